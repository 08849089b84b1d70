"""The FP8 GEMM's tuning sweep on the card (issue 26): for each of DSV4.1-Flash's dense FP8 shapes and
M = 1, 2, 4, 8, 16, every candidate tile of the GEMV path (no tensor cores) and of the MMA kernel,
timed honestly (recipekit.bench.kernels.timing: one CUDA graph of back-to-back calls over rotated
weight copies, so no host gap and no L2 hit), the fastest kept with its parity against the fp32
reference. `python -m recipekit.cli.kernels_fp8_sweep OUT [TABLE] [--new]` writes OUT/fp8_sweep.json (every
timing, torch bf16's beside) and the table (OUT/fp8_tuning.json, or TABLE) that `fp8_gemm` reads
(backends/cuda_sm80/kernels/data/fp8_tuning.json); --new times only the committed table's entry and the latest
sweep's candidates (NEW) per shape and M. Every candidate is compiled first in parallel worker processes."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

from recipekit.backends.cuda_sm80.kernels import fp8_gemm as fp8_gemm_mod
from recipekit.backends.cuda_sm80.kernels import fp8_gemv_mma, tuning
from recipekit.backends.cuda_sm80.kernels.fp8_gemm import gemv_fits, mma_fits
from recipekit.bench.kernels import roofline, synth, timing
from recipekit.cli.kernels_driver import driver

MS = (1, 2, 4, 8, 16)
# GEMV candidates (BLOCK_N, BLOCK_K, num_warps, SPLIT_K, DECODER, PREFETCH, ACC_TILE) per M. Sweeps 1-4
# (results/h200-2026-12-02-fp8-sweep-*.json) found prefetching and the per-step K reduction slower, the M = 1
# 2-D tile (ACC_TILE 2) fastest at M = 1 and the MMA kernel at M = 2..16; sweep 5 adds the register tile
# (ACC_TILE 3: one 2-D accumulator per token, M = 1..8) with the fp32-bits decoder (3) and split-K 2 / 4 for
# more programs in flight, keeping sweep 4's winners as the baseline; sweep 6 the MMA kernel's bf16-bits decoder.
_M1_TILES = ((16, 512, 4), (8, 512, 4), (16, 1024, 8), (32, 256, 8), (8, 1024, 4), (4, 1024, 4), (16, 256, 4))
_TOKEN_TILES = {
    2: ((8, 512, 4), (16, 256, 4), (8, 256, 4), (16, 512, 8), (4, 1024, 4)),
    4: ((8, 256, 4), (4, 512, 4), (16, 128, 4), (8, 128, 4), (8, 256, 8)),
    8: ((4, 256, 4), (8, 128, 4), (4, 128, 4), (8, 256, 8), (16, 128, 8)),
}
GEMV_BY_M = {
    1: [(bn, bk, w, 1, 3, 0, 3) for bn, bk, w in _M1_TILES]
    + [
        (bn, bk, w, sp, 3, 0, 3)
        for bn, bk, w in ((16, 512, 4), (8, 512, 4), (16, 256, 4), (8, 256, 4))
        for sp in (2, 4)
    ]
    + [(16, 512, 4, 1, 2, 0, 2), (8, 512, 4, 1, 2, 0, 2), (32, 256, 8, 1, 2, 0, 2), (16, 1024, 8, 1, 2, 0, 2)],
    **{
        m: [(bn, bk, w, 1, 3, 0, 3) for bn, bk, w in tiles]
        + [(tiles[0][0], tiles[0][1], tiles[0][2], 2, 3, 0, 3), (tiles[0][0], tiles[0][1], tiles[0][2], 1, 2, 0, 3)]
        for m, tiles in _TOKEN_TILES.items()
    },
    16: [],
}
# (BLOCK_N, BLOCK_K, num_warps, num_stages, SPLIT_K, DECODER): sweep 4's MMA winners (decoder 0: fp16 bits,
# two converts per weight) and, sweep 6, the weights straight into bf16 bits (decoder 1, no convert per weight):
# decoder 1 was slower than decoder 0 on every shape but 4096 x 4096 (both then loading the activations first,
# which cost decoder 0 2-4 us against sweep 5; decoder 0's loads are back in their sweep-5 order)
MMA = [(32, 256, 4, 3, 1, 0), (32, 256, 4, 3, 4, 0)] + [
    (32, 256, 4, 3, 1, 1), (32, 256, 4, 3, 4, 1), (16, 256, 4, 3, 1, 1), (32, 512, 4, 3, 1, 1),
    (32, 128, 4, 4, 1, 1), (16, 512, 4, 3, 2, 1), (32, 256, 8, 3, 1, 1), (32, 256, 4, 3, 2, 1),
]  # fmt: skip


# Sweep 7 (issue 26, session 34): the swapped MMA kernel (fp8_gemm_swap_kernel: the decoded weights as the MMA's A
# operand, the activations transposed as B) with the packed-PTX bf16 decoder and one scaled partial dot per 32-wide
# block (DECODER 2); (BLOCK_N, BLOCK_K, num_warps, num_stages) per tile, each at SPLIT_K 1, 2 and 4. BLOCK_N 32 on 1
# warp and 64 on 2 compile to mma.sync on sm_90 (3.8-4.2 SASS instructions per weight in the main loop, nvdisasm);
# 64 and 128 on 4 warps to wgmma (5.9-6.5); beside them the plain-Triton bf16 decoder (3) and the fp32 one (0).
SWAP_TILES = ((32, 256, 1, 3), (64, 256, 2, 3), (64, 128, 2, 3), (64, 512, 2, 3), (32, 256, 2, 3), (64, 256, 2, 4),
              (128, 256, 4, 3), (32, 128, 1, 4))  # fmt: skip
SWAP = [(bn, bk, w, st, sp, 2, 1) for bn, bk, w, st in SWAP_TILES for sp in (1, 2, 4)] + [
    (32, 256, 1, 3, 1, 3, 1), (64, 256, 2, 3, 1, 0, 1), (64, 256, 4, 3, 1, 2, 1),
]  # fmt: skip


# Sweep 8: sweep 7 found the scale loads (one E8M0 code per row block and 32-wide block of K, loaded right before
# their use, outside Triton's pipelining) exposed; DECODER 4 loads the next step's codes a step ahead (the time of
# sweep 7's winners was nearly flat in M: not the MMA). Sweep 7's winners are the committed table's entries.
SWAP2_TILES = {
    (64, 128, 2, 3): (1, 2, 4, 8), (32, 256, 2, 3): (2, 4, 8), (32, 128, 1, 4): (2, 4, 8), (64, 128, 2, 4): (2, 4),
    (64, 64, 2, 4): (2, 4), (32, 128, 2, 4): (2, 4), (64, 256, 2, 3): (2, 4), (128, 128, 4, 3): (2, 4),
    (64, 128, 4, 3): (2, 4),
}  # fmt: skip
SWAP2 = [(bn, bk, w, st, sp, 4, 1) for (bn, bk, w, st), splits in SWAP2_TILES.items() for sp in splits]


# Sweep 9: sweep 8's winners ran 2 warps per program, 4-8 warps per SM (0.5-0.64x of copy bandwidth, 4.2 SASS
# instructions per weight: latency-bound, not issue-bound); 4 and 8 warps per program on mma.sync (MMA_V2 1, Triton's
# DISABLE_MMA_V3 at compile: on 4+ warps and BLOCK_N >= 64 Triton picks wgmma, slower in sweeps 7 and 8)
SWAP3_TILES = {
    (64, 128, 4, 3): (2, 4, 8), (64, 64, 4, 4): (4,), (128, 128, 8, 3): (2, 4), (128, 128, 4, 3): (1, 2, 4),
    (64, 128, 4, 4): (2, 4),
}  # fmt: skip
SWAP3 = [(bn, bk, w, st, sp, 4, 1, 0, 1) for (bn, bk, w, st), splits in SWAP3_TILES.items() for sp in splits]
# Sweep 10 (session 35): serial split-K (SERIAL: the last program of a row block sums the splits, no split_sum_kernel
# launch, which costs about an empty launch, 1.0-1.4 us in diag-1/-2). The split candidates of sweeps 8 and 9 with it
# (M >= 2), the register tile's split candidates of sweeps 5 and 6 with it (M = 1: sweep 6's 5120 x 16384 winner split
# 4 ways) and, at every M, the table's own entry with it where it splits.
SERIAL_GEMV_M1 = [
    (bn, bk, w, sp, 3, pf, 3, 0, 1)
    for bn, bk, w, sp, pf in (
        (8, 512, 4, 4, 0), (16, 512, 4, 4, 0), (8, 256, 4, 2, 0), (8, 256, 4, 4, 0), (16, 256, 4, 4, 1),
        (16, 512, 4, 2, 0), (8, 512, 4, 2, 0), (8, 1024, 4, 2, 0), (16, 256, 4, 2, 1), (16, 1024, 8, 2, 0),
    )
]  # fmt: skip
SERIAL_MMA = [c + (0, 0, 1) for c in SWAP2 if c[4] > 1] + [c + (1,) for c in SWAP3 if c[4] > 1]
NEW: dict[int, Sequence[tuple[int, ...]]] = {7: SWAP, 8: SWAP2, 9: SWAP3, 10: SERIAL_MMA}  # each sweep's candidates
# Sweep 11 (session 36, commit c010e7e, results/h200-2026-12-03-fp8-sweep-11.json) tried the register tile with
# per-thread partial sums over 16 columns (55 instead of 122 registers per thread for the M = 1 tile, more bytes in
# flight per SM): slower on every shape and M (M = 1: 18.5 vs 15.4 us on 8192 x 5120, 9.0 vs 7.8 on 4096 x 4096),
# so it was taken out again.
# Sweep 12 (session 36): the register tile with its loop's loads staged through shared memory by Triton's pipeliner
# (STAGES, config index 9: cp.async on sm_80, 2-4 steps in flight per program at no register cost; the M = 1 tile
# compiles to 125 registers with 3 stages against 122 without, ptxas -v on sm_90). The register prefetch (PREFETCH)
# had cost registers and lost in sweeps 1-6. (BLOCK_N, BLOCK_K, num_warps, SPLIT, STAGES)
_STAGED_TILES = {
    1: [(bn, bk, w, 1, st) for bn, bk, w in ((8, 1024, 4), (16, 512, 4), (8, 512, 4), (32, 256, 8), (16, 1024, 8),
                                             (4, 1024, 4), (16, 256, 4)) for st in (2, 3, 4)]
    + [(8, 512, 4, 2, 3), (16, 256, 4, 2, 3), (8, 1024, 4, 2, 3), (16, 256, 4, 4, 3)],
    2: [(bn, bk, w, 1, st) for bn, bk, w in ((8, 512, 4), (8, 1024, 4), (16, 256, 4)) for st in (2, 3)],
    4: [(8, 256, 4, 1, 3), (4, 512, 4, 1, 3)],
    8: [(8, 256, 4, 1, 3), (4, 512, 4, 1, 3)],
}  # fmt: skip
# Sweep 13: around sweep 12's M = 1 winner (16, 512, 4) with 3 stages (14.2 us on 8192 x 5120 against 15.3): register
# caps (index 7) for more programs per SM, other warps and tiles, split K with the serial sum, the register prefetch
STAGED2_GEMV_M1 = [
    (16, 512, 4, 1, 3, 0, 3, 128, 0, 3), (16, 512, 4, 1, 3, 0, 3, 96, 0, 3), (16, 512, 4, 1, 3, 0, 3, 80, 0, 3),
    (16, 512, 8, 1, 3, 0, 3, 0, 0, 3), (16, 1024, 8, 1, 3, 0, 3, 0, 0, 3), (32, 512, 8, 1, 3, 0, 3, 0, 0, 3),
    (32, 256, 4, 1, 3, 0, 3, 0, 0, 3), (16, 512, 2, 1, 3, 0, 3, 0, 0, 3), (16, 512, 4, 1, 3, 1, 3, 0, 0, 3),
    (16, 512, 4, 2, 3, 0, 3, 0, 1, 3), (16, 256, 4, 2, 3, 1, 3, 0, 1, 3), (16, 512, 4, 4, 3, 0, 3, 0, 1, 3),
    (16, 256, 4, 1, 3, 0, 3, 96, 0, 3),
]  # fmt: skip
STAGED_GEMV = {
    m: [(bn, bk, w, sp, 3, 0, 3, 0, int(sp > 1), st) for bn, bk, w, sp, st in tiles]
    for m, tiles in _STAGED_TILES.items()
}
# the register-tile sweeps' candidates per M (sweep 12: STAGED_GEMV, 13: STAGED2_GEMV_M1)
NEW_GEMV: dict[int, Mapping[int, Sequence[tuple[int, ...]]]] = {12: STAGED_GEMV, 13: {1: STAGED2_GEMV_M1}}
# Sweep 14 (session 37): DSV4.1-Flash's own dense FP8 shapes (roofline.DSV41_FP8_SHAPES; sweeps 1-13 ran on the
# research's four shapes, none of which is DSV4.1-Flash's). Beside the committed table's winners at that M (from
# any shape, where K allows), K split up to 10 ways with the serial sum, so that the small-N weights (wkv's 512 rows,
# wq_a's 1280) fill the card; BLOCK_K 256 for K = 1280 and 2304 (not multiples of 512). (BLOCK_N, BLOCK_K, warps)
# of the register tile staged 3 deep at M = 1, and of the swapped MMA kernel (with num_stages, MMA_V2) at M >= 2
DSV41_SPLITS = (1, 2, 3, 4, 5, 6, 8, 10)
DSV41_GEMV_M1 = [
    (bn, bk, w, sp, 3, 0, 3, 0, int(sp > 1), 3)
    for bn, bk, w in ((16, 512, 4), (8, 512, 4), (16, 256, 4), (8, 256, 4), (8, 1024, 4), (32, 256, 8), (16, 128, 4))
    for sp in DSV41_SPLITS
]
DSV41_SWAP = [
    (bn, bk, w, st, sp, 4, 1, 0, v2, int(sp > 1))
    for bn, bk, w, st, v2 in ((64, 128, 2, 3, 0), (32, 128, 2, 4, 0), (128, 128, 4, 3, 1), (64, 128, 4, 3, 1))
    for sp in DSV41_SPLITS
]
DSV41_GEMV_M2 = [(8, 512, 4, 1, 3, 1, 3), (16, 256, 4, 1, 3, 0, 3), (8, 256, 4, 1, 3, 0, 3, 0, 0, 3)]


def _fits(k: int, path: str, cfg: tuple[int, ...]) -> bool:
    """Whether a candidate takes this K, by the kernels' own rules (gemv_fits, mma_fits, fp8_gemv_mma.config_fits)."""
    if path == "gluon":
        return fp8_gemv_mma.config_fits(k, cfg)
    return gemv_fits(k, cfg) if path == "gemv" else mma_fits(k, cfg)


