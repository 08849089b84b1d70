"""The Gaudi port checkpoint format: its tensors and its config marker (research/dsv41-format.md
§4), built on the DSV4.1 contract in recipekit.checkpoint.dsv41. The converter and the layout check
(backends/gaudi) write and check it; the oracle (bench/oracle) reads it.

Every FP8 linear (weight + 32x32 E8M0 scale) becomes one BF16 weight (exact); a block's routed
experts become four stacked tensors `ffn.experts.w13.{weight,scale}` [E, 2I, ...] with gate row j
at 2j and up row j at 2j+1, and `ffn.experts.w2.{weight,scale}` [E, ...] with the bytes
unchanged; an Engram table becomes one tensor pair per hash bucket
`engram.embed.buckets.B.{weight,scale}`; the rest is copied byte for byte. The real config gives
1,267 + vision tensors in 94 + vision shards (the cookbook's "95 shards, 1,530 tensors").
"""

from __future__ import annotations

from recipekit.checkpoint.dsv41 import BF16, E8M0, FP8, I8, Geometry, Spec, SpecBuilder, cdiv, original_tensors
from recipekit.checkpoint.engram_addressing import EngramConfig, EngramLayout

GAUDI_LAYOUT_FORMAT = "recipekit-gaudi-mxfp4/1"
GAUDI_LAYOUT_KEY = "hpu_layout"  # the config.json key that marks a converted checkpoint


def engram_buckets(g: Geometry) -> dict[int, list[tuple[int, int]]]:
    """Engram layer -> [start, end) row range of each hash bucket, checked against the config."""
    cfg = EngramConfig(
        layer_ids=g.engram_layers,
        num_embeddings=g.engram_rows,
        max_ngram_size=g.engram_max_ngram,
        vocab_size=g.engram_vocab,
        n_heads=g.engram_n_heads,
        head_dim=g.engram_head_dim,
        pad_token_id=2,
    )
    layout = EngramLayout.build(cfg)
    return {lid: layout.bucket_ranges(lid) for lid in g.engram_layers}


def fp8_linears(specs: dict[str, Spec]) -> list[str]:
    """Base names of FP8 linears (a `.weight` F8_E4M3 with a `.scale` E8M0), Engram tables excluded."""
    out = []
    for n, s in specs.items():
        if s.dtype == FP8 and n.endswith(".weight") and s.kind == "dense":
            base = n[: -len(".weight")]
            if f"{base}.scale" in specs:
                out.append(base)
    return out


def gaudi_tensors(g: Geometry, buckets: dict[int, list[tuple[int, int]]] | None = None) -> dict[str, Spec]:
    """Every non-vision tensor of the Gaudi port layout, with its output shard group."""
    orig = original_tensors(g)
    buckets = buckets if buckets is not None else engram_buckets(g)
    lin = set(fp8_linears(orig))
    b = SpecBuilder()
    done_experts: set[str] = set()
    for n, s in orig.items():
        if s.kind == "expert":
            p = n[: n.index("ffn.experts.")]
            if p in done_experts:
                continue
            done_experts.add(p)
            E = g.n_routed if p.startswith("layers.") else g.dspark_n_routed
            h, i = g.hidden, g.inter
            b.add(f"{p}ffn.experts.w13.weight", I8, (E, 2 * i, h // 2), s.group, "expert")
            b.add(f"{p}ffn.experts.w13.scale", E8M0, (E, 2 * i, cdiv(h, 32)), s.group, "expert")
            b.add(f"{p}ffn.experts.w2.weight", I8, (E, h, i // 2), s.group, "expert")
            b.add(f"{p}ffn.experts.w2.scale", E8M0, (E, h, cdiv(i, 32)), s.group, "expert")
        elif s.kind == "engram-table":
            if n.endswith(".embed.scale"):
                continue
            L = int(n.split(".")[1])
            p = n[: -len("embed.weight")]
            for bi, (r0, r1) in enumerate(buckets[L]):
                grp = f"engram-bucket:{L}:{bi}"
                b.add(f"{p}embed.buckets.{bi}.weight", FP8, (r1 - r0, g.engram_head_dim), grp, "engram-table")
                b.add(f"{p}embed.buckets.{bi}.scale", E8M0, (r1 - r0, g.engram_head_dim // 32), grp, "engram-table")
        elif n.endswith(".weight") and n[: -len(".weight")] in lin:
            grp = "engram-dense" if s.group.startswith("engram:") else s.group
            b.add(n, BF16, s.shape, grp)
        elif n.endswith(".scale") and n[: -len(".scale")] in lin:
            continue
        else:
            grp = "engram-dense" if s.group.startswith("engram:") else s.group
            b.add(n, s.dtype, s.shape, grp)
    return b.out
