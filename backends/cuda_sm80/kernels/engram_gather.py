"""Engram row gather + dequant: rows by id from an FP8 e4m3 table with one E8M0 code per 32 columns,
to bf16 (exact: e4m3 times a power of two fits bf16). The table may sit in device memory or in
pinned host memory (read over the bus through unified addressing).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from recipekit.backends.cuda_sm80.kernels.decode import e4m3_times_2e8, e8m0

BLOCK_R = 16


@triton.jit
def engram_gather_kernel(t_ptr, s_ptr, ids_ptr, y_ptr, n, D: tl.constexpr, BLOCK_R: tl.constexpr):
    rr = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rr < n
    ids = tl.load(ids_ptr + rr, mask=rmask, other=0).to(tl.int64)
    cols = tl.arange(0, D)
    b = tl.load(t_ptr + ids[:, None] * D + cols[None, :], mask=rmask[:, None], other=0)
    s = tl.load(s_ptr + ids[:, None] * (D // 32) + (cols // 32)[None, :], mask=rmask[:, None], other=0)
    v = e4m3_times_2e8(b) * (e8m0(s) * 256.0)
    tl.store(y_ptr + rr[:, None] * D + cols[None, :], v.to(tl.bfloat16), mask=rmask[:, None])


def engram_gather(table: Any, scales: Any, ids: Any) -> Any:
    """table uint8 [R, D], scales uint8 [R, D/32], ids int [n] (on the GPU) -> bf16 [n, D] on ids' device."""
    n = ids.numel()
    d = table.shape[1]
    y = torch.empty((n, d), dtype=torch.bfloat16, device=ids.device)
    engram_gather_kernel[(triton.cdiv(n, BLOCK_R),)](table, scales, ids.contiguous(), y, n, D=d, BLOCK_R=BLOCK_R)
    return y