def dsv41_candidates(k: int, m: int) -> list[tuple[str, tuple[int, ...]]]:
    """Sweep 14's candidates for one K and M: the committed table's entries at this M (any shape), then DSV41_GEMV_M1
    at M = 1 or DSV41_SWAP, and DSV41_GEMV_M2 at M = 2; those that take K, each once."""
    won = [(str(e["path"]), tuple(int(v) for v in e["config"])) for e in tuning.table()["entries"] if e["m"] == m]
    new: list[tuple[str, tuple[int, ...]]] = (
        [("gemv", c) for c in DSV41_GEMV_M1] if m == 1 else [("mma", c) for c in DSV41_SWAP]
    )
    if m == 2:
        new += [("gemv", c) for c in DSV41_GEMV_M2]
    return list(dict.fromkeys(c for c in won + new if _fits(k, *c)))


# Sweep 15 (session 37): the two DSV4.1 shapes where sweep 14's table lost to torch bf16 at M = 4 and 8 (shared
# expert w2 5120 x 2304: 8.6-8.7 against 8.4 us; indexer wq_b 4096 x 1280: 6.2-6.3 against 5.7), K = 2304 and 1280
# (9 and 5 steps of 256): the register tile per token (M <= 8) with BLOCK_K 128 / 256, K split 3, 5 or 9 ways
# (serial sum), staged or not; the swapped MMA kernel with BLOCK_K 64 / 256 and the same splits
SWEEP15_SHAPES = ((5120, 2304), (4096, 1280))
SWEEP15_GEMV = [
    (bn, bk, w, sp, 3, 0, 3, 0, int(sp > 1), st)
    for bn, bk, w in ((8, 256, 4), (4, 256, 4), (16, 256, 4), (8, 128, 4), (4, 128, 4), (16, 128, 4))
    for sp in (1, 3, 5, 9)
    for st in (1, 3)
]
SWEEP15_SWAP = [
    (bn, bk, w, st, sp, 4, 1, 0, v2, int(sp > 1))
    for bn, bk, w, st, v2 in ((64, 256, 2, 3, 0), (32, 256, 2, 3, 0), (64, 64, 2, 4, 0), (32, 64, 1, 4, 0),
                              (64, 256, 4, 3, 1))
    for sp in (1, 2, 3, 5, 9)
]  # fmt: skip


