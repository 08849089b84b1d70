"""CSA2 attention (research/dsv41-format.md §6): MQA with one K = V latent, sliding window,
compressed entries selected by the indexer's top-k, the layer-20-style candidate pool, per-head
attention sinks, the inverse rotation of the output's rope dims, the grouped output projection.

Roles come from config.json: ratio 0 = window only (rope_theta, no YaRN); ratio > 0 layers use
compress_rope_theta with YaRN. A KV source compresses its own latents (ratio 2: per-channel softmax
gate over each group of 2 tokens; ratio 1: one entry per token), publishes them and its index K;
other ratio > 0 layers reuse the latest KV source at or before them. An index source scores
entries with its own indexer queries (against the latest KV source's index K) and publishes its
top-k; layers after the candidate source that are index sources but not KV sources score only
inside the candidate pool. Other layers reuse the latest index source's top-k.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from recipekit.bench.oracle.mhc import rms_norm
from recipekit.bench.oracle.numerics import stable_topk
from recipekit.errors import RecipekitError

QUERY_CHUNK = 256


@dataclass
class PromptState:
    """Per-prompt caches shared between layers: compressed latents, index K, top-k, candidate pool."""

    latents: dict[int, Any] = field(default_factory=dict)
    index_k: dict[int, Any] = field(default_factory=dict)
    topk: dict[int, Any] = field(default_factory=dict)
    candidates: Any = None


def rope_inv_freq(dim: int, theta: float, yarn: dict | None, max_pos: int) -> list[float]:
    """Inverse frequencies (float64 on the host, so every device gets the same table); YaRN per
    DeepSeek's precompute_freqs_cis when max_pos exceeds the original context."""
    freqs = [1.0 / (theta ** (i / dim)) for i in range(0, dim, 2)]
    if not yarn or max_pos <= int(yarn["original_max_position_embeddings"]):
        return freqs
    orig, factor = int(yarn["original_max_position_embeddings"]), float(yarn["factor"])

    def corr(rot: float) -> float:
        return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))

    low = float(max(math.floor(corr(float(yarn["beta_fast"]))), 0))
    high = float(min(math.ceil(corr(float(yarn["beta_slow"]))), dim - 1))
    if low == high:
        high += 0.001
    out = []
    for k, f in enumerate(freqs):
        ramp = min(max((k - low) / (high - low), 0.0), 1.0)
        smooth = 1 - ramp
        out.append(f / factor * (1 - smooth) + f * smooth)
    return out


def rope_table(inv_freq: list[float], positions: Any, device: Any, dtype: Any = None) -> tuple[Any, Any]:
    """(cos, sin) [T, len(inv_freq)], computed in float64 on the host, then `dtype` (default fp32) on `device`."""
    import torch  # lazy: pulls torch

    dtype = dtype or torch.float32
    pos = torch.as_tensor(positions, dtype=torch.float64).cpu()
    ang = pos[:, None] * torch.tensor(inv_freq, dtype=torch.float64)[None, :]
    return torch.cos(ang).to(device, dtype), torch.sin(ang).to(device, dtype)


def apply_rope(x: Any, cos: Any, sin: Any, inverse: bool = False) -> Any:
    """Rotate the LAST 2*len(freq) dims of x [..., T, d] as adjacent pairs; cos/sin [T, d_rope/2]."""
    import torch  # lazy: pulls torch

    r = cos.shape[-1] * 2
    head, tail = x[..., :-r], x[..., -r:]
    a, b = tail[..., 0::2], tail[..., 1::2]
    s = -sin if inverse else sin
    ra, rb = a * cos - b * s, a * s + b * cos
    rot = torch.stack((ra, rb), dim=-1).flatten(-2)
    return torch.cat((head, rot), dim=-1)


@dataclass
class Roles:
    ratio: int
    kv_src: int  # -1 for ratio-0 layers (window only)
    idx_src: int
    own_kv: bool
    own_index: bool
    candidate_source: bool
    in_pool: bool


def layer_roles(text: dict, layer: int) -> Roles:
    ratio = int(text["compress_ratios"][layer])
    kvs = [int(v) for v in text["kv_source_layer_ids"]]
    idxs = [int(v) for v in text["index_source_layer_ids"]]
    cand = int(text["candidate_source_layer_id"])
    if ratio == 0:
        return Roles(0, -1, -1, False, False, False, False)
    kv_src = max((s for s in kvs if s <= layer), default=None)
    idx_src = max((s for s in idxs if s <= layer), default=None)
    if kv_src is None or idx_src is None or int(text["compress_ratios"][kv_src]) != ratio:
        raise RecipekitError(
            code="oracle-config-roles",
            location="config.json $.text_config",
            message=f"layer {layer} (ratio {ratio}) has no KV/index source of the same ratio before it",
            hint="check compress_ratios, kv_source_layer_ids and index_source_layer_ids",
        )
    own_index = layer in idxs
    assert kv_src is not None and idx_src is not None
    return Roles(
        ratio, kv_src, idx_src, layer in kvs, own_index, layer == cand, own_index and layer not in kvs and layer > cand
    )


