"""The FP8 GEMM's per-shape table (data measured by recipekit.cli.kernels_fp8_sweep) and the honest timing's
weight rotation, without a GPU."""

from __future__ import annotations

import pytest

from recipekit.backends.cuda_sm80.kernels import tuning
from recipekit.bench.kernels import roofline, timing


def test_committed_table_has_provenance_and_parity_checked_entries():
    doc = tuning.table()
    prov = doc["provenance"]
    assert prov["gpu"] == "NVIDIA H200" and prov["triton"] and prov["torch"] and prov["date"] and prov["driver"]
    assert "CUDA graph" in doc["source"]
    shapes = {(e["n"], e["k"]) for e in doc["entries"]}
    # DSV4.1-Flash's dense FP8 shapes (sweep 14, session 37) and the research's four (sweeps 1-13)
    assert shapes == set(roofline.FP8_SHAPES) | set(roofline.RESEARCH_FP8_SHAPES)
    assert len(doc["entries"]) == 5 * len(shapes)  # M = 1, 2, 4, 8, 16 each
    assert {e["path"] for e in doc["entries"]} <= {"gemv", "mma", "gluon"}
    # the hand-placed MMA path (sweeps 19-21 at M <= 8, sweep 24 at M = 16: its second token group), in its own fields
    gluon = [e for e in doc["entries"] if e["path"] == "gluon"]
    assert {e["m"] for e in gluon} == {1, 2, 4, 8, 16} and all(len(e["config"]) <= 3 for e in gluon)


def test_lookup_takes_the_smallest_measured_m_at_or_above():
    card = tuning.table()["provenance"]["gpu"]
    by_m = {
        e["m"]: (e["path"], tuple(e["config"])) for e in tuning.table()["entries"] if (e["n"], e["k"]) == (8192, 5120)
    }
    assert tuning.lookup(card, 8192, 5120, 1) == by_m[1]
    assert tuning.lookup(card, 8192, 5120, 3) == by_m[4]  # M = 3 runs the M = 4 entry
    assert tuning.lookup(card, 8192, 5120, 17) is None
    assert tuning.lookup("NVIDIA CMP 170HX", 8192, 5120, 1) is None  # another card: not measured, rule of thumb
    assert tuning.lookup(card, 1024, 1024, 1) is None


def test_every_gemv_entry_fits_its_shape():
    pytest.importorskip("triton")
    from recipekit.backends.cuda_sm80.kernels.fp8_gemm import gemv_fits

    for e in tuning.table()["entries"]:
        if e["path"] == "gemv":
            assert gemv_fits(e["k"], tuple(e["config"])), e


def test_every_swapped_entry_and_fallback_fits_its_shape():
    """The swapped kernel takes K a multiple of BLOCK_K x SPLIT_K (fp8_gemm raises otherwise): the table's entries
    and the rule of thumb's choices all fit."""
    swapped = [e for e in tuning.table()["entries"] if e["path"] == "mma" and len(e["config"]) > 6 and e["config"][6]]
    assert swapped  # sweep 8's winners
    for e in swapped:
        bn, bk, _, _, split, decoder = e["config"][:6]
        assert e["k"] % (bk * split) == 0 and decoder in (0, 2, 3, 4), e
    for n, k, m in ((8192, 5120, 4), (5120, 16384, 8), (7168, 2048, 16), (1000, 4608, 3), (96, 1024, 4)):
        path, cfg = tuning.fallback(k, m, n)
        if path == "mma" and cfg:
            assert k % (cfg[1] * cfg[4]) == 0, (n, k, m, cfg)


def test_weight_copies_exceed_the_l2(monkeypatch):
    monkeypatch.setattr(timing, "l2_bytes", lambda device=0: 50 << 20)
    assert timing.copies_needed(42 << 20) == 5  # 5 x 42 MB >= 4 x 50 MB
    assert timing.copies_needed(16 << 20) == 13
    assert timing.copies_needed(512 << 20) == 1  # one call alone streams 10x the L2
    assert timing.copies_needed(1) == timing.MAX_COPIES
    for b in (1 << 20, 16 << 20, 42 << 20, 126 << 20):
        n = timing.copies_needed(b)
        assert n == timing.MAX_COPIES or n * b >= timing.L2_FACTOR * (50 << 20)


def test_rule_of_thumb_for_shapes_and_cards_not_measured():
    assert tuning.fallback(1024, 1) == ("gemv", tuning.FALLBACK_GEMV_M1)
    assert tuning.FALLBACK_GEMV_M1[9] == 3  # loads staged through shared memory (sweep 12)
    assert tuning.fallback(1024, 2) == ("gemv", tuning.FALLBACK_GEMV)
    swap = tuning.FALLBACK_SWAP
    assert tuning.fallback(1024, 4) == ("mma", swap)  # rows unknown: no split
    serial = (0, 0, 1)  # maxnreg 0, MMA_V2 0, SERIAL 1: from split 4 on (sweep 10)
    assert tuning.fallback(5120, 8, 8192) == ("mma", swap[:4] + (4,) + swap[5:] + serial)  # 128 blocks x 4 = 512
    assert tuning.fallback(5120, 8, 24576) == ("mma", swap[:4] + (2,) + swap[5:])  # split 2: no serial sum
    assert tuning.fallback(16384, 16, 5120) == ("mma", swap[:4] + (8,) + swap[5:] + serial)
    assert tuning.fallback(5120, 4, 1024) == ("mma", swap[:4] + (8,) + swap[5:] + serial)  # 5120 = 5 x 1024: split 8
    assert tuning.fallback(640, 4, 1024) == ("mma", swap)  # 640 is no multiple of 256: no split
    assert tuning.fallback(96, 1) == ("mma", ())  # K fits no GEMV tile and no swapped one: the first MMA kernel
    assert tuning.fallback(96, 8, 8192) == ("mma", ())
