"""Tiny DSV4.1 checkpoints for the oracle's proofs and benchmarks.

tools/tiny_dsv41.py puts edge scale codes on some tensors (0/2/250/254 on expert 0's w1 scale,
3/246 on wq_a and the Engram table) to exercise the converters' exactness checks. Weights of
6 * 2^127 or 448 * 2^119 overflow any fp32 matmul, so a forward through them gives inf/NaN.
`make_oracle_tiny` makes the tiny checkpoint and rewrites every E8M0 scale code above 200 in place
to 120 (a typical real code, research/dsv41-format.md §2), everything else unchanged; the Gaudi
conversion is then made from that folder. (The real checkpoint's codes are ~115-120.)
"""
from __future__ import annotations

import os
from pathlib import Path

from recipekit.hybrid.safetensors_io import Checkpoint

FP32_SAFE_MAX_CODE = 200       # 6 * 2^(200-127) and its products stay far inside fp32
TAME_CODE = 120


def tame_scales(folder: str | Path) -> int:
    """Rewrite E8M0 scale codes above FP32_SAFE_MAX_CODE to TAME_CODE; returns the bytes changed."""
    import numpy as np
    changed = 0
    with Checkpoint(folder) as ck:
        for name in list(ck.names()):
            f = ck.tensor_file(name)
            info = f.info(name)
            if info.dtype != "F8_E8M0":
                continue
            a = np.frombuffer(f.read_bytes(name), dtype=np.uint8).copy()
            bad = a > FP32_SAFE_MAX_CODE
            if not bad.any():
                continue
            a[bad] = TAME_CODE
            fd = os.open(f.path, os.O_WRONLY)
            try:
                os.pwrite(fd, a.tobytes(), f.data_start + info.begin)
            finally:
                os.close(fd)
            changed += int(bad.sum())
    return changed


def make_oracle_tiny(out: str | Path, size: str = "tiny", gaudi: str | Path | None = None, seed: int = 0) -> Path:
    """The tiny checkpoint (tamed) in `out`, and its Gaudi conversion in `gaudi` when given."""
    from recipekit.tools.tiny_dsv41 import make_tiny_dsv41
    out = Path(out)
    make_tiny_dsv41(out, seed=seed, size=size)
    tame_scales(out)
    if gaudi is not None:
        from recipekit.backends.gaudi.convert import convert_to_gaudi
        convert_to_gaudi(out, gaudi)
    return out
