"""FP8 e4m3 weight-only GEMM for decode (M = 1..16), bf16 activations, DSV4.1's 32x32 E8M0 blocks.

y[M, N] = x[M, K] @ W[N, K]^T with W in e4m3 bytes and one E8M0 code per 32x32 block, read as stored.
Each weight is decoded by integer ALU (decode.py) and multiplied by its block's power of two, which
is exact in bf16 (3 mantissa bits, fp32's exponent range), so every 32-wide partial dot is scaled
exactly; tl.dot accumulates in fp32 (mma.sync on sm_80) and the output is rounded once to bf16.
M is padded to 16 rows inside the program (the MMA's smallest M): decode is bandwidth-bound, the
padding costs arithmetic only. At M = 1 (K a multiple of 1024) `fp8_gemm` takes `fp8_gemv`, the
same math without the MMA: each token's 32-wide partial sums times the block's power of two. Split-K (for shapes with few row blocks) writes fp32 partials that a
second launch sums in split order into bf16: deterministic, no atomics.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from recipekit.backends.cuda_sm80.kernels.decode import e4m3_times_2e8, e8m0

BLOCK = 32  # DSV4.1's FP8 block (weight_block_size [32, 32])
# (BLOCK_N, BLOCK_K, num_warps, num_stages, SPLIT_K); the split 0 = chosen by `default_split`
DEFAULT_CONFIG = (32, 256, 4, 3, 0)


def default_split(n: int, k: int, block_n: int, block_k: int) -> int:
    """Split K in 4 for long rows with few row blocks, else not: on the H200 (results/h200-2026-12-02-
    bench.json) split 4 was the fastest for 5120 x 16384 at every M and split 1 for the K = 4096/5120
    shapes (the second launch costs more than the extra programs bring)."""
    return 4 if k >= 8192 and -(-n // block_n) < 264 and k >= 8 * block_k else 1


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
    K_PER_SPLIT,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rm = tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(pid_k * K_PER_SPLIT, tl.minimum(K, (pid_k + 1) * K_PER_SPLIT), BLOCK_K):
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
    omask = (rm < M)[:, None] & nmask[None, :]
    if SPLIT == 1:
        tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc.to(tl.bfloat16), mask=omask)
    else:  # y_ptr is the fp32 partials [SPLIT, M, N]
        tl.store(y_ptr + pid_k * M * N + rm[:, None] * N + rn[None, :], acc, mask=omask)


@triton.jit
def split_sum_kernel(p_ptr, y_ptr, MN, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    """y (bf16) = sum over the SPLIT fp32 partials, in split order."""
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = r < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in tl.static_range(SPLIT):
        acc += tl.load(p_ptr + i * MN + r, mask=mask, other=0.0)
    tl.store(y_ptr + r, acc.to(tl.bfloat16), mask=mask)


def fp8_gemm(
    x: Any, w: Any, s: Any, config: tuple[int, int, int, int, int] | None = None, fp_fusion: bool = True
) -> Any:
    """x bf16 [M, K] (M <= 16), w uint8 e4m3 [N, K], s uint8 E8M0 [ceil(N/32), ceil(K/32)] -> bf16 [M, N]."""
    m, k = x.shape
    n = w.shape[0]
    if m > 16 or k % BLOCK:
        raise ValueError(f"fp8_gemm takes M <= 16 and K a multiple of {BLOCK}, got M={m} K={k}")
    if config is None and m == 1 and k % 1024 == 0:
        # M = 1: the path without tensor cores was 1.3-1.6x faster on the H200 (results/h200-2026-12-02-gemv-trial.json)
        return fp8_gemv(x, w, s, (4, 1024, 4 if k > 8192 else 2), fp_fusion)
    bn, bk, warps, stages, split = config or DEFAULT_CONFIG
    split = split or default_split(n, k, bn, bk)
    per_split = triton.cdiv(triton.cdiv(k, split), bk) * bk
    split = triton.cdiv(k, per_split)
    x = x.contiguous()
    y = torch.empty((m, n), dtype=torch.bfloat16, device=x.device)
    out = y if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(n, bn), split)
    fp8_gemm_kernel[grid](
        x,
        w,
        s,
        out,
        m,
        n,
        k,
        x.stride(0),
        w.stride(0),
        s.stride(0),
        y.stride(0),
        per_split,
        BLOCK_M=16,
        BLOCK_N=bn,
        BLOCK_K=bk,
        SPLIT=split,
        num_warps=warps,
        num_stages=stages,
        enable_fp_fusion=fp_fusion,  # False: no FMA contraction (for FMA-throttled cards, bench/kernels/variant.py)
    )
    if split > 1:
        split_sum_kernel[(triton.cdiv(m * n, 1024),)](out, y, m * n, SPLIT=split, BLOCK=1024)
    return y


@triton.jit
def fp8_gemv_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_sn, stride_ym,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, M_MAX: tl.constexpr,
):  # fmt: skip
    """Small-M path without the MMA: per row block, each token's products summed per 32 (one block
    of scale), times the block's power of two, fp32 accumulation; the weight tile is decoded once
    and used by every token."""
    pid_n = tl.program_id(0)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < N
    for mi in tl.static_range(M_MAX):
        if mi < M:
            acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                rk = k0 + tl.arange(0, BLOCK_K)
                w = tl.load(w_ptr + rn[:, None] * stride_wn + rk[None, :], mask=nmask[:, None], other=0)
                rkb = k0 // 32 + tl.arange(0, BLOCK_K // 32)
                s = tl.load(s_ptr + (rn // 32)[:, None] * stride_sn + rkb[None, :], mask=nmask[:, None], other=0)
                x = tl.load(x_ptr + mi * stride_xm + rk).to(tl.float32)
                p = tl.reshape(e4m3_times_2e8(w) * x[None, :], (BLOCK_N, BLOCK_K // 32, 32))
                acc += tl.sum(tl.sum(p, axis=2) * (e8m0(s) * 256.0), axis=1)
            tl.store(y_ptr + mi * stride_ym + rn, acc.to(tl.bfloat16), mask=nmask)


def fp8_gemv(x: Any, w: Any, s: Any, config: tuple[int, int, int] = (16, 512, 4), fp_fusion: bool = True) -> Any:
    """The same contract as fp8_gemm for M <= 4 (K a multiple of BLOCK_K), without tensor cores."""
    m, k = x.shape
    n = w.shape[0]
    bn, bk, warps = config
    if m > 4 or k % bk:
        raise ValueError(f"fp8_gemv takes M <= 4 and K a multiple of {bk}, got M={m} K={k}")
    x = x.contiguous()
    y = torch.empty((m, n), dtype=torch.bfloat16, device=x.device)
    fp8_gemv_kernel[(triton.cdiv(n, bn),)](
        x, w, s, y, m, n, k, x.stride(0), w.stride(0), s.stride(0), y.stride(0),
        BLOCK_N=bn, BLOCK_K=bk, M_MAX=4, num_warps=warps, enable_fp_fusion=fp_fusion,
    )  # fmt: skip
    return y
