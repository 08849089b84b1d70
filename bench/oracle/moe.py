"""MoE (research/dsv41-format.md §0, §3): sqrtsoftplus + bias top-k routing, route scale, shared
expert, clamped SwiGLU. Routed experts are loaded on demand: only those the batch routes to,
one at a time, freed after use. Accumulation is per (token, slot) then summed in slot order, so
the result does not depend on expert visiting order or on atomics (deterministic on CUDA too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from recipekit.bench.oracle.numerics import stable_topk


def route(
    x: Any, gate_w: Any, bias: Any, top_k: int, scale: float, norm_topk: bool, ties: str, select_f64: bool = False
) -> tuple[Any, Any]:
    """(expert ids [N, k], weights [N, k]): top-k of sqrt(softplus(logits)) + bias, weights from the unbiased scores.

    select_f64: the router logits are accumulated in float64 (then the weights rounded to x's dtype),
    so that the selection does not depend on the device's fp32 reduction order (Numerics.select_f64).
    """
    import torch  # lazy: pulls torch

    dt = torch.float64 if select_f64 else x.dtype
    scores = torch.sqrt(torch.nn.functional.softplus(x.to(dt) @ gate_w.to(dt).T))
    sel = stable_topk(scores + bias.to(dt), top_k, ties)
    w = scores.gather(1, sel)
    if norm_topk:
        w = w / w.sum(-1, keepdim=True)
    return sel, (w * scale).to(x.dtype)


def swiglu(x: Any, w1: Any, w2: Any, w3: Any, limit: float, weight: Any = None) -> Any:
    """w2 (silu(min(x w1^T, limit)) * clamp(x w3^T, -limit, limit) [* weight])."""
    import torch  # lazy: pulls torch

    h = torch.nn.functional.silu(torch.clamp(x @ w1.T, max=limit)) * torch.clamp(x @ w3.T, -limit, limit)
    if weight is not None:
        h = h * weight
    return h @ w2.T


def moe(
    x: Any, sel: Any, w: Any, expert: Callable[[int], tuple[Any, Any, Any]], limit: float, quant: Callable[[Any], Any]
) -> tuple[Any, list[int]]:
    """Routed part for tokens x [N, h]; `expert(e)` returns (w1, w2, w3) on x's device."""
    import torch  # lazy: pulls torch

    n, k = sel.shape
    buf = torch.zeros((n, k, x.shape[1]), dtype=x.dtype, device=x.device)
    used = sorted(int(e) for e in torch.unique(sel).tolist())
    xq = quant(x)
    for e in used:
        tok, slot = torch.nonzero(sel == e, as_tuple=True)
        w1, w2, w3 = expert(e)
        buf[tok, slot] = swiglu(xq[tok], w1, w2, w3, limit, w[tok, slot][:, None])
        del w1, w2, w3
    return buf.sum(1), used
