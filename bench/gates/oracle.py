"""Reference log-probabilities: the fp32 HF oracle as a subprocess, and the server's prompt_logprobs."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

from recipekit.bench.client import Client
from recipekit.errors import ExitCode, RecipekitError
from recipekit.paths import venvs_dir

ORACLE_SCRIPT = Path(__file__).resolve().parents[1] / "oracle_hf.py"


def find_oracle_python(explicit: str | None = None) -> str:
    """A python that has torch + transformers: --oracle-python, $RECIPEKIT_ORACLE_PYTHON, or an
    engine venv under RECIPEKIT_HOME/venvs (the toolkit venv never has torch)."""
    cands = [explicit, os.environ.get("RECIPEKIT_ORACLE_PYTHON")]

    if venvs_dir().is_dir():
        cands += [str(p / "bin" / "python") for p in sorted(venvs_dir().iterdir())]
    for c in cands:
        if not c or not Path(c).exists():
            continue
        r = subprocess.run([c, "-c", "import torch, transformers"], capture_output=True, timeout=120)
        if r.returncode == 0:
            return c
    raise RecipekitError(
        code="oracle-python-missing",
        exit_code=ExitCode.NOT_FOUND,
        message="no python with torch and transformers for the fp32 oracle",
        hint="apply the local recipe first (it installs the engine venv) or pass --oracle-python",
    )


def oracle_logprobs(python: str, model_dir: str, sequences: list[list[int]], timeout: float = 900) -> dict:
    req = json.dumps({"model_dir": model_dir, "sequences": sequences, "threads": 1})
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    r = subprocess.run(
        [python, str(ORACLE_SCRIPT)], input=req, capture_output=True, text=True, timeout=timeout, env=env
    )
    if r.returncode != 0:
        tail = r.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise RecipekitError(
            code="oracle-failed",
            exit_code=ExitCode.FAILURE,
            message=f"the fp32 oracle exited {r.returncode}: {tail[0][:200]}",
            hint="RECIPEKIT_DEBUG=1 and run bench/oracle_hf.py by hand with the same python",
        )
    return json.loads(r.stdout)


async def server_prompt_logprobs(client: Client, ids: list[int], top: int = 0) -> list[dict | None]:
    """vLLM prompt_logprobs for exactly these token ids: per position {token_id(str): {logprob, rank}}."""
    status, data = await client.post_json(
        "/v1/completions",
        {
            "model": await client.resolve_model(),
            "prompt": ids,
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": top,
        },
    )
    if status != 200:
        raise RecipekitError(
            code="prompt-logprobs-unsupported",
            exit_code=ExitCode.FAILURE,
            message=f"server refused prompt_logprobs: HTTP {status} {str(data)[:160]}",
            hint="the perplexity and decode-prefill gates need vLLM's prompt_logprobs",
        )
    choices = data.get("choices") if isinstance(data, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    entries = first.get("prompt_logprobs") if isinstance(first, dict) else None
    if not isinstance(entries, list):
        raise RecipekitError(
            code="prompt-logprobs-missing",
            exit_code=ExitCode.FAILURE,
            message=f"the answer has no choices[0].prompt_logprobs list: {str(data)[:160]}",
            hint="the server must be vLLM's OpenAI server with prompt_logprobs (vLLM extra parameter)",
        )
    return entries


def scored_logprobs(entries: list, ids: list[int]) -> list[float | None]:
    """One value per scored token ids[1:], aligned by position (never zipped short): the entry's
    log-prob of that token when it is a finite number <= 0, else None (missing). Entries beyond the
    prompt are not read; `entry_count_problem` reports a count that differs."""
    out: list[float | None] = []
    for t in range(1, len(ids)):
        lp = logprob_of(entries[t], ids[t]) if t < len(entries) else None
        out.append(lp if lp is not None and math.isfinite(lp) and lp <= 0 else None)
    return out


def entry_count_problem(entries: list, ids: list[int]) -> str | None:
    """A prompt_logprobs answer must hold one entry per prompt token."""
    if len(entries) != len(ids):
        return f"the server returned {len(entries)} prompt_logprobs entries for {len(ids)} prompt tokens"
    return None


def logprob_of(entry: dict | None, token_id: int) -> float | None:
    """The log-prob of `token_id` in a prompt_logprobs entry ({id: {logprob, ...}} or {id: logprob});
    None when the entry has none, or none that is a number (a server's answer is outside input)."""
    if not isinstance(entry, dict):
        return None
    v = entry.get(str(token_id))
    lp = v.get("logprob") if isinstance(v, dict) else v
    if not isinstance(lp, (int, float)) or isinstance(lp, bool):
        return None
    return float(lp)


def argmax_of(entry: dict | None) -> int | None:
    """The rank-1 token of a prompt_logprobs entry (needs top >= 1); keys that are not token ids are passed over."""
    if not isinstance(entry, dict):
        return None
    best = [int(k) for k, v in entry.items() if isinstance(v, dict) and v.get("rank") == 1 and k.lstrip("-").isdigit()]
    return best[0] if best else None
