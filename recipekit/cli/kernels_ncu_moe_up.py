"""The MoE's up launch under a profiler (issue 26, session 38): `ncu -k regex:moe_up ... python -m
recipekit.cli.kernels_ncu_moe_up [ON,WARPS,STEPS]` sees the default's up launch (TILE 14) three times, then the
tensor-core one's (mxfp4_moe_mma: config indices 23-25, default 2,4,2) three times, at M = 1 on DSV4.1-Flash's
experts. It times nothing: ncu does (its figures are under ncu's locked clocks, so compare them with each other, not
with the bench). A second argument `down` runs each configuration's down launch after its up launch (profile it
with `-k regex:moe_down`)."""

from __future__ import annotations

import sys

import torch

from recipekit.backends.cuda_sm80.kernels import mxfp4_moe
from recipekit.bench.kernels import roofline


def main(mma: tuple[int, ...] = (2, 4, 2), launch: str = "up") -> None:
    """`launch`: which of the call's launches to run ("up", or "down" to profile the down launch the same way)."""
    weights = roofline._moe_weights()
    sels, wts, x, _, _ = roofline._moe_call(1, torch.Generator().manual_seed(11), weights)
    base = mxfp4_moe.DEFAULT_CONFIG
    for cfg in (base, base + (0,) * (23 - len(base)) + mma):
        launches = dict(mxfp4_moe.moe_launches(x, sels[0], wts, *weights, 10.0, cfg)[0])
        for _ in range(3):
            launches["up"]()
            if launch != "up":
                launches[launch]()
        torch.cuda.synchronize()


if __name__ == "__main__":
    mma = tuple(int(v) for v in sys.argv[1].split(",")) if len(sys.argv) > 1 else (2, 4, 2)
    main(mma, sys.argv[2] if len(sys.argv) > 2 else "up")
