"""`recipe doctor --memtest`: is each card's memory what it reports? The worker (memtest_worker.py, under a
torch + CUDA python) fills the free memory with per-chunk patterns and reads it all back; this module judges its
output: a card FAILs when a read-back differs or when what it verified falls short of what it reported free
(a CMP 170HX "unlock" that reports 64 GB with 32 GB real: club-170hx #48), and WARNs when it stopped early.
Bounded in time (the worker's deadline + a margin), and the worker frees all it allocated."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from recipekit.tools.p2p.probe import run_json_worker

GIB = 1024**3
WORKER = Path(__file__).with_name("memtest_worker.py")
# what a healthy card leaves unverified: the reserve kept for the context and the copy test, plus one chunk
SHORTFALL_TOLERANCE = 0.03


@dataclass(frozen=True)
class CardVerdict:
    index: int
    name: str
    status: str  # ok | warn | fail
    reported_gib: float
    usable_gib: float
    copy_gbps: Optional[float]
    why: str


def judge(record: dict, chunk_bytes: int, reserve_bytes: int) -> CardVerdict:
    name, idx = str(record.get("name", "?")), int(record.get("index", -1))
    total, free = int(record["reported_total_bytes"]), int(record["reported_free_bytes"])
    verified, allocated = int(record["verified_bytes"]), int(record["allocated_bytes"])
    usable = verified + (total - free)  # what the context and others already hold is memory the card has
    status, why = _verdict(record, free, verified, allocated, chunk_bytes, reserve_bytes)
    return CardVerdict(idx, name, status, round(total / GIB, 2), round(usable / GIB, 2), record.get("copy_gbps"), why)


def _verdict(
    record: dict, free: int, verified: int, allocated: int, chunk_bytes: int, reserve_bytes: int
) -> tuple[str, str]:
    err = record.get("first_error")
    if err:
        return "fail", (
            f"read-back differs in chunk {err['chunk']} at {err['offset_bytes'] / GIB:.1f} GiB "
            f"({err['mismatched_words']:,} words): the card holds less than it reports"
        )
    expected = free - reserve_bytes - chunk_bytes
    if verified < expected * (1 - SHORTFALL_TOLERANCE):
        stopped = str(record.get("stopped", ""))
        why = f"verified {verified / GIB:.1f} GiB of {free / GIB:.1f} GiB reported free ({stopped})"
        return ("warn" if stopped == "time" else "fail"), why
    if allocated != verified:
        return "fail", "allocated memory was not all verified"
    return "ok", f"{verified / GIB:.1f} GiB written and read back"


def run(python: str, chunk_mib: int = 1024, reserve_mib: int = 512, timeout_s: float = 300) -> tuple[list[dict], str]:
    """The worker's records and its stderr tail; bounded by timeout_s plus a margin for start-up."""
    argv = [python, str(WORKER), "--chunk-mib", str(chunk_mib), "--reserve-mib", str(reserve_mib)]
    return run_json_worker(argv + ["--timeout-s", str(timeout_s)], timeout_s + 120)
