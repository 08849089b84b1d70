"""What vLLM's DeepSeek-V4.1 loader requires of a checkpoint, as data with its source.

Each rule names the consumer, the versions read and the file:line (research/consumers.md §1,
read from the vLLM 0.32.0 and 0.33.0 wheels). `recipe checkpoint check --checkpoint-format original`
reports a broken rule as `rule <id> (<source>): <what is wrong>`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConsumerRule:
    id: str
    consumer: str
    version: str
    source: str  # file:line in the consumer's code
    text: str  # what the consumer requires

    def finding(self, message: str) -> str:
        return f"rule {self.id} ({self.consumer} {self.version} {self.source}): {message}"


VLLM = "vLLM DeepseekV41ForCausalLM"
VERSIONS = "0.32.0/0.33.0"

HEAD_DIM = 512
QK_ROPE_HEAD_DIM = 64
INDEX_HEAD_DIM = 128
IMAGE_TOKEN_ID = 129264
IMAGE_TOKEN = "<image>"
WEIGHT_BLOCK_SIZE = [32, 32]
REQUIRED_QUANT_KEYS = ("quant_method", "activation_scheme")
EXPERT_DTYPE = "fp4"

RULES: dict[str, ConsumerRule] = {
    r.id: r
    for r in (
        ConsumerRule(
            "vllm-head-dim",
            VLLM,
            VERSIONS,
            "deepseek_v41/compressor.py:214",
            f"text_config.head_dim == {HEAD_DIM} (asserted at construction; kernels hard-code 512: "
            "fused_compress_quant_cache.py:65/247/280, cache_utils.py:261)",
        ),
        ConsumerRule(
            "vllm-rope-dim",
            VLLM,
            VERSIONS,
            "deepseek_v41/compressor.py:214",
            f"text_config.qk_rope_head_dim == {QK_ROPE_HEAD_DIM} (asserted at construction)",
        ),
        ConsumerRule(
            "vllm-index-head-dim",
            VLLM,
            VERSIONS,
            "deepseek_v41/indexer_k_store.py:58",
            f"text_config.index_head_dim == {INDEX_HEAD_DIM} (the indexer K store's head size)",
        ),
        ConsumerRule(
            "vllm-quant-keys",
            VLLM,
            VERSIONS,
            "deepseek_v41/quant_config.py (fp8.py:159-161)",
            "quantization_config holds quant_method and activation_scheme",
        ),
        ConsumerRule(
            "vllm-block-size",
            VLLM,
            VERSIONS,
            "deepseek_v41/quant_config.py",
            "quantization_config.weight_block_size == [32, 32] (the FP8 linear path of V4.1)",
        ),
        ConsumerRule(
            "vllm-expert-dtype",
            VLLM,
            VERSIONS,
            "deepseek_v41/quant_config.py",
            "quantization_config.expert_dtype == 'fp4' (MXFP4 routed experts)",
        ),
        ConsumerRule(
            "vllm-vision-names",
            VLLM,
            VERSIONS,
            "deepseek_v4/common/vision.py",
            "vision tensors carry vLLM's names and biases (patch_embed.proj, attn.wqkv, attn.wo, "
            "aligner.w1/w2 with .bias; no aligner.norm)",
        ),
        ConsumerRule(
            "vllm-gate-bias-vl",
            VLLM,
            VERSIONS,
            "deepseek_v4/nvidia/model.py:767,1358",
            "ffn.gate.bias_vl exists only when the vision tower has layers (else KeyError at load)",
        ),
        ConsumerRule(
            "vllm-image-token",
            VLLM,
            VERSIONS,
            "deepseek_v41/common/mm_preprocess.py:51-67",
            f"the tokenizer's {IMAGE_TOKEN} token has id {IMAGE_TOKEN_ID} (hard-coded; "
            "config.image_token_id is not read)",
        ),
        ConsumerRule(
            "vllm-engram-dead-token",
            VLLM,
            VERSIONS,
            "deepseek_v41/common/mm_preprocess.py:56, nvidia/model.py:954/972",
            f"Engram marks a token dead (image) only when its id equals {IMAGE_TOKEN_ID}",
        ),
        ConsumerRule(
            "vllm-vocab-holds-image",
            VLLM,
            VERSIONS,
            "deepseek_v41/common/mm_preprocess.py:51-67",
            f"text_config.vocab_size > {IMAGE_TOKEN_ID} (the image token is an embedding row)",
        ),
    )
}


def rule(rule_id: str) -> ConsumerRule:
    return RULES[rule_id]
