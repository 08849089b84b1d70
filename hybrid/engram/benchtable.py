"""A DSV4.1-shaped Engram model folder for benchmarks: the real row layout on disk, at a chosen size.

Two Engram layers (1 and 14) in two shards like the official 47/48, each shard holding
`layers.{L}.engram.embed.weight` F8_E4M3 [rows, 256] and `.scale` F8_E8M0 [rows, 8] (separate
regions), with a config whose 24 prime buckets per layer sum to the table sizes (engram_vocab_size
scaled down so that the two tables together reach the asked size), a byte-level BPE tokenizer
trained on the calibration half of the built-in corpus, and an index. The engine's rules pass on
it (`rules.locate_tables`), so the bench and the warmer read it exactly as they read the real
folder. Generated once and reused while its stamp matches.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from pydoc_data.topics import topics
from typing import Callable

from recipekit import bounded
from recipekit.bpe import train_byte_level_bpe
from recipekit.checkpoint.engram_addressing import (
    EngramConfig,
    EngramLayout,
    compressed_token_map,
    derive_multipliers,
    multipliers_document,
)
from recipekit.checkpoint.safetensors_io import INDEX_NAME, ShardWriter, TensorSpec, write_index
from recipekit.errors import RecipekitError

LAYERS = (1, 14)
HEAD_DIM = 256
N_HEADS = 8
MAX_NGRAM = 4
ROW_BYTES = HEAD_DIM + HEAD_DIM // 32
STAMP = "recipekit-engram-bench-table/1"
TOKENIZER_VOCAB = 8192


def builtin_corpus() -> tuple[str, str]:
    """(calibration, held-out) English text: CPython's pydoc topic pages, split by topic."""

    keys = sorted(topics)
    cal = "\n\n".join(topics[k] for i, k in enumerate(keys) if i % 5 != 4)
    held = "\n\n".join(topics[k] for i, k in enumerate(keys) if i % 5 == 4)
    return cal, held


def _train_tokenizer(text: str, path: Path) -> None:
    tok = train_byte_level_bpe(text.split("\n\n"), TOKENIZER_VOCAB, ["<bos>", "<eos>", "<pad>"])
    tok.save(str(path))


def make_bench_model(
    folder: str | os.PathLike, size_gib: float, seed: int = 0, progress: Callable[[str], None] | None = None
) -> Path:
    """Write (or reuse) the folder; returns it."""
    import numpy as np  # lazy: pulls numpy

    say = progress or (lambda m: None)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    vocab = max(64, math.ceil(size_gib * 2**30 / ROW_BYTES / (len(LAYERS) * N_HEADS * (MAX_NGRAM - 1))))
    stamp = {"format": STAMP, "engram_vocab_size": vocab, "seed": seed}
    stamp_path = out / "bench-table.json"
    if stamp_path.is_file() and _read_stamp(stamp_path) == stamp:
        say(f"reusing the table in {out}")
        return out
    cfg = EngramConfig(LAYERS, (0,) * len(LAYERS), MAX_NGRAM, vocab, N_HEADS, HEAD_DIM, 2)
    rows = [sum(p) for p in EngramLayout.build(cfg, check=False).primes]
    cal, _ = builtin_corpus()
    _train_tokenizer(cal, out / "tokenizer.json")
    _, compressed = compressed_token_map(out / "tokenizer.json")
    conf = {
        "architectures": ["DeepseekV41ForCausalLM"],
        "text_config": {
            "engram_layer_ids": list(LAYERS),
            "engram_num_embeddings": rows,
            "engram_max_ngram_size": MAX_NGRAM,
            "engram_vocab_size": vocab,
            "engram_n_heads": N_HEADS,
            "engram_head_dim": HEAD_DIM,
            "engram_pad_token_id": 2,
            "engram_compressed_vocab_size": compressed,
            "num_hidden_layers": 43,
        },
    }
    (out / "config.json").write_text(json.dumps(conf, indent=2))
    mcfg = EngramConfig.from_dict(conf)
    (out / "engram_multipliers.json").write_text(
        json.dumps(multipliers_document(mcfg, compressed, derive_multipliers(LAYERS, MAX_NGRAM, compressed)))
    )
    rng = np.random.default_rng(seed)
    wm: dict[str, str] = {}
    total = 0
    chunk = 1 << 16
    for i, (L, n) in enumerate(zip(LAYERS, rows)):
        shard = f"model-{i + 1:05d}-of-{len(LAYERS):05d}.safetensors"
        w, s = f"layers.{L}.engram.embed.weight", f"layers.{L}.engram.embed.scale"
        specs = [TensorSpec(w, "F8_E4M3", (n, HEAD_DIM)), TensorSpec(s, "F8_E8M0", (n, HEAD_DIM // 32))]
        say(f"writing {shard}: {n:,} rows ({n * ROW_BYTES / 2**30:.2f} GiB)")
        with ShardWriter(out / shard, specs, hash=False, fsync=False) as sw:
            for r0 in range(0, n, chunk):
                k = min(chunk, n - r0)
                sw.write(rng.integers(0, 126, (k, HEAD_DIM), dtype=np.uint8))  # finite e4m3 codes
            for r0 in range(0, n, chunk * 32):
                k = min(chunk * 32, n - r0)
                sw.write(rng.integers(120, 135, (k, HEAD_DIM // 32), dtype=np.uint8))
        wm[w] = wm[s] = shard
        total += n * ROW_BYTES
    write_index(out, wm, total)
    stamp_path.write_text(json.dumps(stamp))
    assert (out / INDEX_NAME).is_file()
    return out


def _read_stamp(path: Path) -> object:
    """The table's stamp (bounded read); None when it is not one we wrote: the table is made again."""

    try:
        return bounded.read_json(path, "bench table stamp", 1 << 20, code="engram-stamp-invalid")
    except (OSError, RecipekitError):
        return None
