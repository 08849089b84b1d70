"""The fit report: per card, weights by tensor class + runtime overhead + the KV pool vLLM would make, the
verdict in vLLM's own terms, and — when it does not fit — what would (the largest max_model_len)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from recipekit.errors import ExitCode, RecipekitError
from recipekit.tools.fit.engine_args import EngineMemoryArgs
from recipekit.tools.fit.kvspec import KVSpec
from recipekit.tools.fit.pool import GIB, Pool, gpu_available_kv, kv_pool, largest_fitting_len
from recipekit.tools.fit.sharding import ClassBytes


@dataclass
class Overhead:
    non_kv_extra_bytes: int  # beyond the weights: buffers, NCCL, the profile run's peak
    cudagraph_bytes: int
    basis: str  # "estimate: ..." or "calibrated: ..."
    calibrated_non_kv_bytes: Optional[int] = None  # a boot log's whole non-KV figure, used as is


@dataclass
class FitReport:
    recipe: str
    layout: Optional[str]
    device: str  # "gpu" | "cpu"
    ranks: int
    card_bytes: Optional[int]
    args: dict[str, Any]
    weights_per_rank_bytes: float
    weights_by_class: list[dict[str, Any]]
    overhead: dict[str, Any]
    kv_spec: dict[str, Any]
    pool: dict[str, Any]
    fits: bool
    verdict: str
    largest_max_model_len: Optional[int] = None
    host: dict[str, Any] = field(default_factory=dict)  # RAM and disk the recipe needs beside the cards
    notes: list[str] = field(default_factory=list)
    timing: dict[str, Any] = field(default_factory=dict)  # `recipe fit --timing` only: wall seconds per phase

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        if not self.timing:
            del d["timing"]
        return d


def _classes(by_class: dict[str, ClassBytes]) -> list[dict[str, Any]]:
    rows = []
    for pattern, c in sorted(by_class.items(), key=lambda kv: -kv[1].per_rank_bytes):
        rows.append(
            {
                "class": pattern,
                "kind": c.kind,
                "tensors": c.tensors,
                "total_gib": round(c.total_bytes / GIB, 4),
                "per_rank_gib": round(c.per_rank_bytes / GIB, 4),
                "source": c.source + (" (assumed)" if c.assumed else ""),
            }
        )
    return rows


def plan(
    *,
    recipe: str,
    layout: Optional[str],
    args: EngineMemoryArgs,
    spec: KVSpec,
    weights_per_rank: float,
    by_class: dict[str, ClassBytes],
    card_bytes: Optional[int],
    overhead: Overhead,
    context_ceiling: int,
) -> FitReport:
    if args.max_model_len is None:
        raise RecipekitError(
            code="fit-no-max-model-len",
            exit_code=ExitCode.INVALID_INPUT,
            message="the serve command sets no --max-model-len: the planner needs the context to size the pool",
            hint="add --max-model-len to the recipe's serve args, or --set --max-model-len=N",
        )
    L = args.max_model_len
    notes: list[str] = []
    if args.cpu_kvcache_space_gib is not None and card_bytes is None:
        device, avail, basis = "cpu", int(args.cpu_kvcache_space_gib * GIB), "cpu-kvcache-space"
    elif args.kv_cache_memory_bytes is not None:
        device, avail, basis = "gpu", args.kv_cache_memory_bytes, "kv-cache-memory-bytes"
    else:
        if card_bytes is None:
            raise RecipekitError(
                code="fit-no-card-memory",
                exit_code=ExitCode.INVALID_INPUT,
                message="the recipe declares no memory per card (hardware.memory_gib_per_device)",
                hint="declare it in the recipe, or measure a card with `recipe doctor --memtest`",
            )
        device, basis = "gpu", "formula"
        if overhead.calibrated_non_kv_bytes is not None:
            non_kv = overhead.calibrated_non_kv_bytes
        else:
            non_kv = int(weights_per_rank) + overhead.non_kv_extra_bytes
        avail = gpu_available_kv(card_bytes, args.gpu_memory_utilization, non_kv, overhead.cudagraph_bytes)
    pool: Pool = kv_pool(avail, spec, L, basis, args.num_gpu_blocks_override)
    if pool.basis == "num-gpu-blocks-override":
        notes.append(
            f"--num-gpu-blocks-override {args.num_gpu_blocks_override}: the pool is {pool.blocks} blocks x "
            f"{spec.block_tokens} = {pool.kv_cache_tokens:,} tokens as given, not a capacity computed from memory"
        )
    # the pool is what memory is left after the weights and the runtime: one full-length request must fit in it
    fits = pool.max_concurrency >= 1.0
    largest = None
    if not fits:
        largest = largest_fitting_len(max(0, avail), spec, min(L, context_ceiling))
    words = (
        f"KV cache size: {pool.kv_cache_tokens:,} tokens; maximum concurrency for {L:,} tokens per request: "
        f"{pool.max_concurrency:.2f}x"
    )
    verdict = ("fits: " if fits else "does not fit: ") + words
    if not fits:
        verdict += (
            f"; the largest max_model_len that fits is {largest:,}"
            if largest
            else "; no context fits: the weights alone exceed the card"
        )
    return FitReport(
        recipe=recipe,
        layout=layout,
        device=device,
        ranks=args.tp * args.pp * args.dp,
        card_bytes=card_bytes,
        args=dict(args.__dict__),
        weights_per_rank_bytes=weights_per_rank,
        weights_by_class=_classes(by_class),
        overhead=dict(overhead.__dict__),
        kv_spec={
            "family": spec.family,
            "bytes_per_token_per_rank": round(spec.bytes_per_token, 2),
            "block_tokens": spec.block_tokens,
            "groups": [
                {
                    "name": g.name,
                    "bytes_per_block": g.bytes_per_block,
                    "block_tokens": g.block_tokens,
                    "source": g.source,
                }
                for g in spec.groups
            ],
            "fixed_bytes_per_request": spec.fixed_bytes_per_request,
            "fixed_basis": spec.fixed_basis,
        },
        pool=pool.to_dict(),
        fits=fits,
        verdict=verdict,
        largest_max_model_len=largest,
        notes=notes,
    )
