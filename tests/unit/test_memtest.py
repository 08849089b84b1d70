"""`recipe doctor --memtest` verdicts on recorded worker outputs: a card that reports 64 GiB and corrupts its
second half (the CMP 170HX "unlock" of club-170hx #48, shaped as the worker prints it) FAILs; a card whose
allocations stop far short of what it reported free FAILs; a run cut by its deadline WARNs; a healthy card
passes. The worker itself runs on the GPU host (tests/fixtures/memtest/h200-*.jsonl is its recorded output)."""

from __future__ import annotations

import json
from pathlib import Path

from recipekit.tools.fit.memtest import GIB, judge

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "memtest"
CHUNK, RESERVE = 1 << 30, 512 << 20


def _rec(**kw) -> dict:
    base = {
        "index": 0,
        "name": "card",
        "reported_total_bytes": 80 * GIB,
        "reported_free_bytes": 79 * GIB,
        "allocated_bytes": 78 * GIB,
        "verified_bytes": 78 * GIB,
        "first_error": None,
        "stopped": "done",
        "copy_gbps": 2000.0,
    }
    return {**base, **kw}


def test_fake_64g_card_fails_on_read_back() -> None:
    rec = json.loads((FIX / "cmp170hx-fake-64g.jsonl").read_text().splitlines()[0])
    v = judge(rec, CHUNK, RESERVE)
    assert v.status == "fail" and v.reported_gib == 64.0
    assert "chunk 31" in v.why and v.usable_gib < 32


def test_healthy_card_passes_and_shortfalls_fail_or_warn() -> None:
    assert judge(_rec(), CHUNK, RESERVE).status == "ok"
    short = judge(
        _rec(allocated_bytes=30 * GIB, verified_bytes=30 * GIB, stopped="allocation refused: OOM"), CHUNK, RESERVE
    )
    assert short.status == "fail" and "30.0 GiB of 79.0" in short.why
    assert (
        judge(_rec(allocated_bytes=30 * GIB, verified_bytes=30 * GIB, stopped="time"), CHUNK, RESERVE).status == "warn"
    )
    assert judge(_rec(verified_bytes=77 * GIB), CHUNK, RESERVE).status == "fail"  # allocated but not all verified


def test_recorded_h200_run_and_its_planted_fault() -> None:
    rec = json.loads((FIX / "h200-2026-12-01.jsonl").read_text().splitlines()[0])
    v = judge(rec, CHUNK, RESERVE)
    assert v.status == "ok" and v.name == "NVIDIA H200"
    assert v.reported_gib == 139.8 and 138 <= v.usable_gib <= 139.8
    assert v.copy_gbps and v.copy_gbps > 3000
    planted = json.loads((FIX / "h200-2026-12-01-planted.jsonl").read_text().splitlines()[0])
    p = judge(planted, CHUNK, RESERVE)
    assert p.status == "fail" and "chunk 69" in p.why and "1,024 words" in p.why
