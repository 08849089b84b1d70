"""lm-evaluation-harness against the server (local-completions), when lm_eval is installed.

Skipped (not failed) when no python with lm_eval is found. Pass: score >= expected × (1 − rtol)
(one-sided, vllm-gaudi style); with no `expected` the score is reported and the gate passes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from recipekit import bounded
from recipekit.bench.gates.base import GateContext, GateResult
from recipekit.errors import RecipekitError
from recipekit.gate_thresholds import LmEvalThresholds


def find_lm_eval() -> str | None:
    exe = os.environ.get("RECIPEKIT_LM_EVAL") or shutil.which("lm_eval") or shutil.which("lm-eval")
    return exe


async def run(ctx: GateContext, t: dict) -> GateResult:
    unchecked = [k for k in LmEvalThresholds.NOT_CHECKED if t.get(k) is not None]
    if unchecked:  # published counts of another harness: comparing arc_easy with them would be no check
        return GateResult(
            "lm-eval",
            False,
            f"could not run: thresholds {', '.join(unchecked)} are counts of the seed's own harness, "
            f"which this gate's lm_eval task {t['task']!r} cannot reproduce",
            {},
            t,
        )
    exe = find_lm_eval()
    if not exe:
        return GateResult(
            "lm-eval", None, "lm_eval not installed (set RECIPEKIT_LM_EVAL or put lm_eval on PATH)", {}, t
        )
    c = ctx.client
    model = await c.resolve_model()
    out = Path(tempfile.mkdtemp(prefix="recipekit-lmeval-"))
    args = [
        exe,
        "--model",
        "local-completions",
        "--tasks",
        str(t["task"]),
        "--limit",
        str(t["limit"]),
        "--model_args",
        f"model={model},base_url={c.base_url}/v1/completions,num_concurrent=4,"
        f"tokenized_requests=False,tokenizer_backend=None",
        "--output_path",
        str(out),
    ]
    ctx.say("lm-eval: " + " ".join(args))
    r = subprocess.run(args, capture_output=True, text=True, timeout=float(t.get("timeout_s", 3600)))
    if r.returncode != 0:
        return GateResult("lm-eval", False, f"lm_eval exited {r.returncode}: {r.stderr.strip()[-200:]}", {}, t)
    files = sorted(out.rglob("results*.json"))

    try:
        doc = bounded.read_json(files[-1], "lm-eval results", 64 << 20, code="lm-eval-results-invalid") if files else {}
        res = doc["results"][str(t["task"])] if files else {}
        if not isinstance(res, dict):
            raise TypeError("the task's results are not a JSON object")
    except (RecipekitError, KeyError, TypeError) as e:
        return GateResult("lm-eval", False, f"lm_eval results unreadable: {str(e)[:200]}", {}, t)
    score = next((v for k, v in res.items() if k.startswith("acc") and "stderr" not in k), None)
    exp = t.get("expected")
    ok = score is not None and (exp is None or score >= float(exp) * (1 - float(t["rtol"])))
    return GateResult(
        "lm-eval",
        ok,
        f"{t['task']} (limit {t['limit']}): {score} vs expected {exp}",
        {"score": score, "results": res},
        t,
    )
