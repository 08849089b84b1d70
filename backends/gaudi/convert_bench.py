"""`recipe checkpoint bench`: Gaudi conversion throughput against a plain copy, and peak RSS.

Generates a DSV4.1-shaped checkpoint of at least the requested size, then in the same run and
on the same disk: (1) copies its shards with plain read+write (+fsync), (2) converts it in a
child process whose peak RSS is read with os.wait4, (3) copies again. The figure of record is
conversion bytes/s (source bytes / conversion seconds) over the faster of the two copies.
Goals: ratio >= 0.7; peak RSS <= 3 x the largest tensor + 512 MiB.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from recipekit import paths
from recipekit.backends.gaudi.validate import validate_gaudi
from recipekit.checkpoint.safetensors_io import SafetensorsFile
from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41
from recipekit.errors import ExitCode, RecipekitError

GOAL_RATIO = 0.7
RSS_SLACK = 512 * 1024 * 1024
COPY_CHUNK = 16 * 1024 * 1024


def copy_tree_bytes(src: Path, dst: Path) -> tuple[int, float]:
    """Plain read+write copy of every shard (fsync per file, like the converter); (bytes, seconds)."""
    dst.mkdir(parents=True, exist_ok=True)
    total = 0
    buf = bytearray(COPY_CHUNK)
    view = memoryview(buf)
    t0 = time.perf_counter()
    for p in sorted(src.glob("*.safetensors")):
        with open(p, "rb", buffering=0) as fi, open(dst / p.name, "wb", buffering=0) as fo:
            while True:
                n = fi.readinto(buf)
                if not n:
                    break
                fo.write(view[:n])
                total += n
            os.fsync(fo.fileno())
    return total, time.perf_counter() - t0


def _largest_tensor(folder: Path) -> int:
    best = 0
    for p in folder.glob("*.safetensors"):
        with SafetensorsFile(p) as f:
            best = max([best] + [t.nbytes for t in f.tensors.values()])
    return best


def _convert_child(src: Path, dst: Path) -> tuple[dict, int, float]:
    """Run the conversion in a child process; (its JSON report, peak RSS bytes, wall seconds)."""
    cmd = [
        sys.executable,
        "-m",
        "recipekit.cli.main",
        "checkpoint",
        "convert",
        "--src",
        str(src),
        "--dst",
        str(dst),
        "--part",
        "all",
        "--no-progress",
        "--format",
        "json",
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()  # reads the pipes; the child is reaped by wait4 below
    _, status, usage = os.wait4(proc.pid, 0) if proc.returncode is None else (0, 0, None)
    wall = time.perf_counter() - t0
    if usage is None:  # communicate() already reaped it: fall back to the children's maximum
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        code = proc.returncode
    else:
        code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RecipekitError(
            code="bench-convert-failed",
            message=f"conversion exited {code}: {err.decode()[-500:]}",
            exit_code=ExitCode.FAILURE,
        )
    return json.loads(out), usage.ru_maxrss * 1024, wall


def run_bench(
    size_gib: float = 2.0,
    workdir: str | None = None,
    keep: bool = False,
    validate: bool = False,
    log: Callable[[str], None] | None = None,
) -> dict:

    log = log or (lambda m: None)
    base = Path(workdir) if workdir else paths.cache_dir()
    work = base / f"checkpoint-bench-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    src, dst, cp1, cp2 = work / "src", work / "dst", work / "copy1", work / "copy2"
    try:
        log(f"generating a {size_gib:g} GiB DSV4.1-shaped checkpoint in {src} ...")
        t0 = time.perf_counter()
        # a little above the request, so that the source is at least size_gib
        gen = make_tiny_dsv41(src, seed=0, size=f"{size_gib * 1.03}GiB", force=True)
        gen_s = time.perf_counter() - t0
        src_bytes = sum(p.stat().st_size for p in src.glob("*.safetensors"))
        log(f"  {gen.tensors} tensors, {src_bytes:,} bytes in {gen_s:.1f} s; copying (baseline 1) ...")
        b1, c1 = copy_tree_bytes(src, cp1)
        shutil.rmtree(cp1)
        log(f"  copy 1: {b1 / c1 / 1e6:.0f} MB/s; converting in a child process ...")
        report, rss, wall = _convert_child(src, dst)
        conv_s = report["seconds"]
        log(
            f"  convert: {src_bytes / conv_s / 1e6:.0f} MB/s (source bytes), peak RSS {rss / 2**20:.0f} MiB; copying (baseline 2) ..."
        )
        b2, c2 = copy_tree_bytes(src, cp2)
        shutil.rmtree(cp2)
        copy_bps = max(b1 / c1, b2 / c2)
        conv_bps = src_bytes / conv_s
        largest = max(_largest_tensor(src), _largest_tensor(dst))
        dst_bytes = sum(p.stat().st_size for p in dst.glob("*.safetensors"))
        result = {
            "size_gib": size_gib,
            "src_bytes": src_bytes,
            "dst_bytes": dst_bytes,
            "tensors_src": gen.tensors,
            "tensors_dst": report["tensors"],
            "generate_seconds": round(gen_s, 3),
            "copy_seconds": [round(c1, 3), round(c2, 3)],
            "convert_seconds": round(conv_s, 3),
            "convert_wall_seconds_incl_startup": round(wall, 3),
            "copy_bytes_per_s": round(copy_bps),
            "convert_bytes_per_s": round(conv_bps),
            "ratio_vs_copy": round(conv_bps / copy_bps, 3),
            "peak_rss_bytes": rss,
            "largest_tensor_bytes": largest,
            "rss_goal_bytes": 3 * largest + RSS_SLACK,
            "goals": {
                "ratio_vs_copy": GOAL_RATIO,
                "met_ratio": conv_bps / copy_bps >= GOAL_RATIO,
                "met_rss": rss <= 3 * largest + RSS_SLACK,
            },
            "notes": "copy = best of two plain read+write copies (fsync per file) of the same shards on the same disk, "
            "before and after the conversion; convert bytes = source bytes",
        }
        if validate:
            log("  validating ...")
            t0 = time.perf_counter()
            v = validate_gaudi(src, dst)
            result["validate_ok"] = v.ok
            result["validate_seconds"] = round(time.perf_counter() - t0, 3)
        return result
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def render_human(r: dict) -> None:
    from rich.console import Console  # lazy: pulls rich
    from rich.table import Table  # lazy: pulls rich

    t = Table(title=f"checkpoint conversion bench ({r['src_bytes'] / 2**30:.2f} GiB source)")
    t.add_column("figure")
    t.add_column("value", justify="right")
    rows = [
        ("copy (read+write)", f"{r['copy_bytes_per_s'] / 1e6:,.0f} MB/s"),
        ("convert (source bytes)", f"{r['convert_bytes_per_s'] / 1e6:,.0f} MB/s"),
        ("ratio vs copy", f"{r['ratio_vs_copy']:.2f}x (goal >= {GOAL_RATIO})"),
        ("peak RSS (child)", f"{r['peak_rss_bytes'] / 2**20:,.0f} MiB"),
        ("largest tensor", f"{r['largest_tensor_bytes'] / 2**20:,.1f} MiB"),
        ("RSS goal 3x largest + 512 MiB", f"{r['rss_goal_bytes'] / 2**20:,.0f} MiB"),
        ("output", f"{r['dst_bytes']:,} bytes, {r['tensors_dst']} tensors"),
    ]
    if "validate_ok" in r:
        rows.append(("validator", "VALIDATE_OK" if r["validate_ok"] else "FAILED"))
    for a, b in rows:
        t.add_row(a, b)
    Console().print(t)
