"""The FP8 GEMM's per-shape choice as data: path (gemv = no tensor cores, mma = tl.dot) and tile
configuration per (card, N, K, M), measured by a sweep on the card (`python -m
recipekit.cli.kernels_fp8_sweep OUT`) and stored in data/fp8_tuning.json with its provenance.
A shape or card the table does not hold gets the rule of thumb below. Weights pack()ed for the hand-placed MMA kernel
(fp8_gemv_mma.pack) have a table of their own, data/fp8_tuning_packed.json (`kernels_device_run packed`)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

# rule of thumb for shapes or cards not measured: at M = 1 and 2 the register-tile GEMV with the fp32-bits
# decoder where K allows (M = 1 won on every H200 shape, M = 2 on three of four: fp8-sweep-5 and -6), else the
# swapped MMA kernel with the codes a step ahead (DECODER 4: sweep 8, results/h200-2026-12-02-fp8-sweep-8.json, won
# M = 2..16 on all four shapes with 64 x 128 tiles on 2 warps, or 32-row ones) split over K until the grid holds
# FALLBACK_PROGRAMS programs (sweep 8's winners: 8192 rows split 4, 24576 split 1-2, 5120 split 4-8) where K allows,
# else the first MMA kernel (any K a multiple of 32)
# M = 1: that tile with its loads staged 3 deep through shared memory (STAGES, index 9): sweep 12 (results/
# h200-2026-12-03-fp8-sweep-12.json) against sweep 6's unstaged tile, 1.4-7.7 us faster on all four H200 shapes
FALLBACK_GEMV_M1 = (16, 512, 4, 1, 3, 0, 3, 0, 0, 3)
FALLBACK_GEMV = (16, 256, 4, 1, 3, 0, 3)
FALLBACK_GEMV_MAX_M = 2
FALLBACK_SWAP = (64, 128, 2, 3, 1, 4, 1)  # (BLOCK_N, BLOCK_K, num_warps, num_stages, SPLIT_K, DECODER, SWAP)
FALLBACK_PROGRAMS = 512
# serial split-K (maxnreg 0, MMA_V2 0, SERIAL 1) from a split of FALLBACK_SERIAL_SPLIT: sweep 10 (results/
# h200-2026-12-02-fp8-sweep-10.json), each split table entry against itself with SERIAL in one run: split 4 and 8
# 0.3-0.9 us faster on all four shapes (one tie), split 2 (24576 x 5120) 0.7-1.2 us slower
FALLBACK_SERIAL_SPLIT = 4


# packed weights on a card or shape the packed table does not hold: the first that K takes (packed-1: (4, 8, 1) won
# wo_a and wo_b at M = 1..8, (4, 4, 1) w2 and the indexer's wq_b; results/h200-2026-12-04-packed-1.json)
FALLBACK_PACKED = ((4, 8, 1), (4, 4, 1), (2, 4, 1), (1, 4, 1), (1, 1, 1))


@lru_cache(maxsize=2)
def table(packed: bool = False) -> dict[str, Any]:
    name = "data/fp8_tuning_packed.json" if packed else "data/fp8_tuning.json"
    doc: dict[str, Any] = json.loads(resources.files(__package__).joinpath(name).read_text(encoding="utf-8"))
    return doc


def lookup(card: str, n: int, k: int, m: int, packed: bool = False) -> tuple[str, tuple[int, ...]] | None:
    """(path, config) of the table's entry (the packed weights' table with `packed`) for this card and shape at the
    smallest measured M >= m."""
    rows = [r for r in table(packed).get("entries", []) if r["card"] == card and r["n"] == n and r["k"] == k]
    rows = sorted((r for r in rows if r["m"] >= m), key=lambda r: r["m"])
    if not rows:
        return None
    return str(rows[0]["path"]), tuple(int(v) for v in rows[0]["config"])


@lru_cache(maxsize=16)
def _card(device: Any) -> str:
    import torch  # lazy: pulls torch

    return str(torch.cuda.get_device_name(device))


def fp8_choice(device: Any, n: int, k: int, m: int) -> tuple[str, tuple[int, ...]]:
    return lookup(_card(device), n, k, m) or fallback(k, m, n)


def packed_choice(device: Any, n: int, k: int, m: int, fits: Any) -> tuple[int, ...]:
    """fp8_gemv_mma's configuration for a pack()ed weight (M <= 16): the packed table's, else the first of
    FALLBACK_PACKED that `fits(k, *config)` says K takes (every K a multiple of 32 takes the last)."""
    hit = lookup(_card(device), n, k, m, packed=True)
    return hit[1] if hit else next(c for c in FALLBACK_PACKED if fits(k, *c))


def fallback(k: int, m: int, n: int = 0) -> tuple[str, tuple[int, ...]]:
    """The rule of thumb above; `n` (the weight's rows) sizes the swapped kernel's split (0: unknown, split 1)."""
    if m == 1 and k % FALLBACK_GEMV_M1[1] == 0:
        return "gemv", FALLBACK_GEMV_M1
    if m <= FALLBACK_GEMV_MAX_M and k % FALLBACK_GEMV[1] == 0:
        return "gemv", FALLBACK_GEMV
    bn, bk = FALLBACK_SWAP[:2]
    if k % bk == 0:
        split = 1
        while n and split < 8 and -(-n // bn) * split < FALLBACK_PROGRAMS and k % (bk * split * 2) == 0:
            split *= 2
        serial = (0, 0, 1) if split >= FALLBACK_SERIAL_SPLIT else ()
        return "mma", FALLBACK_SWAP[:4] + (split,) + FALLBACK_SWAP[5:] + serial
    return "mma", ()
