"""Profile-run workspaces that grow with max_model_len in DeepSeek-V4.1 engines: what the memory profile counts
as non-KV memory beside the weights. Not added to the pool (the measured boot of the CMP seed contradicts every
one of them, see below); reported beside a calibrated plan so a user sees how far the non-KV memory may move
when max_model_len does.

vLLM keeps one workspace buffer per ubatch that grows to the largest single `get_simultaneous` request
(v1/worker/workspace.py:181-207, 256-byte aligned parts), so the profile counts the largest reservation, not
their sum. The reservations the dummy run makes, with their sources:
- the sparse indexer's prefill K buffer: T entries of 128 FP8 bytes + 4 scale bytes, plus the radix top-k
  scratch (model_executor/layers/sparse_attn_indexer.py:444-461; indexer_topk.py:15), T =
  get_max_prefill_buffer_size // compress_ratio (models/deepseek_v41/attention.py:1339-1341). Stock vLLM 0.32.0:
  max_model_len x (1152 // 132) x factor (v1/attention/backends/mla/indexer.py:918-929), factor 5 up to 256K and
  2 above (config/vllm.py:1790-1798). The sm_80 stack the CMP seed runs (zebgop-ops/dsv41reap-pp @8ef75116,
  overlay/vllm/v1/attention/backends/mla/indexer.py `get_max_prefill_buffer_size`): max_model_len x 40.
- the attention's bf16 gather of a prefill chunk: PREFILL_CHUNK_SIZE (4) x (cdiv(max_model_len, ratio) + window
  + max_num_batched_tokens) x 512 x 2 B (models/deepseek_v41/attention.py:200; amd/rocm.py:957-977, 1348-1360,
  the class the sm_80 stack reuses: dsv41reap-pp overlay/vllm/models/deepseek_v4_1/ampere/ampere_sparse.py).

The CMP seed's two boots (2.95 GiB available at 262,144, 2.27 GiB at 1,048,576) put the growth at 0.681 GiB
(929 B per token of max_model_len); stock vLLM's indexer buffer alone grows by 0.773 GiB, and the largest
reservation of either stack by 2.7-3.9 GiB. The recipe's own 34 image patch steps are not public.
"""

from __future__ import annotations

from dataclasses import dataclass

from recipekit.tools.fit.kvspec import cdiv

INDEX_ENTRY_BYTES = 128 + 4  # FP8 K + one fp32 scale (sparse_attn_indexer.py:304-307)
RADIX_TOPK_BYTES = 1024 * 1024  # model_executor/layers/indexer_topk.py:15
GATHER_CHUNK = 4  # models/deepseek_v41/attention.py:200 PREFILL_CHUNK_SIZE
GATHER_ROW_BYTES = 512 * 2  # bf16 rows of head_dim 512 (compressor.py:214 asserts 512)
ALIGN = 256  # v1/worker/workspace.py:194


def _aligned(n: int) -> int:
    return cdiv(n, ALIGN) * ALIGN


def vllm032_factor(max_model_len: int) -> int:
    """sparse_mla_prefill_workspace_factor when left unset (config/vllm.py:1790-1798)."""
    return 5 if max_model_len <= 256 * 1024 else 2


@dataclass(frozen=True)
class Stack:
    name: str
    index_entries_per_token: str  # "factor" (stock: (1152 // 132) x factor) or a fixed multiple
    source: str


STACKS = (
    Stack("vllm 0.32.0", "factor", "v1/attention/backends/mla/indexer.py:918-929; config/vllm.py:1790-1798"),
    Stack("sm_80 overlay (dsv41reap-pp @8ef75116)", "40", "overlay/vllm/v1/attention/backends/mla/indexer.py"),
)


def index_buffer_bytes(stack: Stack, max_model_len: int, compress_ratio: int) -> int:
    per_token = (1152 // 132) * vllm032_factor(max_model_len) if stack.index_entries_per_token == "factor" else 40
    entries = max_model_len * per_token // compress_ratio
    return _aligned(entries * 128) + _aligned(entries * 4) + _aligned(RADIX_TOPK_BYTES)


def gather_bytes(max_model_len: int, compress_ratio: int, window: int, max_batched_tokens: int) -> int:
    return _aligned(
        GATHER_CHUNK * (cdiv(max_model_len, compress_ratio) + window + max_batched_tokens) * GATHER_ROW_BYTES
    )


def largest_reservation(
    stack: Stack, max_model_len: int, ratios: list[int], window: int, max_batched_tokens: int
) -> dict[str, int]:
    """The two reservations at their largest (the smallest compress ratio of the model's attention layers)."""
    r = min(x for x in ratios if x > 0)
    return {
        "index_buffer": index_buffer_bytes(stack, max_model_len, r),
        "gather": gather_bytes(max_model_len, r, window, max_batched_tokens),
    }


def growth_note(config: dict, calibrated_len: int, planned_len: int, max_batched_tokens: int) -> str:
    """One line: how much each stack's largest profile-run reservation moves between the two contexts."""
    cfg = config.get("text_config") or config
    ratios = [int(x) for x in cfg.get("compress_ratios") or []]
    if not ratios or not any(ratios) or calibrated_len == planned_len:
        return ""
    window = int(cfg.get("sliding_window") or 0)
    parts = []
    for s in STACKS:
        a = max(largest_reservation(s, calibrated_len, ratios, window, max_batched_tokens).values())
        b = max(largest_reservation(s, planned_len, ratios, window, max_batched_tokens).values())
        parts.append(f"{s.name} {(b - a) / 1024**3:+.2f} GiB")
    return (
        f"calibrated at max_model_len {calibrated_len:,}, planned at {planned_len:,}: the non-KV memory is held at "
        f"the calibrated figure, but the profile-run workspace grows with the context ({'; '.join(parts)}; "
        "tools/fit/workspace.py) and no stack's figure matches a published boot: treat the pool as uncertain"
    )
