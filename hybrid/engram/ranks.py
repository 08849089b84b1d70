"""Which rank serves which Engram rows, as the sm_80 engine splits them (research/consumers.md §3).

Under tensor parallelism every rank opens the same full shard and serves a contiguous range of
`cdiv(n_cols, TP*DP)` hash columns (engram.py:735-744); ids of other columns come back as zero
rows there. Under pipeline parallelism the rank whose stage holds an Engram layer serves all its
columns (TP=1 inside the stage); the stage of a layer follows vLLM's default even layer split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def column_range(n_cols: int, tp: int, dp: int, rank: int) -> tuple[int, int]:
    """[first, last) hash columns of a TP rank (the last ranks may get fewer, or none)."""
    per = cdiv(n_cols, tp * dp)
    return min(rank * per, n_cols), min((rank + 1) * per, n_cols)


def pp_stage_of_layer(layer: int, n_layers: int, pp: int) -> int:
    """vLLM's default partition: n_layers // pp per stage, the remainder on the last stages."""
    base, extra = divmod(n_layers, pp)
    sizes = [base + (1 if i >= pp - extra else 0) for i in range(pp)]
    start = 0
    for stage, size in enumerate(sizes):
        if layer < start + size:
            return stage
        start += size
    return pp - 1


@dataclass(frozen=True)
class RankShare:
    rank: int
    layer: int
    columns: tuple[int, int]  # [first, last) hash columns this rank serves for the layer

    @property
    def n_columns(self) -> int:
        return self.columns[1] - self.columns[0]


def rank_shares(layers: tuple[int, ...], n_cols: int, n_layers: int, tp: int, pp: int, dp: int = 1) -> list[RankShare]:
    """Every (rank, Engram layer) pair with the columns that rank serves; rank = stage * tp + tp_rank."""
    out = []
    for L in layers:
        stage = pp_stage_of_layer(L, n_layers, pp) if pp > 1 else 0
        for r in range(tp):
            out.append(RankShare(stage * tp + r, L, column_range(n_cols, tp, dp, r)))
    return out


def rows_per_rank(row_ids: Any, shares: list[RankShare]) -> dict[int, dict[int, list[int]]]:
    """{rank: {layer: sorted unique row ids it reads}} from {layer: int array [T, n_cols]}."""
    import numpy as np  # lazy: pulls numpy

    out: dict[int, dict[int, list[int]]] = {}
    for s in shares:
        ids = np.asarray(row_ids[s.layer])[:, s.columns[0] : s.columns[1]]
        out.setdefault(s.rank, {})[s.layer] = sorted({int(x) for x in ids.reshape(-1)})
    return out
