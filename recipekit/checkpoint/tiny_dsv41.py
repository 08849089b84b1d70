"""A deterministic tiny DeepSeek-V4.1 checkpoint in the real names, dtypes and encodings.

`make_tiny_dsv41(out, seed=0, size="tiny")` writes:
- config.json with the real field set (text_config / vision_config / quantization_config),
  dimensions shrunk consistently: 8 layers with every CSA2 role (ratio-2 KV sources with a
  compressor gate, a ratio-1 KV + candidate source, indexer-only layers), Engram on two layers
  with the 24-bucket layout (prime bucket sizes summing to engram_num_embeddings), three
  DSpark stages, and engram_compressed_vocab_size computed from the tokenizer;
- shards split like the real shard map (vision, embed, one per layer, head, one per DSpark
  stage, one per Engram layer) with `model.safetensors.index.json`;
- FP8 e4m3 linears with 32x32 E8M0 scales, MXFP4 routed experts with per-row-per-32 scales,
  FP8 Engram tables with per-row scales; scale codes drawn in 110..125 with a few edge codes
  (3 and 246 on FP8 linears and the Engram table, 0/2/250/254 on expert scales);
- a byte-level BPE tokenizer.json trained offline with `tokenizers` on data/tiny_dsv41_corpus.txt,
  tokenizer_config.json, and engram_multipliers.json (the Engram hash multipliers).

The geometry is one vLLM can construct (head_dim 512, qk_rope 64, index head 128; fewer heads,
layers, experts and a narrow hidden size instead); the vision tower (2 blocks, BF16) carries vLLM's
names and biases; `<image>` is token 129264 as vLLM hard-codes (recipekit.checkpoint.consumer_rules).
`size` other than "tiny" (e.g. "2GiB") keeps the
structure and scales expert count and Engram vocabulary to reach about that many bytes.
Same seed and size -> same bytes. Nothing is trained: weights are seeded random bytes.

`weights="default"` draws every FP8 byte, MXFP4 nibble and scale code uniformly (the codec edge cases
above; |weights| up to 448 * 2^-2, so a forward through them is badly conditioned). `weights="conditioned"`
keeps the names, dtypes, encodings and geometry but draws values like a trained model's init:
FP8 e4m3 values from N(0, 128^2) rounded and clipped to the e4m3 range, MXFP4 values from N(0, 2^2)
rounded to the nearest E2M1 value, and per-block E8M0 scale codes mixing two adjacent codes so that each
quantized linear's dequantized weights have std 1/sqrt(fan_in) (Engram table rows ENGRAM_STD); no edge
codes; BF16 matrices std 1/sqrt(fan_in) (embedding 0.02), norms ~1. It is recorded in the build stamp
(`"weights": "conditioned"`); the files the consumers read carry no trace of it.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from recipekit.atomic import atomic_write_text, build_dir, pid_temp_name
from recipekit.bpe import train_byte_level_bpe
from recipekit.checkpoint import dsv41
from recipekit.checkpoint.consumer_rules import IMAGE_TOKEN, IMAGE_TOKEN_ID
from recipekit.checkpoint.dsv41 import vision_tensors
from recipekit.checkpoint.engram_addressing import (
    SIDECAR_NAME,
    EngramConfig,
    EngramLayout,
    compressed_token_map,
    derive_multipliers,
    multipliers_document,
)
from recipekit.checkpoint.manifest import reusable_build
from recipekit.checkpoint.safetensors_io import ShardWriter, TensorSpec, write_index
from recipekit.errors import RecipekitError

GENERATOR_VERSION = 2
CORPUS = Path(__file__).resolve().parent / "data" / "tiny_dsv41_corpus.txt"
STAMP = ".recipekit-tiny-dsv41.json"
SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"]
CHUNK_BYTES = 16 * 1024 * 1024
WEIGHTS = ("default", "conditioned")
# conditioned variant: the std of the drawn codes' values before scaling (powers of two so the scale
# codes come out near integers), and the std of the Engram table rows
FP8_CODE_STD = 128.0  # a 32x32 block's max |value| ~ 3.5 std ~ 448, as per-block amax scaling gives
MXFP4_CODE_STD = 2.0  # a 32-group's max |value| ~ 3 std ~ 6
ENGRAM_STD = 0.02

# head_dim 512, qk_rope 64 and index head 128 are what vLLM asserts / its kernels hard-code
# (recipekit.checkpoint.consumer_rules); hidden and expert widths are multiples of 128 as exllamav3
# pads linears; the vocabulary is the real 129,280 rows so the image token sits at vLLM's 129264.
TINY = dict(
    hidden=128,
    inter=128,
    layers=8,
    heads=4,
    head_dim=512,
    rope=64,
    q_lora=64,
    o_lora=32,
    o_groups=2,
    routed=8,
    top_k=2,
    index_heads=4,
    index_dim=128,
    engram_vocab=509,
    engram_dim=64,
    dspark_routed=4,
    dspark_top_k=2,
    markov_rank=32,
    bpe_vocab=1000,
)
BENCH = dict(
    hidden=1024,
    inter=512,
    layers=8,
    heads=8,
    head_dim=512,
    rope=64,
    q_lora=256,
    o_lora=128,
    o_groups=2,
    routed=64,
    top_k=4,
    index_heads=8,
    index_dim=128,
    engram_vocab=4096,
    engram_dim=256,
    dspark_routed=32,
    dspark_top_k=2,
    markov_rank=64,
    bpe_vocab=1000,
)
VOCAB = 129280  # the published vocab_size; the image token is row 129264
RESERVED = "<|rsv_{}|>"  # unreachable placeholder tokens filling the BPE vocabulary up to the image token


def parse_size(size: str) -> int | None:
    """'tiny' -> None, '2GiB' / '512MiB' / '3G' / '1000000' -> bytes."""
    s = str(size).strip()
    if s.lower() == "tiny":
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?", s, re.IGNORECASE)
    if not m:
        raise RecipekitError(
            code="bad-size",
            message=f"size {size!r} is not 'tiny' or a byte size",
            hint="e.g. --size tiny, --size 2GiB, --size 512MiB",
        )
    unit = (m.group(2) or "B").upper().rstrip("B").rstrip("I")
    mult = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}[unit]
    return int(float(m.group(1)) * mult)


def geometry_for(size: str) -> dict[str, int]:
    target = parse_size(size)
    if target is None:
        return dict(TINY)
    p = dict(BENCH)
    h, i = p["hidden"], p["inter"]
    # the 129,280-row embedding, LM head and Markov head are fixed; experts and Engram fill the rest
    target = max(target // 4, target - VOCAB * (2 * h + 2 * p["markov_rank"]) * 2)
    per_expert = 3 * (i * h // 2 + i * h // 32)  # w1 + w3 + w2 with scales (square-ish)
    # ~75% routed experts (layers + DSpark stages with routed/2 each), ~20% Engram tables
    p["routed"] = max(8, int(0.75 * target / (per_expert * (p["layers"] + 3 * 0.5))))
    p["dspark_routed"] = max(4, p["routed"] // 2)
    row = p["engram_dim"] + p["engram_dim"] // 32
    p["engram_vocab"] = max(509, int(0.20 * target / (2 * 24 * row)))
    return p


def train_tokenizer(vocab_size: int):
    """Byte-level BPE trained on the shipped corpus, specials at ids 0/1/2; the BPE vocabulary is then
    filled with unreachable placeholders so that `<image>` gets vLLM's id 129264 (consumer_rules
    "vllm-image-token"), followed by the image start/end and DSpark noise tokens and reserved tokens
    up to the published 129,280."""
    from tokenizers import Tokenizer  # lazy: pulls tokenizers

    tok = train_byte_level_bpe(CORPUS.read_text(encoding="utf-8").splitlines(), vocab_size, SPECIALS)
    doc = json.loads(tok.to_str())
    vocab = doc["model"]["vocab"]
    for i in range(len(vocab), IMAGE_TOKEN_ID):
        vocab[RESERVED.format(i)] = i
    tok = Tokenizer.from_str(json.dumps(doc, ensure_ascii=False))
    extra = [IMAGE_TOKEN, "<｜image▁start｜>", "<｜image▁end｜>", "<｜dspark▁noise｜>"]
    tok.add_special_tokens(extra)
    n = tok.get_vocab_size(with_added_tokens=True)
    tok.add_special_tokens([f"<｜reserved▁{i}｜>" for i in range(VOCAB - n)])
    assert tok.token_to_id(IMAGE_TOKEN) == IMAGE_TOKEN_ID
    return tok


def _config(
    p: dict[str, int], vocab: int, image_id: int, noise_id: int, compressed: int, engram_rows: list[int]
) -> dict[str, Any]:
    L = p["layers"]
    # the real layer roles, shrunk: 0-1 SWA; 2 ratio-2 KV+index source; 3 ratio-2 reuse;
    # 4 ratio-1 KV+index+candidate source; 5 reuse; 6 reindex; 7 reuse
    text = {
        "model_type": "deepseek_v41_text",
        "vocab_size": vocab,
        "hidden_size": p["hidden"],
        "moe_intermediate_size": p["inter"],
        "num_hidden_layers": L,
        "num_attention_heads": p["heads"],
        "num_key_value_heads": 1,
        "head_dim": p["head_dim"],
        "qk_rope_head_dim": p["rope"],
        "q_lora_rank": p["q_lora"],
        "o_lora_rank": p["o_lora"],
        "o_groups": p["o_groups"],
        "hidden_act": "silu",
        "swiglu_limit": 10.0,
        "rms_norm_eps": 1e-20,
        "attention_bias": False,
        "max_position_embeddings": 4096,
        "rope_theta": 10000,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 16,
            "beta_fast": 32,
            "beta_slow": 1,
            "original_max_position_embeddings": 256,
        },
        "n_routed_experts": p["routed"],
        "n_shared_experts": 1,
        "num_experts_per_tok": p["top_k"],
        "scoring_func": "sqrtsoftplus",
        "topk_method": "noaux_tc",
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.5,
        "sliding_window": 8,
        "compress_ratios": [0, 0, 2, 2, 1, 1, 1, 1][:L] + [0, 0, 0],
        "compress_rope_theta": 160000,
        "kv_source_layer_ids": [2, 4],
        "index_source_layer_ids": [2, 4, 6],
        "index_n_heads": p["index_heads"],
        "index_head_dim": p["index_dim"],
        "index_topk": 16,
        "candidate_source_layer_id": 4,
        "candidate_topk_blocks": 8,
        "candidate_block_size": 4,
        "hc_mult": 4,
        "hc_sinkhorn_iters": 20,
        "hc_eps": 1e-06,
        "engram_layer_ids": [1, 2],
        "engram_num_embeddings": engram_rows,
        "engram_max_ngram_size": 4,
        "engram_vocab_size": p["engram_vocab"],
        "engram_n_heads": 8,
        "engram_head_dim": p["engram_dim"],
        "engram_pad_token_id": 2,
        "engram_compressed_vocab_size": compressed,
        "num_nextn_predict_layers": 3,
        "dspark_block_size": 5,
        "dspark_noise_token_id": noise_id,
        "dspark_target_layer_ids": [L - 3, L - 2, L - 1],
        "dspark_markov_rank": p["markov_rank"],
        "dspark_n_routed_experts": p["dspark_routed"],
        "dspark_num_experts_per_tok": p["dspark_top_k"],
    }
    vision = {
        "model_type": "deepseek_v41_vision",
        "num_hidden_layers": 2,
        "hidden_size": 32,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "patch_size": 14,
        "rope_theta": 10000,
        "downsample_ratio": 3,
        "max_image_tokens": 64,
        "min_pixels": 3136,
        "max_wh_ratio": None,
    }
    quant = {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "weight_block_size": [32, 32],
        "scale_fmt": "ue8m0",
        "expert_dtype": "fp4",
    }
    return {
        "architectures": ["DeepseekV41ForCausalLM"],
        "model_type": "deepseek_v41",
        "dtype": "bfloat16",
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 2,
        "image_token_id": image_id,
        "quantization_config": quant,
        "text_config": text,
        "vision_config": vision,
    }


def _vision_specs(config: dict, hidden: int):
    """The vision tower in vLLM's names (recipekit.checkpoint.dsv41.vision_tensors)."""

    return vision_tensors(config)


