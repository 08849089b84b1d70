"""What exllamav3 1.6.5 and the vllm-exl3 plugin require of an EXL3 pack / hybrid checkpoint, as
data with its source (research/consumers.md §2). Assembly and `check --checkpoint-format hybrid` both read
these tables, so they refuse the same things.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Exl3Rule:
    id: str
    consumer: str
    source: str
    text: str

    def finding(self, message: str) -> str:
        return f"rule {self.id} ({self.consumer} {self.source}): {message}"


EXLLAMAV3 = "exllamav3 1.6.5"
PLUGIN = "vllm-exl3 (vcruz305/vllm-exl3)"
PLUGIN_SRC = "src/vllm_exl3/exl3.py@00031922"

# codebook marker tensor suffix -> the multiplier exllamav3 checks it holds (loader/safetensors.py:638-663)
CODEBOOK_MULTIPLIER = {"mcg": 0xCBAC1FED, "mul1": 0x83DCD12D}
PLUGIN_CODEBOOKS = ("mcg", "mul1")  # Exl3Config.from_config refuses 3INST (no marker)
MARKER_SHAPES = ((), (1,))  # the plugin's MoE loader takes [] and [1]
BITS_MIN, BITS_MAX = 2, 6  # Exl3Config: bits and layer_bits values in 2..6
PAD = 128  # exllamav3 Linear pads in/out features to multiples of 128

RULES: dict[str, Exl3Rule] = {
    r.id: r
    for r in (
        Exl3Rule(
            "exl3-codebook",
            PLUGIN,
            "exl3.py Exl3Config.from_config",
            "codebook is mcg or mul1 (3INST, a module without a marker, is refused)",
        ),
        Exl3Rule(
            "exl3-marker-value",
            EXLLAMAV3,
            "loader/safetensors.py:638-663",
            "a codebook marker holds its codebook's multiplier (mcg 0xCBAC1FED, mul1 0x83DCD12D)",
        ),
        Exl3Rule(
            "exl3-marker-shape",
            PLUGIN,
            "deepseek_v41.py MoE weight loader",
            "a codebook marker has shape [] or [1]; every expert carries exactly one",
        ),
        Exl3Rule(
            "exl3-bits",
            PLUGIN,
            "exl3.py Exl3Config.from_config",
            "quantization_config.bits is an integer 2..6 (int(bits): a float is truncated, null raises)",
        ),
        Exl3Rule(
            "exl3-layer-bits",
            PLUGIN,
            "exl3.py Exl3Config.from_config",
            "layer_bits has integer keys and values 2..6 equal to the trellis widths of each layer",
        ),
        Exl3Rule(
            "exl3-pad-128",
            EXLLAMAV3,
            "modules/linear.py:54,75",
            "trellis in/out features are the linear's padded to multiples of 128",
        ),
        Exl3Rule(
            "exl3-pack-geometry",
            PLUGIN,
            "deepseek_v41.py MoE weight loader (shape checks)",
            "the pack's n_routed_experts, hidden_size and moe_intermediate_size are the official config's",
        ),
        Exl3Rule(
            "exl3-codebook-config",
            PLUGIN,
            f"{PLUGIN_SRC} Exl3Config.__init__ (one codebook, mcg or mul1) and _check_moe_codebook_markers "
            "(each expert's marker picks the trellis codebook); exllamav3 1.6.5 loader/safetensors.py:638-663",
            "quantization_config.codebook (the pack's and the merged hybrid's) names the codebook of the markers "
            "the tensors carry",
        ),
        Exl3Rule(
            "hybrid-one-source",
            "vLLM weight iterator",
            "vllm model_loader (reads every tensor of every file); "
            "zebgop-ops/dsv41reap-pp overlay/patch_weight_iter.py (DSV41_SKIP_WEIGHT_RE skips by name)",
            "a tensor name is held by exactly one linked file, whichever source it comes from (official shards "
            "included): the loader reads every tensor of every file, and a skip rule by name cannot keep one copy",
        ),
    )
}


def pad128(n: int) -> int:
    return -(-n // PAD) * PAD


def signed32(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v
