"""MXFP4 MoE GEMV for decode (M = 1..16 tokens, top-k of E experts), DeepSeek's own MXFP4 bytes.

Weights: w13 uint8 [E, 2I, H/2] (rows 0..I-1 = w1, I..2I-1 = w3), w2 uint8 [E, H, I/2]; byte j of
a row holds values 2j (low nibble) and 2j+1 (high nibble); E8M0 codes per 32 values [E, rows, cols/32].
Routing (sqrtsoftplus + bias, route scale) is computed outside: sel [M, k] expert ids, wts [M, k].
Two launches: (1) one program per (token, slot, block of I rows): gate and up GEMVs (their rows
in one tile, so both weight streams are in flight together), clamped
SwiGLU (gate <= limit, up in [-limit, limit], as bench/oracle/moe.py), times the route weight,
h kept in fp32; (2) one program per (token, block of H rows): the k down GEMVs summed in slot
order (deterministic, no atomics). Each 32-value group's partial dot is scaled exactly by its
power of two; fp32 accumulation; bf16 output.
The 2-D tile path (TILE in the config, the default): the same up launch on a register tile, then
one down program per (token, slot, block of H rows) into fp32 partials and a third launch summing
them in slot order (6x the down programs in flight, still deterministic); or, DOWN_SUM, the down
launch per (token, block of H rows) adding the slots in the same order itself (two launches, no partials).
`moe_launches` names each launch, so a bench can time them one by one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import triton
import triton.language as tl

from recipekit.backends.cuda_sm80.kernels.decode import (
    e8m0,
    mxfp4_bf16_bits,
    mxfp4_bf16_bits_asm,
    mxfp4_bf16_scaled_asm,
    mxfp4_pair_dot,
    mxfp4_pair_dot_denorm,
    mxfp4_pair_dot_denorm_sext,
    mxfp4_word_dot,
)
from recipekit.backends.cuda_sm80.kernels.fp8_gemm import _serial_sum_1d, split_sum_kernel
from recipekit.backends.cuda_sm80.kernels.mxfp4_moe_mma import moe_down_mma_kernel, moe_up_mma_kernel, xs_steps
from recipekit.backends.cuda_sm80.kernels.serial import serial_counters

GROUP = 32
# (BLOCK_N rows of the up launch, BLOCK_KB bytes, num_warps, SCALE_EACH, BLOCK_N rows of the down
# launch): SCALE_EACH multiplies every product by its group's scale (no reshape of the tile into
# groups; exact too: a power of two); then, optional, TILE (1: the 2-D tile kernels below, SCALE_EACH unused), BLOCK_KB and
# num_warps of the tile path's down launch, DOWN_SUM (1: the slot sum fused into the down launch), KSPLIT (the
# down launch split over the intermediate dim, summed in fixed order by the sum launch), num_stages of the up and
# of the down launch (0: Triton's), PREFETCH (TILE 5: the next step's words loaded before this step's decode).
# TILE 1: fp16 nibble decode; 2: nibbles into fp32 bits; 3: the same on int32 words; 4: as 2 with the byte
# sign-extended (H200 run 10: none of 4, KSPLIT, stages beat the default); 5: int32 words decoded in PTX
# (decode.mxfp4_word_dot: no byte extraction, an FMA chain); 6: TILE 5's up launch, TILE 2's down launch.
# Then maxnreg of the up and of the down launch (indices 13, 14; 0: none). TILE 7: the up launch on the tensor
# cores (_tile_dot_mma: tl.dot of the decoded bf16 tile against a block-diagonal activation tile, one column per
# 32-value group, each group's result scaled in fp32), TILE 2's down launch; 8: the tensor cores in both launches;
# 9 and 10: 7 and 8 with the nibbles decoded in PTX (decode.mxfp4_bf16_bits_asm). H200 run 15
# (bench/kernels/results/h200-2026-12-02-mma-1.json): all slower than the default (up launch 67 against 38 us at M = 1):
# tl.dot's activation tile and operand moves cost more issue slots than the cheaper decode saves.
# TILE 11: the up launch on the tensor cores with each group's scale folded into the decoded bf16 weights (the A
# operand; the token's activations a [BLOCK_KB, 16] B operand with one live column, no block-diagonal tile, one plain
# tl.dot per nibble half, fp32 accumulation in the MMA), TILE 2's down launch; 12: the same decoded and scaled in PTX
# (decode.mxfp4_bf16_scaled_asm); 13: 12 in both launches (h as bf16 hi + lo). H200 session 34
# (bench/kernels/results/h200-2026-12-02-fold-1.json): parity passes, but the up launch takes 76-116 us against the
# default's 38 (PTX: ~17 operations per weight byte in the loop against TILE 6's 10: the byte-pair operand loads,
# the B tile and cp.async addressing cost more than the MMA saves). 14: TILE 5 (the PTX word decoder in both
# launches) with h stored per word of w2 and times 2^63 by the up launch, so the down launch loads a word's 8
# activations as one 32-byte vector (_tile_dot_asm_vec; PTX loop 10.6 operations per byte against TILE 2's 12.4).
# Index 15, MASKLESS (TILE 14 only): the word, code and activation loads unmasked in a launch whose shape its tile
# divides (checked at launch; else masked): the PTX loops 10.0 -> 9.4 (up) and 10.0 -> 9.3 (down) per byte.
# Index 16, SERIAL (the per-slot down launches): up to M = SERIAL tokens, the last program of a (token, row block) sums
# the TOPK x KSPLIT partials in the sum launch's order (fp8_gemm._serial_sum_1d): no third launch (session 35).
# Indices 17 and 18, STAGES of the up and of the down launch (TILE 14): the loops' loads staged through shared memory
# (cp.async) by Triton's pipeliner, as the FP8 register tile's STAGES (session 36).
# Indices 19-22 (TILE 14): up to M = [19] tokens the up launch prefetches [20] eighths of its experts' down weights
# into L2 (evict_last), before ([21] 0) or after (1) its loop; [22] 1: its word loads evict_first (unstaged only).
# H200 session 37 (bench/kernels/results/h200-2026-12-03-moe-l2-1.json): every variant slower at M = 1 (53.3-69.5
# against 50.7 us; the up launch 2.5-6.6 us longer, the down launch at most 1.3 us shorter), so the default has none.
# Indices 23 to 28 (TILE 14): the up launch on the tensor cores through hand-placed mma.sync (mxfp4_moe_mma, Gluon):
# [23] 0: off, 1: on, 2: on with the next iteration's words loaded first; [24] its num_warps (0: 4), one unit per warp;
# [25] its steps (of 8 groups) per loop iteration (0: 2). [26] 1: the down launch on the tensor cores the same way
# (moe_down_mma_kernel: slot partials and the sum launch), [27] its num_warps (0: 4), [28] its steps per iteration (0: 1).
# H200 session 38 (bench/kernels/results/h200-2026-12-03-moe-mma-5.json): parity passes; up (1, 8, 2) 29.9-30.1 against
# 31.1 us at M = 1 (the whole call 49.6-49.9 against 50.7-50.8), slower at M = 8 (321.9 against 318.8 us); the down
# launch slower (20.7 us and a 1.5 us sum against 19.6), so the default uses neither.
# [26] 2: the tensor-core down launch with h rounded to bf16 (two MMAs per step, as the model keeps h between its GEMMs),
# 3: that with its next iteration's loads first; 4 and 5: the same with h and the weights in fp16 (h's 11 significant
# bits; the clamped SwiGLU keeps |h| below fp16's 65504 for a limit up to 64 and route weights below 16); with SERIAL
# (index 16) its last program sums the slots (no sum launch).
# Index 29 (with 23): the tensor-core up launch's words staged that many iterations deep through shared memory by
# cp.async (mxfp4_moe_mma._staged_loop; 0 or 1: in registers, as before). H200 session 40
# (bench/kernels/results/h200-2026-12-03-moe-mma-staged-1.json): parity passes, every depth slower (ST 3: 32.2, 4: 38.1,
# 6: 40.9 against 30.0 us at M = 1; Triton puts two bar.sync in each iteration), so the default has none.
# Index 30, GROUPS (TILE 14's down launch, M = 1): the slots in that many groups, each group's up and down launch on its
# own stream (moe_plan), so one group's down launch runs beside another's up launch, filling the ramps and tails that
# Nsight Compute shows idle (11-22 % of each launch's cycles, session 40). Index 31, URGENT: each group's down launch on a
# high-priority stream.
MoeConfig = tuple[int, ...]
# the row-loop kernels' fastest at M = 1 on the H200 (bench/kernels/results/h200-2026-12-02-bench-honest-3.json)
ROW_CONFIG: MoeConfig = (8, 256, 4, 0, 8)
# the 2-D tile path (TILE 2: nibbles straight into fp32 bits): 16 gate + 16 up rows x 512 bytes per up
# step, 32 rows x 128 bytes (the 1152-byte w2 rows in 9 steps) per down step
TILE_CONFIG: MoeConfig = (16, 512, 4, 0, 32, 2, 128, 4)
# the default from H200 run 13 (bench/kernels/results/h200-2026-12-02-trial-2.json) to session 34: TILE 6 (the up
# launch's words decoded in PTX, decode.mxfp4_word_dot) and the down launch capped at 64 registers per thread (8
# programs per SM instead of 7: its 960 programs at M = 1 in one wave): 62.6 us against TILE_CONFIG's 66.4 us at
# M = 1, 385 against 406 us at M = 8
TILE6_CONFIG: MoeConfig = (16, 512, 4, 0, 32, 6, 128, 4, 0, 1, 0, 0, 0, 0, 64)
# session 34 (bench/kernels/results/h200-2026-12-02-words-1.json, -2.json): TILE 14 (TILE 6's up launch storing h
# per word of w2 and times 2^63; the down launch on the PTX word decoder with a word's 8 activations one vector
# load) with 64 rows per down program (480 programs at M = 1): down launch 19.7 against 23.0 us, the whole call 59.4
# against 62.9 us at M = 1 (0.450x against 0.425x of copy bandwidth), 364 against 384 us at M = 8
TILE14_CONFIG: MoeConfig = (16, 512, 4, 0, 64, 14, 128, 4)
# the default since session 34's run 4 (h200-2026-12-02-even-1.json): TILE 14 with MASKLESS (index 15: the word loads
# unmasked where the shape divides the tile, as DSV4.1-Flash's does): 56.3 against 59.7 us at M = 1 (up 35.9 against
# 38.2, down 18.9 against 19.9; 0.470x against 0.443x), 340.9 against 364.7 us at M = 8
MASKLESS_CONFIG: MoeConfig = (16, 512, 4, 0, 64, 14, 128, 4, 0, 1, 0, 0, 0, 0, 0, 1)
# SERIAL up to 16 tokens (the slots summed by the down launch's last program at every M, no sum launch): H200
# moe-serial-1 (bench/kernels/results/h200-2026-12-02-moe-serial-1.json), same run against MASKLESS_CONFIG: M = 1 55.6
# against 56.1 us (launch by launch 55.2 against 56.0), M = 8 346.6 against 341.6 us (the down launch 115.6 against
# 108.2 + 1.7 for the sum: the last programs' sums sit on the launch's tail)
SERIAL_CONFIG: MoeConfig = MASKLESS_CONFIG + (16,)
# session 35's default: MASKLESS_CONFIG with SERIAL at M = 1 only
SERIAL_M1_CONFIG: MoeConfig = MASKLESS_CONFIG + (1,)
# the default since session 36: that with the up launch's word loads staged 3 deep through shared memory (STAGES,
# index 17; the down launch unstaged, index 18): H200 moe-staged-1 (bench/kernels/results/
# h200-2026-12-03-moe-staged-1.json), same run: M = 1 50.7 against 55.1 us (up 31.1 against 35.6, 0.522x against
# 0.480x), M = 8 315.6 against 340.0 us; staging the down launch (2 or 3) slowed it from 19.6 to 27.8-32.3 us
DEFAULT_CONFIG: MoeConfig = SERIAL_M1_CONFIG + (3, 1)
# the default at M = 1 since session 40 (bench/kernels/results/h200-2026-12-03-moe-groups-1.json to -7.json): the
# slots in 3 groups on their own streams (index 30), each group's up launch on the tensor cores (mxfp4_moe_mma, 8 warps,
# 2 steps per iteration) and its down launch too, with h and the weights in fp16 and its next loads first (index 26: 5,
# 8 warps, 2 steps per iteration): 43.8-44.1 us against the default's 50.5-50.9 (0.603-0.609x of copy bandwidth against
# 0.52x), parity passing at every M (rel. error 2.24e-3 at M = 1, as the default's). At M = 8 the same configuration
# (its groups do not apply there) is slower, so larger M keep DEFAULT_CONFIG; so do hidden sizes that are not a
# multiple of 256 and SwiGLU limits above 64 (fp16 h)
DEFAULT_M1_CONFIG: MoeConfig = DEFAULT_CONFIG + (0,) * 4 + (1, 8, 2, 5, 8, 2, 1, 3)


def default_config(m: int, hidden: int, limit: float = 10.0) -> MoeConfig:
    """The default configuration for M tokens of `hidden` values: DEFAULT_M1_CONFIG at M = 1 where its tensor-core
    launches take the hidden size (a multiple of 256) and the SwiGLU limit (up to 64: h in fp16), else
    DEFAULT_CONFIG."""
    return DEFAULT_M1_CONFIG if m == 1 and hidden % 256 == 0 and limit <= 64 else DEFAULT_CONFIG


@triton.jit
def _group_dot(
    w_ptr,
    s_ptr,
    rn,
    nmask,
    stride_wr,
    stride_sr,
    v_ptr,
    KB,
    BLOCK_N: tl.constexpr,
    BLOCK_KB: tl.constexpr,
    SCALE_EACH: tl.constexpr,
):
    """sum over K of W[rn, :] * v for one expert: W packed MXFP4 [rows, KB bytes], v fp32/bf16 [2 KB]."""
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for kb0 in range(0, KB, BLOCK_KB):
        rkb = kb0 + tl.arange(0, BLOCK_KB)
        kmask = rkb < KB
        rv = 2 * kb0 + tl.arange(0, 2 * BLOCK_KB)  # the activations of these bytes, contiguous
        v = tl.load(v_ptr + rv, mask=rv < 2 * KB, other=0.0).to(tl.float32)
        ve, vo = tl.split(tl.reshape(v, (BLOCK_KB, 2)))
        q = tl.load(w_ptr + rn[:, None] * stride_wr + rkb[None, :], mask=nmask[:, None] & kmask[None, :], other=0)
        p = mxfp4_pair_dot(q, ve[None, :], vo[None, :])
        if SCALE_EACH:
            s = tl.load(
                s_ptr + rn[:, None] * stride_sr + (rkb // 16)[None, :], mask=nmask[:, None] & kmask[None, :], other=0
            )
            acc += tl.sum(p * (e8m0(s) * 16384.0), axis=1)
        else:
            p = tl.sum(tl.reshape(p, (BLOCK_N, BLOCK_KB // 16, 16)), axis=2)  # 16 bytes = one group of 32
            rg = kb0 // 16 + tl.arange(0, BLOCK_KB // 16)
            gmask = nmask[:, None] & (rg * 16 < KB)[None, :]
            s = tl.load(s_ptr + rn[:, None] * stride_sr + rg[None, :], mask=gmask, other=0)
            acc += tl.sum(p * (e8m0(s) * 16384.0), axis=1)
    return acc


@triton.jit
def _up_rows(sel_ptr, wts_ptr, INTER, TOPK: tl.constexpr, BLOCK_N: tl.constexpr):
    """The up launches' prologue: program (token * TOPK + slot, block of I rows) -> its token, expert, route
    weight, output units rn (and their mask), and the gate rows with their up rows (I further down) in one
    tile of 2 BLOCK_N rows, so both weight streams are in flight together."""
    pid_t = tl.program_id(0)
    pid_n = tl.program_id(1)
    m = pid_t // TOPK
    e = tl.load(sel_ptr + pid_t).to(tl.int64)
    wt = tl.load(wts_ptr + pid_t)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    r2 = tl.arange(0, 2 * BLOCK_N)
    rows = pid_n * BLOCK_N + (r2 % BLOCK_N) + (r2 // BLOCK_N) * INTER
    rmask = (pid_n * BLOCK_N + (r2 % BLOCK_N)) < INTER
    return pid_t, m, e, wt, rn, rn < INTER, rows, rmask


# prefetch.global.L2::evict_last (PTX ISA 7.4, sm_80): one 128-byte line into L2, kept over evict_first lines; the
# register output only gives the op a result (inline asm needs one); is_pure=False keeps Triton from dropping it
L2_PREFETCH_ASM = tl.constexpr("prefetch.global.L2::evict_last [$1];\n mov.u32 $0, 0;")


@triton.jit
def _l2_prefetch(base_ptr, nbytes, part, parts, LINES: tl.constexpr):
    """Part `part` of `parts` of the nbytes at base_ptr (a uint8 pointer) prefetched into L2 with evict_last, one
    128-byte line per address; the last addresses clamped into the range (a line fetched twice costs nothing)."""
    chunk = tl.cdiv(tl.cdiv(nbytes, parts), 128) * 128
    start = part * chunk
    end = tl.minimum(start + chunk, nbytes)
    for off in range(start, end, 128 * LINES):
        o = tl.minimum(off + tl.arange(0, LINES) * 128, end - 1)
        tl.inline_asm_elementwise(
            asm=L2_PREFETCH_ASM, constraints="=r,l", args=[base_ptr + o], dtype=tl.int32, is_pure=False, pack=1
        )


@triton.jit
def _down_l2_prefetch(w2b_ptr, s2b_ptr, e, w2_bytes, s2_bytes, part, parts, SHARE: tl.constexpr):
    """The up launch's L2 prefetch of its expert's down weights (config index 19): SHARE eighths of the expert's w2
    bytes and of its scale codes (the first rows: the down launch's first programs), split over the up launch's
    `parts` programs of this (token, slot)."""
    _l2_prefetch(w2b_ptr + e * w2_bytes, w2_bytes * SHARE // 8, part, parts, 128)
    _l2_prefetch(s2b_ptr + e * s2_bytes, s2_bytes * SHARE // 8, part, parts, 128)


@triton.jit
def _swiglu_h(gu, wt, limit, BLOCK_N: tl.constexpr):
    """The up launches' epilogue: the gate and up halves of the tile's dots through the clamped SwiGLU
    (gate <= limit, up in [-limit, limit], as bench/oracle/moe.py), times the route weight."""
    g, u = tl.split(tl.trans(tl.reshape(gu, (2, BLOCK_N))))
    g = tl.minimum(g, limit)
    u = tl.minimum(tl.maximum(u, -limit), limit)
    return g * tl.sigmoid(g) * u * wt


@triton.jit
def moe_up_kernel(
    x_ptr,
    sel_ptr,
    wts_ptr,
    w13_ptr,
    s13_ptr,
    h_ptr,
    H,
    INTER,
    limit,
    stride_we,
    stride_wr,
    stride_se,
    stride_sr,
    TOPK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_KB: tl.constexpr,
    SCALE_EACH: tl.constexpr,
):
    pid_t, m, e, wt, rn, nmask, rows, rmask = _up_rows(sel_ptr, wts_ptr, INTER, TOPK, BLOCK_N)
    w_e = w13_ptr + e * stride_we
    s_e = s13_ptr + e * stride_se
    xrow = x_ptr + m * H
    gu = _group_dot(w_e, s_e, rows, rmask, stride_wr, stride_sr, xrow, H // 2, 2 * BLOCK_N, BLOCK_KB, SCALE_EACH)
    h = _swiglu_h(gu, wt, limit, BLOCK_N)
    tl.store(h_ptr + pid_t * INTER + rn, h, mask=nmask)


@triton.jit
def moe_down_kernel(
    h_ptr,
    sel_ptr,
    w2_ptr,
    s2_ptr,
    y_ptr,
    H,
    INTER,
    stride_we,
    stride_wr,
    stride_se,
    stride_sr,
    TOPK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_KB: tl.constexpr,
    SCALE_EACH: tl.constexpr,
):
    m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < H
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for slot in tl.static_range(TOPK):
        e = tl.load(sel_ptr + m * TOPK + slot).to(tl.int64)
        hrow = h_ptr + (m * TOPK + slot) * INTER
        acc += _group_dot(
            w2_ptr + e * stride_we,
            s2_ptr + e * stride_se,
            rn,
            nmask,
            stride_wr,
            stride_sr,
            hrow,
            INTER // 2,
            BLOCK_N,
            BLOCK_KB,
            SCALE_EACH,
        )
    tl.store(y_ptr + m * H + rn, acc.to(tl.bfloat16), mask=nmask)


@triton.jit
def _pair_planes(v_ptr, col, KB, cmask, PAIRED: tl.constexpr, EVEN: tl.constexpr = 0):
    """The activations of bytes `col` times 2^63 as fp32 (even, odd): PAIRED, from bf16 pairs read as int32
    (even value in the low half); else from two fp32 planes (even values at v_ptr[j], odd ones at v_ptr[KB + j]).
    EVEN (PAIRED only): every column in range, no mask."""
    if PAIRED and EVEN:
        v = tl.load(v_ptr + col)
        ve = (v << 16).to(tl.float32, bitcast=True)
        vo = ((v >> 16) << 16).to(tl.float32, bitcast=True)
    elif PAIRED:
        v = tl.load(v_ptr + col, mask=cmask, other=0)
        ve = (v << 16).to(tl.float32, bitcast=True)
        vo = ((v >> 16) << 16).to(tl.float32, bitcast=True)
    else:
        ve = tl.load(v_ptr + col, mask=cmask, other=0.0)
        vo = tl.load(v_ptr + KB + col, mask=cmask, other=0.0)
    return ve * 9.223372036854775808e18, vo * 9.223372036854775808e18


@triton.jit
def _tile_dot(
    w_ptr,
    s_ptr,
    rows,
    rmask,
    stride_wr,
    stride_sr,
    v_ptr,
    KB,
    R: tl.constexpr,
    BLOCK_KB: tl.constexpr,
    PAIRED: tl.constexpr,
    DENORM: tl.constexpr,
    K0=0,
    KEND=-1,
):
    """sum over K of W[rows, :] * v for one expert, the 2-D register tile way: per step an [R, BLOCK_KB]
    byte tile (16-byte loads along the row), its per-byte products summed per 32-value group (16 bytes,
    within a thread) times the group's power of two accumulate in an [R, G] fp32 tile, reduced over G
    once after the loop. v: PAIRED, the bf16 activations read as int32 pairs (even value in the low
    half: one contiguous load, split by shifts, exact); else two fp32 planes, the even values at
    v_ptr[j] and the odd ones at v_ptr[KB + j]. DENORM 1: nibbles straight into fp32 bits; 2: the same with
    the byte sign-extended (one op less). K0..KEND: the bytes of one split of K (KEND -1: to KB)."""
    G: tl.constexpr = BLOCK_KB // 16
    if KEND < 0:
        KEND = KB
    rk = tl.arange(0, BLOCK_KB)
    rg = tl.arange(0, G)
    acc = tl.zeros((R, G), dtype=tl.float32)
    for kb0 in range(K0, KEND, BLOCK_KB):
        col = kb0 + rk
        cmask = col < KEND
        ve, vo = _pair_planes(v_ptr, col, KB, cmask, PAIRED)  # x 2^63 (once per column)
        q = tl.load(w_ptr + rows[:, None] * stride_wr + col[None, :], mask=rmask[:, None] & cmask[None, :], other=0)
        if DENORM == 2:  # the decoder's 2^-126: 2^63 on the activations, 2^63 in the scale
            p = mxfp4_pair_dot_denorm_sext(q, ve[None, :], vo[None, :])
            fold = 9.223372036854775808e18
        elif DENORM:
            p = mxfp4_pair_dot_denorm(q, ve[None, :], vo[None, :])
            fold = 9.223372036854775808e18
        else:  # the decoder's 2^-14 and the activations' 2^63 folded into the group's power of two: 2^(14 - 63)
            p = mxfp4_pair_dot(q, ve[None, :], vo[None, :])
            fold = 1.7763568394002505e-15
        p = tl.sum(tl.reshape(p, (R, G, 16)), axis=2)
        rgk = kb0 // 16 + rg
        s = tl.load(
            s_ptr + rows[:, None] * stride_sr + rgk[None, :], mask=rmask[:, None] & (rgk * 16 < KEND)[None, :], other=0
        )
        acc += p * (e8m0(s) * fold)  # a power of two: exact
    return tl.sum(acc, axis=1)


@triton.jit
def _tile_dot_words(
    w_ptr,
    s_ptr,
    rows,
    rmask,
    stride_wr,
    stride_sr,
    v_ptr,
    KW,
    R: tl.constexpr,
    BLOCK_KB: tl.constexpr,
):
    """_tile_dot reading the weights as int32 words (4 bytes = 8 nibbles, values 8c..8c+7 in nibble
    order) with no byte extraction: nibble j goes to fp32 bits by ((w << (28 - 4j)) >> 6) & 0x81C00000
    (the value x 2^-126; 2^63 on the activations, 2^63 in the scale). v: the activations in natural
    order (bf16 or fp32), KW words per row."""
    W: tl.constexpr = BLOCK_KB // 4
    G: tl.constexpr = BLOCK_KB // 16
    rw = tl.arange(0, W)
    rg = tl.arange(0, G)
    acc = tl.zeros((R, G), dtype=tl.float32)
    for kw0 in range(0, KW, W):
        colw = kw0 + rw
        wmask = colw < KW
        q = tl.load(w_ptr + rows[:, None] * stride_wr + colw[None, :], mask=rmask[:, None] & wmask[None, :], other=0)
        p = tl.zeros((R, W), dtype=tl.float32)
        for j in tl.static_range(8):  # nibble j of every word: 2-D tiles in the load's own layout
            xj = tl.load(v_ptr + colw * 8 + j, mask=wmask, other=0.0).to(tl.float32) * 9.223372036854775808e18
            bits = ((q << (28 - 4 * j)) >> 6) & -2118123520  # 0x81C00000 as int32
            p += bits.to(tl.float32, bitcast=True) * xj[None, :]
        p = tl.sum(tl.reshape(p, (R, G, 4)), axis=2)
        rgk = kw0 // 4 + rg
        s = tl.load(
            s_ptr + rows[:, None] * stride_sr + rgk[None, :], mask=rmask[:, None] & (rgk * 4 < KW)[None, :], other=0
        )
        acc += p * (e8m0(s) * 9.223372036854775808e18)
    return tl.sum(acc, axis=1)


@triton.jit
def _tile_dot_asm(
    w_ptr, s_ptr, rows, rmask, stride_wr, stride_sr, v_ptr, KB,
    R: tl.constexpr, W: tl.constexpr, PAIRED: tl.constexpr, FUSED: tl.constexpr, PREFETCH: tl.constexpr,
    K0=0, KEND=-1, EVEN: tl.constexpr = 0, STAGES: tl.constexpr = 1, EVICT: tl.constexpr = 0,
):  # fmt: skip
    """_tile_dot on int32 words (TILE 5): per step an [R, W] word tile (16-byte loads along the row; strides in
    words), each word's 8 nibbles decoded and multiplied in PTX (decode.mxfp4_word_dot: no byte extraction,
    an FMA chain), 4 words = one group of 32 summed within a thread, times the group's power of two x 2^63.
    KB: bytes per row (the activations' planes); K0..KEND: the words of one split (KEND -1: to KB / 4).
    PREFETCH: the next step's words are loaded before this step's decode (two tiles in flight per program).
    EVEN (no split, no prefetch): every row and word in range (rows and steps divide the shape), no load masks.
    STAGES > 1: the loop's loads staged through shared memory by Triton's pipeliner (cp.async, sm_80).
    EVICT (with EVEN): the word loads marked evict_first, so that lines prefetched evict_last stay in L2."""
    G: tl.constexpr = W // 4
    KW = KB // 4
    if KEND < 0:
        KEND = KW
    rw = tl.arange(0, W)
    rg = tl.arange(0, G)
    acc = tl.zeros((R, G), dtype=tl.float32)
    if PREFETCH:
        q = tl.load(
            w_ptr + rows[:, None] * stride_wr + (K0 + rw)[None, :],
            mask=rmask[:, None] & (K0 + rw < KEND)[None, :],
            other=0,
        )
    for kw0 in tl.range(K0, KEND, W, num_stages=STAGES):
        colw = kw0 + rw
        cmask = colw < KEND
        if PREFETCH:
            nxt = colw + W
            qn = tl.load(
                w_ptr + rows[:, None] * stride_wr + nxt[None, :], mask=rmask[:, None] & (nxt < KEND)[None, :], other=0
            )
        elif EVEN and EVICT:
            q = tl.load(w_ptr + rows[:, None] * stride_wr + colw[None, :], eviction_policy="evict_first")
        elif EVEN:
            q = tl.load(w_ptr + rows[:, None] * stride_wr + colw[None, :])
        else:
            q = tl.load(
                w_ptr + rows[:, None] * stride_wr + colw[None, :], mask=rmask[:, None] & cmask[None, :], other=0
            )
        e0, o0 = _pair_planes(v_ptr, colw * 4, KB, cmask, PAIRED, EVEN)
        e1, o1 = _pair_planes(v_ptr, colw * 4 + 1, KB, cmask, PAIRED, EVEN)
        e2, o2 = _pair_planes(v_ptr, colw * 4 + 2, KB, cmask, PAIRED, EVEN)
        e3, o3 = _pair_planes(v_ptr, colw * 4 + 3, KB, cmask, PAIRED, EVEN)
        sh: tl.constexpr = (R, W)
        p = mxfp4_word_dot(
            q, tl.broadcast_to(e0[None, :], sh), tl.broadcast_to(e1[None, :], sh), tl.broadcast_to(e2[None, :], sh),
            tl.broadcast_to(e3[None, :], sh), tl.broadcast_to(o0[None, :], sh), tl.broadcast_to(o1[None, :], sh),
            tl.broadcast_to(o2[None, :], sh), tl.broadcast_to(o3[None, :], sh), FUSED,
        )  # fmt: skip
        p = tl.sum(tl.reshape(p, (R, G, 4)), axis=2)
        rgk = kw0 // 4 + rg
        if EVEN:
            s = tl.load(s_ptr + rows[:, None] * stride_sr + rgk[None, :])
        else:
            s = tl.load(
                s_ptr + rows[:, None] * stride_sr + rgk[None, :],
                mask=rmask[:, None] & (rgk * 4 < KEND)[None, :],
                other=0,
            )
        acc += p * (e8m0(s) * 9.223372036854775808e18)  # a power of two: exact
        if PREFETCH:
            q = qn
    return tl.sum(acc, axis=1)


@triton.jit
def _tile_dot_asm_vec(
    w_ptr, s_ptr, rows, rmask, stride_wr, stride_sr, v_ptr, KW,
    R: tl.constexpr, W: tl.constexpr, FUSED: tl.constexpr, EVEN: tl.constexpr = 0, STAGES: tl.constexpr = 1,
):  # fmt: skip
    """_tile_dot_asm (no split, no prefetch) on activations laid out per word (TILE 14's down launch): v_ptr[8c..8c+7]
    holds word c's even values (bytes 0..3) then its odd ones, already times 2^63 (the up launch stores h so), so a
    step's activations are one [W, 8] load of 32 contiguous bytes per word (vector loads, no multiply), split in
    registers into the 8 operands of decode.mxfp4_word_dot. KW: words per row. EVEN: no load masks (as _tile_dot_asm).
    STAGES: as _tile_dot_asm's."""
    G: tl.constexpr = W // 4
    rw = tl.arange(0, W)
    rg = tl.arange(0, G)
    r8 = tl.arange(0, 8)
    acc = tl.zeros((R, G), dtype=tl.float32)
    for kw0 in tl.range(0, KW, W, num_stages=STAGES):
        colw = kw0 + rw
        cmask = colw < KW
        if EVEN:
            q = tl.load(w_ptr + rows[:, None] * stride_wr + colw[None, :])
            a = tl.load(v_ptr + (colw * 8)[:, None] + r8[None, :])
        else:
            q = tl.load(
                w_ptr + rows[:, None] * stride_wr + colw[None, :], mask=rmask[:, None] & cmask[None, :], other=0
            )
            a = tl.load(v_ptr + (colw * 8)[:, None] + r8[None, :], mask=cmask[:, None], other=0.0)
        # flat index 4 * parity + j = 4 * i2 + 2 * i1 + i0 of [W, 2 (i2), 2 (i1), 2 (i0)]: split i0, then i1, then i2
        b0, b1 = tl.split(tl.reshape(a, (W, 2, 2, 2)))
        b00, b01 = tl.split(b0)
        b10, b11 = tl.split(b1)
        e0, o0 = tl.split(b00)
        e1, o1 = tl.split(b10)
        e2, o2 = tl.split(b01)
        e3, o3 = tl.split(b11)
        sh: tl.constexpr = (R, W)
        p = mxfp4_word_dot(
            q, tl.broadcast_to(e0[None, :], sh), tl.broadcast_to(e1[None, :], sh), tl.broadcast_to(e2[None, :], sh),
            tl.broadcast_to(e3[None, :], sh), tl.broadcast_to(o0[None, :], sh), tl.broadcast_to(o1[None, :], sh),
            tl.broadcast_to(o2[None, :], sh), tl.broadcast_to(o3[None, :], sh), FUSED,
        )  # fmt: skip
        p = tl.sum(tl.reshape(p, (R, G, 4)), axis=2)
        rgk = kw0 // 4 + rg
        if EVEN:
            s = tl.load(s_ptr + rows[:, None] * stride_sr + rgk[None, :])
        else:
            s = tl.load(
                s_ptr + rows[:, None] * stride_sr + rgk[None, :], mask=rmask[:, None] & (rgk * 4 < KW)[None, :], other=0
            )
        acc += p * (e8m0(s) * 9.223372036854775808e18)  # a power of two: exact
    return tl.sum(acc, axis=1)


@triton.jit
def _tile_dot_mma(
    w_ptr, s_ptr, rows, rmask, stride_wr, stride_sr, v_ptr, KB,
    R: tl.constexpr, BLOCK_KB: tl.constexpr, PAIRED: tl.constexpr, SPLIT: tl.constexpr, ASMDEC: tl.constexpr = 0,
    K0=0, KEND=-1,
):  # fmt: skip
    """_tile_dot on the tensor cores (TILE 7 / 8): per step an [R, BLOCK_KB] byte tile (R >= 16 rows, BLOCK_KB
    <= 256 bytes: at most 16 groups of 32 values), each nibble placed as bf16 bits worth value x 2^-126
    (decode.mxfp4_bf16_bits; no multiply), then tl.dot (mma.sync m16n8k16 on sm_80, fp32 accumulation) against a
    block-diagonal [BLOCK_KB, 16] activation tile: column c holds the activations (x 2^63, bf16) of the step's
    group c and zeros elsewhere, so column c of the product is row r's exact partial dot over group c alone, and
    is scaled by that group's power of two x 2^63 in fp32 before it is accumulated (exact: a power of two). Even
    and odd values are two dots (low and high nibbles against the even and odd activations). SPLIT: the fp32
    activations (the down launch's h) as bf16 hi + bf16 lo, two dots each (hi + lo holds 16 of fp32's 24
    significand bits); else they must be bf16 already (the up launch's x: hi is exact). ASMDEC: the nibbles decoded
    in PTX four bytes at a time (decode.mxfp4_bf16_bits_asm: the same bits)."""
    G: tl.constexpr = BLOCK_KB // 16
    if KEND < 0:
        KEND = KB
    rk = tl.arange(0, BLOCK_KB)
    rc = tl.arange(0, 16)
    diag = (rk // 16)[:, None] == rc[None, :]  # byte k of the step belongs to group column k // 16
    acc = tl.zeros((R, 16), dtype=tl.float32)
    for kb0 in range(K0, KEND, BLOCK_KB):
        col = kb0 + rk
        cmask = col < KEND
        ve, vo = _pair_planes(v_ptr, col, KB, cmask, PAIRED)  # fp32, x 2^63
        q = tl.load(w_ptr + rows[:, None] * stride_wr + col[None, :], mask=rmask[:, None] & cmask[None, :], other=0)
        if ASMDEC:
            lo, hi = mxfp4_bf16_bits_asm(q)
        else:
            lo, hi = mxfp4_bf16_bits(q)
        ve_h = ve.to(tl.bfloat16)
        vo_h = vo.to(tl.bfloat16)
        d = tl.dot(lo, tl.where(diag, ve_h[:, None], 0.0).to(tl.bfloat16))
        d = tl.dot(hi, tl.where(diag, vo_h[:, None], 0.0).to(tl.bfloat16), d)
        if SPLIT:
            ve_l = (ve - ve_h.to(tl.float32)).to(tl.bfloat16)
            vo_l = (vo - vo_h.to(tl.float32)).to(tl.bfloat16)
            d = tl.dot(lo, tl.where(diag, ve_l[:, None], 0.0).to(tl.bfloat16), d)
            d = tl.dot(hi, tl.where(diag, vo_l[:, None], 0.0).to(tl.bfloat16), d)
        rgk = kb0 // 16 + rc
        s = tl.load(
            s_ptr + rows[:, None] * stride_sr + rgk[None, :],
            mask=rmask[:, None] & (rc < G)[None, :] & (rgk * 16 < KEND)[None, :],
            other=0,
        )
        acc += d * (e8m0(s) * 9.223372036854775808e18)  # a power of two: exact
    return tl.sum(acc, axis=1)


@triton.jit
def _tile_dot_fold(
    w_ptr, s_ptr, rows, rmask, stride_wr, stride_sr, v_ptr, KB,
    R: tl.constexpr, BLOCK_KB: tl.constexpr, PAIRED: tl.constexpr, SPLIT: tl.constexpr, ASMDEC: tl.constexpr = 0,
):  # fmt: skip
    """_tile_dot on the tensor cores with each group's scale folded into the decoded weights (TILE 11 / 12): per
    step an [R, BLOCK_KB] byte tile, each nibble placed as bf16 bits worth value x 2^-126 (decode.mxfp4_bf16_bits)
    and multiplied in bf16 by its group's 2^(s - 64) (bits (s + 63) << 7; exact: e2m1 x 2^(s - 190) has one
    significant bit after the leading one and stays a bf16 normal for 65 <= s <= 191; from 192 the factor is inf,
    below 65 the products are bf16 denormals), the weights the A operand (R rows >= 16) and the token's
    activations x 2^63 the B operand ([BLOCK_KB, 16], column 0 live, the others zero), one plain tl.dot over the step's K per nibble half (even values against the low nibbles, odd ones
    against the high ones), fp32 accumulation in the MMA itself: no per-group scaling after the dot, no
    block-diagonal tile. SPLIT: the fp32 activations (the down launch's h) as bf16 hi + lo, two dots more (hi + lo
    holds 16 of fp32's 24 significand bits); else they must be bf16 already (the up launch's x: hi is exact)."""
    G: tl.constexpr = BLOCK_KB // 16
    rk = tl.arange(0, BLOCK_KB)
    rg = tl.arange(0, G)
    rc = tl.arange(0, 16)
    live = (rc == 0)[None, :]
    acc = tl.zeros((R, 16), dtype=tl.float32)
    for kb0 in range(0, KB, BLOCK_KB):
        col = kb0 + rk
        cmask = col < KB
        ve, vo = _pair_planes(v_ptr, col, KB, cmask, PAIRED)  # fp32, x 2^63
        q = tl.load(w_ptr + rows[:, None] * stride_wr + col[None, :], mask=rmask[:, None] & cmask[None, :], other=0)
        rgk = kb0 // 16 + rg
        s = tl.load(
            s_ptr + rows[:, None] * stride_sr + rgk[None, :], mask=rmask[:, None] & (rgk * 16 < KB)[None, :], other=0
        )
        f = ((s.to(tl.int32) + 63) << 7).to(tl.int16).to(tl.bfloat16, bitcast=True)  # 2^(s - 64), [R, G]
        f = tl.reshape(tl.broadcast_to(f[:, :, None], (R, G, 16)), (R, BLOCK_KB))
        if ASMDEC:
            lo, hi = mxfp4_bf16_scaled_asm(q, f)
        else:
            lo, hi = mxfp4_bf16_bits(q)
            lo = lo * f
            hi = hi * f
        ve_h = ve.to(tl.bfloat16)
        vo_h = vo.to(tl.bfloat16)
        acc = tl.dot(lo, tl.where(live, ve_h[:, None], 0.0).to(tl.bfloat16), acc)
        acc = tl.dot(hi, tl.where(live, vo_h[:, None], 0.0).to(tl.bfloat16), acc)
        if SPLIT:
            ve_l = (ve - ve_h.to(tl.float32)).to(tl.bfloat16)
            vo_l = (vo - vo_h.to(tl.float32)).to(tl.bfloat16)
            acc = tl.dot(lo, tl.where(live, ve_l[:, None], 0.0).to(tl.bfloat16), acc)
            acc = tl.dot(hi, tl.where(live, vo_l[:, None], 0.0).to(tl.bfloat16), acc)
    return tl.sum(acc, axis=1)  # column 0 plus zeros: exact


@triton.jit
def moe_up_tile_kernel(
    x_ptr,
    sel_ptr,
    wts_ptr,
    w13_ptr,
    s13_ptr,
    h_ptr,
    H,
    INTER,
    limit,
    stride_we,
    stride_wr,
    stride_se,
    stride_sr,
    TOPK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_KB: tl.constexpr,
    DENORM: tl.constexpr,
    WORDS: tl.constexpr = 0,
    ASM: tl.constexpr = 0,
    PREFETCH: tl.constexpr = 0,
    MMA: tl.constexpr = 0,
    FOLD: tl.constexpr = 0,
    HWORDS: tl.constexpr = 0,
    EVEN: tl.constexpr = 0,
    STAGES: tl.constexpr = 1,
    w2b_ptr=None,
    s2b_ptr=None,
    w2_bytes=0,
    s2_bytes=0,
    L2: tl.constexpr = 0,
    L2_SHARE: tl.constexpr = 8,
    L2_AT: tl.constexpr = 0,
    EVICT: tl.constexpr = 0,
):
    """moe_up_kernel's math on the 2-D tile; x_ptr is the bf16 activations as int32 pairs [M, H/2];
    h is stored as two planes per (token, slot): the even units at [0, I/2), the odd ones at [I/2, I)
    (the down launch's contiguous even/odd activations). L2 (TILE 14, config indices 19-22): the program
    prefetches its share of its expert's down weights (w2b_ptr, s2b_ptr: w2 and s2 as bytes, w2_bytes and s2_bytes
    per expert) into L2, before its loop (L2_AT 0) or after it (1); EVICT: its own word loads marked evict_first."""
    pid_t, m, e, wt, rn, nmask, rows, rmask = _up_rows(sel_ptr, wts_ptr, INTER, TOPK, BLOCK_N)
    if L2 and L2_AT == 0:
        _down_l2_prefetch(w2b_ptr, s2b_ptr, e, w2_bytes, s2_bytes, tl.program_id(1), tl.num_programs(1), L2_SHARE)
    if FOLD:  # TILE 11 / 12: the tensor cores, the scales folded into the weights; x_ptr bf16 pairs as int32
        gu = _tile_dot_fold(
            w13_ptr + e * stride_we, s13_ptr + e * stride_se, rows, rmask, stride_wr, stride_sr,
            x_ptr + m * (H // 2), H // 2, 2 * BLOCK_N, BLOCK_KB, True, False, FOLD == 2,
        )  # fmt: skip
    elif MMA:  # TILE 7 / 8: the tensor cores; x_ptr the bf16 pairs as int32 [M, H/2], w13_ptr bytes
        gu = _tile_dot_mma(
            w13_ptr + e * stride_we, s13_ptr + e * stride_se, rows, rmask, stride_wr, stride_sr,
            x_ptr + m * (H // 2), H // 2, 2 * BLOCK_N, BLOCK_KB, True, False, MMA == 2,
        )  # fmt: skip
    elif ASM:  # TILE 5: x_ptr the bf16 pairs as int32 [M, H/2]; w13_ptr int32 words, strides in words
        gu = _tile_dot_asm(
            w13_ptr + e * stride_we, s13_ptr + e * stride_se, rows, rmask, stride_wr, stride_sr,
            x_ptr + m * (H // 2), H // 2, 2 * BLOCK_N, BLOCK_KB // 4, True, ASM == 1, PREFETCH, EVEN=EVEN, STAGES=STAGES,
            EVICT=EVICT,
        )  # fmt: skip
    elif WORDS:  # x_ptr: bf16 [M, H]; w13_ptr: int32 words, strides in words
        gu = _tile_dot_words(
            w13_ptr + e * stride_we, s13_ptr + e * stride_se, rows, rmask, stride_wr, stride_sr,
            x_ptr + m * H, H // 8, 2 * BLOCK_N, BLOCK_KB,
        )  # fmt: skip
    else:
        gu = _tile_dot(
            w13_ptr + e * stride_we, s13_ptr + e * stride_se, rows, rmask, stride_wr, stride_sr,
            x_ptr + m * (H // 2), H // 2, 2 * BLOCK_N, BLOCK_KB, True, DENORM,
        )  # fmt: skip
    if L2 and L2_AT == 1:
        _down_l2_prefetch(w2b_ptr, s2b_ptr, e, w2_bytes, s2_bytes, tl.program_id(1), tl.num_programs(1), L2_SHARE)
    h = _swiglu_h(gu, wt, limit, BLOCK_N)
    if HWORDS:  # TILE 14: per word of the down launch's w2 (8 units: even ones, then odd ones), times 2^63
        hw = (rn // 8) * 8 + (rn % 2) * 4 + (rn % 8) // 2
        tl.store(h_ptr + pid_t * INTER + hw, h * 9.223372036854775808e18, mask=nmask)
    elif WORDS:  # natural order
        tl.store(h_ptr + pid_t * INTER + rn, h, mask=nmask)
    else:
        tl.store(h_ptr + pid_t * INTER + (rn % 2) * (INTER // 2) + rn // 2, h, mask=nmask)


@triton.jit
def moe_down_tile_kernel(
    h_ptr,
    sel_ptr,
    w2_ptr,
    s2_ptr,
    p_ptr,
    yb_ptr,
    cnt_ptr,
    M,
    H,
    INTER,
    stride_we,
    stride_wr,
    stride_se,
    stride_sr,
    TOPK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_KB: tl.constexpr,
    DENORM: tl.constexpr,
    WORDS: tl.constexpr = 0,
    KSPLIT: tl.constexpr = 1,
    KCHUNK=0,
    ASM: tl.constexpr = 0,
    PREFETCH: tl.constexpr = 0,
    MMA: tl.constexpr = 0,
    FOLD: tl.constexpr = 0,
    HWORDS: tl.constexpr = 0,
    EVEN: tl.constexpr = 0,
    SERIAL: tl.constexpr = 0,
    STAGES: tl.constexpr = 1,
    SLOT0=0,
    NSLOT: tl.constexpr = 0,
):
    """One program per (token, slot[, split of K], block of H rows): that expert's down GEMV (over one
    KCHUNK-byte split of the intermediate dim when KSPLIT > 1) into fp32 partials [TOPK * KSPLIT, M, H],
    summed in (slot, split) order by a second launch (TOPK x KSPLIT x the programs of one launch per
    token in flight; deterministic, no float atomics). SERIAL: the last of a (token, row block)'s TOPK x KSPLIT
    programs sums them into yb_ptr in the same order (fp8_gemm._serial_sum_1d; counters at cnt_ptr), no second
    launch. SLOT0, NSLOT (a group of the slots, launched on its own stream: mxfp4_moe's index 30): this launch's slots
    are SLOT0 .. SLOT0 + TOPK - 1 of NSLOT, so it stores partial SLOT0 + slot, and the serial sum waits for all NSLOT x
    KSPLIT partials (the other groups' launches included); 0: TOPK."""
    pid_t = tl.program_id(0) // KSPLIT
    ks = tl.program_id(0) % KSPLIT
    pid_n = tl.program_id(1)
    m = pid_t // TOPK
    slot = pid_t % TOPK
    e = tl.load(sel_ptr + pid_t).to(tl.int64)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < H
    if FOLD:  # TILE 13: the tensor cores with the scales folded in, h (fp32 planes) as bf16 hi + lo
        y = _tile_dot_fold(
            w2_ptr + e * stride_we, s2_ptr + e * stride_se, rn, nmask, stride_wr, stride_sr,
            h_ptr + pid_t * INTER, INTER // 2, BLOCK_N, BLOCK_KB, False, True, FOLD == 2,
        )  # fmt: skip
    elif HWORDS:  # TILE 14: w2_ptr int32 words (strides in words), h per word and times 2^63 (the up launch's store)
        y = _tile_dot_asm_vec(
            w2_ptr + e * stride_we, s2_ptr + e * stride_se, rn, nmask, stride_wr, stride_sr,
            h_ptr + pid_t * INTER, INTER // 8, BLOCK_N, BLOCK_KB // 4, ASM == 1, EVEN, STAGES,
        )  # fmt: skip
    elif MMA:  # TILE 8: the tensor cores, h (fp32 planes) as bf16 hi + lo
        y = _tile_dot_mma(
            w2_ptr + e * stride_we, s2_ptr + e * stride_se, rn, nmask, stride_wr, stride_sr,
            h_ptr + pid_t * INTER, INTER // 2, BLOCK_N, BLOCK_KB, False, True, MMA == 2,
        )  # fmt: skip
    elif ASM:  # TILE 5: w2_ptr int32 words (strides in words); KCHUNK in words
        if KSPLIT > 1:
            k0 = ks * KCHUNK
            kend = tl.minimum(ks * KCHUNK + KCHUNK, INTER // 8)
        else:
            k0 = 0
            kend = -1
        y = _tile_dot_asm(
            w2_ptr + e * stride_we, s2_ptr + e * stride_se, rn, nmask, stride_wr, stride_sr,
            h_ptr + pid_t * INTER, INTER // 2, BLOCK_N, BLOCK_KB // 4, False, ASM == 1, PREFETCH, k0, kend,
        )  # fmt: skip
    elif WORDS:
        y = _tile_dot_words(
            w2_ptr + e * stride_we, s2_ptr + e * stride_se, rn, nmask, stride_wr, stride_sr,
            h_ptr + pid_t * INTER, INTER // 8, BLOCK_N, BLOCK_KB,
        )  # fmt: skip
    elif KSPLIT > 1:
        y = _tile_dot(
            w2_ptr + e * stride_we, s2_ptr + e * stride_se, rn, nmask, stride_wr, stride_sr,
            h_ptr + pid_t * INTER, INTER // 2, BLOCK_N, BLOCK_KB, False, DENORM,
            ks * KCHUNK, tl.minimum(ks * KCHUNK + KCHUNK, INTER // 2),
        )  # fmt: skip
    else:
        y = _tile_dot(
            w2_ptr + e * stride_we, s2_ptr + e * stride_se, rn, nmask, stride_wr, stride_sr,
            h_ptr + pid_t * INTER, INTER // 2, BLOCK_N, BLOCK_KB, False, DENORM,
        )  # fmt: skip
    tl.store(p_ptr + (((SLOT0 + slot) * KSPLIT + ks) * M + m) * H + rn, y, mask=nmask)
    if SERIAL:
        counter = m * tl.num_programs(1) + pid_n
        _serial_sum_1d(
            p_ptr, yb_ptr, cnt_ptr, counter, m * H + rn, nmask, M * H, (NSLOT if NSLOT else TOPK) * KSPLIT, BLOCK_N
        )


@triton.jit
def moe_down_sum_tile_kernel(
    h_ptr,
    sel_ptr,
    w2_ptr,
    s2_ptr,
    y_ptr,
    H,
    INTER,
    stride_we,
    stride_wr,
    stride_se,
    stride_sr,
    TOPK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_KB: tl.constexpr,
    DENORM: tl.constexpr,
):
    """The tile path's down launch with the sum fused in (DOWN_SUM 1): one program per (token, block of H
    rows) runs the TOPK down GEMVs of its token in slot order, adding each one's fp32 result as the sum
    launch does (the same order: deterministic, no atomics), and stores bf16; no partials, no third launch."""
    m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < H
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for slot in tl.static_range(TOPK):
        e = tl.load(sel_ptr + m * TOPK + slot).to(tl.int64)
        acc += _tile_dot(
            w2_ptr + e * stride_we, s2_ptr + e * stride_se, rn, nmask, stride_wr, stride_sr,
            h_ptr + (m * TOPK + slot) * INTER, INTER // 2, BLOCK_N, BLOCK_KB, False, DENORM,
        )  # fmt: skip
    tl.store(y_ptr + m * H + rn, acc.to(tl.bfloat16), mask=nmask)


Launches = list[tuple[str, Callable[[], Any]]]


def _down_block_rows(cfg: MoeConfig, hwords: bool) -> int:
    """The output rows of one down program: index 4, or with the tensor-core down launch (index 26, TILE 14) 2 x its
    warps (index 27)."""
    if hwords and len(cfg) > 26 and cfg[26]:
        return 2 * ((cfg[27] if len(cfg) > 27 else 0) or 4)
    return cfg[4]


def _sum_launch(part: Any, y: Any, split: int) -> Callable[[], Any]:
    """The launch summing the fp32 partials [split, M, H] in order into the bf16 output y [M, H]."""
    return partial(split_sum_kernel[(triton.cdiv(y.numel(), 1024),)], part, y, y.numel(), SPLIT=split, BLOCK=1024)


# side streams per (device, priority) for the slot groups (index 30), created once and reused (a CUDA graph captures
# them too)
_side_streams: dict[Any, list[Any]] = {}


def _streams(device: Any, priority: int, n: int) -> list[Any]:
    """`n` side streams of `device` at `priority` (0: normal, -1: high)."""
    known = _side_streams.setdefault((device, priority), [])
    known += [torch.cuda.Stream(device, priority=priority) for _ in range(n - len(known))]
    return known[:n]


def moe_plan(
    x: Any,
    sel: Any,
    wts: Any,
    w13: Any,
    s13: Any,
    w2: Any,
    s2: Any,
    limit: float,
    config: MoeConfig | None = None,
    fp_fusion: bool = True,
) -> tuple[list[Launches], Launches, Any]:
    """mxfp4_moe's launches as streams of (name, callable) on buffers allocated here: the first list on the caller's
    stream, each other on a side stream forked from it and joined back, then the tail on the caller's stream; and
    the output they fill. Index 30, GROUPS (TILE 14, M = 1): the slots in that many groups (its greatest common divisor
    with the slots), each group's up and down
    launch on its own stream, so one group's down launch runs beside another's up launch and fills its ramp and tail;
    the down launches write into one set of partials, summed in slot order by the last program (SERIAL) or the tail's
    sum launch."""
    m, hdim = x.shape
    topk = sel.shape[1]
    cfg = config or default_config(m, hdim, limit)
    groups = math.gcd(cfg[30], topk) if len(cfg) > 30 else 0  # (6 slots: 2, 3 or 6 groups; 8 slots in 3: none)
    if groups <= 1 or m != 1:
        launches, y = _launches(x, sel, wts, w13, s13, w2, s2, limit, cfg, fp_fusion)
        return [launches], [], y
    if cfg[5] != 14:
        raise ValueError(f"mxfp4_moe: slot groups take TILE 14: {cfg}")
    sel = sel.to(torch.int32).contiguous()  # (M = 1: each group's slots a contiguous view)
    wts = wts.to(torch.float32).contiguous()
    ksplit = cfg[9] if len(cfg) > 9 else 1
    part = torch.empty((topk * ksplit, m, hdim), dtype=torch.float32, device=x.device)
    y = torch.empty((m, hdim), dtype=torch.bfloat16, device=x.device)
    blocks = triton.cdiv(hdim, _down_block_rows(cfg, True))
    cnt = serial_counters(x.device, m * blocks) if len(cfg) > 16 and m <= cfg[16] else None
    tg = topk // groups
    streams = []
    for g in range(groups):
        a, b = g * tg, (g + 1) * tg
        launches, _ = _launches(
            x, sel[:, a:b], wts[:, a:b], w13, s13, w2, s2, limit, cfg[:30], fp_fusion, group=(a, topk, part, y, cnt)
        )
        streams.append([(f"{name}{g}", fn) for name, fn in launches])
    tail: Launches = [] if cnt is not None else [("sum", _sum_launch(part, y, topk * ksplit))]
    return streams, tail, y


def moe_launches(
    x: Any,
    sel: Any,
    wts: Any,
    w13: Any,
    s13: Any,
    w2: Any,
    s2: Any,
    limit: float,
    config: MoeConfig | None = None,
    fp_fusion: bool = True,
) -> tuple[Launches, Any]:
    """mxfp4_moe's launches in order (moe_plan's streams one after another, then its tail), each a (name, callable)
    on buffers allocated here, and the output they fill: what a bench times launch by launch (up, down, sum)."""
    streams, tail, y = moe_plan(x, sel, wts, w13, s13, w2, s2, limit, config, fp_fusion)
    return [launch for stream in streams for launch in stream] + tail, y


def _launches(
    x: Any,
    sel: Any,
    wts: Any,
    w13: Any,
    s13: Any,
    w2: Any,
    s2: Any,
    limit: float,
    cfg: MoeConfig,
    fp_fusion: bool,
    group: tuple[int, int, Any, Any, Any] | None = None,
) -> tuple[Launches, Any]:
    """One stream's launches in order and the output they fill. group (moe_plan's slot groups): (the first slot,
    all slots, the shared partials, output and serial counters): the down launch stores its partials among all the
    slots', and no sum is added here."""
    m, hdim = x.shape
    topk = sel.shape[1]
    inter = w2.shape[2] * 2
    bn, bkb, warps, each, bn_down = cfg[:5]
    x = x.contiguous()
    sel = sel.to(torch.int32).contiguous()
    wts = wts.to(torch.float32).contiguous()
    h = torch.empty((m * topk, inter), dtype=torch.float32, device=x.device)
    y = torch.empty((m, hdim), dtype=torch.bfloat16, device=x.device) if group is None else group[3]
    if not (len(cfg) > 5 and cfg[5]):  # the row-loop kernels
        up = partial(
            moe_up_kernel[(m * topk, triton.cdiv(inter, bn))],
            x, sel, wts, w13, s13, h, hdim, inter, float(limit),
            w13.stride(0), w13.stride(1), s13.stride(0), s13.stride(1),
            TOPK=topk, BLOCK_N=bn, BLOCK_KB=bkb, SCALE_EACH=each, num_warps=warps, enable_fp_fusion=fp_fusion,
        )  # fmt: skip
        down = partial(
            moe_down_kernel[(m, triton.cdiv(hdim, bn_down))],
            h, sel, w2, s2, y, hdim, inter,
            w2.stride(0), w2.stride(1), s2.stride(0), s2.stride(1),
            TOPK=topk, BLOCK_N=bn_down, BLOCK_KB=bkb, SCALE_EACH=each, num_warps=warps, enable_fp_fusion=fp_fusion,
        )  # fmt: skip
        return [("up", up), ("down", down)], y
    # the 2-D tile path: per-slot down GEMVs, then their sum in slot order (or the sum fused, DOWN_SUM)
    bkb_down, warps_down = cfg[6], cfg[7]
    down_sum = len(cfg) > 8 and cfg[8]
    ksplit = cfg[9] if len(cfg) > 9 else 1
    stages = {"up": cfg[10] if len(cfg) > 10 else 0, "down": cfg[11] if len(cfg) > 11 else 0}
    st = {k: ({"num_stages": v} if v else {}) for k, v in stages.items()}  # 0: Triton's default
    for k, i in (("up", 13), ("down", 14)):  # a register cap per thread (more programs resident per SM); 0: none
        if len(cfg) > i and cfg[i]:
            st[k]["maxnreg"] = cfg[i]
    denorm, words = (2 if cfg[5] == 4 else 1 if cfg[5] >= 2 else 0), cfg[5] == 3
    # TILE 5: the PTX word decoder in both launches (mul + add without fusion); 6: in the up launch only; 14: as 5,
    # h stored per word of w2 and times 2^63 so that the down launch loads a word's 8 activations as one vector
    asm_up = (1 if fp_fusion else 2) if cfg[5] in (5, 6, 14) else 0
    asm = asm_up if cfg[5] in (5, 14) else 0
    hwords = int(cfg[5] == 14)
    # index 15, MASKLESS (TILE 14): the word loads without masks in a launch whose shape its tile divides (rows and
    # words per step; checked here, else masked as before)
    maskless = len(cfg) > 15 and cfg[15] and hwords
    even_up = int(bool(maskless and inter % bn == 0 and (hdim // 8) % (bkb // 4) == 0))
    even_down = int(bool(maskless and hdim % bn_down == 0 and (inter // 8) % (bkb_down // 4) == 0))
    if hwords and (down_sum or ksplit > 1 or (len(cfg) > 12 and cfg[12])):
        raise ValueError(f"mxfp4_moe: TILE 14 has no fused sum, split-K or prefetch: {cfg}")
    prefetch = cfg[12] if len(cfg) > 12 else 0
    # indices 17 and 18, STAGES of the up and of the down launch (TILE 14): the word loops' loads staged through
    # shared memory by Triton's pipeliner (cp.async); 0 or 1: none. The launch option num_stages (indices 10, 11)
    # leaves loops without tl.dot unstaged.
    smem_up = max(1, cfg[17]) if len(cfg) > 17 and hwords else 1
    smem_down = max(1, cfg[18]) if len(cfg) > 18 and hwords else 1
    # indices 19-22 (TILE 14): up to M = cfg[19] tokens the up launch prefetches its experts' down weights into L2
    # (evict_last), cfg[20] eighths of each (0: all), before (cfg[21] 0) or after (1) its loop; cfg[22] 1: its own
    # word loads evict_first. The down launch then reads them from L2 while the up launch's decode leaves HBM idle.
    l2 = int(bool(hwords and len(cfg) > 19 and m <= cfg[19]))
    l2_share = (cfg[20] or 8) if len(cfg) > 20 else 8
    l2_at = cfg[21] if len(cfg) > 21 else 0
    evict = int(bool(len(cfg) > 22 and cfg[22] and even_up))
    if l2 and not (0 < l2_share <= 8 and l2_at in (0, 1)):
        raise ValueError(f"mxfp4_moe: the L2 prefetch's share is 1..8 eighths and its place 0 or 1: {cfg}")
    # TILE 7: the up launch on the tensor cores; 8: both; 9 and 10: the same with the PTX nibble decoder (MMA 2)
    mma_up = {7: 1, 8: 1, 9: 2, 10: 2}.get(cfg[5], 0)
    mma_down = {8: 1, 10: 2}.get(cfg[5], 0)
    # TILE 11: the up launch on the tensor cores with the scales folded into the weights (_tile_dot_fold); 12: the
    # same with the nibbles decoded and scaled in PTX (FOLD 2); both with TILE 2's down launch; 13: 12 in both launches
    fold_up = {11: 1, 12: 2, 13: 2}.get(cfg[5], 0)
    fold_down = {13: 2}.get(cfg[5], 0)
    if (fold_up or fold_down) and (down_sum or prefetch or (fold_down and ksplit > 1)):
        raise ValueError(
            f"mxfp4_moe: the folded tensor-core path (TILE 11-13) has no fused sum, prefetch or split-K: {cfg}"
        )
    if (mma_up or mma_down) and (down_sum or prefetch or (mma_down and ksplit > 1)):
        raise ValueError(f"mxfp4_moe: the tensor-core path (TILE 7 / 8) has no fused sum, prefetch or split-K: {cfg}")
    if asm and down_sum:
        raise ValueError(f"mxfp4_moe: the PTX word decoder (TILE 5) has no fused down sum: {cfg}")
    if words and (down_sum or ksplit > 1):
        raise ValueError(f"mxfp4_moe: the fused down sum and split-K read bytes, not words (TILE 3): {cfg}")
    if down_sum and ksplit > 1:
        raise ValueError(f"mxfp4_moe: split-K (KSPLIT > 1) writes partials, the fused sum (DOWN_SUM 1) none: {cfg}")
    if words:  # the weights as int32 words (4 bytes), strides in words; x in bf16, natural order
        xw, w13a, w2a = x, w13.view(torch.int32), w2.view(torch.int32)
    elif asm_up:  # the weights as int32 words (TILE 6: the up launch's only), x as bf16 pairs in int32 (as TILE 2)
        xw, w13a, w2a = x.view(torch.int32), w13.view(torch.int32), (w2.view(torch.int32) if asm else w2)
    else:
        xw, w13a, w2a = x.view(torch.int32), w13, w2
    up = partial(
        moe_up_tile_kernel[(m * topk, triton.cdiv(inter, bn))],
        xw, sel, wts, w13a, s13, h, hdim, inter, float(limit),
        w13a.stride(0), w13a.stride(1), s13.stride(0), s13.stride(1),
        TOPK=topk, BLOCK_N=bn, BLOCK_KB=bkb, DENORM=denorm, WORDS=words, ASM=asm_up, PREFETCH=prefetch, MMA=mma_up,
        FOLD=fold_up, HWORDS=hwords, EVEN=even_up, STAGES=smem_up, num_warps=warps, enable_fp_fusion=fp_fusion,
        w2b_ptr=w2.view(torch.uint8), s2b_ptr=s2.view(torch.uint8), w2_bytes=w2.stride(0) * w2.element_size(),
        s2_bytes=s2.stride(0) * s2.element_size(), L2=l2, L2_SHARE=l2_share, L2_AT=l2_at, EVICT=evict, **st["up"],
    )  # fmt: skip
    if down_sum:
        down = partial(
            moe_down_sum_tile_kernel[(m, triton.cdiv(hdim, bn_down))],
            h, sel, w2a, s2, y, hdim, inter,
            w2a.stride(0), w2a.stride(1), s2.stride(0), s2.stride(1),
            TOPK=topk, BLOCK_N=bn_down, BLOCK_KB=bkb_down, DENORM=denorm, num_warps=warps_down,
            enable_fp_fusion=fp_fusion, **st["down"],
        )  # fmt: skip
        return [("up", up), ("down", down)], y
    # split-K: each split a whole number of BLOCK_KB steps (and of 16-byte scale groups)
    kchunk = triton.cdiv(triton.cdiv(inter // 2, ksplit), bkb_down) * bkb_down
    kchunk_arg = kchunk // 4 if asm else kchunk  # TILE 5 counts words
    part = (
        group[2] if group is not None else torch.empty((topk * ksplit, m, hdim), dtype=torch.float32, device=x.device)
    )
    # index 16, SERIAL: the last program of a (token, row block) sums its slots (no "sum" launch), where the counters
    # are there to take (serial.serial_counters: not first allocated under graph capture)
    # index 26: the down launch through hand-placed mma.sync, its row blocks 2 x its warps (TILE 8 and 10's tl.dot down
    # launch is mma_down, above); a slot group takes the counters its plan shares
    sync_down = cfg[26] if len(cfg) > 26 and hwords else 0
    blocks = triton.cdiv(hdim, _down_block_rows(cfg, bool(hwords)))
    if group is not None:
        cnt = group[4]
    else:
        cnt = serial_counters(x.device, m * blocks) if len(cfg) > 16 and m <= cfg[16] else None
    down = partial(
        moe_down_tile_kernel[(m * topk * ksplit, blocks)],
        h, sel, w2a, s2, part, y, y if cnt is None else cnt, m, hdim, inter,
        w2a.stride(0), w2a.stride(1), s2.stride(0), s2.stride(1),
        TOPK=topk, BLOCK_N=bn_down, BLOCK_KB=bkb_down, DENORM=denorm, WORDS=words, KSPLIT=ksplit, KCHUNK=kchunk_arg,
        ASM=asm, PREFETCH=prefetch, MMA=mma_down, FOLD=fold_down, HWORDS=hwords, EVEN=even_down,
        SERIAL=int(cnt is not None), STAGES=smem_down, num_warps=warps_down, enable_fp_fusion=fp_fusion, **st["down"],
        SLOT0=0 if group is None else group[0], NSLOT=0 if group is None else group[1],
    )  # fmt: skip
    sync_up = cfg[23] if len(cfg) > 23 and hwords else 0
    if sync_up:  # the up launch through hand-placed mma.sync (indices 23-25): the same h for the same down launch
        mw = (cfg[24] if len(cfg) > 24 else 0) or 4
        steps = (cfg[25] if len(cfg) > 25 else 0) or 2
        # index 29: its words staged that many iterations deep through shared memory by cp.async (0 or 1: in
        # registers), at most the loop's iterations + 1
        stages = max(1, min(cfg[29] if len(cfg) > 29 else 1, -(-(hdim // 256) // steps) + 1))
        if hdim % 256:
            raise ValueError(f"mxfp4_moe: the tensor-core up launch takes H in 256s, not {hdim}: {cfg}")
        up = partial(
            moe_up_mma_kernel[(m * topk, triton.cdiv(inter, mw))],
            x.view(torch.int32), sel, wts, w13.view(torch.int32), s13, h, inter, float(limit),
            w13.stride(0) // 4, w13.stride(1) // 4, s13.stride(0), s13.stride(1),
            H=hdim, XS=xs_steps(hdim, mw, steps), TOPK=topk, FUSED=int(fp_fusion), PF=int(sync_up == 2), S=steps,
            ST=stages, num_warps=mw,
        )  # fmt: skip
    if sync_down:  # the down launch through hand-placed mma.sync: slot partials, then the serial sum or the sum launch
        dw = (cfg[27] if len(cfg) > 27 else 0) or 4
        dsteps = (cfg[28] if len(cfg) > 28 else 0) or 1
        if inter % 256 or hdim % 2 or sync_down > 5:
            raise ValueError(f"mxfp4_moe: the tensor-core down launch takes I in 256s and H even, index 26 1..5: {cfg}")
        if sync_down >= 4 and limit > 64:  # fp16 h: |h| <= silu(limit) x limit x |route weight| must stay below 65504
            raise ValueError(f"mxfp4_moe: h in fp16 (index 26: 4, 5) takes a SwiGLU limit up to 64, not {limit}")
        down = partial(
            moe_down_mma_kernel[(m * topk, blocks)],
            h, sel, w2.view(torch.int32), s2, part, m, hdim,
            w2.stride(0) // 4, w2.stride(1) // 4, s2.stride(0), s2.stride(1),
            INTER=inter, XS=xs_steps(inter, dw, dsteps), TOPK=topk, FUSED=int(fp_fusion), S=dsteps,
            HB=(0, 0, 1, 1, 2, 2)[sync_down], PF=int(sync_down in (3, 5)), y_ptr=y, cnt_ptr=y if cnt is None else cnt,
            SERIAL=int(cnt is not None), SLOT0=0 if group is None else group[0],
            NSLOT=0 if group is None else group[1], num_warps=dw,
        )  # fmt: skip
    if cnt is not None or group is not None:
        return [("up", up), ("down", down)], y
    return [("up", up), ("down", down), ("sum", _sum_launch(part, y, topk * ksplit))], y


def mxfp4_moe(
    x: Any,
    sel: Any,
    wts: Any,
    w13: Any,
    s13: Any,
    w2: Any,
    s2: Any,
    limit: float,
    config: MoeConfig | None = None,
    fp_fusion: bool = True,
) -> Any:
    """x bf16 [M, H], sel int [M, k], wts fp32 [M, k], w13/s13/w2/s2 as the module says -> bf16 [M, H]."""
    streams, tail, y = moe_plan(x, sel, wts, w13, s13, w2, s2, limit, config, fp_fusion)
    if len(streams) == 1:
        for _, launch in streams[0] + tail:
            launch()
        return y
    cfg = config or default_config(x.shape[0], x.shape[1], limit)
    # index 31, URGENT: each group's down launch on a high-priority stream of its own (waiting for its up launch), so
    # its programs go before the other groups' up programs still queued
    urgent = len(cfg) > 31 and cfg[31]
    main = torch.cuda.current_stream(x.device)
    lanes = [main] + _streams(x.device, 0, len(streams) - 1)
    downs = _streams(x.device, -1, len(streams)) if urgent else lanes
    for lane in {id(s): s for s in lanes[1:] + downs}.values():  # fork: they wait for what main has queued so far
        if lane is not main:
            lane.wait_stream(main)
    for lane, down_lane, launches in zip(lanes, downs, streams, strict=True):
        with torch.cuda.stream(lane):
            launches[0][1]()  # the group's up launch
        if down_lane is not lane:
            down_lane.wait_stream(lane)
        with torch.cuda.stream(down_lane):
            for _, launch in launches[1:]:
                launch()
    for lane in {id(s): s for s in lanes[1:] + downs}.values():  # join: the tail and what the caller queues next
        if lane is not main:
            main.wait_stream(lane)
    for _, launch in tail:
        launch()
    return y