def _fill(name: str, spec, seed: int, rows: tuple[int, int], np, ml_dtypes, weights: str = "default"):
    """Bytes for rows [r0, r1) of a tensor: deterministic per (seed, name, chunk start)."""
    r0, r1 = rows
    shape = (r1 - r0, *spec.shape[1:]) if spec.shape else ()
    n = math.prod(shape)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode()), r0])
    dt = spec.dtype
    if weights == "conditioned":
        out = _fill_conditioned(name, spec, n, rng, np, ml_dtypes)
        if out is not None:
            return out
    if dt == "F8_E4M3":
        b = rng.integers(0, 254, n, dtype=np.uint8)
        b += (b >= 0x7F).astype(np.uint8)  # skip the NaN code 0x7F (0xFF is never drawn)
        return b
    if dt == "F8_E8M0":
        b = rng.integers(110, 126, n, dtype=np.uint8)
        if r0 == 0 and n >= 2:
            if ".experts.0." in name and name.endswith("w1.scale"):
                b[:4] = [0, 2, 250, 254][: min(4, n)]  # exact for MXFP4 (copied, never dequantized)
            elif name.endswith("wq_a.scale") or name.endswith("embed.scale"):
                b[0], b[-1] = 3, 246  # the exact-bf16 edges
        return b
    if dt == "I8":
        return rng.integers(0, 256, n, dtype=np.uint8)
    if dt == "BF16":
        if name.endswith(("norm.weight", "norm1.weight", "norm2.weight")) or name in (
            "image_start",
            "image_end",
            "image_newline",
        ):
            v = 1.0 + 0.05 * rng.standard_normal(n, dtype=np.float32)
        else:
            v = 0.02 * rng.standard_normal(n, dtype=np.float32)
        return v.astype(ml_dtypes.bfloat16).view(np.uint8)
    if dt == "F32":
        return (0.05 * rng.standard_normal(n, dtype=np.float32)).view(np.uint8)
    raise ValueError(dt)


