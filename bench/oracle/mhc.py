"""mHC hyper-connections (research/dsv41-format.md §5): coefficient mixing, Sinkhorn, collapse, expand.

X is [T, hc, h]. Per site: mixes = (flat(X) @ fn^T) * rsqrt(mean(flat(X)^2) + eps);
pre = sigmoid(mixes[0:hc] * scale0 + base) + hc_eps; post = 2 sigmoid(mixes[hc:2hc] * scale1 + base);
comb = Sinkhorn(mixes[2hc:] * scale2 + base) as [hc, hc] (row softmax + eps, column normalize,
then iters-1 rounds of row/column normalization). collapse: sum_j a[j] X[j];
expand: X'[k] = post[k] F + sum_j comb[j, k] X[j].
"""

from __future__ import annotations

from typing import Any


def sinkhorn(m: Any, iters: int, eps: float) -> Any:
    import torch  # lazy: pulls torch

    c = torch.softmax(m, dim=-1) + eps
    c = c / (c.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        c = c / (c.sum(-1, keepdim=True) + eps)
        c = c / (c.sum(-2, keepdim=True) + eps)
    return c


def hc_mix(x: Any, fn: Any, base: Any, scale: Any, iters: int, hc_eps: float, norm_eps: float) -> tuple[Any, Any, Any]:
    """(pre [T, hc], post [T, hc], comb [T, hc, hc]) for the stream x [T, hc, h]."""
    import torch  # lazy: pulls torch

    t, hc, _ = x.shape
    flat = x.reshape(t, -1)
    mixes = (flat @ fn.T) * torch.rsqrt(flat.square().mean(-1, keepdim=True) + norm_eps)
    pre = torch.sigmoid(mixes[:, :hc] * scale[0] + base[:hc]) + hc_eps
    post = 2 * torch.sigmoid(mixes[:, hc : 2 * hc] * scale[1] + base[hc : 2 * hc])
    m = (mixes[:, 2 * hc :] * scale[2] + base[2 * hc :]).reshape(t, hc, hc)
    return pre, post, sinkhorn(m, iters, hc_eps)


def hc_pre(x: Any, a: Any) -> Any:
    """Collapse [T, hc, h] with weights [T, hc] -> [T, h]."""
    return (a[:, :, None] * x).sum(1)


def hc_post(f: Any, x: Any, post: Any, comb: Any) -> Any:
    """Expand a sublayer output f [T, h] back into the stream."""
    import torch  # lazy: pulls torch

    return post[:, :, None] * f[:, None, :] + torch.einsum("tjk,tjh->tkh", comb, x)


def rms_norm(x: Any, weight: Any, eps: float) -> Any:
    import torch  # lazy: pulls torch

    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * weight
