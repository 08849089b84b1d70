"""vLLM's own arithmetic from memory to a KV pool, and the verdict in its terms (vLLM 0.32.0):
- GPU: requested = ceil(total x gpu_memory_utilization) (v1/worker/utils.py:716-726);
  available KV = requested - non-KV - CUDA-graph estimate (v1/worker/gpu_worker.py:740-744), non-KV being
  everything allocated since engine creation (weights, NCCL, buffers) + the profile run's transient peak
  (utils/mem_utils.py:312-321). `--kv-cache-memory-bytes` replaces the whole computation.
- CPU: the pool is VLLM_CPU_KVCACHE_SPACE GiB.
- blocks = available // bytes per block (v1/core/kv_cache_utils.py:1520-1551); the logged
  "KV cache size: N tokens" = int(max_concurrency x max_model_len), max_concurrency = blocks over the blocks
  one full-length request needs (kv_cache_utils.py:1195-1228, 2300-2334). `--num-gpu-blocks-override`
  replaces the block count (then the capacity is an override, not a computed figure).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional

from recipekit.tools.fit.kvspec import KVSpec, cdiv

GIB = 1024**3


@dataclass(frozen=True)
class Pool:
    available_kv_bytes: int
    blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    bytes_per_request: int
    basis: str  # "formula" | "kv-cache-memory-bytes" | "cpu-kvcache-space" | "num-gpu-blocks-override"

    def to_dict(self) -> dict:
        return asdict(self)


def kv_pool(
    available_kv_bytes: int, spec: KVSpec, max_model_len: int, basis: str, blocks_override: Optional[int] = None
) -> Pool:
    per_block = sum(g.bytes_per_block for g in spec.groups)
    per_request = spec.bytes_per_request(max_model_len)
    if blocks_override is not None:
        blocks = blocks_override
        # the engine takes the block count as given: capacity is blocks x block size, whatever memory it needs
        return Pool(
            blocks * per_block,
            blocks,
            blocks * spec.block_tokens,
            blocks * spec.block_tokens / max_model_len,
            per_request,
            "num-gpu-blocks-override",
        )
    avail = max(0, available_kv_bytes)
    blocks = avail // per_block if per_block else 0
    concurrency = avail / per_request if per_request else 0.0
    # a pool of whole blocks: the full-length requests it holds cannot use more blocks than exist
    concurrency = min(concurrency, blocks / cdiv(max_model_len, spec.block_tokens)) if blocks else 0.0
    return Pool(avail, int(blocks), int(concurrency * max_model_len), concurrency, per_request, basis)


def largest_fitting_len(available_kv_bytes: int, spec: KVSpec, ceiling: int) -> int:
    """The largest max_model_len (a multiple of the block size, <= ceiling) one request of which fits."""
    lo, hi = 0, ceiling // spec.block_tokens
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if spec.bytes_per_request(mid * spec.block_tokens) <= available_kv_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo * spec.block_tokens


def gpu_available_kv(total_bytes: int, utilization: float, non_kv_bytes: int, cudagraph_bytes: int) -> int:
    return math.ceil(total_bytes * utilization) - non_kv_bytes - cudagraph_bytes