def compress(x: Any, wkv: Any, wgate: Any, norm_w: Any, ratio: int, eps: float) -> Any:
    """Compressed latents [T // ratio, D] of a KV source (before RoPE)."""
    import torch  # lazy: pulls torch

    kv = x @ wkv.T
    n = kv.shape[0] // ratio
    if ratio == 1:
        lat = kv
    else:
        g = (x @ wgate.T)[: n * ratio].reshape(n, ratio, -1)
        lat = (torch.softmax(g, dim=1) * kv[: n * ratio].reshape(n, ratio, -1)).sum(1)
    return rms_norm(lat, norm_w, eps)


def visible_counts(t: int, ratio: int, device: Any) -> Any:
    import torch  # lazy: pulls torch

    return (torch.arange(t, device=device) + 1) // ratio


def index_scores(q: Any, w: Any, k: Any, select_f64: bool = False) -> Any:
    """score[i, j] = sum_h relu(q[i, h] . k[j]) * w[i, h]; q [T, H, d], w [T, H], k [N, d].
    select_f64: accumulated in float64 (a selection score: the same set on every device's reduction order)."""
    import torch  # lazy: pulls torch

    if select_f64:
        q, w, k = q.double(), w.double(), k.double()
    return (torch.relu(torch.einsum("thd,nd->thn", q, k)) * w[:, :, None]).sum(1)


def select_topk(scores: Any, visible: Any, k: int, ties: str, pool: Any = None) -> Any:
    """Per query: a boolean mask [T, N] of the top-k visible entries (all of them when fewer)."""
    import torch  # lazy: pulls torch

    t, n = scores.shape
    allowed = torch.arange(n, device=scores.device)[None, :] < visible[:, None]
    if pool is not None:
        allowed = allowed & pool
    s = torch.where(allowed, scores, torch.full_like(scores, -math.inf))
    kk = min(k, n)
    mask = torch.zeros((t, n), dtype=torch.bool, device=scores.device)
    if kk == 0:
        return mask
    idx = stable_topk(s, kk, ties)
    mask.scatter_(1, idx, True)
    return mask & allowed


