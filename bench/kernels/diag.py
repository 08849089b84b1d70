"""Where a memory-bound kernel's time goes (issue 26's open question): diagnostic kernels that read the same
bytes as the MXFP4 MoE's up launch or the FP8 GEMV at M = 1, with the same grid and tile, but no real decode.

- `up_load_kernel` / `gemv_load_kernel`: the current tiling (the same programs, rows, bytes per step and
  16-byte loads, the scale codes and an activation per word loaded too) with the decode replaced by a
  trivial one: each 4-byte word read as fp32 bits times its activation (one FMA per 4 bytes instead of
  ~10 integer and FP operations per byte), group sums times the power of two as the real kernels. The
  values are wrong, but every byte is folded into the stored sum, so no load is optimised away:
  the load-only ceiling of the current tiling. SIDE 0 adds the words as integers and loads nothing else.
- `read_reduce_kernel`: a plain "read these bytes and reduce" over the same bytes: program (t, b) reads
  chunk b of CHUNKS contiguous chunks of the weights of slot t (the expert `sel[t]`), BLOCK words per step:
  what the access pattern can reach with a given grid, nothing of the kernels' layout.
- `empty_kernel`: the same grid doing nothing: the launch and scheduling floor inside a CUDA graph.
Timed as every kernel (timing.per_call_seconds: one CUDA graph of back-to-back calls over weight copies
that exceed the L2). The kernels take the tensors the application hands them; nothing here imports a backend.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
import triton
import triton.language as tl

from recipekit.bench.kernels import timing


@triton.jit
def up_load_kernel(
    x_ptr, sel_ptr, w_ptr, s_ptr, h_ptr, INTER, KW, stride_we, stride_wr, stride_se, stride_sr,
    TOPK: tl.constexpr, BLOCK_N: tl.constexpr, W: tl.constexpr, SIDE: tl.constexpr,
):  # fmt: skip
    """The MoE up launch's programs (token x slot, block of BLOCK_N gate + BLOCK_N up rows), W int32 words
    (4 W bytes) per row per step, the decode replaced by one FMA per word (SIDE 1) or an integer add (0)."""
    pid_t = tl.program_id(0)
    pid_n = tl.program_id(1)
    m = pid_t // TOPK
    e = tl.load(sel_ptr + pid_t).to(tl.int64)
    r2 = tl.arange(0, 2 * BLOCK_N)
    rows = pid_n * BLOCK_N + (r2 % BLOCK_N) + (r2 // BLOCK_N) * INTER
    rmask = (pid_n * BLOCK_N + (r2 % BLOCK_N)) < INTER
    G: tl.constexpr = W // 4  # 16 bytes = one group of 32 values
    rw = tl.arange(0, W)
    rg = tl.arange(0, G)
    w_e = w_ptr + e * stride_we
    s_e = s_ptr + e * stride_se
    acc = tl.zeros((2 * BLOCK_N, G), dtype=tl.float32)
    acci = tl.zeros((2 * BLOCK_N, W), dtype=tl.int32)
    for kw0 in range(0, KW, W):
        colw = kw0 + rw
        q = tl.load(w_e + rows[:, None] * stride_wr + colw[None, :], mask=rmask[:, None], other=0)
        if SIDE:
            xv = tl.load(x_ptr + m * KW + colw)
            p = tl.sum(tl.reshape(q.to(tl.float32, bitcast=True) * xv[None, :], (2 * BLOCK_N, G, 4)), axis=2)
            rgk = kw0 // 4 + rg
            s = tl.load(s_e + rows[:, None] * stride_sr + rgk[None, :], mask=rmask[:, None], other=0)
            acc += p * (s.to(tl.int32) << 23).to(tl.float32, bitcast=True)
        else:
            acci += q
    if SIDE:
        out = tl.sum(acc, axis=1)
    else:
        out = tl.sum(acci, axis=1).to(tl.float32)
    tl.store(h_ptr + pid_t * 2 * INTER + pid_n * 2 * BLOCK_N + r2, out, mask=rmask)


@triton.jit
def gemv_load_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr, N, KW, stride_wn, stride_sn,
    BLOCK_N: tl.constexpr, W: tl.constexpr, SIDE: tl.constexpr,
):  # fmt: skip
    """The FP8 GEMV's M = 1 programs (BLOCK_N rows each, the whole row), W words (4 W bytes) per row per
    step, the decode replaced by one FMA per word with the column's scale code (SIDE 1) or an integer add."""
    pid_n = tl.program_id(0)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < N
    rw = tl.arange(0, W)
    s_row = s_ptr + (pid_n * BLOCK_N // 32) * stride_sn
    acc = tl.zeros((BLOCK_N, W), dtype=tl.float32)
    acci = tl.zeros((BLOCK_N, W), dtype=tl.int32)
    for kw0 in range(0, KW, W):
        colw = kw0 + rw
        q = tl.load(w_ptr + rn[:, None] * stride_wn + colw[None, :], mask=nmask[:, None], other=0)
        if SIDE:
            xv = tl.load(x_ptr + colw)
            s = tl.load(s_row + colw // 8)
            acc += q.to(tl.float32, bitcast=True) * (xv * (s.to(tl.int32) << 23).to(tl.float32, bitcast=True))[None, :]
        else:
            acci += q
    if SIDE:
        out = tl.sum(acc, axis=1)
    else:
        out = tl.sum(acci, axis=1).to(tl.float32)
    tl.store(y_ptr + rn, out.to(tl.bfloat16), mask=nmask)


@triton.jit
def read_reduce_kernel(w_ptr, sel_ptr, out_ptr, stride_we, CHUNK, BLOCK: tl.constexpr):
    """Program (t, b): the int32 sum of words [b CHUNK, (b + 1) CHUNK) of slot t's expert (sel[t]), BLOCK at a time."""
    t = tl.program_id(0)
    b = tl.program_id(1)
    e = tl.load(sel_ptr + t).to(tl.int64)
    base = w_ptr + e * stride_we + b.to(tl.int64) * CHUNK
    r = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.int32)
    for i in range(0, CHUNK, BLOCK):
        acc += tl.load(base + i + r)
    tl.store(out_ptr + t * tl.num_programs(1) + b, tl.sum(acc, axis=0))


@triton.jit
def empty_kernel(out_ptr, FLAG):
    """Nothing (FLAG is 0): the launch of a grid."""
    if FLAG:
        tl.store(out_ptr + tl.program_id(0), 1)


def _us(calls: list[Any]) -> float:
    return timing.per_call_seconds(calls) * 1e6


def _rr_calls(words: Any, sels: list[Any], programs: int, block: int, warps: int) -> tuple[list[Any], int]:
    """read_reduce over each slot's expert (words [E, words per expert]) in `programs` chunks per slot."""
    per = words.shape[1]
    chunk = per // programs // block * block
    out = torch.empty((sels[0].numel() * programs,), dtype=torch.int32, device=words.device)
    calls = [
        partial(read_reduce_kernel[(s.numel(), programs)], words, s, out, words.stride(0), chunk, BLOCK=block,
                num_warps=warps)
        for s in sels
    ]  # fmt: skip
    return calls, chunk * 4 * programs * sels[0].numel()


def moe_up(
    up_calls: list[Any], w13: Any, s13: Any, sels: list[Any], hidden: int, inter: int, tile: tuple[int, int, int],
    copy_gbs: float, rr_grids: tuple[tuple[int, int, int], ...],
) -> dict[str, Any]:  # fmt: skip
    """The up launch (up_calls: the real one per routing, M = 1) beside its load-only twins and read-reduce
    over the same experts' w13 bytes; tile = (BLOCK_N, BLOCK_KB, num_warps) of the real up launch;
    rr_grids: (programs per slot, BLOCK words, num_warps) of the read-reduce runs."""
    bn, bkb, warps = tile
    topk = sels[0].numel()
    words = w13.view(torch.int32).reshape(w13.shape[0], -1)
    kw = hidden // 8
    nbytes = topk * (w13[0].numel() + s13[0].numel())
    x = torch.randn((1, kw), device=w13.device)
    h = torch.empty((topk, 2 * inter), dtype=torch.float32, device=w13.device)
    w13w = w13.view(torch.int32)
    grid = (topk, triton.cdiv(inter, bn))
    rows: dict[str, Any] = {"bytes": nbytes, "programs": grid[0] * grid[1], "tile": list(tile)}

    def rec(name: str, us: float, nb: int = nbytes, **extra: Any) -> None:
        rows[name] = {"us": us, "bytes": nb, "gb_s": nb / us / 1e3, "x_copy": nb / us / 1e3 / copy_gbs, **extra}
        print("moe-up", name, rows[name], flush=True)

    rec("real", _us(up_calls))
    for side in (1, 0):
        calls = [
            partial(up_load_kernel[grid], x, s, w13w, s13, h, inter, kw, w13w.stride(0), w13w.stride(1),
                    s13.stride(0), s13.stride(1), TOPK=topk, BLOCK_N=bn, W=bkb // 4, SIDE=side, num_warps=warps)
            for s in sels
        ]  # fmt: skip
        rec(f"load_only_side{side}", _us(calls))
    for programs, block, w in rr_grids:
        calls, nb = _rr_calls(words, sels, programs, block, w)
        rec(f"read_reduce_{programs}x{topk}_b{block}_w{w}", _us(calls), nb, programs=programs * topk)
    flag = torch.zeros(1, dtype=torch.int32, device=w13.device)
    rec("empty_same_grid", _us([partial(empty_kernel[grid], flag, 0, num_warps=warps)]), 0)
    return rows


def fp8_gemv(
    real_calls: list[Any], ws: list[Any], ss: list[Any], tile: tuple[int, int, int], copy_gbs: float,
    rr_grids: tuple[tuple[int, int, int], ...],
) -> dict[str, Any]:  # fmt: skip
    """The FP8 GEMV at M = 1 (real_calls: the default path per weight copy) beside its load-only twins and
    read-reduce over the same bytes; tile = (BLOCK_N, BLOCK_K, num_warps) of the real kernel."""
    bn, bk, warps = tile
    n, k = ws[0].shape
    kw = k // 4
    nbytes = ws[0].numel() + ss[0].numel()
    x = torch.randn((kw,), device=ws[0].device)
    y = torch.empty((n,), dtype=torch.bfloat16, device=ws[0].device)
    grid = (triton.cdiv(n, bn),)
    rows: dict[str, Any] = {"n": n, "k": k, "bytes": nbytes, "programs": grid[0], "tile": list(tile)}

    def rec(name: str, us: float, nb: int = nbytes, **extra: Any) -> None:
        rows[name] = {"us": us, "bytes": nb, "gb_s": nb / us / 1e3, "x_copy": nb / us / 1e3 / copy_gbs, **extra}
        print("fp8", n, k, name, rows[name], flush=True)

    rec("real", _us(real_calls))
    for side in (1, 0):
        calls = [
            partial(gemv_load_kernel[grid], x, w.view(torch.int32), s, y, n, kw, kw, s.stride(0), BLOCK_N=bn,
                    W=bk // 4, SIDE=side, num_warps=warps)
            for w, s in zip(ws, ss)
        ]  # fmt: skip
        rec(f"load_only_side{side}", _us(calls))
    sel = [torch.zeros(1, dtype=torch.int32, device=ws[0].device)]
    for programs, block, w in rr_grids:
        calls = []
        for wt in ws:
            c, nb = _rr_calls(wt.view(torch.int32).reshape(1, -1), sel, programs, block, w)
            calls += c
        rec(f"read_reduce_{programs}_b{block}_w{w}", _us(calls), nb, programs=programs)
    flag = torch.zeros(1, dtype=torch.int32, device=ws[0].device)
    rec("empty_same_grid", _us([partial(empty_kernel[grid], flag, 0, num_warps=warps)]), 0)
    return rows
