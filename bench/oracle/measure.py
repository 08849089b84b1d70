"""Benchmark the oracle: tokens/s and peak RSS vs checkpoint size, and the streaming reader's read
throughput vs a plain sequential read of the same shards, measured in the same run.

`python -m recipekit.bench.oracle.measure --checkpoint DIR [--tokens N] [--device cpu|cuda] [--json OUT]`
prints one figure per line. The forward runs in a child process so its peak RSS is its own; the
reader figures are taken warm (every shard read once first), so they compare CPU-side costs:
- sequential: read each shard file start to end in 16 MiB chunks (the baseline);
- reader raw: every tensor through SafetensorsFile.read_bytes (the reader's pread path);
- reader decode: every tensor through the reader's interface (dense/expert/engram rows: to fp32).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CHUNK = 16 * 1024 * 1024


def _sequential(files: list[Path]) -> int:
    n = 0
    for p in files:
        with open(p, "rb", buffering=0) as f:
            while True:
                b = f.read(CHUNK)
                if not b:
                    break
                n += len(b)
    return n


def reader_throughput(folder: str | Path) -> dict[str, Any]:
    import numpy as np  # lazy: pulls numpy

    from recipekit.bench.oracle.reader import open_reader  # lazy: pulls ml_dtypes, numpy

    folder = Path(folder)
    with open_reader(folder) as r:
        files = [folder / rel for rel in r.ckpt.index.shards()]
        _sequential(files)  # warm the page cache
        t = time.perf_counter()
        seq = _sequential(files)
        t_seq = time.perf_counter() - t
        names = list(r.ckpt.names())
        t = time.perf_counter()
        raw = 0
        for n in names:
            raw += len(r.ckpt.tensor_file(n).read_bytes(n))
        t_raw = time.perf_counter() - t
        t = time.perf_counter()
        decoded = 0
        g = r.geom
        for n in names:
            if (
                ".ffn.experts." in n
                or ".engram.embed" in n
                or n.endswith(".scale")
                or not n.startswith(("layers.", "embed", "head", "norm"))
            ):
                continue
            decoded += r.dense(n).numel() * 4
        prefixes = [f"layers.{L}." for L in range(g.n_layers)]
        for p in prefixes:
            for e in range(g.n_routed):
                decoded += sum(w.numel() * 4 for w in r.expert(p, e))
        for L, rows in zip(g.engram_layers, g.engram_rows):
            ids = np.arange(rows, dtype=np.int64)
            decoded += r.engram_rows(L, ids).numel() * 4
        t_dec = time.perf_counter() - t
        decoded_src = r.stats.bytes_read
    return {
        "shard_bytes": seq,
        "sequential_s": t_seq,
        "sequential_MBps": seq / t_seq / 1e6,
        "reader_raw_bytes": raw,
        "reader_raw_s": t_raw,
        "reader_raw_MBps": raw / t_raw / 1e6,
        "reader_raw_vs_sequential": (raw / t_raw) / (seq / t_seq),
        "reader_decode_src_bytes": decoded_src,
        "reader_decode_fp32_bytes": decoded,
        "reader_decode_s": t_dec,
        "reader_decode_src_MBps": decoded_src / t_dec / 1e6,
        "reader_decode_vs_sequential": (decoded_src / t_dec) / (seq / t_seq),
    }


def forward_child(folder: str, tokens: int, device: str, threads: int | None) -> dict[str, Any]:
    """Run the oracle in a fresh process: its own peak RSS."""
    code = (
        "import json,sys; from recipekit.bench.oracle.run import run_oracle, tokenize_text;"
        "from recipekit.bench.gates.perplexity import ppl_text;"
        f"ids=tokenize_text({folder!r}, ppl_text(), {tokens});"
        f"d=run_oracle({folder!r}, [ids], device={device!r}, threads={threads!r});"
        "d.pop('results'); print(json.dumps(d))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3000, check=False)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def checkpoint_bytes(folder: str | Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).glob("*.safetensors"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-reader", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    out: dict[str, Any] = {
        "checkpoint": a.checkpoint,
        "checkpoint_bytes": checkpoint_bytes(a.checkpoint),
        "cpus": os.cpu_count(),
    }
    fw = forward_child(a.checkpoint, a.tokens, a.device, a.threads)
    m = fw["measured"]
    out["forward"] = {
        "device": fw["device"],
        "threads": fw["threads"],
        "tokens": fw["prompt_set"]["tokens"],
        "seconds": m["seconds"],
        "tokens_per_s": m["tokens_per_s"],
        "peak_rss_bytes": m["peak_rss_bytes"],
        "baseline_rss_bytes": m["baseline_rss_bytes"],
        "forward_rss_bytes": m["peak_rss_bytes"] - m["baseline_rss_bytes"],
        "forward_rss_over_checkpoint": (m["peak_rss_bytes"] - m["baseline_rss_bytes"]) / out["checkpoint_bytes"],
        "bytes_read": m["bytes_read"],
        "ppl": fw["ppl"],
        "torch": fw["torch"],
    }
    if not a.no_reader:
        out["reader"] = reader_throughput(a.checkpoint)
    for k, v in out["forward"].items():
        print(f"forward.{k}: {v}")
    for k, v in (out.get("reader") or {}).items():
        print(f"reader.{k}: {v:.4g}" if isinstance(v, float) else f"reader.{k}: {v}")
    print(f"checkpoint_bytes: {out['checkpoint_bytes']}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
