"""Benchmark the oracle: tokens/s and peak RSS vs checkpoint size, and the streaming reader's read
throughput vs a plain sequential read of the same shards, measured in the same run.

`python -m recipekit.bench.oracle.measure --checkpoint DIR [--tokens N] [--device cpu|cuda] [--json OUT]`
prints one figure per line. The forward runs in a child process so its peak RSS is its own; the
reader figures are taken warm (every shard read once first), so they compare CPU-side costs:
- sequential: read each shard file start to end in 16 MiB chunks (the baseline);
- reader raw: every tensor through SafetensorsFile.read_bytes (the reader's pread path);
- reader decode: every tensor through the reader's interface (dense/expert/engram rows: to fp32).
`--stream` adds the streaming path on `--device` (stream.py: large preads into pinned buffers,
asynchronous copies, decode on the device) beside the plain sequential read of the same shards,
alternating in the same run, both cold (each shard's pages dropped with
posix_fadvise(POSIX_FADV_DONTNEED) first, after an fsync: no root needed) and both warm.
`--no-forward` skips the forward. The streamed tensors are decoded by the torch ops here; `recipe oracle
measure` (the application) runs the same figures with the decoders it picks for the device (the sm_80
Triton kernels on CUDA), and each figure names the decoders that ran.
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


def drop_cache(files: list[Path]) -> None:
    """Drop the shards' clean pages from the page cache (dirty ones are written out first)."""
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _stream_once(folder: Path, device: str, decoders: Any = None) -> dict[str, Any]:
    import torch  # lazy: pulls torch

    from recipekit.bench.oracle import stream  # lazy: pulls torch
    from recipekit.checkpoint.safetensors_io import Checkpoint  # lazy: only here

    dec = decoders if decoders is not None else stream.TORCH
    st = stream.PipelineStats()
    fp32 = 0
    t = time.perf_counter()
    with Checkpoint(folder) as ck:
        names = list(ck.names())
        for _name, x in stream.stream_decoded(ck, names, device, stats=st, decoders=dec):
            fp32 += x.numel() * x.element_size()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        s = time.perf_counter() - t
        tensor_bytes = sum(ck.info(n).nbytes for n in names)
    if st.bytes_read < tensor_bytes:  # the figure is over bytes that were really read, every tensor's
        raise RuntimeError(f"the stream read {st.bytes_read} bytes, the tensors hold {tensor_bytes}")
    return {"s": s, "src_bytes": st.bytes_read, "decoded_bytes": fp32, "preads": st.preads, "regions": st.regions,
            "host_buffer_bytes": st.host_bytes}  # fmt: skip


def stream_vs_sequential(folder: str | Path, device: str, repeats: int = 2, decoders: Any = None) -> dict[str, Any]:
    """The streaming path (every tensor to fp32 on `device`, decoded by `decoders`, default the torch
    ops) against the plain sequential read of the same shards, alternating, cold and warm; each figure
    is the best of `repeats`."""
    from recipekit.bench.oracle.decoders import TORCH  # lazy: pulls numpy
    from recipekit.checkpoint.safetensors_io import Checkpoint  # lazy: only here

    decoders = decoders if decoders is not None else TORCH

    folder = Path(folder)
    with Checkpoint(folder) as ck:
        files = [folder / rel for rel in ck.index.shards()]
    shard_bytes = sum(p.stat().st_size for p in files)
    out: dict[str, Any] = {"device": device, "decoders": decoders.name, "shard_bytes": shard_bytes, "repeats": repeats}
    _stream_once(folder, device, decoders)  # compile/warm the decoders and the CUDA context, not timed
    for mode in ("cold", "warm"):
        seq_s: list[float] = []
        runs: list[dict[str, Any]] = []
        if mode == "warm":
            _sequential(files)
        for _ in range(repeats):
            if mode == "cold":
                drop_cache(files)
            t = time.perf_counter()
            n = _sequential(files)
            seq_s.append(time.perf_counter() - t)
            if n != shard_bytes:
                raise RuntimeError(f"sequential read {n} bytes of {shard_bytes}")
            if mode == "cold":
                drop_cache(files)
            runs.append(_stream_once(folder, device, decoders))
        best = min(runs, key=lambda r: r["s"])
        seq = shard_bytes / min(seq_s) / 1e6
        strm = best["src_bytes"] / best["s"] / 1e6
        out[mode] = {
            "sequential_s": seq_s,
            "sequential_MBps": seq,
            "stream_s": [r["s"] for r in runs],
            "stream_src_MBps": strm,
            "stream_vs_sequential": strm / seq,
            **{k: v for k, v in best.items() if k != "s"},
        }
    return out


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


