"""DeepSeek-V4.1 checkpoint contract: the tensors a config.json implies in the original layout
(research/dsv41-format.md §1.3, §2, §3).

`Geometry.from_config(config)` reads the text_config fields that size tensors;
`original_tensors(geom)` lists every expected tensor with dtype, shape, the group it belongs
to (its shard) and the parts that select it. The real config gives 96,085 - 263 (vision)
tensors in 47 non-vision groups. Layouts derived from it (the Gaudi port:
recipekit.backends.gaudi.layout) build on these specs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from recipekit import bounded, confine
from recipekit.errors import ExitCode, RecipekitError

FP8 = "F8_E4M3"
E8M0 = "F8_E8M0"
BF16 = "BF16"
F32 = "F32"
I8 = "I8"

VISION_PREFIXES = ("vision.", "aligner.")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Geometry:
    vocab: int
    hidden: int
    inter: int
    n_layers: int
    n_heads: int
    head_dim: int
    q_lora: int
    o_lora: int
    o_groups: int
    n_routed: int
    n_shared: int
    compress_ratios: tuple[int, ...]
    kv_sources: tuple[int, ...]
    index_sources: tuple[int, ...]
    index_n_heads: int
    index_head_dim: int
    hc_mult: int
    engram_layers: tuple[int, ...]
    engram_rows: tuple[int, ...]
    engram_max_ngram: int
    engram_n_heads: int
    engram_head_dim: int
    engram_vocab: int
    n_mtp: int
    dspark_n_routed: int
    dspark_markov_rank: int
    dspark_taps: int
    vision_layers: int = 0  # vision_config.num_hidden_layers (0 when the config has no vision tower)

    @classmethod
    def from_config(cls, config: dict[str, Any], where: str = "config.json") -> "Geometry":
        text = config.get("text_config", config)
        if not isinstance(text, dict):
            raise RecipekitError(code="config-invalid", message="text_config is not an object", location=where)
        fields = {
            "vocab": "vocab_size",
            "hidden": "hidden_size",
            "inter": "moe_intermediate_size",
            "n_layers": "num_hidden_layers",
            "n_heads": "num_attention_heads",
            "head_dim": "head_dim",
            "q_lora": "q_lora_rank",
            "o_lora": "o_lora_rank",
            "o_groups": "o_groups",
            "n_routed": "n_routed_experts",
            "n_shared": "n_shared_experts",
            "compress_ratios": "compress_ratios",
            "kv_sources": "kv_source_layer_ids",
            "index_sources": "index_source_layer_ids",
            "index_n_heads": "index_n_heads",
            "index_head_dim": "index_head_dim",
            "hc_mult": "hc_mult",
            "engram_layers": "engram_layer_ids",
            "engram_rows": "engram_num_embeddings",
            "engram_max_ngram": "engram_max_ngram_size",
            "engram_n_heads": "engram_n_heads",
            "engram_head_dim": "engram_head_dim",
            "engram_vocab": "engram_vocab_size",
            "n_mtp": "num_nextn_predict_layers",
            "dspark_n_routed": "dspark_n_routed_experts",
            "dspark_markov_rank": "dspark_markov_rank",
            "dspark_taps": "dspark_target_layer_ids",
        }
        missing = [k for k in fields.values() if k not in text]
        if missing:
            raise RecipekitError(
                code="config-missing-field",
                location=f"{where} $.text_config",
                message=f"missing DeepSeek-V4.1 field(s): {', '.join(missing)}",
                hint="is this a DeepSeek-V4.1 config.json?",
            )
        vals: dict[str, Any] = {"vision_layers": vision_layers(config)}
        for attr, key in fields.items():
            v = text[key]
            if attr == "dspark_taps" and isinstance(v, list):
                v = len(v)
            lowest = 1 if attr in _POSITIVE else 0
            if attr in _LISTS and isinstance(v, list) and all(_whole(x, 0) for x in v):
                v = tuple(int(x) for x in v)
            elif _whole(v, lowest):
                v = int(v)
            else:
                raise RecipekitError(
                    code="config-invalid",
                    location=f"{where} $.text_config.{key}",
                    message=f"{key} = {repr(v)[:80]} is not an integer (list) in {lowest}..{_MAX_DIM}",
                    hint="config.json is damaged or is not a DeepSeek-V4.1 config",
                )
            vals[attr] = v
        g = cls(**vals)
        g._check(where)
        return g

    def _check(self, where: str) -> None:
        problems = []
        if len(self.compress_ratios) != self.n_layers + self.n_mtp:
            problems.append(
                f"compress_ratios has {len(self.compress_ratios)} entries, expected layers + mtp = {self.n_layers + self.n_mtp}"
            )
        if len(self.engram_layers) != len(self.engram_rows):
            problems.append("engram_layer_ids and engram_num_embeddings differ in length")
        for name, v in (
            ("hidden_size", self.hidden),
            ("moe_intermediate_size", self.inter),
            ("engram_head_dim", self.engram_head_dim),
        ):
            if v % 32:
                problems.append(f"{name} {v} is not a multiple of 32 (FP8/FP4 blocks)")
        if (self.n_heads * self.head_dim) % self.o_groups:
            problems.append("heads x head_dim is not divisible by o_groups")
        if problems:
            raise RecipekitError(code="config-invalid", location=where, message="; ".join(problems))

    @property
    def hc_rows(self) -> int:
        return (2 + self.hc_mult) * self.hc_mult


# sizes that must be at least 1 (the others may be 0); no size is above _MAX_DIM
_POSITIVE = frozenset(
    {
        "vocab",
        "hidden",
        "inter",
        "n_layers",
        "n_heads",
        "head_dim",
        "q_lora",
        "o_lora",
        "o_groups",
        "n_routed",
        "index_n_heads",
        "index_head_dim",
        "hc_mult",
        "engram_head_dim",
        "engram_n_heads",
        "engram_vocab",
        "engram_max_ngram",
    }
)
_MAX_DIM = 1 << 40
_LISTS = frozenset({"compress_ratios", "kv_sources", "index_sources", "engram_layers", "engram_rows"})


def _whole(v: Any, lowest: int) -> bool:
    """A JSON number that is a whole number in lowest.._MAX_DIM (NaN, inf, bools, strings are not)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if isinstance(v, float) and not v.is_integer():
        return False
    return lowest <= v <= _MAX_DIM


