"""DeepSeek-V4.1 weight encodings (numpy + ml_dtypes, no torch).

- E8M0 (UE8M0) scale byte e: value 2^(e-127); e = 255 is NaN.
- FP8 e4m3fn weights with one E8M0 scale per 32x32 block (dense linears) or per row per 32
  columns (the Engram table): W[i, j] = e4m3(Wq[i, j]) * 2^(S[i//bm, j//bn] - 127).
- MXFP4: e2m1 codes two per byte, the LOW nibble is the even (lower K) index, one E8M0
  scale per row per 32 columns.

FP8 -> bf16 is exact iff every scale code is in 3..246 (below, e4m3 subnormals fall under
bf16's smallest subnormal; above, 448 * 2^(e-127) overflows). `check_exact_scale_codes`
refuses other codes, naming the tensor and the first offending block; nothing is rounded.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from recipekit.errors import ExitCode, RecipekitError

E8M0_BIAS = 127
E8M0_NAN = 255
EXACT_BF16_CODES = (3, 246)  # inclusive range of scale codes for an exact FP8 -> bf16
FP8_BLOCK = (32, 32)
ENGRAM_BLOCK = (1, 32)
MXFP4_GROUP = 32

# e2m1 code (nibble) -> value; code 8 is -0.0
E2M1_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32
)

# e4m3fn byte -> float32 value (NaN for 0x7F / 0xFF)
_E4M3_TO_F32 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def e8m0_to_float(codes) -> np.ndarray:
    """Scale codes (uint8) -> float32 2^(e-127), NaN for 255."""
    c = np.asarray(codes, dtype=np.uint8)
    with np.errstate(over="ignore"):
        out = np.ldexp(np.float32(1.0), c.astype(np.int32) - E8M0_BIAS).astype(np.float32)
    out[c == E8M0_NAN] = np.nan
    return out


def float_to_e8m0(values) -> np.ndarray:
    """Exact powers of two -> scale codes; anything else is refused."""
    v = np.asarray(values, dtype=np.float64)
    m, e = np.frexp(v)
    if not np.all(m == 0.5):
        raise ValueError("E8M0 holds only positive powers of two")
    codes = e - 1 + E8M0_BIAS
    if codes.min(initial=0) < 0 or codes.max(initial=0) > 254:
        raise ValueError("power of two outside the E8M0 range")
    return codes.astype(np.uint8)


def check_exact_scale_codes(codes, tensor: str, block: tuple[int, int] = FP8_BLOCK) -> None:
    """Refuse scale codes for which FP8 -> bf16 would not be exact (outside 3..246)."""
    c = np.asarray(codes, dtype=np.uint8)
    lo, hi = EXACT_BF16_CODES
    bad = (c < lo) | (c > hi)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        code = int(c[idx])
        rows = f"rows {idx[0] * block[0]}..{(idx[0] + 1) * block[0] - 1}" if len(idx) == 2 else ""
        cols = f", cols {idx[1] * block[1]}..{(idx[1] + 1) * block[1] - 1}" if len(idx) == 2 else ""
        raise RecipekitError(
            code="fp8-scale-not-exact",
            message=(
                f"tensor '{tensor}' block {list(idx)} ({rows}{cols}) has scale code {code}"
                f" ({'NaN' if code == E8M0_NAN else f'2^{code - E8M0_BIAS}'}); FP8 -> bf16 is exact only for codes {lo}..{hi}"
                f" ({int(bad.sum())} block(s) outside)"
            ),
            hint="this checkpoint cannot be dequantized losslessly; nothing was rounded or written for it",
            exit_code=ExitCode.INVALID_INPUT,
        )


def _expand_scales(scale_f32: np.ndarray, shape: tuple[int, int], block: tuple[int, int]) -> np.ndarray:
    rows, cols = shape
    s = np.repeat(scale_f32, block[0], axis=0)[:rows] if block[0] > 1 else scale_f32[:rows]
    s = np.repeat(s, block[1], axis=1)[:, :cols] if block[1] > 1 else s[:, :cols]
    return s


def expected_scale_shape(shape: tuple[int, int], block: tuple[int, int]) -> tuple[int, int]:
    return (-(-shape[0] // block[0]), -(-shape[1] // block[1]))


def fp8_dequant_f32(weight, scale_codes, block: tuple[int, int] = FP8_BLOCK) -> np.ndarray:
    """FP8 e4m3fn bytes [rows, cols] + E8M0 codes per block -> float32 (exact)."""
    w = np.asarray(weight).view(np.uint8)
    sc = np.asarray(scale_codes, dtype=np.uint8)
    if sc.shape != expected_scale_shape(w.shape, block):
        raise ValueError(f"scale shape {sc.shape} does not match weight {w.shape} with block {block}")
    vals = _E4M3_TO_F32[w]
    return vals * _expand_scales(e8m0_to_float(sc), w.shape, block)


_BF16_LUT: np.ndarray | None = None


def _bf16_lut() -> np.ndarray:
    """bf16 bits of e4m3(byte) * 2^(code-127), indexed by (code << 8) | byte (exact for codes 3..246)."""
    global _BF16_LUT
    if _BF16_LUT is None:
        with np.errstate(over="ignore", invalid="ignore"):
            f = _E4M3_TO_F32[None, :] * e8m0_to_float(np.arange(256, dtype=np.uint8))[:, None]
        _BF16_LUT = (np.ascontiguousarray(f, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16).reshape(-1)
    return _BF16_LUT


def fp8_to_bf16(
    weight, scale_codes, tensor: str = "<tensor>", block: tuple[int, int] = FP8_BLOCK, check: bool = True
) -> np.ndarray:
    """FP8 e4m3fn + E8M0 block scales -> bf16, bit-exact (refuses codes outside 3..246)."""
    if check:
        check_exact_scale_codes(scale_codes, tensor, block)
    w = np.asarray(weight).view(np.uint8)
    sc = np.asarray(scale_codes, dtype=np.uint8)
    rows, cols = w.shape
    bm, bn = block
    if rows % bm == 0 and cols % bn == 0 and sc.shape == (rows // bm, cols // bn):
        # whole blocks: one table lookup per element; the table holds exact products
        idx = (sc.astype(np.uint16)[:, None, :, None] << 8) | w.reshape(rows // bm, bm, cols // bn, bn)
        return _bf16_lut()[idx].reshape(rows, cols).view(ml_dtypes.bfloat16)
    f = np.ascontiguousarray(fp8_dequant_f32(w, sc, block))
    # exactness guarantees the low 16 bits are zero, so truncation is the exact bf16
    return (f.view(np.uint32) >> 16).astype(np.uint16).view(ml_dtypes.bfloat16)


def fp8_encode(values, scale_codes, block: tuple[int, int] = FP8_BLOCK) -> np.ndarray:
    """Inverse of fp8_dequant for values that are exactly representable: -> e4m3fn bytes (uint8)."""
    v = np.asarray(values, dtype=np.float32)
    sc = np.asarray(scale_codes, dtype=np.uint8)
    q = v / _expand_scales(e8m0_to_float(sc), v.shape, block)
    return q.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def mxfp4_unpack(packed) -> np.ndarray:
    """Packed bytes [..., k/2] -> e2m1 codes [..., k]; low nibble first (even index)."""
    p = np.asarray(packed).view(np.uint8)
    out = np.empty(p.shape[:-1] + (p.shape[-1] * 2,), dtype=np.uint8)
    out[..., 0::2] = p & 0x0F
    out[..., 1::2] = p >> 4
    return out


def mxfp4_pack(codes) -> np.ndarray:
    """e2m1 codes [..., k] (k even, values 0..15) -> packed bytes [..., k/2]."""
    c = np.asarray(codes, dtype=np.uint8)
    if c.shape[-1] % 2 or (c > 15).any():
        raise ValueError("mxfp4_pack needs an even number of 4-bit codes")
    return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)


def mxfp4_dequant_f32(packed, scale_codes, group: int = MXFP4_GROUP) -> np.ndarray:
    """MXFP4 bytes [rows, k/2] + E8M0 [rows, k/32] -> float32 [rows, k] (exact)."""
    codes = mxfp4_unpack(packed)
    sc = np.asarray(scale_codes, dtype=np.uint8)
    rows, k = codes.shape
    if sc.shape != (rows, -(-k // group)):
        raise ValueError(f"scale shape {sc.shape} does not match {rows}x{k} with group {group}")
    return E2M1_VALUES[codes] * _expand_scales(e8m0_to_float(sc), (rows, k), (1, group))


def mxfp4_encode_codes(values, scale_codes, group: int = MXFP4_GROUP) -> np.ndarray:
    """Values exactly on the scaled e2m1 grid -> codes (refuses anything off the grid)."""
    v = np.asarray(values, dtype=np.float32)
    q = v / _expand_scales(e8m0_to_float(np.asarray(scale_codes, np.uint8)), v.shape, (1, group))
    # match on value and sign bit so that -0.0 keeps code 8
    neg = np.signbit(q)
    mag = np.abs(q)
    table = E2M1_VALUES[:8]
    idx = np.searchsorted(table, mag)
    idx = np.clip(idx, 0, 7)
    if not np.array_equal(table[idx], mag):
        raise ValueError("values are not on the e2m1 grid for these scales")
    return (idx + 8 * neg).astype(np.uint8)
