"""Whole-tensor dequant to fp32, valid on sm_80: FP8 e4m3 + E8M0 block scales (the 32x32 blocks of the
linears, or one code per row per 32 columns: the Engram tables' rows) and MXFP4 e2m1 (two per byte, low
nibble = even index) + one E8M0 code per row per 32. What the oracle's streaming reader decodes on the GPU
when the application hands it these kernels (bench/oracle/decoders.py: the Decoders it takes).

Same bits as recipekit.checkpoint.codecs for every byte and every scale code, NaN and inf included:
- the e4m3 byte goes to fp32 bits by integer ops (decode.e4m3_bits_times_2em120: value * 2^-120, the
  subnormals on fp32 denormals) and is multiplied by 2^120 (exact: every e4m3 value is a normal fp32);
  the NaN bytes 0x7F / 0xFF are set to NaN (the integer decode alone gives 480 there);
- the e2m1 nibble likewise (decode.e2m1_bits_times_2em126, times 2^126; code 8 stays -0.0);
- the E8M0 code by decode.e8m0_codec: 2^(s-127), 2^-127 for code 0 (a denormal), NaN for 255;
- then one IEEE fp32 multiply of those two values, the codecs' own operation on the same operands:
  the same rounding (denormal results too: Triton's fp32 multiply does not flush), the same overflow to
  inf (e.g. 448 x 2^127), NaN wherever an operand is NaN.
tests/unit/test_oracle_decoders.py checks every e4m3 byte x every E8M0 code, every e2m1 byte x every
code, ragged 32x32 edges and Engram rows against the codecs on a GPU.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from recipekit.backends.cuda_sm80.kernels.decode import e2m1_bits_times_2em126, e4m3_bits_times_2em120, e8m0_codec

FP8_TILE = (32, 128)  # rows x columns of output per program
MXFP4_TILE = (16, 128)  # rows x packed bytes per program (256 outputs per row)
NUM_WARPS = 4


@triton.jit
def fp8_dequant_kernel(
    w_ptr,
    s_ptr,
    y_ptr,
    rows,
    cols,
    s_cols,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    r = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    c = (tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)).to(tl.int64)
    m = (r < rows)[:, None] & (c < cols)[None, :]
    off = r[:, None] * cols + c[None, :]
    b = tl.load(w_ptr + off, mask=m, other=0)
    s = tl.load(s_ptr + (r // BM)[:, None] * s_cols + (c // BN)[None, :], mask=m, other=127)
    v = e4m3_bits_times_2em120(b) * 1.329227995784916e36  # 2^120
    nan = tl.full([BLOCK_R, BLOCK_C], 0x7FC00000, tl.int32).to(tl.float32, bitcast=True)
    v = tl.where((b.to(tl.int32) & 0x7F) == 0x7F, nan, v)
    tl.store(y_ptr + off, v * e8m0_codec(s), mask=m)


@triton.jit
def mxfp4_dequant_kernel(
    p_ptr, s_ptr, y_ptr, rows, half, s_cols, GROUP: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr
):
    r = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    j = (tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)).to(tl.int64)
    m = (r < rows)[:, None] & (j < half)[None, :]
    q = tl.load(p_ptr + r[:, None] * half + j[None, :], mask=m, other=0).to(tl.int32)
    s = tl.load(s_ptr + r[:, None] * s_cols + ((2 * j) // GROUP)[None, :], mask=m, other=127)
    sc = e8m0_codec(s)
    lo = e2m1_bits_times_2em126(q & 15) * 8.507059173023462e37  # 2^126
    hi = e2m1_bits_times_2em126(q >> 4) * 8.507059173023462e37
    # interleave (lo, hi) per byte into one row of 2 x BLOCK_H outputs: one contiguous store
    v = tl.reshape(tl.join(lo * sc, hi * sc), (BLOCK_R, 2 * BLOCK_H))
    k = tl.program_id(1).to(tl.int64) * (2 * BLOCK_H) + tl.arange(0, 2 * BLOCK_H)
    tl.store(y_ptr + r[:, None] * (2 * half) + k[None, :], v, mask=(r < rows)[:, None] & (k < 2 * half)[None, :])


def _scale_shape(shape: tuple[int, int], block: tuple[int, int]) -> tuple[int, int]:
    return (-(-shape[0] // block[0]), -(-shape[1] // block[1]))


def fp8_dequant(w: Any, sc: Any, block: tuple[int, int] = (32, 32)) -> Any:
    """uint8 e4m3 bytes [rows, cols] + uint8 E8M0 codes [ceil(rows/bm), ceil(cols/bn)] (on the GPU) -> fp32
    [rows, cols] on the same device. block (32, 32): the linears; (1, 32): the Engram tables' rows."""
    if w.dim() != 2 or tuple(sc.shape) != _scale_shape(tuple(w.shape), block):
        raise ValueError(f"scale shape {tuple(sc.shape)} does not match weight {tuple(w.shape)} with block {block}")
    rows, cols = w.shape
    y = torch.empty((rows, cols), dtype=torch.float32, device=w.device)
    if y.numel():
        br, bc = FP8_TILE
        grid = (triton.cdiv(rows, br), triton.cdiv(cols, bc))
        fp8_dequant_kernel[grid](
            w.contiguous(), sc.contiguous(), y, rows, cols, sc.shape[1],
            BM=block[0], BN=block[1], BLOCK_R=br, BLOCK_C=bc, num_warps=NUM_WARPS,
        )  # fmt: skip
    return y


def mxfp4_dequant(p: Any, sc: Any, group: int = 32) -> Any:
    """uint8 MXFP4 bytes [rows, k/2] (low nibble = even index) + uint8 E8M0 [rows, ceil(k/group)] (on the
    GPU) -> fp32 [rows, k] on the same device."""
    rows, half = p.shape
    if group % 2 or tuple(sc.shape) != (rows, -(-2 * half // group)):
        raise ValueError(f"scale shape {tuple(sc.shape)} does not match {rows}x{2 * half} with group {group}")
    y = torch.empty((rows, 2 * half), dtype=torch.float32, device=p.device)
    if y.numel():
        br, bh = MXFP4_TILE
        grid = (triton.cdiv(rows, br), triton.cdiv(half, bh))
        mxfp4_dequant_kernel[grid](
            p.contiguous(), sc.contiguous(), y, rows, half, sc.shape[1],
            GROUP=group, BLOCK_R=br, BLOCK_H=bh, num_warps=NUM_WARPS,
        )  # fmt: skip
    return y
