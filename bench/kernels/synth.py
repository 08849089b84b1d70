"""Synthetic inputs in DSV4.1's real encodings for the kernel checks (seeded, reproducible).

e4m3 bytes are uniform over every finite code (NaN bytes 0x7F/0xFF excluded: the kernels decode
them as finite, the reference as NaN); E8M0 codes stay in a checkpoint-like range (2^-9..2^-5, close enough that every block counts);
MXFP4 bytes are uniform over all 256 (every nibble is a finite e2m1 value).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TOPK = 6  # DSV4.1: 6 routed experts per token


@dataclass(frozen=True)
class Shapes:
    """Sizes of one check: the parity default is small (the fp32 reference runs on the CPU)."""

    fp8_nk: tuple[int, int] = (512, 1024)
    moe_experts: int = 384
    moe_hidden: int = 512
    moe_inter: int = 256
    engram_rows: int = 4096
    engram_dim: int = 256
    engram_rows_per_token: int = 24
    hc: int = 4
    sinkhorn_iters: int = 20
    swiglu_limit: float = 10.0
    hc_eps: float = 1e-6


def _gen(seed: int) -> Any:
    import torch  # lazy: pulls torch

    return torch.Generator().manual_seed(seed)


def fp8_bytes(shape: tuple[int, ...], g: Any) -> Any:
    import torch  # lazy: pulls torch

    b = torch.randint(0, 254, shape, generator=g, dtype=torch.int32)  # 254 finite codes per sign
    b = b + (b >= 0x7F).to(torch.int32)  # skip 0x7F; 0x80..0xFE, never 0xFF
    return b.to(torch.uint8)


def e8m0_codes(shape: tuple[int, ...], g: Any, lo: int = 118, hi: int = 122) -> Any:
    import torch  # lazy: pulls torch

    return torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int32).to(torch.uint8)


def bf16(shape: tuple[int, ...], g: Any) -> Any:
    import torch  # lazy: pulls torch

    return torch.randn(shape, generator=g).to(torch.bfloat16)


def inputs(kernel: str, m: int, shapes: Shapes, seed: int = 0) -> tuple[Any, ...]:
    """The positional arguments of `kernel` for M tokens, on the CPU."""
    import torch  # lazy: pulls torch

    g = _gen(seed * 1000 + m)
    if kernel == "fp8_gemm":
        n, k = shapes.fp8_nk
        return (bf16((m, k), g), fp8_bytes((n, k), g), e8m0_codes((-(-n // 32), -(-k // 32)), g))
    if kernel == "mxfp4_moe":
        e, h, i = shapes.moe_experts, shapes.moe_hidden, shapes.moe_inter
        sel = torch.stack([torch.randperm(e, generator=g)[:TOPK] for _ in range(m)]).to(torch.int32)
        wts = torch.rand((m, TOPK), generator=g) * 2.5
        w13 = torch.randint(0, 256, (e, 2 * i, h // 2), generator=g, dtype=torch.int32).to(torch.uint8)
        w2 = torch.randint(0, 256, (e, h, i // 2), generator=g, dtype=torch.int32).to(torch.uint8)
        s13 = e8m0_codes((e, 2 * i, h // 32), g, 119, 122)
        s2 = e8m0_codes((e, h, i // 32), g, 119, 122)
        return (bf16((m, h), g), sel, wts, w13, s13, w2, s2, shapes.swiglu_limit)
    if kernel == "engram_gather":
        r, d = shapes.engram_rows, shapes.engram_dim
        ids = torch.randint(0, r, (m * shapes.engram_rows_per_token,), generator=g)
        return (fp8_bytes((r, d), g), e8m0_codes((r, d // 32), g), ids)
    if kernel == "sinkhorn":
        hc = shapes.hc
        width = 2 * hc + hc * hc
        mixes = torch.randn((m, width), generator=g) * 3
        scale = torch.rand(3, generator=g) + 0.5
        base = torch.randn(width, generator=g) * 0.5
        return (mixes, scale, base, shapes.sinkhorn_iters, shapes.hc_eps)
    raise KeyError(kernel)


def to_device(args: tuple[Any, ...], device: str) -> tuple[Any, ...]:
    return tuple(a.to(device) if hasattr(a, "to") and hasattr(a, "shape") else a for a in args)