def scale_target_std(name: str, spec) -> float:
    """The dequantized std the conditioned variant aims at for the weight an E8M0 scale tensor scales:
    1/sqrt(fan_in) for linears and experts (fan_in = 32 * the scale's columns: 32x32 FP8 blocks and
    MXFP4's 32-groups both run along the input), ENGRAM_STD for the Engram table."""
    if name.endswith("engram.embed.scale"):
        return ENGRAM_STD
    return 1.0 / math.sqrt(32 * spec.shape[-1])


def _mixed_scale_codes(target: float, code_std: float, n: int, rng, np):
    """n E8M0 codes, each floor(t) or floor(t) + 1 (t = log2(target / code_std)), mixed so that the mean
    variance of code_std * 2^(code - 127) is target^2."""
    t = math.log2(target / code_std)
    lo = math.floor(t)
    p = (4.0**t - 4.0**lo) / (4.0 ** (lo + 1) - 4.0**lo)
    return (127 + lo + (rng.random(n) < p)).astype(np.uint8)


def _fill_conditioned(name: str, spec, n: int, rng, np, ml_dtypes):
    """The conditioned variant's bytes, or None where it draws like the default (norms, F32)."""
    from recipekit.checkpoint.codecs import E2M1_VALUES  # lazy: pulls ml_dtypes, numpy

    dt = spec.dtype
    if dt == "F8_E4M3":
        v = np.clip(FP8_CODE_STD * rng.standard_normal(n, dtype=np.float32), -448.0, 448.0)
        return v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    if dt == "F8_E8M0":
        code_std = MXFP4_CODE_STD if ".experts." in name else FP8_CODE_STD
        return _mixed_scale_codes(scale_target_std(name, spec), code_std, n, rng, np)
    if dt == "I8":  # two E2M1 codes per byte, both drawn alike (so their order within the byte is moot)
        v = MXFP4_CODE_STD * rng.standard_normal(2 * n, dtype=np.float32)
        codes = np.abs(np.abs(v)[:, None] - E2M1_VALUES[None, :8]).argmin(axis=1).astype(np.uint8) | (
            (v < 0).astype(np.uint8) << 3
        )
        return codes[0::2] | (codes[1::2] << 4)
    if dt == "BF16" and len(spec.shape) == 2 and not name.endswith("norm.weight"):
        std = 0.02 if name == "embed.weight" else 1.0 / math.sqrt(spec.shape[-1])
        return (std * rng.standard_normal(n, dtype=np.float32)).astype(ml_dtypes.bfloat16).view(np.uint8)
    return None


