"""Disk fitness for Engram on NVMe, measured in one run on the disk it will run from.

On one file (the DSV4.1-shaped table of `benchtable`, or an existing Engram/model folder), with the
page cache dropped for that file before each pass (`posix_fadvise(DONTNEED)`), uniform random rows
(the uncached worst case), each pass bounded in time:

- fio anchor (when `fio` is on PATH): 4 KiB random read, O_DIRECT, libaio, QD1 and QD32;
- the engine's access pattern (research/consumers.md §3): two buffered `pread`s per row (256 B in
  the weight region, 8 B in the scale region); decode = batches of 48 rows per token, which the
  engine runs inline (<= 64 rows); prefill = batches of 2048 tokens x 48 rows in 64-row jobs on 16
  threads;
- one aligned O_DIRECT read per row (the 4 KiB page, or the two pages a straddling row spans) at
  QD1 and QD32 (32 threads): the bench's own reader, compared with fio at the same depth.

Rows/s become Engram-bound ceilings (tokens/s = rows/s / 48) for decode and prefill, compared with
the recipe's published figures (2,416 tok/s cold prefill needs ~116k row reads/s uncached).
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Optional

from recipekit.hybrid.engram.benchtable import make_bench_model
from recipekit.hybrid.engram.reader import ENGINE_JOB_ROWS, ENGINE_THREADS
from recipekit.hybrid.engram.rules import EngramTable, open_tables

ROWS_PER_TOKEN = 48
PREFILL_TOKENS = 2048
PAGE = 4096


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)  # DONTNEED leaves dirty pages (a freshly written table) in the cache
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def fio_randread(path: Path, iodepth: int, seconds: float) -> Optional[dict]:
    """fio 4 KiB random read, O_DIRECT, libaio; None when fio is not installed."""
    fio = shutil.which("fio")
    if fio is None:
        return None
    argv = [
        fio,
        "--name=engram",
        f"--filename={path}",
        "--readonly",
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        f"--iodepth={iodepth}",
        f"--runtime={max(1, int(seconds))}",
        "--time_based",
        "--norandommap",
        "--output-format=json",
    ]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1:] or ["fio failed"]}
    job = json.loads(p.stdout[p.stdout.index("{") :])["jobs"][0]["read"]
    return {"iops": float(job["iops"]), "lat_us_mean": float(job["lat_ns"]["mean"]) / 1000.0}


def _random_rows(table: EngramTable, n: int, seed: int) -> Any:
    import numpy as np  # lazy: pulls numpy

    return np.random.default_rng(seed).integers(0, table.rows, n, dtype=np.int64)


def _timed_threads(threads: int, work: Callable[[int, float], int], seconds: float) -> float:
    """Run work(thread_index, deadline) on `threads` threads; returns items per second."""
    start = time.perf_counter()
    deadline = start + seconds
    counts = [0] * threads

    def run(i: int) -> None:
        counts[i] = work(i, deadline)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / (time.perf_counter() - start)


def engine_decode(table: EngramTable, seconds: float, seed: int) -> float:
    """Rows/s of 48-row batches read inline, two preads per row."""
    ids = _random_rows(table, 4_000_000, seed).tolist()
    fd = os.open(table.path, os.O_RDONLY)
    wb, sb, hd, sc = table.weight_base, table.scale_base, table.head_dim, table.scale_cols
    pread, now = os.pread, time.perf_counter
    try:

        def work(_i: int, deadline: float) -> int:
            n = 0
            while n + ROWS_PER_TOKEN <= len(ids) and now() < deadline:
                for r in ids[n : n + ROWS_PER_TOKEN]:
                    pread(fd, hd, wb + r * hd)
                    pread(fd, sc, sb + r * sc)
                n += ROWS_PER_TOKEN
            return n

        return _timed_threads(1, work, seconds)
    finally:
        os.close(fd)


def engine_prefill(
    table: EngramTable, seconds: float, seed: int, threads: int = ENGINE_THREADS, job_rows: int = ENGINE_JOB_ROWS
) -> float:
    """Rows/s of prefill batches (2048 tokens x 48 rows) split into 64-row jobs over 16 threads."""
    batch = PREFILL_TOKENS * ROWS_PER_TOKEN
    ids = _random_rows(table, 4_000_000, seed).tolist()
    fd = os.open(table.path, os.O_RDONLY)
    wb, sb, hd, sc = table.weight_base, table.scale_base, table.head_dim, table.scale_cols
    pread = os.pread

    def job(lo: int, hi: int) -> None:
        for r in ids[lo:hi]:
            pread(fd, hd, wb + r * hd)
            pread(fd, sc, sb + r * sc)

    done = 0
    start = time.perf_counter()
    try:
        with ThreadPoolExecutor(threads) as pool:
            while done + batch <= len(ids) and time.perf_counter() - start < seconds:
                list(pool.map(lambda lo: job(lo, lo + job_rows), range(done, done + batch, job_rows)))
                done += batch
        return done / (time.perf_counter() - start)
    finally:
        os.close(fd)


def aligned_reads(table: EngramTable, depth: int, seconds: float, seed: int) -> float:
    """Rows/s of one O_DIRECT aligned read per row (the page(s) holding its weight bytes), `depth` threads."""
    import numpy as np  # lazy: pulls numpy

    ids = _random_rows(table, 4_000_000, seed)
    offs = table.weight_base + ids * table.head_dim
    first = (offs // PAGE) * PAGE
    spans = ((offs + table.head_dim - 1) // PAGE * PAGE + PAGE - first).astype(np.int64)
    starts, lens = first.tolist(), spans.tolist()
    fd = os.open(table.path, os.O_RDONLY | os.O_DIRECT)
    per = len(starts) // depth
    try:

        def work(i: int, deadline: float) -> int:
            bufs = {PAGE: mmap.mmap(-1, PAGE), 2 * PAGE: mmap.mmap(-1, 2 * PAGE)}
            preadv, now = os.preadv, time.perf_counter
            lo, n = i * per, 0
            while n < per:
                for k in range(lo + n, lo + min(n + 16, per)):
                    preadv(fd, [bufs[lens[k]]], starts[k])
                n = min(n + 16, per)
                if now() >= deadline:
                    break
            return n

        return _timed_threads(depth, work, seconds)
    finally:
        os.close(fd)


def run_bench(
    folder: Path,
    model: Optional[Path] = None,
    size_gib: float = 4.0,
    seconds: float = 4.0,
    published_prefill_tps: Optional[float] = None,
    published_decode_tps: Optional[float] = None,
    progress: Callable[[str], None] | None = None,
    seed: int = 0,
    rounds_n: int = 2,
) -> dict:
    """Every pass on the same file in one run; returns the figures (rows/s, IOPS, ratios, ceilings)."""
    say = progress or (lambda m: None)
    if model is None:
        model = make_bench_model(folder, size_gib, seed=seed, progress=say)
    tables = open_tables(model)
    table = max(tables.values(), key=lambda t: t.rows)
    res: dict[str, Any] = {
        "file": str(table.path),
        "file_bytes": table.file_size,
        "table_rows": table.rows,
        "seconds_per_pass": seconds,
        "date": time.strftime("%Y-%m-%d"),
    }

    def pass_(name: str, fn: Callable[[], Any]) -> Any:
        drop_cache(table.path)
        say(f"{name} ...")
        return fn()

    # fio and the aligned reader alternate over `rounds` rounds (best of each kept, each round's ratio
    # reported): on a shared disk the load moves between passes
    fio1 = fio32 = None
    rounds: list[dict] = []
    for k in range(max(1, rounds_n)):
        f1 = pass_(f"fio QD1 (round {k + 1})", lambda: fio_randread(table.path, 1, seconds))
        # pass_ calls each lambda at once, within this iteration: binding k late is what is meant
        a1 = pass_(f"aligned QD1 (round {k + 1})", lambda: aligned_reads(table, 1, seconds, seed + 1 + 10 * k))  # noqa: B023
        f32 = pass_(f"fio QD32 (round {k + 1})", lambda: fio_randread(table.path, 32, seconds))
        a32 = pass_(f"aligned QD32 (round {k + 1})", lambda: aligned_reads(table, 32, seconds, seed + 2 + 10 * k))  # noqa: B023
        rounds.append(
            {
                "fio_qd1_iops": (f1 or {}).get("iops"),
                "aligned_qd1_rows_per_s": a1,
                "fio_qd32_iops": (f32 or {}).get("iops"),
                "aligned_qd32_rows_per_s": a32,
                "ratio_qd32": a32 / f32["iops"] if f32 and f32.get("iops") else None,
            }
        )
        if f1 is not None and (fio1 is None or f1.get("iops", 0) > fio1.get("iops", 0)):
            fio1 = f1
        if f32 is not None and (fio32 is None or f32.get("iops", 0) > fio32.get("iops", 0)):
            fio32 = f32
    res["rounds"] = rounds
    res["fio"] = None if fio1 is None else {"qd1": fio1, "qd32": fio32}
    res["aligned_qd1_rows_per_s"] = max(r["aligned_qd1_rows_per_s"] for r in rounds)
    res["aligned_qd32_rows_per_s"] = max(r["aligned_qd32_rows_per_s"] for r in rounds)
    res["engine_decode_rows_per_s"] = pass_("engine decode", lambda: engine_decode(table, seconds, seed + 3))
    res["engine_prefill_rows_per_s"] = pass_("engine prefill", lambda: engine_prefill(table, seconds, seed + 4))
    drop_cache(table.path)
    fio_ok = res["fio"] is not None and "iops" in (fio32 or {}) and "iops" in (fio1 or {})
    res["reader_vs_fio_qd32"] = res["aligned_qd32_rows_per_s"] / fio32["iops"] if fio_ok and fio32 is not None else None
    res["reader_vs_fio_qd1"] = res["aligned_qd1_rows_per_s"] / fio1["iops"] if fio_ok and fio1 is not None else None
    res["decode_tps_ceiling"] = res["engine_decode_rows_per_s"] / ROWS_PER_TOKEN
    res["prefill_tps_ceiling"] = res["engine_prefill_rows_per_s"] / ROWS_PER_TOKEN
    res["published"] = {
        "prefill_tps_cold": published_prefill_tps,
        "decode_tps": published_decode_tps,
        "prefill_rows_per_s_needed": published_prefill_tps * ROWS_PER_TOKEN if published_prefill_tps else None,
    }
    return res
