"""Hot-row warming: pre-load the page-cache pages of the Engram rows a calibration corpus touches most,
within a RAM budget, before serving; and measure what it buys on held-out text.

Engram access is Zipf-like (research/engram-store.md): a small set of n-gram rows takes most lookups.
The engine reads through the page cache with two `pread`s per row (weight page(s) + scale page), so
warming = reading those pages once. `plan_warm` ranks rows by how often the corpus touches them and
takes their pages (deduplicated; a scale page serves 512 rows) in rank order until the budget is
used. `measure` replays held-out text the engine's way and counts, per row, whether its pages were
resident (`preadv(..., RWF_NOWAIT)` fails with EAGAIN or reads short when a page is not cached), so
the page-cache hit rate and disk reads per token count the row's own pages. Readahead is off on the
warming and measuring descriptors (`POSIX_FADV_RANDOM`): warming then fills exactly its budget, and
a hit is never a neighbour that readahead happened to pull in (the engine's default readahead adds
such neighbours; on 189 GiB of tables they are rarely the rows asked next).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from recipekit.errors import RecipekitError
from recipekit.hybrid.engram.rules import EngramTable

PAGE = 4096
RUN_BYTES = 1 << 20


def tokenize(tokenizer_json: Path, text: str) -> list[list[int]]:
    from tokenizers import Tokenizer  # lazy: pulls tokenizers

    tok = Tokenizer.from_file(str(tokenizer_json))
    # one sequence per paragraph: each starts fresh (pad look-back), like separate prompts
    return [list(tok.encode(p, add_special_tokens=False).ids) for p in text.split("\n\n") if p.strip()]


def touched_rows(addr: Any, sequences: list[list[int]]) -> dict[int, Any]:
    """{layer: int64 array of every row read, in order} for token sequences."""
    import numpy as np  # lazy: pulls numpy

    out: dict[int, list[Any]] = {L: [] for L in addr.config.layer_ids}
    for seq in sequences:
        if not seq:
            continue
        for L in addr.config.layer_ids:
            out[L].append(addr.row_ids(L, seq).reshape(-1))
    return {L: (np.concatenate(v) if v else np.zeros(0, np.int64)) for L, v in out.items()}


def row_pages(t: EngramTable, row: int) -> list[int]:
    """Page offsets a row's two reads touch (weight page(s), then the scale page)."""
    w0 = t.weight_offset(row)
    pages = list(range(w0 // PAGE * PAGE, (w0 + t.head_dim - 1) // PAGE * PAGE + 1, PAGE))
    s0 = t.scale_offset(row)
    pages += [p for p in range(s0 // PAGE * PAGE, (s0 + t.scale_cols - 1) // PAGE * PAGE + 1, PAGE) if p not in pages]
    return pages


@dataclass
class WarmPlan:
    pages: dict[int, list[int]]  # layer -> sorted page offsets
    rows: int  # hot rows covered
    distinct_rows: int  # distinct rows the corpus touched
    bytes: int

    def to_dict(self) -> dict:
        return {
            "hot_rows": self.rows,
            "distinct_rows": self.distinct_rows,
            "bytes": self.bytes,
            "pages": sum(len(v) for v in self.pages.values()),
        }


def plan_warm(tables: dict[int, EngramTable], rows: dict[int, Any], budget_bytes: int) -> WarmPlan:
    counts: Counter = Counter()
    for L, ids in rows.items():
        counts.update((L, int(r)) for r in ids.tolist())
    chosen: dict[int, set[int]] = {L: set() for L in tables}
    used, covered = 0, 0
    for (L, r), _n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        new = [p for p in row_pages(tables[L], r) if p not in chosen[L]]
        if used + len(new) * PAGE > budget_bytes:
            break
        chosen[L].update(new)
        used += len(new) * PAGE
        covered += 1
    return WarmPlan({L: sorted(v) for L, v in chosen.items()}, covered, len(counts), used)


def apply_warm(tables: dict[int, EngramTable], plan: WarmPlan) -> int:
    """Read the planned pages (contiguous pages in one read of up to 1 MiB); returns bytes read."""
    done = 0
    for L, pages in plan.pages.items():
        fd = os.open(tables[L].path, os.O_RDONLY)
        try:
            # no readahead on this descriptor: only the planned pages enter the page cache (the budget holds)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            i = 0
            while i < len(pages):
                j = i
                while j + 1 < len(pages) and pages[j + 1] == pages[j] + PAGE and (j + 1 - i) * PAGE < RUN_BYTES:
                    j += 1
                done += len(os.pread(fd, (j - i + 1) * PAGE, pages[i]))
                i = j + 1
        finally:
            os.close(fd)
    return done


def _resident(fd: int, buf: bytearray, page: int) -> bool:
    try:
        return os.preadv(fd, [buf], page, os.RWF_NOWAIT) == PAGE
    except BlockingIOError:
        return False


def measure(tables: dict[int, EngramTable], sequences_rows: dict[int, Any], tokens: int) -> dict:
    """Replay rows the engine's way; hit = every page of the row was already in the page cache."""
    hits = reads = disk_pages = 0
    buf = bytearray(PAGE)
    fds = {L: os.open(t.path, os.O_RDONLY) for L, t in tables.items()}
    for fd in fds.values():
        # readahead off: a hit is a row whose own pages were cached, not neighbours readahead pulled in
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    try:
        for L, ids in sequences_rows.items():
            t, fd = tables[L], fds[L]
            hd, sc = t.head_dim, t.scale_cols
            for r in ids.tolist():
                pages = row_pages(t, r)
                miss = sum(0 if _resident(fd, buf, p) else 1 for p in pages)
                os.pread(fd, hd, t.weight_offset(r))  # the engine's two reads (they cache the pages)
                os.pread(fd, sc, t.scale_offset(r))
                reads += 1
                hits += miss == 0
                disk_pages += miss
    finally:
        for fd in fds.values():
            os.close(fd)
    return {
        "row_reads": reads,
        "hit_rate": hits / reads if reads else 0.0,
        "disk_reads": disk_pages,
        "disk_reads_per_token": disk_pages / tokens if tokens else 0.0,
        "tokens": tokens,
    }


def resident_bytes(tables: dict[int, EngramTable], samples: int = 20000, seed: int = 0) -> int:
    """Estimated page-cache bytes of the tables (RWF_NOWAIT probes of random pages; the probe reads nothing)."""
    import numpy as np  # lazy: pulls numpy

    rng = np.random.default_rng(seed)
    total = 0
    buf = bytearray(PAGE)
    for t in tables.values():
        fd = os.open(t.path, os.O_RDONLY)
        try:
            pages = rng.integers(0, t.file_size // PAGE, samples)
            hit = sum(_resident(fd, buf, int(p) * PAGE) for p in pages)
        finally:
            os.close(fd)
        total += int(hit / samples * t.file_size)
    return total


def drop_cache(tables: dict[int, EngramTable]) -> None:
    for t in tables.values():
        fd = os.open(t.path, os.O_RDONLY)
        try:
            os.fdatasync(fd)  # DONTNEED leaves dirty pages (a freshly written table) in the cache
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def default_budget(mem_total: Optional[int], recipe_needs: Optional[int]) -> tuple[int, str]:
    """Host RAM minus what the recipe needs (hardware.host_ram_gib_min), as bytes, and how it was derived."""
    if not mem_total:
        return 0, "MemTotal unreadable"
    need = recipe_needs or 0
    return max(0, mem_total - need), f"MemTotal {mem_total / 2**30:.1f} GiB - recipe needs {need / 2**30:.1f} GiB"


def resident_pages_supported(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.preadv(fd, [bytearray(PAGE)], 0, os.RWF_NOWAIT)
        return True
    except BlockingIOError:
        return True
    except (OSError, AttributeError):
        return False
    finally:
        os.close(fd)


def warm(
    tables: dict[int, EngramTable],
    addr: Any,
    tokenizer_json: Path,
    corpus: str,
    budget_bytes: int,
    held_out: Optional[str] = None,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Plan + warm; with `held_out`, measure without warming (cold) and with it, in this one run."""

    say = progress or (lambda m: None)
    t0 = time.perf_counter()
    cal_seqs = tokenize(tokenizer_json, corpus)
    cal_rows = touched_rows(addr, cal_seqs)
    plan = plan_warm(tables, cal_rows, budget_bytes)
    say(
        f"calibration: {sum(len(s) for s in cal_seqs):,} tokens, {plan.distinct_rows:,} distinct rows; "
        f"{plan.rows:,} hottest fit {budget_bytes / 2**20:,.0f} MiB"
    )
    res: dict[str, Any] = {
        "budget_bytes": budget_bytes,
        "calibration_tokens": sum(len(s) for s in cal_seqs),
        "plan": plan.to_dict(),
        "plan_seconds": time.perf_counter() - t0,
    }
    if held_out is None:
        t1 = time.perf_counter()
        res["warmed_bytes"] = apply_warm(tables, plan)
        res["warm_seconds"] = time.perf_counter() - t1
        return res
    if not resident_pages_supported(next(iter(tables.values())).path):
        raise RecipekitError(
            code="engram-residency-unsupported",
            message="preadv(RWF_NOWAIT) is not available here",
            hint="the hit-rate measurement needs Linux >= 4.14 and Python >= 3.7",
        )
    held_seqs = tokenize(tokenizer_json, held_out)
    held_rows = touched_rows(addr, held_seqs)
    tokens = sum(len(s) for s in held_seqs)
    drop_cache(tables)
    say("held-out text, page cache dropped, no warming ...")
    res["without_warming"] = measure(tables, held_rows, tokens)
    drop_cache(tables)
    t1 = time.perf_counter()
    res["warmed_bytes"] = apply_warm(tables, plan)
    res["warm_seconds"] = time.perf_counter() - t1
    res["resident_bytes_after_warm"] = resident_bytes(tables)
    say("held-out text after warming ...")
    res["with_warming"] = measure(tables, held_rows, tokens)
    drop_cache(tables)
    return res
