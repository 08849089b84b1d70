"""Tiny DSV4.1 checkpoints for the oracle's proofs and benchmarks.

recipekit/checkpoint/tiny_dsv41.py puts edge scale codes on some tensors (0/2/250/254 on expert
0's w1 scale, 3/246 on wq_a and the Engram table) to exercise the converters' exactness checks. Weights of
6 * 2^127 or 448 * 2^119 overflow any fp32 matmul, so a forward through them gives inf/NaN.
`make_oracle_tiny` makes the tiny checkpoint and rewrites every E8M0 scale code above 200 in place
to 120 (a typical real code, research/dsv41-format.md §2), everything else unchanged; the caller
makes the Gaudi conversion from that folder with the gaudi backend's converter. (The real
checkpoint's codes are ~115-120.)

The generator draws every F32 tensor as 0.05 * N(0, 1); mHC's coefficients then are all ~0.5 and
the four stream copies stay alike, so no test could see whether the mHC wiring (the delayed pre,
the layer order) is right. `sharpen_mhc` redraws hc_*_base as N(0, 4) and hc_*_scale as 1.0
(seeded, in place) so that the copies differ as in a trained model.

`make_oracle_tiny(..., weights="conditioned")` starts from the generator's well-conditioned variant
(weights at init-like magnitudes, no edge codes; recipekit/checkpoint/tiny_dsv41.py), the one proof 4 compares CPU and
CUDA on in fp32; taming then changes nothing and mHC is sharpened the same way.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from recipekit.checkpoint.safetensors_io import Checkpoint
from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41

FP32_SAFE_MAX_CODE = 200  # 6 * 2^(200-127) and its products stay far inside fp32
TAME_CODE = 120


def tame_scales(folder: str | Path) -> int:
    """Rewrite E8M0 scale codes above FP32_SAFE_MAX_CODE to TAME_CODE; returns the bytes changed."""
    import numpy as np  # lazy: pulls numpy

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
            _rewrite(f, name, a.tobytes())
            changed += int(bad.sum())
    return changed


def _rewrite(f, name: str, data: bytes) -> None:
    info = f.info(name)
    if len(data) != info.nbytes:
        raise ValueError(f"{name}: {len(data)} bytes for a {info.nbytes}-byte tensor")
    fd = os.open(f.path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, f.data_start + info.begin)
    finally:
        os.close(fd)


def sharpen_mhc(folder: str | Path, seed: int = 0) -> int:
    """Redraw the mHC base (N(0, 4)) and scale (1.0) tensors in place; returns how many were rewritten."""

    import numpy as np  # lazy: pulls numpy

    n = 0
    with Checkpoint(folder) as ck:
        for name in sorted(ck.names()):
            leaf = name.rsplit(".", 1)[-1]
            if not (leaf.startswith("hc_") and (leaf.endswith(("_base", "_scale")))):
                continue
            f = ck.tensor_file(name)
            size = f.info(name).numel
            if leaf.endswith("_scale"):
                v = np.ones(size, dtype=np.float32)
            else:
                v = np.random.default_rng([seed, zlib.crc32(name.encode())]).normal(0, 4, size).astype(np.float32)
            _rewrite(f, name, v.tobytes())
            n += 1
    return n


def make_oracle_tiny(out: str | Path, size: str = "tiny", seed: int = 0, weights: str = "default") -> Path:
    """The tiny checkpoint (tamed) in `out`; its Gaudi conversion is the caller's
    (recipekit.backends.gaudi.convert.convert_to_gaudi(out, dest))."""
    out = Path(out)
    make_tiny_dsv41(out, seed=seed, size=size, weights=weights)
    tame_scales(out)
    sharpen_mhc(out, seed)
    return out