class Spec(NamedTuple):
    """One expected tensor (a tuple: the full-size contract lists ~96,000 of them per check)."""

    dtype: str
    shape: tuple[int, ...]
    group: str  # the shard it lives in: embed, layer:N, head, mtp:S, engram:N, engram-bucket:N:B, ...
    kind: str  # dense | expert | engram-table


def _parts_of(name: str, spec: Spec) -> set[str]:
    parts = {"all"}
    if spec.kind == "expert":
        parts.add("moe")
    elif spec.kind == "engram-table":
        parts.add("engram")
    else:
        parts.add("dense")
    if ".engram." in name:
        parts.add("engram")
    m = re.match(r"layers\.(\d+)\.", name)
    if m:
        parts.add(f"layer:{m.group(1)}")
    return parts


PART_RE = re.compile(r"^(all|dense|moe|engram|layer:\d+)$")


def check_part(part: str) -> str:
    if not PART_RE.match(part):
        raise RecipekitError(
            code="bad-part", message=f"unknown part {part!r}", hint="use all, dense, moe, engram or layer:N"
        )
    return part


def selected(name: str, spec: Spec, parts: set[str] | tuple[str, ...] | list[str]) -> bool:
    return bool(_parts_of(name, spec) & set(parts))


# ----------------------------------------------------------------------------- original layout


class SpecBuilder:
    def __init__(self) -> None:
        self.out: dict[str, Spec] = {}

    def add(self, name: str, dtype: str, shape, group: str, kind: str = "dense") -> None:
        self.out[name] = Spec(dtype, tuple(map(int, shape)), group, kind)

    def fp8(self, name: str, out: int, inp: int, group: str) -> None:
        self.add(f"{name}.weight", FP8, (out, inp), group)
        self.add(f"{name}.scale", E8M0, (cdiv(out, 32), cdiv(inp, 32)), group)


