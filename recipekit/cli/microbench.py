"""`recipe doctor [<recipe>] --microbench`: each card's FFMA, FMUL+FADD, HFMA2 and tensor-core MMA
throughput (~1 s each) under the engine's torch python (bench/kernels/microbench.py as a standalone
worker), the sm_80 kernels' variant it chooses (FMA contraction off where FFMA is throttled), and,
with a recipe, whether the recipe's recorded variant (setting KERNELS_FP_FUSION) agrees."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Optional

from recipekit import paths
from recipekit.bench import kernels as bench_kernels
from recipekit.bench.kernels import variant
from recipekit.errors import ExitCode, RecipekitError
from recipekit.output import Output
from recipekit.tools.p2p.probe import find_torch_python, run_json_worker

WORKER = Path(bench_kernels.__file__).with_name("microbench.py")
START_MARGIN_S = 120.0  # torch + Triton import and the four kernels' compile before the timed seconds


def measure(python: str, seconds: float, timeout_s: float) -> tuple[list[dict[str, Any]], str]:
    """The worker's per-card records and its stderr tail; bounded in time."""
    records, stderr = run_json_worker([python, str(WORKER), str(seconds)], timeout_s)
    return [r for r in records if "ffma_tflops" in r], stderr


def run_microbench(out: Output, python: Optional[str], seconds: float, recorded: Any, has_recipe: bool) -> int:
    py, info, tried = find_torch_python(python, paths.venvs_dir())
    if py is None or not (info and info.get("cuda")):
        raise RecipekitError(
            code="microbench-no-cuda",
            exit_code=ExitCode.HOST_CHECK_FAILED,
            message=f"no Python with torch that sees a CUDA card (tried {', '.join(tried) or 'none'})",
        )
    budget = 4 * seconds * 8 + START_MARGIN_S  # 4 figures per card, up to 8 cards
    try:
        cards, stderr = measure(py, seconds, budget)
    except subprocess.TimeoutExpired:
        raise RecipekitError(
            code="microbench-timeout",
            exit_code=ExitCode.HOST_CHECK_FAILED,
            message=f"the microbench did not finish in {budget:.0f} s",
        ) from None
    if not cards:
        raise RecipekitError(
            code="microbench-no-result",
            exit_code=ExitCode.HOST_CHECK_FAILED,
            message=f"the microbench reported no card: {(stderr.strip().splitlines() or ['(no output)'])[-1][:200]}",
        )
    for c in cards:
        c["variant"] = variant.choose(c)
        if has_recipe:
            c["recipe"] = variant.against_recipe(c["variant"], recorded)
    keys = ("ffma_tflops", "fmul_fadd_tflops", "hfma_tflops", "mma_fp16_tflops")

    def human() -> None:
        for c in cards:
            figs = ", ".join(f"{k.removesuffix('_tflops')} {c[k]:.2f}" for k in keys)
            print(f"card {c.get('index', '?')} {c.get('card', '?')}: {figs} TFLOPS")
            print(f"  variant: enable_fp_fusion={c['variant']['enable_fp_fusion']} ({c['variant']['why']})")
            if "recipe" in c:
                print(f"  {c['recipe']['status'].upper()} recipe: {c['recipe']['why']}")

    out.result({"python": py, "cards": cards, "setting": variant.SETTING}, human=human)
    return 0