def checked_from_spec(spec: str, device: str) -> Any:
    """The decoders `spec` names, bit-checked again in this process on `device` (the forward child's own
    objects: a check in the parent proved the parent's): ValueError on any bit that differs from the codecs."""
    from recipekit.bench.oracle.decoders import from_spec, problems  # lazy: pulls torch

    dec = from_spec(spec)
    found = problems(dec, device)
    if found:
        raise ValueError(f"the {dec.name} decoders differ from the codecs on {device}: " + "; ".join(found))
    return dec


def forward_child(
    folder: str, tokens: int, device: str, threads: int | None, decoders_spec: str | None = None
) -> dict[str, Any]:
    """Run the oracle in a fresh process: its own peak RSS. `decoders_spec`: the "module:callable" of the
    decoders the child hands the oracle (decoders.from_spec), None for the torch ops."""
    code = (
        "import json,sys; from recipekit.bench.oracle.run import run_oracle, tokenize_text;"
        "from recipekit.bench.oracle.measure import checked_from_spec;"
        "from recipekit.bench.gates.perplexity import ppl_text;"
        f"ids=tokenize_text({folder!r}, ppl_text(), {tokens});"
        f"dec=checked_from_spec({decoders_spec!r}, {device!r}) if {decoders_spec!r} else None;"
        f"d=run_oracle({folder!r}, [ids], device={device!r}, threads={threads!r}, decoders=dec);"
        "d.pop('results'); print(json.dumps(d))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3000, check=False)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def checkpoint_bytes(folder: str | Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).glob("*.safetensors"))


def measure(
    checkpoint: str,
    tokens: int = 256,
    device: str = "cpu",
    threads: int | None = None,
    reader: bool = True,
    forward: bool = True,
    stream: bool = False,
    decoders: Any = None,
) -> dict[str, Any]:
    """The figures `main` prints: the forward in a child, the reader's throughput, and (`stream`) the
    streaming path vs sequential, the streamed tensors decoded by `decoders` (default the torch ops)."""
    out: dict[str, Any] = {
        "checkpoint": checkpoint,
        "checkpoint_bytes": checkpoint_bytes(checkpoint),
        "cpus": os.cpu_count(),
    }
    if forward:
        out["forward"] = _forward_figures(checkpoint, tokens, device, threads, out["checkpoint_bytes"], decoders)
    if reader:
        out["reader"] = reader_throughput(checkpoint)
    if stream:
        out["stream"] = stream_vs_sequential(checkpoint, device, decoders=decoders)
    return out


def figure_lines(out: dict[str, Any]) -> list[str]:
    """One line per figure, as `main` prints them."""
    lines = [f"forward.{k}: {v}" for k, v in (out.get("forward") or {}).items()]
    for k, v in (out.get("reader") or {}).items():
        lines.append(f"reader.{k}: {v:.4g}" if isinstance(v, float) else f"reader.{k}: {v}")
    lines += [f"stream.{k}: {v}" for k, v in (out.get("stream") or {}).items()]
    return lines + [f"checkpoint_bytes: {out['checkpoint_bytes']}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-reader", action="store_true")
    ap.add_argument("--no-forward", action="store_true")
    ap.add_argument("--stream", action="store_true", help="the streaming path on --device vs sequential read")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    out = measure(a.checkpoint, a.tokens, a.device, a.threads, not a.no_reader, not a.no_forward, a.stream)
    print("\n".join(figure_lines(out)))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def _forward_figures(
    checkpoint: str, tokens: int, device: str, threads: int | None, ckpt_bytes: int, decoders: Any
) -> dict[str, Any]:
    fw = forward_child(checkpoint, tokens, device, threads, decoders.spec if decoders is not None else None)
    m = fw["measured"]
    return {
        "device": fw["device"],
        "decoders": fw["decoders"],
        "threads": fw["threads"],
        "tokens": fw["prompt_set"]["tokens"],
        "seconds": m["seconds"],
        "tokens_per_s": m["tokens_per_s"],
        "peak_rss_bytes": m["peak_rss_bytes"],
        "baseline_rss_bytes": m["baseline_rss_bytes"],
        "forward_rss_bytes": m["peak_rss_bytes"] - m["baseline_rss_bytes"],
        "forward_rss_over_checkpoint": (m["peak_rss_bytes"] - m["baseline_rss_bytes"]) / ckpt_bytes,
        "bytes_read": m["bytes_read"],
        "ppl": fw["ppl"],
        "torch": fw["torch"],
    }


if __name__ == "__main__":
    sys.exit(main())
