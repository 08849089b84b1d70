"""Engram (research/dsv41-format.md §4.2 step 5): rows by our addressing, FP8 rows dequantized,
kv = wkv(rows); per hc copy c: w = q_weight[c] * k_weight[c];
dot = sum(X_c * w * key_c) * rsqrt(mean X_c^2 + eps) * rsqrt(mean key_c^2 + eps) / sqrt(h);
gate = sigmoid(sign(dot) sqrt(max(|dot|, 1e-6))); X_c += gate * value. Runs before its layer's block.
"""

from __future__ import annotations

from typing import Any


def engram_update(x: Any, rows: Any, wkv: Any, q_weight: Any, k_weight: Any, eps: float, quant: Any) -> Any:
    """x [T, hc, h]; rows [T, n_cols * dim] (already dequantized) -> the updated stream."""
    import torch  # lazy: pulls torch

    t, hc, h = x.shape
    kv = quant(rows) @ wkv.T  # [T, (hc + 1) h]
    key = kv[:, : hc * h].reshape(t, hc, h)
    value = kv[:, hc * h :]
    w = (q_weight * k_weight)[None]  # [1, hc, h]
    dot = (x * w * key).sum(-1)
    dot = dot * torch.rsqrt(x.square().mean(-1) + eps) * torch.rsqrt(key.square().mean(-1) + eps) / (h**0.5)
    gate = torch.sigmoid(torch.sign(dot) * torch.sqrt(torch.clamp(dot.abs(), min=1e-6)))
    return x + gate[:, :, None] * value[:, None, :]