@dataclass
class TinyResult:
    path: Path
    tensors: int
    shards: int
    total_size: int
    skipped: bool = False


def make_tiny_dsv41(
    out: str | Path,
    seed: int = 0,
    size: str = "tiny",
    force: bool = False,
    progress: Callable[[str, int], None] | None = None,
    weights: str = "default",
    engram_dim: int | None = None,
) -> TinyResult:
    """Write the checkpoint into `out` (built in a temp folder next to it, then renamed).
    `weights`: "default" (uniform codes, codec edge cases) or "conditioned" (see the module docstring).
    `engram_dim`: the Engram head width instead of the size's (the sm_80 engine's row store reads
    only 256: a rehearsal of the CMP recipe asks for it)."""
    if weights not in WEIGHTS:
        raise RecipekitError(
            code="bad-weights",
            message=f"weights {weights!r} is not one of {', '.join(WEIGHTS)}",
            hint="e.g. --weights conditioned",
        )
    import ml_dtypes  # lazy: pulls ml_dtypes
    import numpy as np  # lazy: pulls numpy

    out = Path(out)
    params = geometry_for(size)
    stamp_want: dict[str, Any] = {"generator": GENERATOR_VERSION, "seed": seed, "size": str(size)}
    if engram_dim is not None:  # absent otherwise: the default's stamp stays byte-identical to earlier builds
        params["engram_dim"] = stamp_want["engram_dim"] = int(engram_dim)
    if weights != "default":  # the default's stamp stays byte-identical to earlier builds
        stamp_want["weights"] = weights
    stamp = reusable_build(out, STAMP, stamp_want, force, "make-tiny")
    # reusable_build matches only the keys asked for: a default build must not reuse a conditioned one
    if stamp is not None and stamp.get("weights", "default") == weights and stamp.get("engram_dim") == engram_dim:
        return TinyResult(out, stamp["tensors"], stamp["shards"], stamp["total_size"], skipped=True)
    with build_dir(out) as tmp:
        tok = train_tokenizer(params["bpe_vocab"])
        tok.save(str(tmp / "tokenizer.json"))
        vocab = tok.get_vocab_size(with_added_tokens=True)
        image_id, noise_id = tok.token_to_id("<image>"), tok.token_to_id("<｜dspark▁noise｜>")
        _, compressed = compressed_token_map(tmp / "tokenizer.json")
        ecfg = EngramConfig(
            layer_ids=(1, 2),
            num_embeddings=(0, 0),
            max_ngram_size=4,
            vocab_size=params["engram_vocab"],
            n_heads=8,
            head_dim=params["engram_dim"],
            pad_token_id=2,
        )
        rows = [sum(c) for c in EngramLayout.build(ecfg, check=False).primes]
        config = _config(params, vocab, image_id, noise_id, compressed, rows)
        geom = dsv41.Geometry.from_config(config)
        specs = dict(_vision_specs(config, geom.hidden))
        specs.update(dsv41.original_tensors(geom))
        groups = dsv41.group_order({s.group for s in specs.values()})
        names = dsv41.shard_names(groups)
        weight_map: dict[str, str] = {}
        total = 0
        for gname in groups:
            members = [(n, s) for n, s in specs.items() if s.group == gname]
            shard = names[gname]
            tspecs = [TensorSpec(n, s.dtype, s.shape) for n, s in members]
            with ShardWriter(tmp / shard, tspecs, metadata={"format": "pt"}, hash=False) as w:
                for (n, s), ts in zip(members, tspecs):
                    nrows = s.shape[0] if s.shape else 1
                    row_bytes = ts.nbytes // nrows if nrows else 0
                    step = max(1, CHUNK_BYTES // max(1, row_bytes))
                    for r0 in range(0, nrows, step):
                        w.write(_fill(n, s, seed, (r0, min(nrows, r0 + step)), np, ml_dtypes, weights), n)
                    weight_map[n] = shard
                    total += ts.nbytes
            if progress:
                progress(shard, (tmp / shard).stat().st_size)
        write_index(tmp, weight_map, total)
        atomic_write_text(
            tmp / "config.json",
            json.dumps(config, indent=2) + "\n",
            sync_dir="ignore",
            temp=pid_temp_name(tmp / "config.json"),
        )
        tok_cfg = {
            "bos_token": SPECIALS[0],
            "eos_token": SPECIALS[1],
            "pad_token": SPECIALS[2],
            "model_max_length": 4096,
            "tokenizer_class": "PreTrainedTokenizerFast",
            "add_bos_token": True,
            "chat_template": "{{ bos_token }}{% for m in messages %}<｜{{ m['role'] }}｜>{{ m['content'] }}{% endfor %}"
            "{% if add_generation_prompt %}<｜assistant｜>{% endif %}",
        }
        atomic_write_text(
            tmp / "tokenizer_config.json",
            json.dumps(tok_cfg, indent=2, ensure_ascii=False) + "\n",
            sync_dir="ignore",
            temp=pid_temp_name(tmp / "tokenizer_config.json"),
        )
        ecfg_real = EngramConfig.from_dict(config)
        mults = derive_multipliers(ecfg_real.layer_ids, ecfg_real.max_ngram_size, compressed)
        sidecar = json.dumps(multipliers_document(ecfg_real, compressed, mults), indent=2) + "\n"
        atomic_write_text(tmp / SIDECAR_NAME, sidecar, sync_dir="ignore", temp=pid_temp_name(tmp / SIDECAR_NAME))
        stamp = dict(stamp_want, tensors=len(weight_map), shards=len(groups), total_size=total)
        atomic_write_text(
            tmp / STAMP, json.dumps(stamp, indent=2) + "\n", sync_dir="ignore", temp=pid_temp_name(tmp / STAMP)
        )
    return TinyResult(out, len(weight_map), len(groups), total)
