"""The FP8 GEMM's per-shape choice as data: path (gemv = no tensor cores, mma = tl.dot) and tile
configuration per (card, N, K, M), measured by a sweep on the card (`python -m
recipekit.cli.kernels_fp8_sweep OUT`) and stored in data/fp8_tuning.json with its provenance.
A shape or card the table does not hold gets the rule of thumb below."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

# rule of thumb for shapes or cards not measured: at M = 1 and 2 the register-tile GEMV with the fp32-bits
# decoder where K allows (M = 1 won on every H200 shape, M = 2 on three of four: fp8-sweep-5 and -6), else the
# MMA kernel (at M = 4 and 8 the register tile was 2-8x slower)
FALLBACK_GEMV_M1 = (16, 512, 4, 1, 3, 0, 3)
FALLBACK_GEMV = (16, 256, 4, 1, 3, 0, 3)
FALLBACK_GEMV_MAX_M = 2


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("data/fp8_tuning.json").read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def lookup(card: str, n: int, k: int, m: int) -> tuple[str, tuple[int, ...]] | None:
    """(path, config) of the table's entry for this card and shape at the smallest measured M >= m."""
    rows = [r for r in table().get("entries", []) if r["card"] == card and r["n"] == n and r["k"] == k]
    rows = sorted((r for r in rows if r["m"] >= m), key=lambda r: r["m"])
    if not rows:
        return None
    return str(rows[0]["path"]), tuple(int(v) for v in rows[0]["config"])


@lru_cache(maxsize=16)
def _card(device: Any) -> str:
    import torch  # lazy: pulls torch

    return str(torch.cuda.get_device_name(device))


def fp8_choice(device: Any, n: int, k: int, m: int) -> tuple[str, tuple[int, ...]]:
    return lookup(_card(device), n, k, m) or fallback(k, m)


def fallback(k: int, m: int) -> tuple[str, tuple[int, ...]]:
    if m == 1 and k % FALLBACK_GEMV_M1[1] == 0:
        return "gemv", FALLBACK_GEMV_M1
    if m <= FALLBACK_GEMV_MAX_M and k % FALLBACK_GEMV[1] == 0:
        return "gemv", FALLBACK_GEMV
    return "mma", ()