def sweep15_candidates(k: int, m: int) -> list[tuple[str, tuple[int, ...]]]:
    """Sweep 15's candidates for one K and M >= 2 (the register tile up to M = 8), those that take K."""
    gemv = [("gemv", c) for c in SWEEP15_GEMV] if 2 <= m <= 8 else []
    cands = gemv + [("mma", c) for c in SWEEP15_SWAP] if m >= 2 else []
    return [c for c in cands if _fits(k, *c)]


# Sweep 16 (session 41): deep staging. Sweeps 12-15 staged a program's loads 2-4 steps deep; on DSV4.1-Flash's small
# weights (2.6-23.6 MB, 20-180 KB per SM) a program then waits a DRAM round trip for every 1-3 steps of its K range,
# which is what its time looked like (wq_a 1280 x 5120: 6.1 us against 3.5 for a copy of the same bytes). Here every
# step of a program's K range (or DEEP_STAGES_MID of them) is in flight at once: STAGES (the register tile, index 9)
# or num_stages (the swapped MMA kernel) = steps + 1, capped at DEEP_MAX_STAGES, while the staged bytes of one program
# stay under DEEP_SMEM (an estimate: the weight tile per stage, the MMA's activations beside it; what Triton cannot fit
# fails at compile and the sweep skips it, said). Every DSV4.1 shape: the register tile at M = 1..8, the swapped MMA
# kernel (DECODER 4, the codes a step ahead) at M = 2..16; K split with the serial sum for more programs.
DEEP_MAX_STAGES = 12
DEEP_STAGES_MID = 5
DEEP_SMEM = 96 << 10
DEEP_SPLITS = (1, 2, 3, 4, 5)
DEEP_GEMV_TILES = {
    1: ((16, 256, 4), (8, 256, 4), (16, 512, 4), (8, 512, 4), (4, 512, 4), (4, 1024, 4), (16, 128, 4)),
    2: ((16, 256, 4), (8, 256, 4), (4, 256, 4), (8, 512, 4), (16, 128, 4)),
    4: ((8, 256, 4), (4, 256, 4), (4, 512, 4)),
    8: ((4, 256, 4), (8, 256, 4), (4, 512, 4)),
}
DEEP_SWAP_TILES = ((32, 128, 2, 0), (64, 128, 2, 0), (64, 128, 4, 1), (128, 128, 4, 1), (32, 64, 1, 0))  # + MMA_V2