def _block(b: SpecBuilder, g: Geometry, p: str, group: str, n_experts: int, layer: int | None) -> None:
    h, hc = g.hidden, g.hc_mult
    for site in ("attn", "ffn"):
        b.add(f"{p}hc_{site}_fn", F32, (g.hc_rows, hc * h), group)
        b.add(f"{p}hc_{site}_base", F32, (g.hc_rows,), group)
        b.add(f"{p}hc_{site}_scale", F32, (3,), group)
    b.add(f"{p}attn_norm.weight", BF16, (h,), group)
    b.add(f"{p}ffn_norm.weight", BF16, (h,), group)
    b.fp8(f"{p}attn.wq_a", g.q_lora, h, group)
    b.add(f"{p}attn.q_norm.weight", BF16, (g.q_lora,), group)
    b.fp8(f"{p}attn.wq_b", g.n_heads * g.head_dim, g.q_lora, group)
    b.fp8(f"{p}attn.wkv", g.head_dim, h, group)
    b.add(f"{p}attn.kv_norm.weight", BF16, (g.head_dim,), group)
    b.fp8(f"{p}attn.wo_a", g.o_groups * g.o_lora, g.n_heads * g.head_dim // g.o_groups, group)
    b.fp8(f"{p}attn.wo_b", h, g.o_groups * g.o_lora, group)
    b.add(f"{p}attn.attn_sink", F32, (g.n_heads,), group)
    if layer is not None and layer in g.kv_sources:
        b.add(f"{p}attn.compressor.wkv.weight", BF16, (g.head_dim, h), group)
        if g.compress_ratios[layer] == 2:
            b.add(f"{p}attn.compressor.wgate.weight", BF16, (g.head_dim, h), group)
        b.add(f"{p}attn.compressor.norm.weight", BF16, (g.head_dim,), group)
        b.add(f"{p}attn.indexer.wk.weight", BF16, (g.index_head_dim, g.head_dim), group)
        b.add(f"{p}attn.indexer.k_norm.weight", BF16, (g.index_head_dim,), group)
    if layer is not None and layer in g.index_sources:
        b.fp8(f"{p}attn.indexer.wq_b", g.index_n_heads * g.index_head_dim, g.q_lora, group)
        b.add(f"{p}attn.indexer.weights_proj.weight", BF16, (g.index_n_heads, h), group)
    b.add(f"{p}ffn.gate.weight", BF16, (n_experts, h), group)
    b.add(f"{p}ffn.gate.bias", F32, (n_experts,), group)
    if g.vision_layers > 0:  # consumer_rules "vllm-gate-bias-vl"
        b.add(f"{p}ffn.gate.bias_vl", F32, (n_experts,), group)
    si = g.inter * g.n_shared
    b.fp8(f"{p}ffn.shared_experts.w1", si, h, group)
    b.fp8(f"{p}ffn.shared_experts.w3", si, h, group)
    b.fp8(f"{p}ffn.shared_experts.w2", h, si, group)
    # the experts share their six specs (immutable tuples): one object each, not one per expert
    per_expert = []
    for w, (rows, k) in (("w1", (g.inter, h)), ("w2", (h, g.inter)), ("w3", (g.inter, h))):
        per_expert.append((f".{w}.weight", Spec(I8, (int(rows), int(k // 2)), group, "expert")))
        per_expert.append((f".{w}.scale", Spec(E8M0, (int(rows), int(cdiv(k, 32))), group, "expert")))
    # one prefix per expert, then one concatenation per name (a third faster than an f-string per name)
    experts = [f"{p}ffn.experts.{e}" for e in range(n_experts)]
    b.out.update({x + sfx: spec for x in experts for sfx, spec in per_expert})


def vision_layers(config: dict[str, Any]) -> int:
    v = config.get("vision_config")
    if not isinstance(v, dict):
        return 0
    n = v.get("num_hidden_layers", 0)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def vision_tensors(config: dict[str, Any]) -> dict[str, Spec]:
    """The vision tower + aligner under vLLM's names (consumer_rules "vllm-vision-names"), BF16.

    The published config (hidden 1024, intermediate 2816, patch 14, 32 blocks, 3x3 unshuffle
    into hidden 5120) gives 263 tensors / 970,506,240 bytes, the published shard 1."""
    v = config.get("vision_config")
    n_blocks = vision_layers(config)
    if not isinstance(v, dict) or n_blocks == 0:
        return {}
    text = config.get("text_config", config)
    try:
        vh, vi, ps = int(v["hidden_size"]), int(v["intermediate_size"]), int(v["patch_size"])
        ds, hidden = int(v["downsample_ratio"]), int(text["hidden_size"])
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        raise RecipekitError(
            code="config-invalid",
            location="config.json $.vision_config",
            message=f"vision_config lacks an integer field: {e}",
        ) from None
    b = SpecBuilder()
    b.add("vision.patch_embed.proj.weight", BF16, (vh, 3 * ps * ps), "vision")
    b.add("vision.patch_embed.proj.bias", BF16, (vh,), "vision")
    for i in range(n_blocks):
        p = f"vision.blocks.{i}."
        b.add(p + "norm1.weight", BF16, (vh,), "vision")
        b.add(p + "attn.wqkv.weight", BF16, (3 * vh, vh), "vision")
        b.add(p + "attn.wqkv.bias", BF16, (3 * vh,), "vision")
        b.add(p + "attn.wo.weight", BF16, (vh, vh), "vision")
        b.add(p + "attn.wo.bias", BF16, (vh,), "vision")
        b.add(p + "norm2.weight", BF16, (vh,), "vision")
        b.add(p + "mlp.w1.weight", BF16, (2 * vi, vh), "vision")  # fused gate + up
        b.add(p + "mlp.w2.weight", BF16, (vh, vi), "vision")
    b.add("vision.norm.weight", BF16, (vh,), "vision")
    b.add("aligner.w1.weight", BF16, (hidden, vh * ds * ds), "vision")
    b.add("aligner.w1.bias", BF16, (hidden,), "vision")
    b.add("aligner.w2.weight", BF16, (hidden, hidden), "vision")
    b.add("aligner.w2.bias", BF16, (hidden,), "vision")
    return b.out


def original_tensors(g: Geometry) -> dict[str, Spec]:
    """Every non-vision tensor of the original checkpoint (FP8 linears, per-expert MXFP4)."""
    b = SpecBuilder()
    b.add("embed.weight", BF16, (g.vocab, g.hidden), "embed")
    for n in ("image_start", "image_end", "image_newline"):
        b.add(n, BF16, (g.hidden,), "embed")
    for L in range(g.n_layers):
        _block(b, g, f"layers.{L}.", f"layer:{L}", g.n_routed, L)
    b.add("head.weight", BF16, (g.vocab, g.hidden), "head")
    b.add("norm.weight", BF16, (g.hidden,), "head")
    for s in range(g.n_mtp):
        p, grp = f"mtp.{s}.", f"mtp:{s}"
        _block(b, g, p, grp, g.dspark_n_routed, None)
        if s == 0:
            b.fp8(f"{p}main_proj", g.hidden, g.dspark_taps * g.hidden, grp)
            b.add(f"{p}main_norm.weight", BF16, (g.hidden,), grp)
        if s == g.n_mtp - 1:
            b.add(f"{p}markov_head.embed.weight", BF16, (g.vocab, g.dspark_markov_rank), grp)
            b.add(f"{p}markov_head.head.weight", BF16, (g.vocab, g.dspark_markov_rank), grp)
            b.add(f"{p}confidence_head.proj.weight", BF16, (1, g.hidden + g.dspark_markov_rank), grp)
            b.add(f"{p}norm.weight", BF16, (g.hidden,), grp)
    for L, rows in zip(g.engram_layers, g.engram_rows):
        p, grp = f"layers.{L}.engram.", f"engram:{L}"
        b.add(f"{p}embed.weight", FP8, (rows, g.engram_head_dim), grp, "engram-table")
        b.add(f"{p}embed.scale", E8M0, (rows, g.engram_head_dim // 32), grp, "engram-table")
        b.fp8(
            f"{p}wkv", (g.hc_mult + 1) * g.hidden, (g.engram_max_ngram - 1) * g.engram_n_heads * g.engram_head_dim, grp
        )
        b.add(f"{p}q_weight", BF16, (g.hc_mult, g.hidden), grp)
        b.add(f"{p}k_weight", BF16, (g.hc_mult, g.hidden), grp)
    return b.out


def group_order(groups: set[str]) -> list[str]:
    """A stable shard order: vision, embed, layers, head, mtp, engram dense, engram buckets."""

    def key(gname: str):
        kind, _, rest = gname.partition(":")
        rank = {
            "vision": 0,
            "embed": 1,
            "layer": 2,
            "head": 3,
            "mtp": 4,
            "engram": 5,
            "engram-dense": 6,
            "engram-bucket": 7,
        }.get(kind, 8)
        nums = tuple(int(x) for x in rest.split(":") if x.isdigit())
        return (rank, nums, gname)

    return sorted(groups, key=key)


def shard_names(groups: list[str]) -> dict[str, str]:
    n = len(groups)
    return {gname: f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i, gname in enumerate(groups)}


def is_vision(name: str) -> bool:
    return name.startswith(VISION_PREFIXES)


CONFIG_MAX_BYTES = 16 * 1024 * 1024


def load_config(folder) -> dict[str, Any]:

    path = Path(folder) / "config.json"
    if not os.path.lexists(path):
        raise RecipekitError(
            code="checkpoint-config-missing",
            location=str(path),
            message="no config.json in the checkpoint folder",
            exit_code=ExitCode.NOT_FOUND,
        )
    confine.refuse_link_outside(Path(folder), path, "config.json", code="side-file-outside")
    cfg = bounded.read_json(path, "config.json", CONFIG_MAX_BYTES, code="checkpoint-config-invalid")
    if not isinstance(cfg, dict):
        raise RecipekitError(
            code="checkpoint-config-invalid", location=str(path), message="config.json is not an object"
        )
    return cfg
