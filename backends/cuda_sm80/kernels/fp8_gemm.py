"""FP8 e4m3 weight-only GEMM for decode (M = 1..16), bf16 activations, DSV4.1's 32x32 E8M0 blocks.

y[M, N] = x[M, K] @ W[N, K]^T with W in e4m3 bytes and one E8M0 code per 32x32 block, read as stored.
Each weight is decoded by integer ALU (decode.py) and multiplied by its block's power of two, which
is exact in bf16 (3 mantissa bits, fp32's exponent range), so every 32-wide partial dot is scaled
exactly; tl.dot accumulates in fp32 (mma.sync on sm_80) and the output is rounded once to bf16.
M is padded to 16 rows inside the program (the MMA's smallest M): decode is bandwidth-bound, the
padding costs arithmetic only.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from recipekit.backends.cuda_sm80.kernels.decode import e4m3_times_2e8, e8m0

BLOCK = 32  # DSV4.1's FP8 block (weight_block_size [32, 32])
# (BLOCK_N, BLOCK_K, num_warps, num_stages) by measurement on the H200 host (bench/kernels/results)
DEFAULT_CONFIG = (32, 256, 4, 4)


@triton.jit
def fp8_gemm_kernel(
    x_ptr,
    w_ptr,
    s_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_sn,
    stride_ym,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_n = tl.program_id(0)
    rm = tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        kmask = rk < K
        w = tl.load(w_ptr + rn[:, None] * stride_wn + rk[None, :], mask=nmask[:, None] & kmask[None, :], other=0)
        rkb = k0 // 32 + tl.arange(0, BLOCK_K // 32)
        s = tl.load(
            s_ptr + (rn // 32)[:, None] * stride_sn + rkb[None, :],
            mask=nmask[:, None] & (rkb * 32 < K)[None, :],
            other=0,
        )
        scale = e8m0(s) * 256.0  # the decoder's 2^-8 folded into the block's power of two
        wv = tl.reshape(e4m3_times_2e8(w), (BLOCK_N, BLOCK_K // 32, 32)) * scale[:, :, None]
        wb = tl.reshape(wv, (BLOCK_N, BLOCK_K)).to(tl.bfloat16)
        x = tl.load(x_ptr + rm[:, None] * stride_xm + rk[None, :], mask=(rm < M)[:, None] & kmask[None, :], other=0.0)
        acc += tl.dot(x, tl.trans(wb))
    y = acc.to(tl.bfloat16)
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], y, mask=(rm < M)[:, None] & nmask[None, :])


def fp8_gemm(x: Any, w: Any, s: Any, config: tuple[int, int, int, int] | None = None) -> Any:
    """x bf16 [M, K] (M <= 16), w uint8 e4m3 [N, K], s uint8 E8M0 [ceil(N/32), ceil(K/32)] -> bf16 [M, N]."""
    m, k = x.shape
    n = w.shape[0]
    if m > 16 or k % BLOCK:
        raise ValueError(f"fp8_gemm takes M <= 16 and K a multiple of {BLOCK}, got M={m} K={k}")
    bn, bk, warps, stages = config or DEFAULT_CONFIG
    x = x.contiguous()
    y = torch.empty((m, n), dtype=torch.bfloat16, device=x.device)
    grid = (triton.cdiv(n, bn),)
    fp8_gemm_kernel[grid](
        x,
        w,
        s,
        y,
        m,
        n,
        k,
        x.stride(0),
        w.stride(0),
        s.stride(0),
        y.stride(0),
        BLOCK_M=16,
        BLOCK_N=bn,
        BLOCK_K=bk,
        num_warps=warps,
        num_stages=stages,
    )
    return y
