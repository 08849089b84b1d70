"""Per-card arithmetic throughput, ~1 s each: FP32 FFMA, FP32 FMUL+FADD (the same Triton loop
compiled with enable_fp_fusion=False), FP16 HFMA (packed by the compiler where it can) and a
tensor-core FP16 matmul through torch. Figures feed `variant.choose`.

It also runs as a file under another python (`recipe doctor --microbench` starts it under the
engine's torch python, where recipekit need not be installed): `python microbench.py SECONDS`
prints the figures as one JSON line; the variant is chosen by the caller."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import torch
import triton
import triton.language as tl

STEPS = 256  # dependent multiply-add steps per element per launch (8 unrolled per loop turn)
BLOCK = 1024


@triton.jit
def _madd_loop(out_ptr, a, b, STEPS: tl.constexpr, BLOCK: tl.constexpr, HALF: tl.constexpr):
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = r.to(tl.float32) * 1e-7
    if HALF:
        x = x.to(tl.float16)
        av = tl.full((BLOCK,), a, tl.float16)
        bv = tl.full((BLOCK,), b, tl.float16)
    else:
        av = tl.full((BLOCK,), a, tl.float32)
        bv = tl.full((BLOCK,), b, tl.float32)
    for _ in range(STEPS // 8):
        x = x * av + bv
        x = x * av + bv
        x = x * av + bv
        x = x * av + bv
        x = x * av + bv
        x = x * av + bv
        x = x * av + bv
        x = x * av + bv
    tl.store(out_ptr + r, x.to(tl.float32))


def _rate(fn: Any, flops_per_call: float, seconds: float) -> float:
    """Flops/s of fn() called until `seconds` have passed (after one warm-up call)."""
    fn()
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        n += 1
        if n % 8 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return n * flops_per_call / (time.perf_counter() - t0)


def measure(seconds: float = 1.0, device: int = 0) -> dict[str, Any]:
    """Card `device`'s figures (no recipekit import: this runs as a standalone worker too)."""
    with torch.cuda.device(device):
        return _measure(seconds, device)


def _measure(seconds: float, device: int) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(device)
    programs = props.multi_processor_count * 16
    out = torch.empty(programs * BLOCK, dtype=torch.float32, device=f"cuda:{device}")
    flops = 2.0 * STEPS * programs * BLOCK

    def loop(half: bool, fusion: bool) -> Any:
        return lambda: _madd_loop[(programs,)](
            out, 0.999, 1e-4, STEPS=STEPS, BLOCK=BLOCK, HALF=half, enable_fp_fusion=fusion, num_warps=8
        )

    a = torch.randn((4096, 4096), dtype=torch.float16, device=f"cuda:{device}")
    res = {
        "index": device,
        "card": props.name,
        "sms": props.multi_processor_count,
        "ffma_tflops": _rate(loop(False, True), flops, seconds) / 1e12,
        "fmul_fadd_tflops": _rate(loop(False, False), flops, seconds) / 1e12,
        "hfma_tflops": _rate(loop(True, True), flops, seconds) / 1e12,
        "mma_fp16_tflops": _rate(lambda: a @ a, 2.0 * 4096**3, seconds) / 1e12,
        "seconds_each": seconds,
    }
    return res


def run(seconds: float = 1.0, device: int = 0) -> dict[str, Any]:
    """The figures and the kernel variant they choose."""
    from recipekit.bench.kernels import variant  # lazy: the standalone worker runs without recipekit

    res = measure(seconds, device)
    res["variant"] = variant.choose(res)
    return res


if __name__ == "__main__":  # one JSON line per card
    for d in range(torch.cuda.device_count()):
        print(json.dumps(measure(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0, d)), flush=True)
