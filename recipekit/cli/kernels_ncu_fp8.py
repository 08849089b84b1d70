"""The FP8 GEMM on one of DSV4.1-Flash's small weights under a profiler (issue 26, session 41): `ncu ... python -m
recipekit.cli.kernels_ncu_fp8 N,K` runs, each three times, the committed table's choice at M = 1, 2, 4 and 8, the
register tile (the table's M = 2 tile) at M = 4 and 8, and torch's bf16 matmul on the dequantized weight at M = 4
(the path the kernel must beat). Weights and activations are made on the CPU and copied, so the only kernels are
those. It times nothing: ncu does, under its locked clocks and with its caches flushed per launch, so compare the
figures with each other, not with the bench."""

from __future__ import annotations

import sys

import torch

from recipekit.backends.cuda_sm80.kernels import fp8_gemm, tuning
from recipekit.bench.kernels import synth
from recipekit.bench.oracle import decode


def runs(n: int, k: int) -> list[tuple[str, int, str, tuple[int, ...]]]:
    """(label, M, path, config) of every profiled launch: the table's choice per M, then the register tile at 4, 8."""
    out = []
    for m in (1, 2, 4, 8):
        path, cfg = tuning.fp8_choice(torch.device("cuda"), n, k, m)
        out.append((f"table M={m}", m, path, cfg))
    tile = tuning.fp8_choice(torch.device("cuda"), n, k, 2)
    if tile[0] == "gemv":
        out += [(f"register tile M={m}", m, "gemv", tile[1]) for m in (4, 8)]
    return out


def main(n: int, k: int) -> None:
    g = torch.Generator().manual_seed(n + k)
    w = synth.fp8_bytes((n, k), g)
    s = synth.e8m0_codes((-(-n // 32), -(-k // 32)), g)
    wb = decode.fp8_dequant(w.numpy(), s.numpy()).to(torch.bfloat16).cuda()
    w, s = w.cuda(), s.cuda()
    for label, m, path, cfg in runs(n, k):
        x = synth.bf16((m, k), g).cuda()
        print(label, path, cfg, flush=True)
        fn = fp8_gemm.fp8_gemv if path == "gemv" else fp8_gemm.fp8_gemm
        for _ in range(3):
            fn(x, w, s, cfg)
        torch.cuda.synchronize()
    x = synth.bf16((4, k), g).cuda()
    print("torch bf16 M=4", flush=True)
    for _ in range(3):
        torch.matmul(x, wb.T)
    torch.cuda.synchronize()


if __name__ == "__main__":
    n_, k_ = (int(v) for v in sys.argv[1].split(","))
    main(n_, k_)
