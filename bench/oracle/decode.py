"""The reader's decoders in torch: FP8 e4m3 + E8M0 block scales, MXFP4 + E8M0, BF16 -> fp32.

Bit-identical to recipekit.checkpoint.codecs (numpy, single-threaded fancy indexing and np.repeat
of the scales), but run on torch's vectorized multi-threaded kernels: the e4m3 byte is widened by
torch's own float8_e4m3fn -> float32 cast (exact), the E8M0 code by a 256-entry table (exact powers
of two, NaN for 255), and the scale is broadcast over its block by a reshape instead of being
materialised per element. The products are single IEEE fp32 multiplications by a power of two, so
the two implementations give the same bits (NaN positions included; tests/unit/test_oracle_decode.py
checks them against codecs and ml_dtypes on random bytes with every NaN/inf/subnormal pattern).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recipekit.checkpoint import codecs

_TABLES: dict[str, tuple[Any, Any]] = {}


def _tables(device: Any = "cpu") -> tuple[Any, Any]:
    """(E8M0 code -> fp32 [256], packed MXFP4 byte -> its two fp32 values, low nibble first [256, 2]),
    built once per device from the numpy codecs' own tables (so every device decodes by the same values)."""
    key = str(device)
    if key not in _TABLES:
        import torch  # lazy: pulls torch

        e8m0 = torch.from_numpy(codecs.e8m0_to_float(np.arange(256, dtype=np.uint8)).copy())
        b = np.arange(256, dtype=np.uint8)
        pairs = torch.from_numpy(np.stack((codecs.E2M1_VALUES[b & 0x0F], codecs.E2M1_VALUES[b >> 4]), axis=1))
        _TABLES[key] = (e8m0.to(device), pairs.to(device))
    return _TABLES[key]


def _u8(a: np.ndarray) -> Any:
    import torch  # lazy: pulls torch

    a = np.ascontiguousarray(np.asarray(a).view(np.uint8))
    if not a.flags.writeable:  # only read here, never written; a copy avoids torch's non-writable warning
        a = a.copy()
    return torch.from_numpy(a)


def _scaled(vals: Any, scale: Any, block: tuple[int, int]) -> Any:
    """vals [rows, cols] fp32 times scale [ceil(rows/bm), ceil(cols/bn)] broadcast over its blocks."""
    rows, cols = vals.shape
    bm, bn = block
    rb, cb = scale.shape
    if rows == rb * bm and cols == cb * bn:  # in place: `vals` is a fresh tensor of this decode
        vals.view(rb, bm, cb, bn).mul_(scale[:, None, :, None])
        return vals
    # ragged edge blocks: expand the (small) scale table and cut it to the weight's shape
    full = scale.repeat_interleave(bm, dim=0)[:rows].repeat_interleave(bn, dim=1)[:, :cols]
    return vals.mul_(full)


def fp8_dequant(weight: np.ndarray, scale_codes: np.ndarray, block: tuple[int, int] = codecs.FP8_BLOCK) -> Any:
    """FP8 e4m3fn bytes [rows, cols] + E8M0 codes per block -> fp32 torch tensor (== codecs.fp8_dequant_f32)."""
    return fp8_dequant_t(_u8(weight), _u8(np.asarray(scale_codes, dtype=np.uint8)), block)


def fp8_dequant_t(w: Any, sc: Any, block: tuple[int, int] = codecs.FP8_BLOCK) -> Any:
    """fp8_dequant on uint8 torch tensors on any device (the weight bytes [rows, cols], the codes per
    block); the result is on the same device, with the same bits as on the CPU."""
    import torch  # lazy: pulls torch

    if tuple(sc.shape) != codecs.expected_scale_shape(tuple(w.shape), block):
        raise ValueError(f"scale shape {tuple(sc.shape)} does not match weight {tuple(w.shape)} with block {block}")
    e8m0, _ = _tables(w.device)
    vals = w.view(torch.float8_e4m3fn).to(torch.float32)
    return _scaled(vals, e8m0[sc.long()], block)  # vals: a new tensor (the cast copies)


def mxfp4_dequant(packed: np.ndarray, scale_codes: np.ndarray, group: int = codecs.MXFP4_GROUP) -> Any:
    """MXFP4 bytes [rows, k/2] (low nibble first) + E8M0 [rows, k/32] -> fp32 [rows, k] (== codecs.mxfp4_dequant_f32)."""
    return mxfp4_dequant_t(_u8(packed), _u8(np.asarray(scale_codes, dtype=np.uint8)), group)


def mxfp4_dequant_t(p: Any, sc: Any, group: int = codecs.MXFP4_GROUP) -> Any:
    """mxfp4_dequant on uint8 torch tensors on any device."""
    import torch  # lazy: pulls torch

    rows, half = p.shape
    k = 2 * half
    if tuple(sc.shape) != (rows, -(-k // group)):
        raise ValueError(f"scale shape {tuple(sc.shape)} does not match {rows}x{k} with group {group}")
    e8m0, pairs = _tables(p.device)
    # one gather: byte -> (low nibble value, high nibble value); int32 indices (int64 would be 8x the bytes)
    vals = pairs.index_select(0, p.reshape(-1).to(torch.int32)).reshape(rows, k)
    return _scaled(vals, e8m0[sc.long()], (1, group))


def widen(a: np.ndarray) -> Any:
    """A BF16 (ml_dtypes) or F32 numpy array -> fp32 torch tensor (exact: bf16 is the top half of fp32)."""
    import torch  # lazy: pulls torch

    a = np.ascontiguousarray(a)
    if a.dtype == np.float32:
        return torch.from_numpy(a)
    if a.dtype.itemsize == 2 and a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(torch.float32)
    return torch.from_numpy(a.astype(np.float32))


def widen_t(raw: Any, dtype: str) -> Any:
    """Raw little-endian bytes (a uint8 torch tensor on any device) of a BF16 or F32 tensor -> fp32
    (exact). A view when the bytes are aligned, else one copy first."""
    import torch  # lazy: pulls torch

    item = {"BF16": 2, "F32": 4}[dtype]
    if raw.storage_offset() % item:
        raw = raw.clone()
    if dtype == "F32":
        return raw.view(torch.float32)
    return raw.view(torch.bfloat16).to(torch.float32)