def deep_stages(steps: int) -> list[int]:
    """The stage counts sweep 16 tries for a program of `steps` BLOCK_K steps: all in flight (steps + 1, capped) and
    DEEP_STAGES_MID, those deeper than the 3-4 of sweeps 12-15."""
    return sorted({s for s in (min(steps + 1, DEEP_MAX_STAGES), DEEP_STAGES_MID) if 4 < s <= steps + 1})


def sweep16_candidates(k: int, m: int) -> list[tuple[str, tuple[int, ...]]]:
    """Sweep 16's candidates for one K and M: the register tile (M <= 8) and the swapped MMA kernel (M >= 2) with
    deep stages (deep_stages) on every split of DEEP_SPLITS that K takes, within DEEP_SMEM."""
    cands: list[tuple[str, tuple[int, ...]]] = []
    for bn, bk, w in DEEP_GEMV_TILES.get(m, ()):
        for sp in DEEP_SPLITS:
            if k % (bk * sp):
                continue
            for st in deep_stages(k // (bk * sp)):
                if bn * bk * st <= DEEP_SMEM:
                    cands.append(("gemv", (bn, bk, w, sp, 3, 0, 3, 0, int(sp > 1), st)))
    for bn, bk, w, v2 in DEEP_SWAP_TILES if m >= 2 else ():
        for sp in DEEP_SPLITS:
            if k % (bk * sp):
                continue
            for st in deep_stages(k // (bk * sp)):
                if (bn + 2 * 16) * bk * st <= DEEP_SMEM:  # the weight tile and the bf16 activations [BLOCK_K, 16]
                    cands.append(("mma", (bn, bk, w, st, sp, 4, 1, 0, v2, int(sp > 1))))
    return [c for c in cands if _fits(k, *c)]


# Sweep 17 (session 41): sweep 16's deep stages lost on every shape (one program of 2 warps holding all 40 KB of its
# rows in flight still took longer than 5 programs of a fifth each and a serial sum): the MMA kernel's time at M >= 2
# looks like its decode per warp, not its loads. Here the swapped MMA kernel (DECODER 4, mma.sync: MMA_V2 1) with
# more warps per row block, 16-row blocks on 1-2 warps, and few splits, at M = 2..16.
WARPS_SWAP_TILES = ((16, 128, 1), (16, 128, 2), (16, 256, 2), (16, 256, 4), (32, 128, 4), (32, 128, 8), (32, 256, 4),
                    (32, 256, 8), (64, 128, 8), (64, 256, 8))  # fmt: skip
WARPS_SPLITS = (1, 2, 3, 4, 5)


def _swapped_sync(
    k: int, m: int, tiles: Sequence[tuple[int, int, int]], splits: Sequence[int], decoder: int
) -> list[tuple[str, tuple[int, ...]]]:
    """The swapped MMA kernel on mma.sync (MMA_V2 1) with `decoder` at M >= 2: each (BLOCK_N, BLOCK_K, num_warps) of
    `tiles` at 3 and 4 stages on each split that K takes (the serial sum where split)."""
    cands = [
        ("mma", (bn, bk, w, st, sp, decoder, 1, 0, 1, int(sp > 1)))
        for bn, bk, w in (tiles if m >= 2 else ())
        for sp in splits
        for st in (3, 4)
    ]
    return [c for c in cands if _fits(k, *c)]


def sweep17_candidates(k: int, m: int) -> list[tuple[str, tuple[int, ...]]]:
    """Sweep 17's candidates for one K and M >= 2: WARPS_SWAP_TILES at 3 and 4 stages on the splits of WARPS_SPLITS
    that K takes (the serial sum where split)."""
    return _swapped_sync(k, m, WARPS_SWAP_TILES, WARPS_SPLITS, 4)


# Sweep 18 (session 41): the swapped MMA kernel with DECODER 5, never timed before in any form: the packed PTX decoder
# (as DECODER 2 and 4) but one tl.dot per BLOCK_K step, its 32-wide blocks' powers of two moved onto the activations'
# rows (as DECODER 1, exact in bf16), instead of one dot per 32-wide block and a scaled fp32 partial (half an FMA per
# weight at 32 rows, and 4-8 dots per step). BLOCK_N 16 or 32 (one row block of codes per program), at M = 2..16.
SWAP5_TILES = ((32, 128, 2), (32, 256, 2), (32, 128, 1), (32, 256, 1), (16, 128, 1), (16, 256, 1), (32, 128, 4),
               (32, 512, 2))  # fmt: skip
SWAP5_SPLITS = (1, 2, 3, 4, 5, 8, 10)


def sweep18_candidates(k: int, m: int) -> list[tuple[str, tuple[int, ...]]]:
    """Sweep 18's candidates for one K and M >= 2: SWAP5_TILES with DECODER 5 at 3 and 4 stages on the splits of
    SWAP5_SPLITS that K takes (the serial sum where split), mma.sync (MMA_V2 1)."""
    return _swapped_sync(k, m, SWAP5_TILES, SWAP5_SPLITS, 5)


# Sweep 19 (session 41): fp8_gemv_mma (Gluon, hand-placed mma.sync: the tokens as the MMA's N, 2.6 SASS instructions
# per weight in its loop against 7.3 for the register tile) at M = 1..8: (num_warps, S blocks per loop iteration)
GLUON_WARPS = (1, 2, 4, 8)
GLUON_STEPS = (1, 4)  # 4: four blocks per iteration, the next four loaded ahead


# sweeps 19-23 timed the Gluon kernel at M <= 8 (one token group: it took 8 tokens then; a second group since session 42)
GLUON_SWEEP_MAX_M = 8


def sweep19_candidates(k: int, m: int) -> list[tuple[str, tuple[int, ...]]]:
    """Sweep 19's candidates for one K and M <= 8: every (num_warps, S) of GLUON_WARPS x GLUON_STEPS that K takes."""
    cands = [("gluon", (w, st)) for w in GLUON_WARPS for st in GLUON_STEPS] if m <= GLUON_SWEEP_MAX_M else []
    return [c for c in cands if _fits(k, *c)]


# Sweep 20 (session 41): sweep 19's kernel lost where a weight has few 16-row tiles (wq_a's 80, wkv's 32) or long rows
# (wo_b, w1+w3 at M = 1): K split over programs with the serial sum (SPLIT, config index 2), 4 blocks ahead
GLUON_SPLITS = (2, 3, 4, 5, 8, 10)


def sweep20_candidates(k: int, m: int) -> list[tuple[str, tuple[int, ...]]]:
    """Sweep 20's candidates for one K and M <= 8: (num_warps, 4, SPLIT) for 2, 4 and 8 warps and GLUON_SPLITS."""
    cands = [("gluon", (w, 4, sp)) for w in (2, 4, 8) for sp in GLUON_SPLITS] if m <= GLUON_SWEEP_MAX_M else []
    return [c for c in cands if _fits(k, *c)]


# Sweep 21 (session 41): eight blocks per iteration, the next eight loaded ahead (S 8: up to 16 blocks in flight per
# warp), on every warp count and split of sweeps 19 and 20
def sweep21_candidates(k: int, m: int) -> list[tuple[str, tuple[int, ...]]]:
    """Sweep 21's candidates for one K and M <= 8: (num_warps, 8, SPLIT) for GLUON_WARPS and splits 1 + GLUON_SPLITS."""
    if m > GLUON_SWEEP_MAX_M:
        return []
    cands = [("gluon", (w, 8, sp)) for w in GLUON_WARPS for sp in (1, *GLUON_SPLITS)]
    return [c for c in cands if _fits(k, *c)]


# Sweeps 22 and 23 (session 42: longer row runs and cache hints; L2 prefetch and alternate loads) were measured and
# removed: their candidates and the kernel's options are at commit 7898003


# Sweep 24 (session 42): the Gluon kernel takes 16 tokens in one launch (a second token group): at M = 16 every
# (num_warps, S, SPLIT) of sweeps 19-21 beside the table's entry (the swapped MMA kernel's); the other Ms the entry only
def sweep24_candidates(k: int, m: int) -> list[tuple[str, tuple[int, ...]]]:
    """Sweep 24's candidates for one K: at M = 16, (num_warps, S, SPLIT) for GLUON_WARPS, S 4 and 8 and splits 1 +
    GLUON_SPLITS; none at other Ms."""
    if m != 16:
        return []
    cands = [("gluon", (w, st, sp)) for w in GLUON_WARPS for st in (4, 8) for sp in (1, *GLUON_SPLITS)]
    return [c for c in cands if _fits(k, *c)]


# the sweeps with shapes of their own: their candidates per K and M, and their shapes
SHAPE_SWEEPS: dict[int, tuple[Callable[[int, int], list[tuple[str, tuple[int, ...]]]], tuple[tuple[int, int], ...]]] = {
    14: (dsv41_candidates, roofline.FP8_SHAPES),
    15: (sweep15_candidates, SWEEP15_SHAPES),
    16: (sweep16_candidates, roofline.FP8_SHAPES),
    17: (sweep17_candidates, roofline.FP8_SHAPES),
    18: (sweep18_candidates, roofline.FP8_SHAPES),
    19: (sweep19_candidates, roofline.FP8_SHAPES),
    20: (sweep20_candidates, roofline.FP8_SHAPES),
    21: (sweep21_candidates, roofline.FP8_SHAPES),
    24: (sweep24_candidates, roofline.FP8_SHAPES),
}


def sweep_shapes(new_only: bool, sweep: int) -> tuple[tuple[int, int], ...]:
    """The shapes a sweep runs on: 1-13 the research's, 14 and 15 their own (SHAPE_SWEEPS), a full sweep
    DSV4.1-Flash's."""
    if not new_only:
        return roofline.FP8_SHAPES
    return SHAPE_SWEEPS[sweep][1] if sweep in SHAPE_SWEEPS else roofline.RESEARCH_FP8_SHAPES


def with_serial(path: str, cfg: tuple[int, ...]) -> tuple[int, ...] | None:
    """A table entry with SERIAL on where it splits K (the register tile, ACC_TILE 3, or the swapped kernel), else None."""
    if path == "gemv" and len(cfg) >= 7 and cfg[6] == 3 and cfg[3] > 1:
        return cfg[:7] + ((cfg[7] if len(cfg) > 7 else 0), 1) + tuple(cfg[9:])
    if path == "mma" and len(cfg) >= 7 and cfg[6] == 1 and cfg[4] > 1:
        return cfg[:7] + tuple(cfg[7:9]) + (0,) * (9 - max(len(cfg), 7)) + (1,)
    return None


def candidates(n: int, k: int, m: int, new_only: bool, sweep: int = 13) -> list[tuple[str, tuple[int, ...]]]:
    """Every candidate of the full sweep (GEMV_BY_M, MMA, SWAP, SWAP2, SWAP3, sweep 10's, the Gluon kernel's of sweeps
    19-21 and 24), or with `new_only` the
    committed table's entry for this shape and M (the baseline) and the candidates sweep `sweep` added (NEW; NEW_GEMV
    for sweeps 12 and 13; sweep 10: the table's entry with SERIAL, SERIAL_GEMV_M1 at M = 1, SERIAL_MMA at M >= 2)."""
    if new_only:
        path, cfg = tuning.lookup(torch.cuda.get_device_name(0), n, k, m) or tuning.fallback(k, m, n)
        base = [(path, cfg or fp8_gemm_mod.DEFAULT_CONFIG)]
        if sweep in SHAPE_SWEEPS:
            return list(dict.fromkeys(base + SHAPE_SWEEPS[sweep][0](k, m)))
        if sweep in NEW_GEMV:
            gemv_new = NEW_GEMV[sweep].get(m, ())
            return base + [("gemv", c) for c in gemv_new if gemv_fits(k, c) and ("gemv", c) not in base]
        if sweep != 10:
            return base + [("mma", c) for c in NEW[sweep] if ("mma", c) not in base]
        serial = with_serial(path, tuple(cfg))
        more = [("gemv", serial)] if serial and path == "gemv" else [("mma", serial)] if serial else []
        if m == 1:
            more += [("gemv", c) for c in SERIAL_GEMV_M1 if gemv_fits(k, c)]
        else:
            more += [("mma", c) for c in SERIAL_MMA]
        return base + [c for i, c in enumerate(more) if c not in base and c not in more[:i]]
    gemv: list[tuple[int, ...]] = [c for c in GEMV_BY_M[m] + STAGED_GEMV.get(m, []) if gemv_fits(k, c)]
    gemv += [c for c in SERIAL_GEMV_M1 + STAGED2_GEMV_M1 if m == 1 and gemv_fits(k, c)]
    gluon = sweep19_candidates(k, m) + sweep20_candidates(k, m) + sweep21_candidates(k, m) + sweep24_candidates(k, m)
    return [("gemv", c) for c in gemv] + [("mma", c) for c in MMA + SWAP + SWAP2 + SWAP3 + SERIAL_MMA] + gluon


def _compile_one(job: tuple[str, tuple[int, ...], int, int]) -> str:
    """One candidate run once on small tensors of the sweep's specializations (M, K; N a multiple of 16), in a
    worker process: Triton's cache on disk then holds its binary for the timing process."""
    path, cfg, m, k = job
    try:
        x = torch.zeros((m, k), dtype=torch.bfloat16, device="cuda")
        w = torch.zeros((256, k), dtype=torch.uint8, device="cuda")
        s = torch.full((8, k // 32), 127, dtype=torch.uint8, device="cuda")
        fp8_gemm_mod.path_kernel(path)(x, w, s, cfg)
        torch.cuda.synchronize()
        return ""
    except Exception as e:  # said by the timing process again, where it counts
        return f"{path} {cfg} M={m}: {type(e).__name__}"


def precompile(jobs: list[tuple[str, tuple[int, ...], int, int]], workers: int = 12) -> None:
    """Compile every candidate in parallel worker processes before the (serial) timing: compiling dominates a
    sweep's device time otherwise."""
    import concurrent.futures  # lazy: only the sweep on the card uses it
    import multiprocessing  # lazy: only the sweep on the card uses it

    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        bad = [r for r in pool.map(_compile_one, jobs) if r]
    print(f"precompiled {len(jobs)} candidates, {len(bad)} failed: {bad[:6]}", flush=True)


def main(out: Path, table_path: Path | None = None, new_only: bool = False, sweep: int = 24) -> dict[str, Any]:
    card = torch.cuda.get_device_name(0)
    doc: dict[str, Any] = {"provenance": roofline.provenance(driver()), "method": timing.METHOD, "new_only": new_only}
    doc["sweep"] = sweep if new_only else "full"
    shapes = sweep_shapes(new_only, sweep)
    jobs = {(p, c, m, k) for n, k in shapes for m in MS for p, c in candidates(n, k, m, new_only, sweep)}
    precompile(sorted(jobs))
    doc["copy"] = timing.copy_bandwidth()
    gbs = doc["copy"]["gb_s"]
    print("copy", doc["copy"], flush=True)
    rows, entries = [], []
    for n, k in shapes:
        g = torch.Generator().manual_seed(n + k)
        w0, s0, ws, ss = roofline.fp8_weights(n, k, g)
        wbs = roofline.torch_weights(w0, s0)  # torch's path, beside
        for m in MS:
            x = synth.bf16((m, k), g).cuda()
            nbytes = w0.numel() + s0.numel() + x.numel() * 2 + m * n * 2
            cands = candidates(n, k, m, new_only, sweep)
            times: dict[tuple[str, tuple[int, ...]], float] = {}
            for path, cfg in cands:
                fn = fp8_gemm_mod.path_kernel(path)
                try:
                    times[(path, cfg)] = timing.per_call_seconds([partial(fn, x, w, s, cfg) for w, s in zip(ws, ss)])
                except Exception as e:  # a tile Triton cannot build is skipped, and said
                    print(f"{n}x{k} M={m} {path} {cfg}: {type(e).__name__}: {str(e)[:120]}", flush=True)
            # the fastest candidate that passes parity (a wrong fast one is no result): up to 4 tried in time order
            for best in sorted(times, key=lambda c: times[c])[:4]:
                fn = fp8_gemm_mod.path_kernel(best[0])
                check = roofline._parity("fp8_gemm", m, fn(x, w0, s0, best[1]), (x, w0, s0))
                if check["parity_pass"]:
                    break
                print(f"{n}x{k} M={m} {best}: parity FAIL {check['parity_rel_error']}", flush=True)
            t = times[best]
            t_torch = timing.per_call_seconds([partial(torch.matmul, x, wb.T) for wb in wbs])
            row = {
                "n": n, "k": k, "m": m, "path": best[0], "config": list(best[1]), "us": t * 1e6,
                "x_copy": nbytes / t / 1e9 / gbs, "torch_us": t_torch * 1e6, "baseline": [cands[0][0], list(cands[0][1])],
                "baseline_us": times.get(cands[0], float("nan")) * 1e6, **check,
                "all": [{"path": p, "config": list(c), "us": v * 1e6} for (p, c), v in sorted(times.items(), key=lambda i: i[1])],
            }  # fmt: skip
            rows.append(row)
            print({k_: v for k_, v in row.items() if k_ != "all"}, flush=True)
            if check["parity_pass"]:
                entries.append({"card": card, "n": n, "k": k, "m": m, "path": best[0], "config": list(best[1])})
        del ws, ss, wbs
        torch.cuda.empty_cache()
        _write(out, table_path, doc, rows, entries)  # after every shape: a cut-off run keeps what it measured
    return doc


def _write(out: Path, table_path: Path | None, doc: dict[str, Any], rows: list[Any], entries: list[Any]) -> None:
    """The sweep's rows, and the table: this run's entries, then the committed table's for shapes it did not run
    (a sweep over some shapes keeps the others' tiles)."""
    doc["rows"] = rows
    ran = {(r["n"], r["k"]) for r in rows}
    kept = [e for e in tuning.table().get("entries", []) if (e["n"], e["k"]) not in ran]
    entries = entries + kept
    table = {
        "source": "python -m recipekit.cli.kernels_fp8_sweep (fastest parity-passing candidate per shape and M, "
        f"timed as: {timing.METHOD})",
        "provenance": doc["provenance"],
        "config_fields": {"gemv": "BLOCK_N, BLOCK_K, num_warps, SPLIT_K, DECODER (0 ALU, 1 sign-extension, 2 PTX four-at-once, 3 fp32 bits), PREFETCH, ACC_TILE (0 per-step K reduction, 1 3-D tile, 2 M = 1 2-D tile, 3 one 2-D tile per token)[, maxnreg[, SERIAL (1: the last program of a row block sums the splits)[, STAGES (loads staged through shared memory)]]]", "mma": "BLOCK_N, BLOCK_K, num_warps, num_stages, SPLIT_K, DECODER (0 fp16 bits + two converts, 1 bf16 bits, 2 packed-PTX bf16 bits + one scaled partial dot per 32-wide block (swapped kernel only), 3 the same with Triton's decoder, 4 as 2 with the next step's codes loaded a step ahead, 5 the packed-PTX decoder with the blocks' powers of two on the activations and one dot per step (swapped kernel, BLOCK_N dividing 32)), SWAP (1: the decoded weights as the MMA's A operand)[, maxnreg (0 none)[, MMA_V2 (1: compiled with DISABLE_MMA_V3)[, SERIAL (1: the last program of a row block sums the splits)]]]", "gluon": "num_warps (the warps of a 16-row tile, each a share of K), S (1, or 4 / 8: that many 32-wide blocks per iteration, the next ones loaded ahead)[, SPLIT (K over that many programs, the last of a tile sums)]: fp8_gemv_mma, hand-placed mma.sync, M <= 16 (a second token group from M = 9)"},
        "entries": entries,
    }  # fmt: skip
    (out / "fp8_sweep.json").write_text(json.dumps(doc, indent=1))
    (table_path or out / "fp8_tuning.json").write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":  # OUT [TABLE] [--new: the table's entries and the latest sweep's candidates only]
    args = [a for a in sys.argv[1:] if a != "--new"]
    main(Path(args[0]), Path(args[1]) if len(args) > 1 else None, "--new" in sys.argv)
