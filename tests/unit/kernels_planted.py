"""Kernels with the signatures of recipekit.backends.cuda_sm80.kernels for the parity harness's tests:
one right (bf16 output, as a real kernel), the others each wrong in one planted way. Plain torch on
the oracle's references, so that they run without a GPU."""

from __future__ import annotations

from typing import Any

from recipekit.bench.kernels import reference


def fp8_gemm_bf16(x: Any, w: Any, s: Any) -> Any:
    """Right: the reference rounded to bf16 once, as a kernel's output."""
    import torch

    return reference.fp8_gemm(x, w, s).to(torch.bfloat16)


def fp8_gemm_scale_bit(x: Any, w: Any, s: Any) -> Any:
    """Wrong: bit 0 of one block's E8M0 code flipped (the block scale doubled or halved)."""
    s2 = s.clone()
    s2[0, 0] ^= 1
    return fp8_gemm_bf16(x, w, s2)


def mxfp4_moe_nibble_swap(x: Any, sel: Any, wts: Any, w13: Any, s13: Any, w2: Any, s2: Any, limit: float) -> Any:
    """Wrong: the high nibble read as the even index (the other MXFP4 convention)."""
    import torch

    def swap(b: Any) -> Any:
        return ((b << 4) | (b >> 4)).to(torch.uint8)

    return reference.mxfp4_moe(x, sel, wts, swap(w13), s13, swap(w2), s2, limit).to(torch.bfloat16)


def engram_gather_scale_bit(table: Any, scales: Any, ids: Any) -> Any:
    """Wrong: bit 0 of the first gathered row's first scale flipped."""
    s2 = scales.clone()
    s2[int(ids[0]), 0] ^= 1
    return reference.engram_gather(table, s2, ids)


def sinkhorn_19(mixes: Any, scale: Any, base: Any, iters: int, eps: float) -> Any:
    """Wrong: one normalization round short."""
    return reference.sinkhorn(mixes, scale, base, iters - 1, eps)
