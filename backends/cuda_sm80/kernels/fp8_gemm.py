"""FP8 e4m3 weight-only GEMM for decode (M = 1..16), bf16 activations, DSV4.1's 32x32 E8M0 blocks.

y[M, N] = x[M, K] @ W[N, K]^T with W in e4m3 bytes and one E8M0 code per 32x32 block, read as stored.
Each weight is decoded by integer ALU (decode.py) and multiplied by its block's power of two, which
is exact in bf16 (3 mantissa bits, fp32's exponent range), so every 32-wide partial dot is scaled
exactly; tl.dot accumulates in fp32 (mma.sync on sm_80) and the output is rounded once to bf16.
M is padded to 16 rows inside the MMA program (the MMA's smallest M): decode is bandwidth-bound,
the padding costs arithmetic only. `fp8_gemv` is the same math without the MMA for small M: the
weight tile decoded once for every token, each token's 32-wide partial sums times the block's power
of two. Which path and tile `fp8_gemm` takes per shape is data (tuning.py, measured by a sweep).
The table's third path, `gluon` (fp8_gemv_mma: hand-placed mma.sync, M <= 16), is taken where it was measured
fastest; a weight fp8_gemv_mma.pack()ed at load time always runs it, with its own table.
Split-K (for shapes with few row blocks) writes fp32 partials that a second launch sums in split
order into bf16: deterministic, no atomics.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch
import triton
import triton.language as tl

from recipekit.backends.cuda_sm80.kernels import fp8_gemv_mma, tuning
from recipekit.backends.cuda_sm80.kernels.decode import (
    e4m3_asm_times_2e8,
    e4m3_bf16_bits_asm,
    e4m3_bf16_bits_times_2em120,
    e4m3_bits_times_2em120,
    e4m3_sext_times_2e8,
    e4m3_times_2e8,
    e8m0,
)
from recipekit.backends.cuda_sm80.kernels.serial import serial_counters

BLOCK = 32  # DSV4.1's FP8 block (weight_block_size [32, 32])
# (BLOCK_N, BLOCK_K, num_warps, num_stages, SPLIT_K[, DECODER[, SWAP[, maxnreg[, MMA_V2[, SERIAL]]]]]); the split
# 0 = chosen by `default_split`; SWAP 1: fp8_gemm_swap_kernel (the decoded weights as the MMA's A operand); maxnreg 0:
# no cap; SERIAL 1 (swapped kernel, split > 1): the last program of a row block sums the splits (_serial_split_sum)
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
    DECODER: tl.constexpr = 0,
):
    """DECODER 0: each weight decoded to fp32 (fp16 bits, one cvt), times its block's power of two, rounded
    to bf16 (a second cvt). DECODER 1 (BLOCK_N divides 32: one row block per program): the weights placed
    straight into bf16 bits (value x 2^-120, no convert), the block's power of two x 2^60 moved onto the
    activations' columns (exact in bf16), 2^60 on the result: per step only the activation tile is converted."""
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
        if DECODER == 1:
            x = tl.load(
                x_ptr + rm[:, None] * stride_xm + rk[None, :], mask=(rm < M)[:, None] & kmask[None, :], other=0.0
            )
            s1 = tl.load(s_ptr + (pid_n * BLOCK_N // 32) * stride_sn + rk // 32, mask=kmask, other=0)
            xs = (x.to(tl.float32) * (e8m0(s1) * 1.152921504606846976e18)[None, :]).to(tl.bfloat16)  # 2^60
            acc += tl.dot(xs, tl.trans(e4m3_bf16_bits_times_2em120(w)))
        else:
            rkb = k0 // 32 + tl.arange(0, BLOCK_K // 32)
            s = tl.load(
                s_ptr + (rn // 32)[:, None] * stride_sn + rkb[None, :],
                mask=nmask[:, None] & (rkb * 32 < K)[None, :],
                other=0,
            )
            scale = e8m0(s) * 256.0  # the decoder's 2^-8 folded into the block's power of two
            wv = tl.reshape(e4m3_times_2e8(w), (BLOCK_N, BLOCK_K // 32, 32)) * scale[:, :, None]
            wb = tl.reshape(wv, (BLOCK_N, BLOCK_K)).to(tl.bfloat16)
            # the activations loaded after the decode, as before DECODER 1 existed: run 9 (sweep 6) loaded them
            # first and the MMA kernel took 2-4 us longer on every shape
            x = tl.load(
                x_ptr + rm[:, None] * stride_xm + rk[None, :], mask=(rm < M)[:, None] & kmask[None, :], other=0.0
            )
            acc += tl.dot(x, tl.trans(wb))
    if DECODER == 1:
        acc = acc * 1.152921504606846976e18  # 2^60
    omask = (rm < M)[:, None] & nmask[None, :]
    if SPLIT == 1:
        tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc.to(tl.bfloat16), mask=omask)
    else:  # y_ptr is the fp32 partials [SPLIT, M, N]
        tl.store(y_ptr + pid_k * M * N + rm[:, None] * N + rn[None, :], acc, mask=omask)


@triton.jit
def _column(t, c: tl.constexpr, C: tl.constexpr, BLOCK_N: tl.constexpr):
    """Column c of the [BLOCK_N, C] tile t (C a power of two) by halving splits: no gather, no shared memory."""
    if C == 1:
        return tl.reshape(t, (BLOCK_N,))
    else:
        a, b = tl.split(tl.reshape(t, (BLOCK_N, C // 2, 2)))
        if c % 2 == 0:
            return _column(a, c // 2, C // 2, BLOCK_N)
        else:
            return _column(b, c // 2, C // 2, BLOCK_N)


@triton.jit
def fp8_gemm_swap_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr, yb_ptr, cnt_ptr, M, N, K, stride_xm, stride_wn, stride_sn, stride_ym, K_PER_SPLIT,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
    DECODER: tl.constexpr = 0, MMA_V2: tl.constexpr = 0, SERIAL: tl.constexpr = 0,
):  # fmt: skip
    """fp8_gemm_kernel with the operands swapped: the decoded weight tile [BLOCK_N, BLOCK_K] is the MMA's A
    operand (mma.sync takes it from registers on sm_80; on sm_90 wgmma can too, for BLOCK_N >= 64) and the
    activations, transposed [BLOCK_K, BLOCK_M], are B: the small tile is the one staged. The result is
    y^T [BLOCK_N, BLOCK_M], stored transposed. DECODER 0: each weight to fp32 (fp16 bits, one cvt) times its
    block's power of two, rounded to bf16 (exact); DECODER 1 (BLOCK_N divides 32: one row block per program):
    the weights straight into bf16 bits (x 2^-120), the block's power of two x 2^60 on the activations' rows
    (exact in bf16), 2^60 on the result; DECODER 5: the same with the packed PTX decoder (decode.e4m3_bf16_bits_asm):
    one tl.dot per step, no per-block scaling of partial dots. DECODER 2: the weights into bf16 bits (x 2^-120) by the
    packed PTX decoder (decode.e4m3_bf16_bits_asm, 1.5 operations per weight), one tl.dot per 32-wide block of K, its
    fp32 partial dot times the rows' powers of two x 2^60 (exact: every partial dot scaled exactly, as the
    reference's), 2^60 on the result; 3: the same with Triton's decoder; 4: as 2, the next step's codes loaded a step ahead (one load of
    [BLOCK_N, BLOCK_K / 32] codes per step instead of one unpipelined load per block before its use). DECODER 2-4
    take E8M0 codes up to 194 (2^(code - 67) in fp32; DSV4.1's codes lie far below). A product that falls under
    fp32's normal range inside the MMA (a subnormal weight x 2^-120 times a small activation) is kept only as far
    as the tensor core's fp32 accumulation keeps it: the subnormal-only parity weights pass (kernels_device_run
    SUBNORMAL_CASES, results h200-2026-12-02-fp8-swap-*.json).
    MMA_V2 (1: compiled with Triton's DISABLE_MMA_V3, mma.sync on sm_90 at 4+ warps too) only keys the compile.
    SERIAL (SPLIT > 1): the last program of a row block sums the partials into yb_ptr (_serial_split_sum)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rm = tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < N
    mmask = rm < M
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    if DECODER == 4:  # this step's E8M0 codes [BLOCK_N, BLOCK_K / 32], the next step's loaded a step ahead
        s_ptrs = s_ptr + (rn // 32)[:, None] * stride_sn + tl.arange(0, BLOCK_K // 32)[None, :]
        s_cur = tl.load(s_ptrs + pid_k * (K_PER_SPLIT // 32), mask=nmask[:, None], other=0)
    for kk in range(0, K_PER_SPLIT, BLOCK_K):  # K_PER_SPLIT = K / SPLIT, a multiple of BLOCK_K: no K mask
        k0 = pid_k * K_PER_SPLIT + kk
        rk = k0 + tl.arange(0, BLOCK_K)
        if DECODER == 4:
            live = kk + BLOCK_K < K_PER_SPLIT
            s_nxt = tl.load(s_ptrs + (k0 + BLOCK_K) // 32, mask=nmask[:, None] & live, other=0)
            for c in tl.static_range(BLOCK_K // 32):
                rc = k0 + c * 32 + tl.arange(0, 32)
                wc = tl.load(w_ptr + rn[:, None] * stride_wn + rc[None, :], mask=nmask[:, None], other=0)
                xc = tl.load(x_ptr + rm[None, :] * stride_xm + rc[:, None], mask=mmask[None, :], other=0.0)
                sc = _column(s_cur, c, BLOCK_K // 32, BLOCK_N)
                acc += tl.dot(e4m3_bf16_bits_asm(wc), xc) * (e8m0(sc) * 1.152921504606846976e18)[:, None]  # 2^60
            s_cur = s_nxt
        elif DECODER >= 2:  # one 32-wide block of K at a time: its partial dot times the rows' powers of two
            for c in tl.static_range(BLOCK_K // 32):
                rc = k0 + c * 32 + tl.arange(0, 32)
                wc = tl.load(w_ptr + rn[:, None] * stride_wn + rc[None, :], mask=nmask[:, None], other=0)
                xc = tl.load(x_ptr + rm[None, :] * stride_xm + rc[:, None], mask=mmask[None, :], other=0.0)
                sc = tl.load(s_ptr + (rn // 32) * stride_sn + (k0 // 32 + c), mask=nmask, other=0)
                wd = e4m3_bf16_bits_asm(wc) if DECODER == 2 else e4m3_bf16_bits_times_2em120(wc)
                acc += tl.dot(wd, xc) * (e8m0(sc) * 1.152921504606846976e18)[:, None]  # 2^60
        elif DECODER == 1 or DECODER == 5:
            w = tl.load(w_ptr + rn[:, None] * stride_wn + rk[None, :], mask=nmask[:, None], other=0)
            xt = tl.load(x_ptr + rm[None, :] * stride_xm + rk[:, None], mask=mmask[None, :], other=0.0)
            s1 = tl.load(s_ptr + (pid_n * BLOCK_N // 32) * stride_sn + rk // 32)
            xs = (xt.to(tl.float32) * (e8m0(s1) * 1.152921504606846976e18)[:, None]).to(tl.bfloat16)  # 2^60
            wd = e4m3_bf16_bits_asm(w) if DECODER == 5 else e4m3_bf16_bits_times_2em120(w)
            acc += tl.dot(wd, xs)
        else:
            w = tl.load(w_ptr + rn[:, None] * stride_wn + rk[None, :], mask=nmask[:, None], other=0)
            xt = tl.load(x_ptr + rm[None, :] * stride_xm + rk[:, None], mask=mmask[None, :], other=0.0)
            rkb = k0 // 32 + tl.arange(0, BLOCK_K // 32)
            s = tl.load(s_ptr + (rn // 32)[:, None] * stride_sn + rkb[None, :], mask=nmask[:, None], other=0)
            scale = e8m0(s) * 256.0  # the decoder's 2^-8 folded into the block's power of two
            wv = tl.reshape(e4m3_times_2e8(w), (BLOCK_N, BLOCK_K // 32, 32)) * scale[:, :, None]
            acc += tl.dot(tl.reshape(wv, (BLOCK_N, BLOCK_K)).to(tl.bfloat16), xt)
    if DECODER >= 1:
        acc = acc * 1.152921504606846976e18  # 2^60
    omask = nmask[:, None] & mmask[None, :]
    if SPLIT == 1:
        tl.store(y_ptr + rm[None, :] * stride_ym + rn[:, None], acc.to(tl.bfloat16), mask=omask)
    else:  # y_ptr is the fp32 partials [SPLIT, M, N]
        tl.store(y_ptr + pid_k * M * N + rm[None, :] * N + rn[:, None], acc, mask=omask)
        if SERIAL:
            _serial_split_sum(y_ptr, yb_ptr, cnt_ptr, rn, nmask, M, N, stride_ym, BLOCK_N, BLOCK_M, SPLIT)


@triton.jit
def split_sum_kernel(p_ptr, y_ptr, MN, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    """y (bf16) = sum over the SPLIT fp32 partials, in split order."""
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = r < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in tl.static_range(SPLIT):
        acc += tl.load(p_ptr + i * MN + r, mask=mask, other=0.0)
    tl.store(y_ptr + r, acc.to(tl.bfloat16), mask=mask)


@triton.jit
def _serial_split_sum(
    p_ptr, yb_ptr, cnt_ptr, rn, nmask, M, N, stride_ym,
    BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, SPLIT: tl.constexpr,
):  # fmt: skip
    """Serial split-K (config field SERIAL), called by every program after it stored its fp32 partials
    [SPLIT, M, N]: it adds one to its row block's counter (cnt_ptr[program_id(0)]); the program that finds SPLIT - 1
    there, the last of the block to finish, sums the block's SPLIT partials in split order from zero into bf16, as
    split_sum_kernel does (the same bits), and sets the counter back to 0 for the next launch: no second launch.
    The barrier makes every thread's partial stores precede the release of the counter's acq_rel add (the
    semaphore of a serial split-K reduction); the partials are read at L2 (.cg), where other SMs' stores are."""
    tl.debug_barrier()
    done = tl.atomic_add(cnt_ptr + tl.program_id(0), 1, sem="acq_rel", scope="gpu")
    if done == SPLIT - 1:
        rm = tl.arange(0, BLOCK_M)
        mask = nmask[:, None] & (rm < M)[None, :]
        off = rm[None, :] * N + rn[:, None]
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        for j in tl.static_range(SPLIT):
            acc += tl.load(p_ptr + j * M * N + off, mask=mask, other=0.0, cache_modifier=".cg")
        tl.store(yb_ptr + rm[None, :] * stride_ym + rn[:, None], acc.to(tl.bfloat16), mask=mask)
        tl.atomic_xchg(cnt_ptr + tl.program_id(0), 0, sem="relaxed", scope="gpu")


@contextlib.contextmanager
def _mma_v3_disabled(on: bool) -> Iterator[None]:
    """Triton's DISABLE_MMA_V3 set while a launch compiles (Triton reads it per compile, and its cache on disk keys on
    it; the kernel's MMA_V2 constexpr keys the in-memory cache): the swapped kernel on mma.sync at 4+ warps on sm_90.
    The variable is process-wide: a kernel another thread compiles at that moment is built on mma.sync too (its
    instruction kind changes, not its math). Only asked for on sm_90 and later: sm_80 has no MMA v3, and there the
    hot path sets no environment variable per call."""
    if not on or os.environ.get("DISABLE_MMA_V3"):
        yield
        return
    os.environ["DISABLE_MMA_V3"] = "1"
    try:
        yield
    finally:
        del os.environ["DISABLE_MMA_V3"]


@triton.jit
def _serial_sum_1d(p_ptr, yb_ptr, cnt_ptr, counter, r, mask, MN, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    """_serial_split_sum for one run of outputs: offsets r into the bf16 result [MN] (partials [SPLIT, MN]) and the
    counter index of the programs that share them (the MoE's down launch: one per token and row block)."""
    tl.debug_barrier()
    done = tl.atomic_add(cnt_ptr + counter, 1, sem="acq_rel", scope="gpu")
    if done == SPLIT - 1:
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for j in tl.static_range(SPLIT):
            acc += tl.load(p_ptr + j * MN + r, mask=mask, other=0.0, cache_modifier=".cg")
        tl.store(yb_ptr + r, acc.to(tl.bfloat16), mask=mask)
        tl.atomic_xchg(cnt_ptr + counter, 0, sem="relaxed", scope="gpu")


def swap_fits(k: int, bn: int, bk: int, split: int, decoder: int) -> bool:
    """Whether the swapped kernel takes this tile: K a multiple of BLOCK_K x SPLIT_K, BLOCK_N a multiple of 32 with
    DECODER 0 or dividing 32 with DECODER 1 and 5 (one row block of scales per program), DECODER 0..5."""
    return not (k % (bk * split) or (decoder == 0 and bn % 32) or (decoder in (1, 5) and 32 % bn) or decoder > 5)


def mma_fits(k: int, config: tuple[int, ...]) -> bool:
    """Whether fp8_gemm takes an MMA configuration with its explicit SPLIT_K for K (a multiple of 32): the swapped
    kernel (SWAP 1) as swap_fits says, the plain one any such K."""
    bn, bk, _, _, split = config[:5]
    decoder = config[5] if len(config) > 5 else 0
    swap = config[6] if len(config) > 6 else 0
    return not swap or swap_fits(k, bn, bk, split, decoder)


def fp8_gemm(x: Any, w: Any, s: Any, config: tuple[int, ...] | None = None, fp_fusion: bool = True) -> Any:
    """x bf16 [M, K] (M <= 16), w uint8 e4m3 [N, K] or fp8_gemv_mma.pack()ed, s uint8 E8M0 [ceil(N/32), ceil(K/32)]
    -> bf16 [M, N]. A packed weight runs the hand-placed MMA kernel (its own table, tuning.packed_choice; `config`
    its configuration)."""
    m, k = x.shape
    n = w.shape[0]
    if m > 16 or k % BLOCK:
        raise ValueError(f"fp8_gemm takes M <= 16 and K a multiple of {BLOCK}, got M={m} K={k}")
    if isinstance(w, fp8_gemv_mma.Packed):  # M <= 16: one launch (tokens 9..16 a second MMA on the same words)
        cfg = config or tuning.packed_choice(x.device, n, k, m, fp8_gemv_mma.fits)
        return fp8_gemv_mma.fp8_gemv_mma(x, w, s, cfg, fp_fusion)
    if config is None:  # the measured table (tuning.py) names the path and its configuration per shape
        path, cfg = tuning.fp8_choice(x.device, n, k, m)
        if path == "gemv" and gemv_fits(k, cfg):
            return fp8_gemv(x, w, s, cfg, fp_fusion)
        if path == "gluon" and m <= fp8_gemv_mma.TOKENS_MAX and fp8_gemv_mma.config_fits(k, cfg):
            return fp8_gemv_mma.fp8_gemv_mma(x, w, s, cfg, fp_fusion)
        config = cfg if path == "mma" else None
    bn, bk, warps, stages, split = (config or DEFAULT_CONFIG)[:5]
    decoder = config[5] if config and len(config) > 5 else 0
    swap = config[6] if config and len(config) > 6 else 0
    cap = {"maxnreg": config[7]} if config and len(config) > 7 and config[7] else {}  # registers per thread; 0: none
    if decoder == 1 and 32 % bn:
        raise ValueError(f"fp8_gemm's bf16-bits decoder (DECODER 1) takes BLOCK_N dividing 32, got {bn}")
    split = split or default_split(n, k, bn, bk)
    if swap and not swap_fits(k, bn, bk, split, decoder):
        raise ValueError(
            f"fp8_gemm's swapped kernel takes K a multiple of BLOCK_K x SPLIT_K, BLOCK_N a multiple of 32 (DECODER 0) "
            f"or dividing 32 (DECODER 1, 5), DECODER 0..5; got K={k} BLOCK_K={bk} SPLIT_K={split} BLOCK_N={bn} DECODER={decoder}"
        )
    if not swap and decoder > 1:
        raise ValueError(f"fp8_gemm's DECODER {decoder} runs in the swapped kernel only (config field SWAP = 1)")
    per_split = triton.cdiv(triton.cdiv(k, split), bk) * bk
    split = triton.cdiv(k, per_split)
    x = x.contiguous()
    y = torch.empty((m, n), dtype=torch.bfloat16, device=x.device)
    out = y if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(n, bn), split)
    if swap:
        mma_v2 = config[8] if config and len(config) > 8 else 0
        cnt = serial_counters(x.device, grid[0]) if split > 1 and config and len(config) > 9 and config[9] else None
        hopper = x.device.type == "cuda" and torch.cuda.get_device_capability(x.device)[0] >= 9
        with _mma_v3_disabled(bool(mma_v2) and hopper):
            fp8_gemm_swap_kernel[grid](
                x, w, s, out, y, y if cnt is None else cnt, m, n, k, x.stride(0), w.stride(0), s.stride(0),
                y.stride(0), k // split, BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, SPLIT=split, DECODER=decoder,
                MMA_V2=mma_v2, SERIAL=int(cnt is not None), num_warps=warps, num_stages=stages,
                enable_fp_fusion=fp_fusion, **cap,
            )  # fmt: skip
        if split > 1 and cnt is None:
            split_sum_kernel[(triton.cdiv(m * n, 1024),)](out, y, m * n, SPLIT=split, BLOCK=1024)
        return y
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
        DECODER=decoder,
        num_warps=warps,
        num_stages=stages,
        enable_fp_fusion=fp_fusion,  # False: no FMA contraction (for FMA-throttled cards, bench/kernels/variant.py)
    )
    if split > 1:
        split_sum_kernel[(triton.cdiv(m * n, 1024),)](out, y, m * n, SPLIT=split, BLOCK=1024)
    return y


@triton.jit
def _gemv_tile(x_ptr, w_ptr, s_row, rn, nmask, rm, M, K, k0, stride_xm, stride_wn,
               BLOCK_K: tl.constexpr, LIVE):  # fmt: skip
    """The raw loads of one BLOCK_K step: weight bytes [BLOCK_N, BLOCK_K], E8M0 codes [BLOCK_K] (one per
    column, repeated over 32), activations [BLOCK_M, BLOCK_K]; LIVE False (past the split's end) loads nothing."""
    rk = k0 + tl.arange(0, BLOCK_K)
    w = tl.load(w_ptr + rn[:, None] * stride_wn + rk[None, :], mask=nmask[:, None] & LIVE, other=0)
    s = tl.load(s_row + rk // 32, mask=(rk < K) & LIVE, other=0)
    x = tl.load(x_ptr + rm[:, None] * stride_xm + rk[None, :], mask=(rm < M)[:, None] & LIVE, other=0.0)
    return w, s, x


@triton.jit
def fp8_gemv_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_sn, stride_ym, K_PER_SPLIT,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr, SEXT: tl.constexpr,
    PREFETCH: tl.constexpr = 0, ACC_TILE: tl.constexpr = 1,
):  # fmt: skip
    """Small-M path without the MMA. A program owns BLOCK_N rows (inside one 32-row scale block:
    32 % BLOCK_N == 0) over one K split. Per BLOCK_K step the weight tile is loaded (16-byte loads, no
    K mask) and decoded once for every token; each token's activations are multiplied by their
    column block's power of two (x 2^8, the decoder's factor), which is exact, so every product
    w * x * scale is exact in fp32, as the reference's. ACC_TILE: products accumulate per (token, row,
    column) in fp32 registers, reduced once at the end (2: M = 1 in a 2-D tile, no 3-D broadcast and no
    shared-memory layout change per step); else reduced over K every step. PREFETCH: the
    next step's raw bytes are loaded before this step's decode (two loads in flight per program)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < N
    rm = tl.arange(0, BLOCK_M)
    if ACC_TILE == 2:  # M = 1 only: a 2-D tile, the activations a plain row (no 3-D broadcast)
        acc1 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    elif ACC_TILE:
        acc = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=tl.float32)
    else:
        acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_lo = pid_k * K_PER_SPLIT
    s_row = s_ptr + (pid_n * BLOCK_N // 32) * stride_sn
    if PREFETCH:
        w, s, x = _gemv_tile(x_ptr, w_ptr, s_row, rn, nmask, rm, M, K, k_lo, stride_xm, stride_wn, BLOCK_K, True)
    for kk in range(0, K_PER_SPLIT, BLOCK_K):
        if PREFETCH:
            live = kk + BLOCK_K < K_PER_SPLIT
            w_n, s_n, x_n = _gemv_tile(
                x_ptr, w_ptr, s_row, rn, nmask, rm, M, K, k_lo + kk + BLOCK_K, stride_xm, stride_wn, BLOCK_K, live
            )
        else:  # plain loads, no per-step mask beyond the rows'
            rk = k_lo + kk + tl.arange(0, BLOCK_K)
            w = tl.load(w_ptr + rn[:, None] * stride_wn + rk[None, :], mask=nmask[:, None], other=0)
            s = tl.load(s_row + rk // 32)
            if ACC_TILE == 2:
                x = tl.load(x_ptr + rk)
            else:
                x = tl.load(x_ptr + rm[:, None] * stride_xm + rk[None, :], mask=(rm < M)[:, None], other=0.0)
        if SEXT == 2:
            wf = e4m3_asm_times_2e8(w)
        elif SEXT == 1:
            wf = e4m3_sext_times_2e8(w)
        else:
            wf = e4m3_times_2e8(w)
        if ACC_TILE == 2:
            acc1 += wf * (x.to(tl.float32) * (e8m0(s) * 256.0))[None, :]
        elif ACC_TILE:
            xs = x.to(tl.float32) * (e8m0(s) * 256.0)[None, :]  # the decoder's 2^-8 folded into the power of two
            acc += wf[None, :, :] * xs[:, None, :]
        else:
            xs = x.to(tl.float32) * (e8m0(s) * 256.0)[None, :]
            acc2 += tl.sum(wf[None, :, :] * xs[:, None, :], axis=2)
        if PREFETCH:
            w, s, x = w_n, s_n, x_n
    if ACC_TILE == 2:
        y = tl.sum(acc1, axis=1)[None, :]
    elif ACC_TILE:
        y = tl.sum(acc, axis=2)
    else:
        y = acc2
    omask = (rm < M)[:, None] & nmask[None, :]
    if SPLIT == 1:
        tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], y.to(tl.bfloat16), mask=omask)
    else:  # y_ptr is the fp32 partials [SPLIT, M, N]
        tl.store(y_ptr + pid_k * M * N + rm[:, None] * N + rn[None, :], y, mask=omask)


@triton.jit
def _token_fma(acc, wf, x_ptr, rk, sc, i: tl.constexpr, stride_xm, MT: tl.constexpr):
    """Token i's products with the decoded tile (acc unchanged past the M tokens: compiled away)."""
    if i < MT:
        acc += wf * (tl.load(x_ptr + i * stride_xm + rk).to(tl.float32) * sc)[None, :]
    return acc


@triton.jit
def _token_store(acc, y_ptr, i: tl.constexpr, rn, nmask, N, pid_k, stride_ym, OUT_SCALE, MT: tl.constexpr,
                 SPLIT: tl.constexpr):  # fmt: skip
    """Token i's row: the tile reduced once over K, times the decoder's remaining factor."""
    if i < MT:
        y = tl.sum(acc, axis=1) * OUT_SCALE
        if SPLIT == 1:
            tl.store(y_ptr + i * stride_ym + rn, y.to(tl.bfloat16), mask=nmask)
        else:  # y_ptr is the fp32 partials [SPLIT, M, N]
            tl.store(y_ptr + (pid_k * MT + i) * N + rn, y, mask=nmask)


@triton.jit
def fp8_gemv_tokens_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr, yb_ptr, cnt_ptr, N, stride_xm, stride_wn, stride_sn, stride_ym, K_PER_SPLIT,
    MT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr, DECODER: tl.constexpr,
    PREFETCH: tl.constexpr = 0, SERIAL: tl.constexpr = 0, BLOCK_MT: tl.constexpr = 8, STAGES: tl.constexpr = 1,
):  # fmt: skip
    """The register-tile path for M = 1..8 (ACC_TILE 3): one 2-D fp32 accumulator [BLOCK_N, BLOCK_K] per
    token (unrolled over the MT tokens, no 3-D broadcast, no layout change per step), the weight tile
    decoded once per step and reused by every token, each accumulator reduced over K once at the end.
    DECODER 3: e4m3 bytes straight into fp32 bits (value x 2^-120, no fp16 -> fp32 convert; 2^60 on the
    activations' column factor, 2^60 on the result); else the PTX four-at-once decoder (x 2^-8, 2^8 on the
    activations). Every product w * x * scale is exact in fp32, as the reference's. PREFETCH: the next step's
    weight bytes and codes are loaded before this step's decode (two tiles in flight per program). SERIAL (SPLIT > 1):
    the last program of a row block sums the partials into yb_ptr (_serial_split_sum), no split_sum_kernel launch.
    STAGES > 1: Triton's software pipeliner stages the loop's loads through shared memory (cp.async, sm_80), that many
    steps in flight per program without holding them in registers."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < N
    a0 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    a1 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    a2 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    a3 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    a4 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    a5 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    a6 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    a7 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    k_lo = pid_k * K_PER_SPLIT
    s_row = s_ptr + (pid_n * BLOCK_N // 32) * stride_sn
    if PREFETCH:
        rk0 = k_lo + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + rn[:, None] * stride_wn + rk0[None, :], mask=nmask[:, None], other=0)
        s = tl.load(s_row + rk0 // 32)
    for kk in tl.range(0, K_PER_SPLIT, BLOCK_K, num_stages=STAGES):
        rk = k_lo + kk + tl.arange(0, BLOCK_K)
        if PREFETCH:  # the next step's tile (none past the split's end)
            live = kk + BLOCK_K < K_PER_SPLIT
            w_n = tl.load(
                w_ptr + rn[:, None] * stride_wn + (rk + BLOCK_K)[None, :], mask=nmask[:, None] & live, other=0
            )
            s_n = tl.load(s_row + (rk + BLOCK_K) // 32, mask=live, other=0)
        else:
            w = tl.load(w_ptr + rn[:, None] * stride_wn + rk[None, :], mask=nmask[:, None], other=0)
            s = tl.load(s_row + rk // 32)
        if DECODER == 3:
            wf = e4m3_bits_times_2em120(w)
            sc = e8m0(s) * 1.152921504606846976e18  # 2^60
        else:
            wf = e4m3_asm_times_2e8(w)
            sc = e8m0(s) * 256.0
        a0 = _token_fma(a0, wf, x_ptr, rk, sc, 0, stride_xm, MT)
        a1 = _token_fma(a1, wf, x_ptr, rk, sc, 1, stride_xm, MT)
        a2 = _token_fma(a2, wf, x_ptr, rk, sc, 2, stride_xm, MT)
        a3 = _token_fma(a3, wf, x_ptr, rk, sc, 3, stride_xm, MT)
        a4 = _token_fma(a4, wf, x_ptr, rk, sc, 4, stride_xm, MT)
        a5 = _token_fma(a5, wf, x_ptr, rk, sc, 5, stride_xm, MT)
        a6 = _token_fma(a6, wf, x_ptr, rk, sc, 6, stride_xm, MT)
        a7 = _token_fma(a7, wf, x_ptr, rk, sc, 7, stride_xm, MT)
        if PREFETCH:
            w = w_n
            s = s_n
    out_scale = 1.152921504606846976e18 if DECODER == 3 else 1.0
    _token_store(a0, y_ptr, 0, rn, nmask, N, pid_k, stride_ym, out_scale, MT, SPLIT)
    _token_store(a1, y_ptr, 1, rn, nmask, N, pid_k, stride_ym, out_scale, MT, SPLIT)
    _token_store(a2, y_ptr, 2, rn, nmask, N, pid_k, stride_ym, out_scale, MT, SPLIT)
    _token_store(a3, y_ptr, 3, rn, nmask, N, pid_k, stride_ym, out_scale, MT, SPLIT)
    _token_store(a4, y_ptr, 4, rn, nmask, N, pid_k, stride_ym, out_scale, MT, SPLIT)
    _token_store(a5, y_ptr, 5, rn, nmask, N, pid_k, stride_ym, out_scale, MT, SPLIT)
    _token_store(a6, y_ptr, 6, rn, nmask, N, pid_k, stride_ym, out_scale, MT, SPLIT)
    _token_store(a7, y_ptr, 7, rn, nmask, N, pid_k, stride_ym, out_scale, MT, SPLIT)
    if SERIAL and SPLIT > 1:  # BLOCK_MT: MT rounded up to a power of two
        _serial_split_sum(y_ptr, yb_ptr, cnt_ptr, rn, nmask, MT, N, stride_ym, BLOCK_N, BLOCK_MT, SPLIT)


TOKENS_MAX = 8  # the register-tile path's accumulators (ACC_TILE 3)

# (BLOCK_N, BLOCK_K, num_warps, SPLIT_K, decoder 0 ALU / 1 sign-extension / 2 PTX four-at-once / 3 fp32 bits
# (ACC_TILE 3 only)[, PREFETCH, ACC_TILE[, maxnreg (ACC_TILE 3 only; 0: none)[, SERIAL (ACC_TILE 3, split > 1)
# [, STAGES (ACC_TILE 3: the loop's loads staged through shared memory, cp.async; 0 or 1: none)]]]])
GemvConfig = tuple[int, ...]
GEMV_DEFAULT: GemvConfig = (4, 1024, 4, 1, 1, 1, 0)


def gemv_fits(k: int, config: GemvConfig) -> bool:
    """Whether K splits into SPLIT equal parts, each a multiple of BLOCK_K, and BLOCK_N divides 32."""
    bn, bk, _, split = config[:4]
    return k % (bk * split) == 0 and 32 % bn == 0


def fp8_gemv(x: Any, w: Any, s: Any, config: GemvConfig = GEMV_DEFAULT, fp_fusion: bool = True) -> Any:
    """The same contract as fp8_gemm for M <= 16 (K a multiple of BLOCK_K * SPLIT), without tensor cores."""
    m, k = x.shape
    n = w.shape[0]
    bn, bk, warps, split, sext = config[:5]
    prefetch = config[5] if len(config) > 5 else 0  # tables measured before these two fields: off, tile on
    acc_tile = config[6] if len(config) > 6 else 1
    cap = {"maxnreg": config[7]} if len(config) > 7 and config[7] else {}  # a register cap per thread; 0: none
    stages = config[9] if len(config) > 9 else 0
    if acc_tile == 2 and (m != 1 or prefetch):
        raise ValueError(f"fp8_gemv's 2-D tile (ACC_TILE 2) takes M = 1 without prefetch, got M={m}")
    if stages > 1 and acc_tile != 3:
        raise ValueError(f"fp8_gemv's STAGES runs in the register tile (ACC_TILE 3) only, got ACC_TILE {acc_tile}")
    if acc_tile == 3 and (m > TOKENS_MAX or sext not in (2, 3)):
        raise ValueError(
            f"fp8_gemv's register tile (ACC_TILE 3) takes M <= {TOKENS_MAX} and decoder 2 or 3, "
            f"got M={m} PREFETCH={prefetch} DECODER={sext}"
        )
    if sext == 3 and acc_tile != 3:
        raise ValueError("fp8_gemv's fp32-bits decoder (DECODER 3) runs in the register tile (ACC_TILE 3) only")
    if m > 16 or not gemv_fits(k, config):
        raise ValueError(
            f"fp8_gemv takes M <= 16, K a multiple of {bk * split} and BLOCK_N dividing 32, got M={m} K={k} BLOCK_N={bn}"
        )
    x = x.contiguous()
    y = torch.empty((m, n), dtype=torch.bfloat16, device=x.device)
    out = y if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    cnt = None
    if acc_tile == 3:
        blocks = triton.cdiv(n, bn)
        cnt = serial_counters(x.device, blocks) if split > 1 and len(config) > 8 and config[8] else None
        fp8_gemv_tokens_kernel[(blocks, split)](
            x, w, s, out, y, y if cnt is None else cnt, n, x.stride(0), w.stride(0), s.stride(0), y.stride(0),
            k // split, MT=m, BLOCK_N=bn, BLOCK_K=bk, SPLIT=split, DECODER=sext, PREFETCH=prefetch,
            SERIAL=int(cnt is not None), BLOCK_MT=triton.next_power_of_2(m), STAGES=max(1, stages), num_warps=warps,
            enable_fp_fusion=fp_fusion, **cap,
        )  # fmt: skip
    else:
        fp8_gemv_kernel[(triton.cdiv(n, bn), split)](
            x, w, s, out, m, n, k, x.stride(0), w.stride(0), s.stride(0), y.stride(0), k // split,
            BLOCK_M=triton.next_power_of_2(m), BLOCK_N=bn, BLOCK_K=bk, SPLIT=split, SEXT=sext,
            PREFETCH=prefetch, ACC_TILE=acc_tile, num_warps=warps, enable_fp_fusion=fp_fusion,
        )  # fmt: skip
    if split > 1 and cnt is None:
        split_sum_kernel[(triton.cdiv(m * n, 1024),)](out, y, m * n, SPLIT=split, BLOCK=1024)
    return y


def path_kernel(path: str) -> Any:
    """The function that runs a tuning-table path's configuration (x, w, s, config, fp_fusion): "gemv" the register
    tile, "gluon" the hand-placed MMA kernel, "gluon_packed" the same on pack()ed weights, any other ("mma") fp8_gemm
    itself."""
    kernels = {"gemv": fp8_gemv, "gluon": fp8_gemv_mma.fp8_gemv_mma, "gluon_packed": fp8_gemv_mma.fp8_gemv_mma_packed}
    return kernels.get(path, fp8_gemm)
