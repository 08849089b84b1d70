"""The decoders the oracle's streaming reader runs on the device, as one injectable object.

stream.py decodes a quantized tensor's raw bytes with whatever `Decoders` it is handed: by default
TORCH (decode.py's torch ops, on any device). The application may hand it others, e.g. the sm_80 Triton
kernels of backends/cuda_sm80 (a bench imports no backend: recipekit/cli/oracle_decoders.py builds
that object and passes it down). Whatever is handed in must give the numpy codecs' bits: `problems`
decodes every e4m3 byte x every E8M0 code (per-row blocks of 32, the Engram tables' layout), ragged
32x32 blocks, and every MXFP4 byte (both nibbles) x every code on the device, and names each
difference; the application refuses decoders with any (oracle-decoder-mismatch).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from recipekit.bench.oracle import decode
from recipekit.checkpoint import codecs


@dataclass(frozen=True)
class Decoders:
    """name: what a report calls them; fp8_dequant(w, sc, block) and mxfp4_dequant(p, sc): uint8 torch
    tensors on the device (raw bytes, E8M0 codes) -> fp32 on that device, the codecs' bits. block (32, 32)
    is the linears', (1, 32) the Engram tables' rows. spec: "module:callable" that returns these decoders
    in another process (the forward child of measure.py), or None."""

    name: str
    fp8_dequant: Callable[[Any, Any, tuple[int, int]], Any]
    mxfp4_dequant: Callable[[Any, Any], Any]
    spec: str | None = None


TORCH = Decoders("torch-ops", decode.fp8_dequant_t, decode.mxfp4_dequant_t, "recipekit.bench.oracle.decoders:torch_ops")


def torch_ops() -> Decoders:
    """TORCH (a callable, as a spec names one)."""
    return TORCH


def from_spec(spec: str) -> Decoders:
    """The decoders a "module:callable" spec returns (the application names it; this module imports none)."""
    mod, _, fn = spec.partition(":")
    got = getattr(importlib.import_module(mod), fn)()
    if not isinstance(got, Decoders):
        raise TypeError(f"{spec} returned {type(got).__name__}, not Decoders")
    return got


def _same_bits(got: np.ndarray, want: np.ndarray, what: str) -> list[str]:
    if got.shape != want.shape or got.dtype != np.float32:
        return [f"{what}: {got.dtype} {got.shape}, expected float32 {want.shape}"]
    gn, wn = np.isnan(got), np.isnan(want)
    if (gn != wn).any():
        return [f"{what}: NaN at {int((gn != wn).sum())} positions that differ"]
    bad = got.view(np.uint32)[~gn] != want.view(np.uint32)[~wn]
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return [
            f"{what}: {int(bad.sum())} values differ (first: {float(got[~gn][i])!r}, codecs {float(want[~wn][i])!r})"
        ]
    return []


def problems(dec: Decoders, device: Any = "cpu") -> list[str]:
    """Every difference between `dec` on `device` and the numpy codecs over every e4m3 byte, e2m1 byte
    and E8M0 code (empty: the same bits). A few hundred KiB of work."""
    import torch  # lazy: pulls torch

    def run(fn: Callable[..., Any], *args: Any) -> np.ndarray:
        out = fn(
            *(torch.from_numpy(np.ascontiguousarray(a)).to(device) if isinstance(a, np.ndarray) else a for a in args)
        )
        return np.asarray(out.cpu().numpy())

    b = np.arange(256, dtype=np.uint8)
    out: list[str] = []
    with np.errstate(over="ignore", invalid="ignore"):
        # every e4m3 byte x every E8M0 code: row i holds every byte, scaled by code i (the Engram rows' blocks)
        w = np.tile(b, (256, 1))
        sc = np.repeat(b[:, None], 256 // 32, axis=1)
        want = codecs.fp8_dequant_f32(w, sc, codecs.ENGRAM_BLOCK)
        out += _same_bits(run(dec.fp8_dequant, w, sc, codecs.ENGRAM_BLOCK), want, f"{dec.name} fp8 rows")
        # 32x32 blocks with ragged edges, every byte and the edge codes in them
        rng = np.random.default_rng(3)
        w2 = rng.integers(0, 256, (70, 45), dtype=np.uint8)
        w2.reshape(-1)[:256] = b
        sc2 = rng.integers(0, 256, codecs.expected_scale_shape((70, 45), codecs.FP8_BLOCK), dtype=np.uint8)
        sc2.reshape(-1)[:4] = [0, 1, 254, 255]
        want2 = codecs.fp8_dequant_f32(w2, sc2, codecs.FP8_BLOCK)
        out += _same_bits(run(dec.fp8_dequant, w2, sc2, codecs.FP8_BLOCK), want2, f"{dec.name} fp8 blocks")
        # every MXFP4 byte (both nibbles) x every E8M0 code
        p = np.tile(b, (256, 1))
        sp = np.repeat(b[:, None], 512 // 32, axis=1)
        out += _same_bits(run(dec.mxfp4_dequant, p, sp), codecs.mxfp4_dequant_f32(p, sp), f"{dec.name} mxfp4")
    return out
