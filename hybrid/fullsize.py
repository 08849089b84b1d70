"""Full-size DeepSeek-V4.1 checkpoints as sparse files, for timing the checkpoint commands at real size.

`make_sparse_original` writes the published checkpoint's layout from the layout contract
(recipekit.checkpoint.dsv41 with the published config's sizes: 48 shards, 96,085 tensors,
510,286,023,000 bytes of payload) and `make_sparse_exl3` an EXL3 pack of its routed experts (one
shard per layer, 184,320 tensors). Every shard has its real safetensors header and real size; the
tensor bytes are holes, except the bytes a command reads as values: the EXL3 codebook markers.
The files take a few MB of disk. Tokenizer files come from a tiny checkpoint (`like`), whose
tokenizer-derived config fields (vocabulary, special token ids, compressed Engram vocabulary) are
kept.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from recipekit.atomic import atomic_write_text
from recipekit.checkpoint import dsv41
from recipekit.checkpoint.engram_addressing import (
    SIDECAR_NAME,
    EngramConfig,
    compressed_token_map,
    derive_multipliers,
    multipliers_document,
)
from recipekit.checkpoint.published_config import PUBLISHED_TEXT, PUBLISHED_VISION
from recipekit.checkpoint.safetensors_io import TensorSpec, write_index
from recipekit.checkpoint.sparse import write_sparse_layout, write_sparse_shard
from recipekit.hybrid.exl3 import CODEBOOK_MULT, default_bits, exl3_specs, linear_dims

# The published config.json's sizing fields (deepseek-ai/DeepSeek-V4.1-Flash, config.json text_config
# and vision_config, from the one table in recipekit.checkpoint.published_config); the fields a
# tokenizer decides stay those of the tiny checkpoint.
SIZING_FIELDS = (
    "hidden_size",
    "moe_intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "head_dim",
    "qk_rope_head_dim",
    "q_lora_rank",
    "o_lora_rank",
    "o_groups",
    "n_routed_experts",
    "n_shared_experts",
    "num_experts_per_tok",
    "sliding_window",
    "compress_ratios",
    "kv_source_layer_ids",
    "index_source_layer_ids",
    "index_n_heads",
    "index_head_dim",
    "index_topk",
    "candidate_source_layer_id",
    "candidate_topk_blocks",
    "candidate_block_size",
    "hc_mult",
    "engram_layer_ids",
    "engram_num_embeddings",
    "engram_max_ngram_size",
    "engram_vocab_size",
    "engram_n_heads",
    "engram_head_dim",
    "num_nextn_predict_layers",
    "dspark_target_layer_ids",
    "dspark_markov_rank",
    "dspark_n_routed_experts",
    "dspark_num_experts_per_tok",
)
FULL_TEXT: dict[str, Any] = {k: PUBLISHED_TEXT[k] for k in SIZING_FIELDS}
FULL_VISION: dict[str, Any] = {k: v for k, v in PUBLISHED_VISION.items() if k != "model_type"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def full_config(like_config: dict[str, Any], text: dict[str, Any] | None = None) -> dict[str, Any]:
    """The tiny config with the published sizes (text and vision), then `text` (a reduced layout for tests)."""
    cfg = json.loads(json.dumps(like_config))
    cfg["text_config"].update(FULL_TEXT)
    cfg["text_config"].update(text or {})
    cfg["vision_config"].update(FULL_VISION)
    return cfg


def _write_json(path: Path, doc: Any) -> None:
    atomic_write_text(path, json.dumps(doc, indent=2) + "\n", sync_dir="ignore")


def make_sparse_original(like: Path, out: Path, text: dict[str, Any] | None = None) -> dict[str, int]:
    """The original layout at full size in `out` (created); `like`: a tiny checkpoint for the tokenizer;
    `text`: text_config fields over the published ones (fewer layers: a reduced layout, full-size tensors)."""

    config = full_config(dsv41.load_config(like), text)
    geom = dsv41.Geometry.from_config(config)
    specs = dict(dsv41.vision_tensors(config))
    specs.update(dsv41.original_tensors(geom))
    made = write_sparse_layout(out, specs, config)
    for name in TOKENIZER_FILES:
        shutil.copyfile(like / name, out / name)
    ecfg = EngramConfig.from_dict(config)
    _, compressed = compressed_token_map(out / "tokenizer.json")
    mults = derive_multipliers(ecfg.layer_ids, ecfg.max_ngram_size, compressed)
    _write_json(out / SIDECAR_NAME, multipliers_document(ecfg, compressed, mults))
    return {**made, "disk": disk_bytes(out)}


def make_sparse_exl3(official: Path, out: Path, codebook: str = "mcg", markers_first: bool = True) -> dict[str, Any]:
    """An EXL3 pack of the routed experts of `official` (one shard per layer), markers real, rest holes.
    `markers_first=False` keeps each module's tensors together (markers spread through the shard, most
    of them past 4 GiB; one disk block each)."""
    config = dsv41.load_config(official)
    g = dsv41.Geometry.from_config(config)
    marker = CODEBOOK_MULT[codebook].to_bytes(4, "little")
    layer_bits = {L: default_bits(L, g.n_layers) for L in range(g.n_layers)}
    out.mkdir(parents=True)
    weight_map: dict[str, str] = {}
    total = weights = total_bits = 0
    for L in range(g.n_layers):
        fname = f"model-{L + 1:05d}-of-{g.n_layers:05d}.safetensors"
        tspecs: list[TensorSpec] = []
        real: dict[str, bytes] = {}
        for e in range(g.n_routed):
            for w in ("w1", "w2", "w3"):
                module = f"layers.{L}.ffn.experts.{e}.{w}"
                in_f, out_f = linear_dims(module, g.hidden, g.inter)
                for name, (dt, shape) in exl3_specs(module, in_f, out_f, layer_bits[L], codebook).items():
                    tspecs.append(TensorSpec(name, dt, shape))
                    if dt == "I32":
                        real[name] = marker
                weights += in_f * out_f
                total_bits += in_f * out_f * layer_bits[L]
        # the markers first, as safetensors' own serializer orders data (wider dtypes first): their
        # bytes then share a few disk blocks instead of taking one block each
        if markers_first:
            tspecs.sort(key=lambda t: t.dtype != "I32")
        write_sparse_shard(out / fname, tspecs, real)
        for ts in tspecs:
            weight_map[ts.name] = fname
            total += ts.nbytes
    write_index(out, weight_map, total)
    avg_bits = round(total_bits / max(1, weights), 3)
    pack_config = dict(config)
    pack_config["quantization_config"] = {
        "quant_method": "exl3",
        "version": "sparse",
        "bits": avg_bits,
        "codebook": codebook,
        "scope": "deepseek_v41_routed_experts",
        "layer_bits": {str(L): b for L, b in layer_bits.items()},
        "calibration": {"rows": 0, "cols": 0, "note": "holes, layout only"},
    }
    _write_json(out / "config.json", pack_config)
    return {
        "tensors": len(weight_map),
        "shards": g.n_layers,
        "payload": total,
        "bits": avg_bits,
        "disk": disk_bytes(out),
    }


def disk_bytes(folder: Path) -> int:
    """Bytes the folder's regular files take on disk (allocated blocks, not their apparent sizes)."""
    n = 0
    for root, _dirs, files in os.walk(folder):
        for f in files:
            st = os.lstat(os.path.join(root, f))
            n += st.st_blocks * 512
    return n
