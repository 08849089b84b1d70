"""mHC Sinkhorn: a site's 2hc + hc^2 mixes per token -> pre, post, comb in one launch (one program
per token, the hc x hc matrix in registers), the math of bench/oracle/mhc.py: pre = sigmoid(m0 s0 + b)
+ eps, post = 2 sigmoid(m1 s1 + b), comb = row softmax + eps, column normalize, then iters - 1
rounds of row/column normalization, each dividing by (sum + eps). All fp32.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def sinkhorn_kernel(
    mix_ptr, scale_ptr, base_ptr, pre_ptr, post_ptr, comb_ptr, eps, HC: tl.constexpr, ITERS: tl.constexpr
):
    t = tl.program_id(0)
    width: tl.constexpr = 2 * HC + HC * HC
    r = tl.arange(0, HC)
    row = mix_ptr + t * width
    s0 = tl.load(scale_ptr)
    s1 = tl.load(scale_ptr + 1)
    s2 = tl.load(scale_ptr + 2)
    pre = tl.sigmoid(tl.load(row + r) * s0 + tl.load(base_ptr + r)) + eps
    post = 2.0 * tl.sigmoid(tl.load(row + HC + r) * s1 + tl.load(base_ptr + HC + r))
    ij = r[:, None] * HC + r[None, :]
    c = tl.load(row + 2 * HC + ij) * s2 + tl.load(base_ptr + 2 * HC + ij)
    c = tl.exp(c - tl.max(c, axis=1)[:, None])
    c = c / tl.sum(c, axis=1)[:, None] + eps
    c = c / (tl.sum(c, axis=0)[None, :] + eps)
    for _ in tl.static_range(ITERS - 1):
        c = c / (tl.sum(c, axis=1)[:, None] + eps)
        c = c / (tl.sum(c, axis=0)[None, :] + eps)
    tl.store(pre_ptr + t * HC + r, pre)
    tl.store(post_ptr + t * HC + r, post)
    tl.store(comb_ptr + t * HC * HC + ij, c)


def sinkhorn(mixes: Any, scale: Any, base: Any, iters: int, eps: float) -> tuple[Any, Any, Any]:
    """mixes fp32 [T, 2hc + hc^2], scale fp32 [3], base fp32 [2hc + hc^2] -> (pre [T, hc], post [T, hc], comb [T, hc, hc])."""
    t, width = mixes.shape
    hc = round((1 + width) ** 0.5) - 1  # width = hc^2 + 2 hc
    pre = torch.empty((t, hc), dtype=torch.float32, device=mixes.device)
    post = torch.empty_like(pre)
    comb = torch.empty((t, hc, hc), dtype=torch.float32, device=mixes.device)
    sinkhorn_kernel[(t,)](mixes.contiguous(), scale, base, pre, post, comb, float(eps), HC=hc, ITERS=iters, num_warps=1)
    return pre, post, comb