def candidate_pool(scores: Any, visible: Any, block: int, keep: int, ties: str) -> Any:
    """Layer-20-style pool [T, N]: block score = max over `block` entries; the newest (partly filled)
    visible block is always kept, plus the best `keep - 1` others."""
    import torch  # lazy: pulls torch

    t, n = scores.shape
    nb = -(-n // block)
    allowed = torch.arange(n, device=scores.device)[None, :] < visible[:, None]
    s = torch.where(allowed, scores, torch.full_like(scores, -math.inf))
    pad = nb * block - n
    if pad:
        s = torch.cat([s, torch.full((t, pad), -math.inf, device=s.device)], dim=1)
    bs = s.reshape(t, nb, block).amax(-1)
    newest = (visible - 1).clamp_min(0) // block
    bs = bs.scatter(1, newest[:, None], math.inf)
    keep_blocks = torch.zeros((t, nb), dtype=torch.bool, device=s.device)
    kk = min(keep, nb)
    if kk:
        keep_blocks.scatter_(1, stable_topk(bs, kk, ties), True)
    keep_blocks &= torch.isfinite(bs) | (bs == math.inf)
    return keep_blocks.repeat_interleave(block, dim=1)[:, :n] & allowed


def attend(q: Any, kv: Any, lat: Any, sel: Any, sink: Any, window: int) -> Any:
    """o [T, H, D]: softmax over the window (own kv) and the selected compressed latents, with a
    per-head sink logit in the denominator only; queries in chunks to bound memory."""
    import torch  # lazy: pulls torch

    t, nh, d = q.shape
    scale = d**-0.5
    out = torch.empty_like(q)
    pos = torch.arange(t, device=q.device)
    for c0 in range(0, t, QUERY_CHUNK):
        c1 = min(t, c0 + QUERY_CHUNK)
        qc = q[c0:c1].transpose(0, 1)  # [H, c, D]
        i = pos[c0:c1, None]
        win = (pos[None, :] <= i) & (pos[None, :] > i - window)  # [c, T]
        lw = (qc @ kv.T) * scale
        lw = lw.masked_fill(~win[None], -math.inf)
        parts = [lw]
        if lat is not None and lat.shape[0]:
            lc = (qc @ lat.T) * scale
            parts.append(lc.masked_fill(~sel[c0:c1][None], -math.inf))
        parts.append(sink[:, None, None].expand(nh, c1 - c0, 1))
        p = torch.softmax(torch.cat(parts, dim=-1), dim=-1)
        o = p[..., :t] @ kv
        if len(parts) == 3:
            o = o + p[..., t : t + lat.shape[0]] @ lat
        out[c0:c1] = o.transpose(0, 1)
    return out


def attention(
    x: Any,
    pos_tables: dict,
    w: Callable[[str], Any],
    has: Callable[[str], bool],
    p: str,
    text: dict,
    layer: int,
    st: PromptState,
    quant: Callable[[Any], Any],
    kv_round: Callable[[Any], Any],
    ties: str,
    select_f64: bool = False,
) -> Any:
    """The attention sublayer for one prompt: x [T, h] (already attn_norm'ed) -> [T, h]."""
    import torch  # lazy: pulls torch

    eps = float(text["rms_norm_eps"])
    nh, d = int(text["num_attention_heads"]), int(text["head_dim"])
    roles = layer_roles(text, layer)
    t = x.shape[0]
    cos, sin = pos_tables["compressed" if roles.ratio else "window"]
    qr = rms_norm(quant(x) @ w(f"{p}attn.wq_a.weight").T, w(f"{p}attn.q_norm.weight"), eps)
    q = (quant(qr) @ w(f"{p}attn.wq_b.weight").T).reshape(t, nh, d)
    q = apply_rope(q.transpose(0, 1), cos[:t], sin[:t]).transpose(0, 1)
    kv = rms_norm(quant(x) @ w(f"{p}attn.wkv.weight").T, w(f"{p}attn.kv_norm.weight"), eps)
    kv = kv_round(apply_rope(kv, cos[:t], sin[:t]))
    lat, sel = None, None
    if roles.ratio:
        r = roles.ratio
        visible = visible_counts(t, r, x.device)
        if roles.own_kv:
            wg = w(f"{p}attn.compressor.wgate.weight") if r == 2 else None
            raw = compress(x, w(f"{p}attn.compressor.wkv.weight"), wg, w(f"{p}attn.compressor.norm.weight"), r, eps)
            n = raw.shape[0]
            ccos, csin = pos_tables["compressed"]
            epos = torch.arange(n) * r
            st.latents[layer] = apply_rope(raw, ccos[epos], csin[epos])
            ik = rms_norm(raw @ w(f"{p}attn.indexer.wk.weight").T, w(f"{p}attn.indexer.k_norm.weight"), eps)
            st.index_k[layer] = apply_rope(ik, ccos[epos], csin[epos])
        lat = st.latents[roles.kv_src]
        if roles.own_index:
            ih, idim = int(text["index_n_heads"]), int(text["index_head_dim"])
            iq = (quant(qr) @ w(f"{p}attn.indexer.wq_b.weight").T).reshape(t, ih, idim)
            iq = apply_rope(iq.transpose(0, 1), cos[:t], sin[:t]).transpose(0, 1)
            wp = w(f"{p}attn.indexer.weights_proj.weight")
            iw = ((x.double() @ wp.double().T) if select_f64 else (x @ wp.T)) * (idim**-0.5) * (ih**-0.5)
            scores = index_scores(iq, iw, st.index_k[roles.kv_src], select_f64)
            if roles.candidate_source:
                st.candidates = candidate_pool(
                    scores, visible, int(text["candidate_block_size"]), int(text["candidate_topk_blocks"]), ties
                )
            pool = st.candidates if roles.in_pool else None
            st.topk[layer] = select_topk(scores, visible, int(text["index_topk"]), ties, pool)
        sel = st.topk[roles.idx_src]
    o = attend(q, kv, lat, sel, w(f"{p}attn.attn_sink"), int(text["sliding_window"]))
    o = apply_rope(o.transpose(0, 1), cos[:t], sin[:t], inverse=True).transpose(0, 1)
    g = int(text["o_groups"])
    wo_a = w(f"{p}attn.wo_a.weight")
    o_lora = wo_a.shape[0] // g
    og = quant(o.reshape(t, g, -1))
    y = torch.einsum("tgd,grd->tgr", og, wo_a.reshape(g, o_lora, -1)).reshape(t, g * o_lora)
    return quant(y) @ w(f"{p}attn.wo_b.weight").T
