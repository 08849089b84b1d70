"""One command per device run (GPU time is scarce): `python -m recipekit.cli.kernels_device_run
check OUT` runs the parity harness on the Triton kernels at every M and the sm_80 validity compile;
`... bench OUT [fp8,moe,...]` runs the roofline bench (or those parts of it); `... micro OUT` the throughput microbench and the
no-FMA variant's parity; `... moe OUT` the MoE kernel's parity and roofline rows alone;
`... moe-launches OUT` the MoE's time launch by launch; `... diag OUT` where the M = 1 time of the MoE's up
launch and of the FP8 GEMV goes (bench/kernels/diag.py: load-only twins, read-reduce, empty grid); `... mma OUT` the
MoE's tensor-core candidates (TILE 7 / 8) against the default; `... swap OUT` the swapped FP8 MMA kernel's parity and
sweep 7 (issue 26); `... swap2 OUT` / `swap3 OUT` sweep 8 / 9 and the FP8 bench on its table; `... fold OUT` the
folded tensor-core MoE candidates (TILE 11-13), `... words OUT` / `words2 OUT` TILE 14 against the default,
`... even OUT` MASKLESS, `... moe-final OUT` `moe` plus the previous and the new default launch by launch (session
34); `... serial OUT` serial split-K's checks, sweep 10 and the FP8 bench on its table, `... moe-serial OUT` the
MoE's (session 35); `... staged OUT` the register tile with its loads staged through shared memory (STAGES):
its parity, sweep 12 and the FP8 bench on its table, `... staged2 OUT` the same for sweep 13, `... moe-staged OUT` / `moe-staged2 OUT` the MoE's
loads staged the same way, then the tiles around it (session 36); `... moe-l2 OUT` the MoE's up launch prefetching the
down launch's weights into L2, `... moe-warm OUT` its launches with their weights in L2 and not, `... moe-caps OUT` its up launch with register
caps, `... dsv41 OUT` sweep 14 (DSV4.1-Flash's
own dense FP8 shapes) and the FP8 bench on its table, `... dsv41b OUT` the same for sweep 15 (session 37); `... moe-mma OUT` the MoE's
up launch on the tensor cores through hand-placed mma.sync (mxfp4_moe_mma) against the default (session 38); `... deep OUT`
sweep 16 (every step of a program's K range in flight) and the FP8 bench on its table, `... warps OUT` the same for
sweep 17 (more warps per row block), `... swap5 OUT` the swapped kernel's DECODER 5 (its checks, sweep 18 and the FP8 bench),
`... gluon OUT` fp8_gemv_mma (hand-placed mma.sync: its checks, sweep 19 and the FP8 bench), `... gluon2 OUT` the same
with K split over programs (sweep 20), `... gluon3 OUT` with eight blocks ahead (sweep 21) (session 41), `... floor OUT`
where the kernel's time goes against a pure read, `... packed OUT` the kernel on pack()ed weights beside the row
layout, `... packed-bench OUT` that and the FP8 bench on its table, `... gluon16 OUT` sweep 24 (the kernel at M = 16)
and the bench (session 42; its modes gluon4, gluon5 and packed2, for sweeps 22, 23 and packed-3, are at commit
7898003 with the kernel options they timed).
Each writes its JSON into OUT (committed beside this
script, under bench/kernels/results/). It lives with the application: it hands the sm_80 backend's
kernels to the checks of recipekit.bench.kernels."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from recipekit.backends.cuda_sm80 import kernels
from recipekit.backends.cuda_sm80.kernels import fp8_gemm, fp8_gemv_mma, mxfp4_moe
from recipekit.backends.cuda_sm80.kernels import serial as serial_split
from recipekit.bench.kernels import diag as kdiag
from recipekit.bench.kernels import microbench, parity, reference, roofline, synth, timing, validity
from recipekit.cli.kernels_driver import driver


def timed_doc() -> dict[str, Any]:
    """A timing mode's result head: provenance, the timing method and the copy baseline measured now (printed)."""
    doc: dict[str, Any] = {"provenance": roofline.provenance(driver()), "method": timing.METHOD}
    doc["copy"] = roofline.copy_bandwidth()
    print("copy", doc["copy"], flush=True)
    return doc


def check(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = {"provenance": roofline.provenance(driver())}
    impls = {name: kernels.builtin(name) for name in kernels.ENTRIES}
    res = parity.run(impls, "cuda")
    for r in res:
        print(r.line(), flush=True)
    doc["parity"] = [r.to_dict() for r in res]
    doc["subnormal_parity"] = subnormal_parity()
    doc["validity"] = validity.run(kernels.modules())
    for v in doc["validity"]:
        print(v, flush=True)
    (out / "check.json").write_text(json.dumps(doc, indent=1))
    return doc


# the FP8 decoders that place e4m3 bits into fp32 / bf16 denormals (the register tile's DECODER 3, the MMA
# kernel's DECODER 1) and the fp16 one, each on weights holding only e4m3 subnormals (a kernel, or a tensor
# core, that flushed them would give zeros): (name, path, config)
SUBNORMAL_CASES = (
    ("mma bf16 bits", "mma", (32, 256, 4, 3, 1, 1)),
    ("mma fp16 bits", "mma", (32, 256, 4, 3, 1, 0)),
    ("register tile fp32 bits", "gemv", (8, 512, 4, 1, 3, 0, 3)),
    ("swapped mma packed-PTX bf16 bits", "mma", (64, 256, 2, 3, 1, 2, 1)),
    ("swapped mma bf16 bits, split 4", "mma", (32, 256, 1, 3, 4, 2, 1)),
    ("swapped mma bf16 bits, codes a step ahead", "mma", (64, 128, 2, 3, 2, 4, 1)),
    ("swapped mma bf16 bits, 4 warps on mma.sync", "mma", (64, 128, 4, 3, 2, 4, 1, 0, 1)),
    ("register tile fp32 bits, loads staged in shared memory", "gemv", (8, 512, 4, 1, 3, 0, 3, 0, 0, 3)),
    ("swapped mma packed-PTX bf16 bits, powers of two on the activations", "mma", (32, 128, 2, 4, 2, 5, 1, 0, 1, 1)),
    ("hand-placed mma.sync (Gluon), 4 warps", "gluon", (4, 4)),
)


def subnormal_parity() -> list[dict[str, Any]]:
    """Parity of each SUBNORMAL_CASES decoder at M = 1, 2 and 8 on a 512 x 1024 weight of e4m3 subnormal bytes
    only (0x01..0x07 and their negatives), against the fp32 reference."""
    import torch  # lazy: pulls torch

    g = torch.Generator().manual_seed(5)
    n, k = 512, 1024
    w = (torch.randint(1, 8, (n, k), generator=g) | (torch.randint(0, 2, (n, k), generator=g) << 7)).to(torch.uint8)
    s = synth.e8m0_codes((n // 32, k // 32), g)
    limit = float(parity.thresholds()["kernels"]["fp8_gemm"]["max_rel_error"])
    rows = []
    for m in (1, 2, 8):
        x = synth.bf16((m, k), g)
        want = reference.fp8_gemm(x, w, s)
        for name, path, cfg in SUBNORMAL_CASES:
            got = fp8_gemm.path_kernel(path)(x.cuda(), w.cuda(), s.cuda(), cfg).cpu()
            r = parity.compare("fp8_gemm", m, got, want, limit)
            rows.append(
                {"case": name, "config": list(cfg), "m": m, "rel_error": r.to_dict()["rel_error"], "pass": r.passed}
            )
            print("subnormal", rows[-1], flush=True)
    return rows


def micro(out: Path) -> dict[str, Any]:
    """The card's FFMA / FMUL+FADD / HFMA / MMA figures, the variant they choose, and parity of the
    FP8 and MoE kernels compiled without FMA contraction."""

    doc: dict[str, Any] = {"provenance": roofline.provenance(driver()), "microbench": microbench.run()}
    print(doc["microbench"], flush=True)
    impls = {
        "fp8_gemm": partial(fp8_gemm.fp8_gemm, fp_fusion=False),
        "mxfp4_moe": partial(mxfp4_moe.mxfp4_moe, fp_fusion=False),
    }
    res = parity.run(impls, "cuda")
    for r in res:
        print("no-fusion", r.line(), flush=True)
    doc["parity_no_fusion"] = [r.to_dict() for r in res]
    (out / "micro.json").write_text(json.dumps(doc, indent=1))
    return doc


def moe(out: Path) -> dict[str, Any]:
    """The MoE kernel alone (a short run): its parity at every M with and without FMA contraction, then
    its roofline rows (every configuration of roofline.MOE_CONFIGS timed, the copy baseline measured in
    the same run)."""
    doc: dict[str, Any] = {"provenance": roofline.provenance(driver())}
    impls = {"mxfp4_moe": mxfp4_moe.mxfp4_moe}
    res = parity.run(impls, "cuda") + parity.run({"mxfp4_moe": partial(mxfp4_moe.mxfp4_moe, fp_fusion=False)}, "cuda")
    for r in res:
        print(r.line(), flush=True)
    doc["parity_default_then_no_fusion"] = [r.to_dict() for r in res]
    doc["default_config"] = list(mxfp4_moe.DEFAULT_CONFIG)
    (out / "moe.json").write_text(json.dumps(doc, indent=1))
    doc.update(roofline.run(kernels.modules(), driver(), parts=("moe",)))
    (out / "moe.json").write_text(json.dumps(doc, indent=1))
    return doc


def moe_launches(out: Path) -> dict[str, Any]:
    """Where the MoE's time goes: each configuration of roofline.MOE_LAUNCH_CONFIGS at M = 1, the whole call
    and each launch alone (up, down[, sum]), with its parity; then the fastest at M = 1 beside the current
    default at M = 8, and its parity at every M with and without FMA contraction; the copy baseline measured
    in the same run. The JSON is rewritten after each stage (a run cut short keeps what it measured)."""
    doc = timed_doc()
    path = out / "moe_launches.json"
    doc["rows"] = roofline.bench_moe_launches(kernels.modules(), doc["copy"]["gb_s"], roofline.MOE_LAUNCH_CONFIGS)
    path.write_text(json.dumps(doc, indent=1))
    best = tuple(min(doc["rows"], key=lambda r: r["us"])["config"])
    doc["fastest_m1"] = list(best)
    pair = tuple(dict.fromkeys((mxfp4_moe.DEFAULT_CONFIG, best)))
    doc["rows"] += roofline.bench_moe_launches(kernels.modules(), doc["copy"]["gb_s"], pair, ms=(8,))
    path.write_text(json.dumps(doc, indent=1))
    impl = partial(mxfp4_moe.mxfp4_moe, config=best)
    res = parity.run({"mxfp4_moe": impl}, "cuda") + parity.run(
        {"mxfp4_moe": partial(mxfp4_moe.mxfp4_moe, config=best, fp_fusion=False)}, "cuda"
    )
    for r in res:
        print("fastest", r.line(), flush=True)
    doc["fastest_parity_then_no_fusion"] = [r.to_dict() for r in res]
    doc["copy_after"] = roofline.copy_bandwidth()
    path.write_text(json.dumps(doc, indent=1))
    return doc


# the up launch's candidate tiles timed beside the default in `diag` (BLOCK_N, BLOCK_KB, num_warps of the up launch)
DIAG_UP_TILES = ((8, 512, 4), (8, 512, 2), (16, 256, 2), (16, 512, 8), (8, 1024, 4))
# read-reduce grids: (programs per slot or per weight, BLOCK words, num_warps); the first of each is the real grid
DIAG_MOE_RR = ((144, 1024, 4), (144, 2048, 8), (22, 2048, 8), (44, 2048, 8), (88, 1024, 4), (288, 512, 4))
DIAG_FP8_SHAPES = ((4096, 4096), (8192, 5120), (5120, 16384), (24576, 5120))


def diag(out: Path) -> dict[str, Any]:
    """Where the M = 1 time goes: the MoE's up launch and the FP8 GEMV (its table's path) each beside the same
    tiling with a trivial decode, a plain read-reduce of the same bytes on several grids, an empty launch of
    the same grid and a copy of the same bytes; the copy baseline measured in the same run (before and after)."""
    import torch  # lazy: pulls torch

    doc = timed_doc()
    gbs = doc["copy"]["gb_s"]
    path = out / "diag.json"
    weights = roofline._moe_weights()
    w13, s13, w2, s2 = weights
    sels, wts, x, _, _ = roofline._moe_call(1, torch.Generator().manual_seed(11), weights)
    hidden, inter = roofline.MOE["hidden"], roofline.MOE["inter"]
    cfg = mxfp4_moe.DEFAULT_CONFIG
    plans = [mxfp4_moe.moe_launches(x, sel, wts, *weights, 10.0, cfg)[0] for sel in sels]
    tile = (cfg[0], cfg[1], cfg[2])
    doc["moe_up"] = kdiag.moe_up([p[0][1] for p in plans], w13, s13, sels, hidden, inter, tile, gbs, DIAG_MOE_RR)
    up_bytes = doc["moe_up"]["bytes"]
    doc["moe_up"]["copy_same_bytes"] = timing.copy_bandwidth(up_bytes // 2)
    print("moe-up copy of the same bytes", doc["moe_up"]["copy_same_bytes"], flush=True)
    tiles = []
    for bn, bkb, warps in DIAG_UP_TILES:
        c = (bn, bkb, warps) + tuple(cfg[3:])
        ps = [mxfp4_moe.moe_launches(x, sel, wts, *weights, 10.0, c)[0] for sel in sels]
        us = timing.per_call_seconds([p[0][1] for p in ps]) * 1e6
        tiles.append({"config": list(c), "up_us": us, "x_copy": up_bytes / us / 1e3 / gbs})
        print("moe-up tile", tiles[-1], flush=True)
    doc["moe_up_tiles"] = tiles
    path.write_text(json.dumps(doc, indent=1))
    del plans
    torch.cuda.empty_cache()
    doc["fp8"] = []
    for n, k in DIAG_FP8_SHAPES:
        g = torch.Generator().manual_seed(n + k)
        w0, s0, ws, ss = roofline.fp8_weights(n, k, g)
        x1 = synth.bf16((1, k), g).cuda()
        choice = fp8_gemm.tuning.fp8_choice(x1.device, n, k, 1)
        real = [partial(fp8_gemm.fp8_gemm, x1, w, s) for w, s in zip(ws, ss)]
        progs = -(-n // choice[1][0])
        rrg = ((progs, 1024, 4), (progs, 2048, 8), (264, 2048, 8), (528, 1024, 4), (1056, 512, 4))
        row = kdiag.fp8_gemv(real, ws, ss, choice[1][:3], gbs, rrg)  # type: ignore[arg-type]
        row["path"] = [choice[0], list(choice[1])]
        row["copy_same_bytes"] = timing.copy_bandwidth(row["bytes"] // 2)
        print("fp8 copy of the same bytes", row["copy_same_bytes"], flush=True)
        doc["fp8"].append(row)
        path.write_text(json.dumps(doc, indent=1))
        del ws, ss
        torch.cuda.empty_cache()
    doc["copy_after"] = roofline.copy_bandwidth()
    path.write_text(json.dumps(doc, indent=1))
    return doc


# run 12's candidates (mxfp4_moe config; index 5 TILE 5: the PTX word decoder, index 12 PREFETCH)
TRIAL_MOE = (
    mxfp4_moe.DEFAULT_CONFIG,
    (16, 512, 4, 0, 32, 5, 128, 4),
    (16, 512, 4, 0, 32, 5, 128, 4, 0, 1, 0, 0, 1),
    (8, 512, 4, 0, 32, 5, 128, 4, 0, 1, 0, 0, 1),
    (16, 512, 4, 0, 32, 5, 256, 4, 0, 1, 0, 0, 1),
    (16, 256, 4, 0, 32, 5, 128, 4, 0, 1, 0, 0, 1),
    (16, 512, 4, 0, 32, 5, 128, 4, 0, 3, 0, 0, 1),
)
# FP8 GEMV register-tile candidates at M = 1 and 2: (BLOCK_N, BLOCK_K, num_warps, SPLIT_K, DECODER, PREFETCH, 3)
TRIAL_FP8 = ((8, 1024, 4), (8, 512, 4), (16, 512, 4), (16, 256, 4), (32, 256, 8), (8, 256, 4))


# run 13's candidates: TILE 6 (the PTX decoder in the up launch only), register caps (indices 13, 14)
TRIAL2_MOE = (
    mxfp4_moe.DEFAULT_CONFIG,
    (16, 512, 4, 0, 32, 6, 128, 4),
    (16, 512, 4, 0, 32, 6, 128, 4, 0, 1, 0, 0, 0, 96),
    (16, 512, 4, 0, 32, 6, 128, 4, 0, 1, 0, 0, 0, 80),
    (16, 512, 4, 0, 32, 6, 128, 4, 0, 1, 0, 0, 0, 64),
    (16, 512, 4, 0, 32, 2, 128, 4, 0, 1, 0, 0, 0, 96),
    (16, 512, 4, 0, 32, 2, 128, 4, 0, 1, 0, 0, 0, 80),
    (16, 512, 4, 0, 32, 6, 128, 4, 0, 1, 0, 0, 0, 0, 64),
    (16, 512, 4, 0, 32, 6, 128, 4, 0, 1, 0, 0, 0, 80, 64),
)
# full FP8 GEMV configs per M (the table's split is used where it has one): register caps, prefetch beside none
TRIAL2_FP8: dict[int, tuple[tuple[int, ...], ...]] = {
    1: ((8, 1024, 4, 1, 3, 0, 3, 96), (8, 1024, 4, 1, 3, 0, 3, 80), (16, 256, 4, 1, 3, 1, 3), (16, 256, 4, 1, 3, 0, 3),
        (8, 512, 4, 1, 3, 0, 3, 64), (8, 512, 4, 1, 3, 0, 3)),
    2: ((8, 512, 4, 1, 3, 0, 3), (8, 512, 4, 1, 3, 1, 3), (16, 256, 4, 1, 3, 1, 3), (16, 256, 4, 1, 3, 0, 3)),
}  # fmt: skip


# run 15's candidates: TILE 7 (the up launch on the tensor cores: tl.dot of the decoded bf16 tile against a block-
# diagonal activation tile, one column per 32-value group) with the default's down launch, and TILE 8 (the down launch
# on the tensor cores too, h as bf16 hi + lo); 9 and 10 the same with the PTX nibble decoder; rows, bytes per step,
# warps and stages of the up launch varied
MMA_MOE = (
    mxfp4_moe.DEFAULT_CONFIG,
    (32, 256, 4, 0, 32, 9, 128, 4, 0, 1, 0, 0, 0, 0, 64),
    (32, 256, 8, 0, 32, 9, 128, 4, 0, 1, 0, 0, 0, 0, 64),
    (64, 256, 8, 0, 32, 9, 128, 4, 0, 1, 0, 0, 0, 0, 64),
    (16, 256, 4, 0, 32, 9, 128, 4, 0, 1, 0, 0, 0, 0, 64),
    (32, 256, 4, 0, 32, 7, 128, 4, 0, 1, 0, 0, 0, 0, 64),
    (32, 256, 4, 0, 32, 9, 128, 4, 0, 1, 2, 0, 0, 0, 64),
    (32, 256, 4, 0, 32, 9, 128, 4, 0, 1, 4, 0, 0, 0, 64),
    (32, 256, 4, 0, 64, 10, 256, 4),
    (32, 256, 4, 0, 32, 10, 256, 4),
    (32, 256, 4, 0, 64, 10, 256, 8),
    (32, 256, 4, 0, 64, 8, 256, 4),
)


def mma(out: Path) -> dict[str, Any]:
    """Run 15: the tensor-core candidates (MMA_MOE) against the default in one run: parity at every M with and
    without FMA contraction of one TILE 7 and one TILE 8 configuration, then each candidate launch by launch at M = 1
    (with its parity on the full-size shape), the fastest beside the default at M = 8, the fastest's parity at every
    M in both variants; the copy baseline before and after."""
    doc = timed_doc()
    gbs = doc["copy"]["gb_s"]
    path = out / "mma.json"
    doc["moe_parity"] = []

    def par(cfg: tuple[int, ...]) -> None:
        for fusion in (True, False):
            impl = partial(mxfp4_moe.mxfp4_moe, config=cfg, fp_fusion=fusion)
            for r in parity.run({"mxfp4_moe": impl}, "cuda"):
                print("parity", cfg, fusion, r.line(), flush=True)
                doc["moe_parity"].append({"config": list(cfg), "fp_fusion": fusion, **r.to_dict()})
        path.write_text(json.dumps(doc, indent=1))

    for cfg in (MMA_MOE[1], MMA_MOE[8], MMA_MOE[11]):
        par(cfg)
    doc["moe_rows"] = roofline.bench_moe_launches(kernels.modules(), gbs, MMA_MOE)
    path.write_text(json.dumps(doc, indent=1))
    best = tuple(min(doc["moe_rows"], key=lambda r: r["us"])["config"])
    doc["moe_fastest_m1"] = list(best)
    pair = tuple(dict.fromkeys((mxfp4_moe.DEFAULT_CONFIG, best)))
    doc["moe_rows"] += roofline.bench_moe_launches(kernels.modules(), gbs, pair, ms=(8,))
    path.write_text(json.dumps(doc, indent=1))
    if best not in (MMA_MOE[1], MMA_MOE[8], MMA_MOE[11], mxfp4_moe.DEFAULT_CONFIG):
        par(best)
    doc["copy_after"] = roofline.copy_bandwidth()
    path.write_text(json.dumps(doc, indent=1))
    return doc


# session 34's candidates: TILE 11 / 12 (the up launch on the tensor cores, each group's scale folded into the decoded
# bf16 weights, the weights the A operand and the token's activations a [BLOCK_KB, 16] B operand with one live
# column; 12 decodes and scales in PTX) with the default's down launch, and TILE 13 (12 in both launches); rows,
# bytes per step, warps and stages of the up launch varied
FOLD_MOE = (
    mxfp4_moe.TILE6_CONFIG,
    (32, 64, 4, 0, 32, 12, 128, 4, 0, 1, 3, 0, 0, 0, 64),
    (32, 64, 4, 0, 32, 12, 128, 4, 0, 1, 4, 0, 0, 0, 64),
    (32, 128, 4, 0, 32, 12, 128, 4, 0, 1, 3, 0, 0, 0, 64),
    (64, 64, 4, 0, 32, 12, 128, 4, 0, 1, 3, 0, 0, 0, 64),
    (64, 64, 8, 0, 32, 12, 128, 4, 0, 1, 3, 0, 0, 0, 64),
    (16, 64, 4, 0, 32, 12, 128, 4, 0, 1, 3, 0, 0, 0, 64),
    (32, 64, 4, 0, 32, 11, 128, 4, 0, 1, 3, 0, 0, 0, 64),
    (32, 64, 4, 0, 64, 13, 64, 4, 0, 1, 3, 3),
    (32, 64, 4, 0, 64, 13, 128, 4, 0, 1, 3, 3),
)
# the byte-tile kernels whose activation loads moved into _pair_planes (review, session 34): TILE 1 (fp16 decode,
# the 2^63 now folded as 2^(14 - 63)), TILE 2 and TILE 4 (fp32-bit decodes)
PLANES_MOE = ((16, 512, 4, 0, 32, 1, 128, 4), mxfp4_moe.TILE_CONFIG, (16, 512, 4, 0, 32, 4, 128, 4))


def fold(out: Path) -> dict[str, Any]:
    """Session 34: the folded tensor-core candidates (FOLD_MOE) against the default in one run: parity at every M with
    and without FMA contraction of TILE 12, 11 and 13 and of the _pair_planes kernels (PLANES_MOE), then each candidate
    launch by launch at M = 1, the fastest beside the default at M = 8, the fastest's parity; the copy baseline before
    and after. The JSON is rewritten after each stage."""
    doc = timed_doc()
    gbs = doc["copy"]["gb_s"]
    path = out / "fold.json"
    doc["moe_parity"] = []

    def par(cfg: tuple[int, ...], fusions: tuple[bool, ...] = (True, False)) -> None:
        for fusion in fusions:
            impl = partial(mxfp4_moe.mxfp4_moe, config=cfg, fp_fusion=fusion)
            try:
                res = parity.run({"mxfp4_moe": impl}, "cuda")
            except Exception as ex:  # a candidate Triton cannot build is recorded, the run goes on
                print("parity", cfg, fusion, f"{type(ex).__name__}: {str(ex)[:300]}", flush=True)
                doc["moe_parity"].append({"config": list(cfg), "fp_fusion": fusion, "error": str(ex)[:300]})
                continue
            for r in res:
                print("parity", cfg, fusion, r.line(), flush=True)
                doc["moe_parity"].append({"config": list(cfg), "fp_fusion": fusion, **r.to_dict()})
        path.write_text(json.dumps(doc, indent=1))

    checked: tuple[tuple[int, ...], ...] = (FOLD_MOE[1], FOLD_MOE[7], FOLD_MOE[8], *PLANES_MOE)
    for cfg in checked:
        par(cfg)
    doc["moe_rows"] = roofline.bench_moe_launches(kernels.modules(), gbs, FOLD_MOE)  # a config that fails is said
    path.write_text(json.dumps(doc, indent=1))
    best = tuple(min(doc["moe_rows"], key=lambda r: r["us"])["config"])
    doc["moe_fastest_m1"] = list(best)
    pair = tuple(dict.fromkeys((FOLD_MOE[0], best)))
    doc["moe_rows"] += roofline.bench_moe_launches(kernels.modules(), gbs, pair, ms=(8,))
    path.write_text(json.dumps(doc, indent=1))
    if best not in (FOLD_MOE[1], FOLD_MOE[7], FOLD_MOE[8], FOLD_MOE[0]):
        par(best)
    doc["copy_after"] = roofline.copy_bandwidth()
    path.write_text(json.dumps(doc, indent=1))
    return doc


# session 34's second candidates: TILE 14 (TILE 5's PTX word decoder in both launches, h stored per word of w2 and
# times 2^63 so the down launch loads a word's 8 activations as one vector) with the down launch's rows, bytes per
# step, warps and register cap varied; the up launch is the default's
WORDS_MOE = (
    mxfp4_moe.TILE6_CONFIG,
    (16, 512, 4, 0, 32, 14, 128, 4, 0, 1, 0, 0, 0, 0, 64),
    (16, 512, 4, 0, 32, 14, 128, 4),
    (16, 512, 4, 0, 32, 14, 256, 4),
    (16, 512, 4, 0, 16, 14, 256, 4, 0, 1, 0, 0, 0, 0, 64),
    (16, 512, 4, 0, 64, 14, 128, 4),
    (16, 512, 4, 0, 32, 14, 128, 2, 0, 1, 0, 0, 0, 0, 64),
    (16, 512, 4, 0, 16, 14, 128, 2, 0, 1, 0, 0, 0, 0, 64),
)


# run 3: around run 2's fastest (h200-2026-12-02-words-1.json: 64 rows per down program, 59.5 against 62.7 us at
# M = 1): rows, bytes per step, warps, register cap and stages of the down launch
WORDS2_MOE = (
    mxfp4_moe.TILE6_CONFIG,
    (16, 512, 4, 0, 64, 14, 128, 4),
    (16, 512, 4, 0, 64, 14, 256, 4),
    (16, 512, 4, 0, 64, 14, 64, 4),
    (16, 512, 4, 0, 64, 14, 128, 8),
    (16, 512, 4, 0, 128, 14, 128, 8),
    (16, 512, 4, 0, 128, 14, 128, 4),
    (16, 512, 4, 0, 64, 14, 128, 4, 0, 1, 0, 0, 0, 0, 80),
    (16, 512, 4, 0, 64, 14, 128, 4, 0, 1, 0, 2),
    (16, 512, 4, 0, 64, 14, 128, 4, 0, 1, 0, 3),
)


# run 4: TILE 14 with its word loads unmasked where the shape divides the tile (config index 15, MASKLESS): PTX loop
# 10.0 -> 9.4 operations per byte in the up launch, 10.0 -> 9.3 in the down launch (64 rows)
EVEN_MOE = (
    mxfp4_moe.TILE14_CONFIG,
    (16, 512, 4, 0, 64, 14, 128, 4, 0, 1, 0, 0, 0, 0, 0, 1),
    (16, 512, 4, 0, 64, 14, 128, 4, 0, 1, 0, 3, 0, 0, 0, 1),
)
# a parity shape that every EVEN_MOE tile divides (the default one does not divide the up launch's 128 words per step)
EVEN_SHAPES = synth.Shapes(moe_hidden=1024, moe_inter=256)


def even(out: Path) -> dict[str, Any]:
    """Session 34, run 4: EVEN_MOE[1] (MASKLESS) parity at every M with and without FMA contraction on the default
    parity shape (its down launch unmasked, its up launch masked) and on EVEN_SHAPES (both unmasked), the default's
    on EVEN_SHAPES too; then each EVEN_MOE configuration launch by launch at M = 1 and 8; the copy baseline before
    and after."""
    doc = timed_doc()
    path = out / "even.json"
    doc["moe_parity"] = []
    for cfg, shapes, name in (
        (EVEN_MOE[1], None, "default shape"),
        (EVEN_MOE[1], EVEN_SHAPES, "even shape"),
        (mxfp4_moe.DEFAULT_CONFIG, EVEN_SHAPES, "even shape"),
    ):
        for fusion in (True, False):
            impl = partial(mxfp4_moe.mxfp4_moe, config=cfg, fp_fusion=fusion)
            for r in parity.run({"mxfp4_moe": impl}, "cuda", shapes=shapes):
                print("parity", cfg, name, fusion, r.line(), flush=True)
                doc["moe_parity"].append({"config": list(cfg), "shape": name, "fp_fusion": fusion, **r.to_dict()})
        path.write_text(json.dumps(doc, indent=1))
    doc["moe_rows"] = roofline.bench_moe_launches(kernels.modules(), doc["copy"]["gb_s"], EVEN_MOE, ms=(1, 8))
    doc["copy_after"] = roofline.copy_bandwidth()
    path.write_text(json.dumps(doc, indent=1))
    return doc


def words2(out: Path) -> dict[str, Any]:
    """words with run 3's candidates (WORDS2_MOE)."""
    return words(out, WORDS2_MOE, "words2.json")


def words(out: Path, cfgs: tuple[tuple[int, ...], ...] = WORDS_MOE, name: str = "words.json") -> dict[str, Any]:
    """Session 34, run 2: TILE 14 (WORDS_MOE) against the default in one run: parity at every M with and without FMA
    contraction of the first TILE 14 configuration, each candidate launch by launch at M = 1, the fastest beside the
    default at M = 8 and its parity at every M in both variants; the copy baseline before and after."""
    doc = timed_doc()
    gbs = doc["copy"]["gb_s"]
    path = out / name
    doc["moe_parity"] = []

    def par(cfg: tuple[int, ...]) -> None:
        for fusion in (True, False):
            impl = partial(mxfp4_moe.mxfp4_moe, config=cfg, fp_fusion=fusion)
            for r in parity.run({"mxfp4_moe": impl}, "cuda"):
                print("parity", cfg, fusion, r.line(), flush=True)
                doc["moe_parity"].append({"config": list(cfg), "fp_fusion": fusion, **r.to_dict()})
        path.write_text(json.dumps(doc, indent=1))

    par(cfgs[1])
    doc["moe_rows"] = roofline.bench_moe_launches(kernels.modules(), gbs, cfgs)
    path.write_text(json.dumps(doc, indent=1))
    best = tuple(min(doc["moe_rows"], key=lambda r: r["us"])["config"])
    doc["moe_fastest_m1"] = list(best)
    pair = tuple(dict.fromkeys((cfgs[0], best)))
    doc["moe_rows"] += roofline.bench_moe_launches(kernels.modules(), gbs, pair, ms=(8,))
    path.write_text(json.dumps(doc, indent=1))
    if best not in (cfgs[1], cfgs[0]):
        par(best)
    doc["copy_after"] = roofline.copy_bandwidth()
    path.write_text(json.dumps(doc, indent=1))
    return doc


def trial2(out: Path) -> dict[str, Any]:
    """trial with run 13's candidates (TRIAL2_MOE, TRIAL2_FP8)."""
    return trial(out, TRIAL2_MOE, TRIAL2_FP8, "trial2.json", parity_cfgs=TRIAL2_MOE[1:3])


def trial(
    out: Path,
    moe_cfgs: tuple[tuple[int, ...], ...] = TRIAL_MOE,
    fp8_cfgs: dict[int, tuple[tuple[int, ...], ...]] | None = None,
    name: str = "trial.json",
    parity_cfgs: tuple[tuple[int, ...], ...] = TRIAL_MOE[1:3],
) -> dict[str, Any]:
    """Run 12's candidates against the defaults in one run: the MoE's TILE 5 (PTX word decoder, with and without
    prefetch) launch by launch at M = 1 (and the fastest at M = 8), with parity at every M with and without FMA
    contraction; the FP8 register tile with PREFETCH at M = 1 and 2 on the four shapes beside the table's
    choice, each with its parity on the full-size shape; the copy baseline before and after."""
    import torch  # lazy: pulls torch

    doc = timed_doc()
    gbs = doc["copy"]["gb_s"]
    path = out / name
    doc["moe_parity"] = []
    for cfg in parity_cfgs:
        for fusion in (True, False):
            impl = partial(mxfp4_moe.mxfp4_moe, config=cfg, fp_fusion=fusion)
            for r in parity.run({"mxfp4_moe": impl}, "cuda"):
                print("parity", cfg, fusion, r.line(), flush=True)
                doc["moe_parity"].append({"config": list(cfg), "fp_fusion": fusion, **r.to_dict()})
    path.write_text(json.dumps(doc, indent=1))
    doc["moe_rows"] = roofline.bench_moe_launches(kernels.modules(), gbs, moe_cfgs)
    path.write_text(json.dumps(doc, indent=1))
    best = tuple(min(doc["moe_rows"], key=lambda r: r["us"])["config"])
    doc["moe_fastest_m1"] = list(best)
    pair = tuple(dict.fromkeys((mxfp4_moe.DEFAULT_CONFIG, best)))
    doc["moe_rows"] += roofline.bench_moe_launches(kernels.modules(), gbs, pair, ms=(8,))
    path.write_text(json.dumps(doc, indent=1))
    torch.cuda.empty_cache()
    doc["fp8"] = []
    for n, k in DIAG_FP8_SHAPES:
        g = torch.Generator().manual_seed(n + k)
        w0, s0, ws, ss = roofline.fp8_weights(n, k, g)
        nbytes = w0.numel() + s0.numel()
        for m in (1, 2):
            x = synth.bf16((m, k), g).cuda()
            choice = fp8_gemm.tuning.fp8_choice(x.device, n, k, m)
            cands: list[tuple[str, tuple[int, ...]]] = [("table", tuple(choice[1]))]
            split = choice[1][3] if choice[0] == "gemv" else 1
            if choice[0] == "gemv":
                cands.append(("table+prefetch", tuple(choice[1][:5]) + (1, 3)))
            if fp8_cfgs is None:
                cands += [("prefetch", (bn, bk, w, split, 3, 1, 3)) for bn, bk, w in TRIAL_FP8]
            else:
                cands += [("candidate", c[:3] + (split,) + c[4:]) for c in fp8_cfgs[m]]
            for name, cfg in cands:
                if name != "table" and not fp8_gemm.gemv_fits(k, cfg):
                    continue
                fn = fp8_gemm.fp8_gemm if name == "table" else partial(fp8_gemm.fp8_gemv, config=cfg)
                try:
                    t = timing.per_call_seconds([partial(fn, x, w, s) for w, s in zip(ws, ss)])
                except Exception as ex:  # a tile Triton cannot build is skipped, and said
                    print(f"fp8 {n}x{k} M={m} {cfg}: {type(ex).__name__}: {str(ex)[:120]}", flush=True)
                    continue
                row = {"n": n, "k": k, "m": m, "name": name, "path": choice[0] if name == "table" else "gemv",
                       "config": list(cfg), "us": t * 1e6, "x_copy": nbytes / t / 1e9 / gbs,
                       **roofline._parity("fp8_gemm", m, fn(x, w0, s0), (x, w0, s0))}  # fmt: skip
                doc["fp8"].append(row)
                print(row, flush=True)
        path.write_text(json.dumps(doc, indent=1))
        del ws, ss
        torch.cuda.empty_cache()
    doc["copy_after"] = roofline.copy_bandwidth()
    path.write_text(json.dumps(doc, indent=1))
    return doc


def final(out: Path) -> dict[str, Any]:
    """The new defaults measured once more: the MoE default's parity at every M with and without FMA contraction,
    the MoE launch by launch (the previous default TILE_CONFIG beside the new one) at M = 1 and 8, then the FP8
    bench (the table's path per shape and M beside dequantize-once + torch bf16, each with its parity); the copy
    baseline before and after."""
    doc = timed_doc()
    gbs = doc["copy"]["gb_s"]
    path = out / "final.json"
    doc["moe_default"] = list(mxfp4_moe.DEFAULT_CONFIG)
    res = parity.run({"mxfp4_moe": mxfp4_moe.mxfp4_moe}, "cuda") + parity.run(
        {"mxfp4_moe": partial(mxfp4_moe.mxfp4_moe, fp_fusion=False)}, "cuda"
    )
    for r in res:
        print(r.line(), flush=True)
    doc["moe_parity_default_then_no_fusion"] = [r.to_dict() for r in res]
    path.write_text(json.dumps(doc, indent=1))
    pair = (mxfp4_moe.TILE_CONFIG, mxfp4_moe.DEFAULT_CONFIG)
    doc["moe_rows"] = roofline.bench_moe_launches(kernels.modules(), gbs, pair, ms=(1, 8))
    path.write_text(json.dumps(doc, indent=1))
    doc["fp8_gemm"] = roofline.bench_fp8(kernels.modules(), gbs)
    doc["copy_after"] = roofline.copy_bandwidth()
    path.write_text(json.dumps(doc, indent=1))
    return doc


# the swapped MMA kernel's configurations whose parity is checked at every M with and without FMA contraction (one
# per decoder, split and MMA kind: mma.sync on 1-2 warps, wgmma on 4) before sweep 7 times them all
SWAP_PARITY = (
    (64, 256, 2, 3, 1, 2, 1), (32, 256, 1, 3, 4, 2, 1), (64, 256, 4, 3, 2, 2, 1), (32, 256, 1, 3, 1, 3, 1),
    (64, 256, 2, 3, 1, 0, 1),
)  # fmt: skip


def fp8_checks(
    fn: Callable[..., Any], configs: tuple[tuple[int, ...], ...], ms: list[int] | None = None
) -> dict[str, Any]:
    """An FP8 kernel's checks (fn: x, w, s, config, fp_fusion): parity under each of `configs` at `ms` (None: every
    M) with and without FMA contraction, the subnormal-only weights, and one planted fault (bit 0 of one block's E8M0
    code flipped, under configs[0]: the harness must say FAIL); each line printed."""
    doc: dict[str, Any] = {"parity": []}
    for cfg in configs:
        for fusion in (True, False):
            for r in parity.run({"fp8_gemm": partial(fn, config=cfg, fp_fusion=fusion)}, "cuda", ms=ms):
                print("parity", cfg, fusion, r.line(), flush=True)
                doc["parity"].append({"config": list(cfg), "fp_fusion": fusion, **r.to_dict()})
    doc["subnormal_parity"] = subnormal_parity()

    def planted(x: Any, w: Any, s: Any) -> Any:
        s2 = s.clone()
        s2[0, 0] ^= 1
        return fn(x, w, s2, configs[0])

    doc["planted_scale_bit"] = [r.to_dict() for r in parity.run({"fp8_gemm": planted}, "cuda", ms=[1, 8])]
    print("planted", doc["planted_scale_bit"], flush=True)
    return doc


def swap(out: Path, configs: tuple[tuple[int, ...], ...] = SWAP_PARITY, sweep: bool = True) -> dict[str, Any]:
    """Session 34, issue 26: the swapped MMA kernel (fp8_gemm_swap_kernel). Parity of SWAP_PARITY at every M with and
    without FMA contraction, the subnormal-only weights, one planted fault (bit 0 of one block's E8M0 code flipped:
    the harness must say FAIL), then sweep 7 (kernels_fp8_sweep, new only: the committed table's entry and the swapped
    candidates SWAP per shape and M, beside torch bf16) writing OUT/fp8_tuning.json."""
    from recipekit.cli import kernels_fp8_sweep  # lazy: the sweep imports this module (driver)

    doc: dict[str, Any] = {"provenance": roofline.provenance(driver()), **fp8_checks(fp8_gemm.fp8_gemm, configs)}
    (out / "swap.json").write_text(json.dumps(doc, indent=1))
    if sweep:
        kernels_fp8_sweep.main(out, out / "fp8_tuning.json", new_only=True, sweep=7)
    return doc


# sweep 8's DECODER 4 (the next step's codes loaded a step ahead): parity at every M, both FMA variants
SWAP2_PARITY = ((64, 128, 2, 3, 2, 4, 1), (32, 128, 2, 4, 8, 4, 1), (64, 64, 2, 4, 4, 4, 1), (128, 128, 4, 3, 2, 4, 1))


# sweep 9's 4-8 warps on mma.sync (MMA_V2): parity at every M, both FMA variants
SWAP3_PARITY = ((64, 128, 4, 3, 4, 4, 1, 0, 1), (128, 128, 8, 3, 2, 4, 1, 0, 1))


def swap3(out: Path) -> dict[str, Any]:
    """swap2 for sweep 9 (kernels_fp8_sweep.SWAP3 beside the committed table's entries): checks, sweep, the FP8 bench
    on the sweep's table (OUT/swap3.json, fp8_sweep.json, fp8_tuning.json, bench.json)."""
    return swap2(out, SWAP3_PARITY, 9)


def sweep_into_table_and_bench(out: Path, sweep: int) -> dict[str, Any]:
    """kernels_fp8_sweep --new for `sweep` writing OUT/fp8_tuning.json, that table put in place of the backend's, and
    the roofline bench's FP8 part run on it (OUT/bench.json)."""
    import shutil  # lazy: these modes only

    from recipekit.cli import kernels_fp8_sweep  # lazy: the sweep imports kernels_driver, like this module

    kernels_fp8_sweep.main(out, out / "fp8_tuning.json", new_only=True, sweep=sweep)
    shutil.copyfile(out / "fp8_tuning.json", Path(fp8_gemm.tuning.__file__).parent / "data" / "fp8_tuning.json")
    fp8_gemm.tuning.table.cache_clear()
    return bench(out, ("fp8",))


def dsv41(out: Path) -> dict[str, Any]:
    """Session 37, issue 26: sweep 14 (kernels_fp8_sweep: DSV4.1-Flash's own dense FP8 shapes, roofline.FP8_SHAPES)
    into the table, then the FP8 bench on it over those shapes and the research's four (OUT/fp8_sweep.json,
    fp8_tuning.json, bench.json: every row with its same-size copy beside)."""
    return sweep_into_table_and_bench(out, 14)


def dsv41b(out: Path) -> dict[str, Any]:
    """Session 37: sweep 15 (kernels_fp8_sweep.SWEEP15_SHAPES, where sweep 14 lost to torch at M = 4 and 8) into the
    table, then the FP8 bench on it (OUT/fp8_sweep.json, fp8_tuning.json, bench.json)."""
    return sweep_into_table_and_bench(out, 15)


def deep(out: Path) -> dict[str, Any]:
    """Session 41: sweep 16 (kernels_fp8_sweep.sweep16_candidates: every step of a program's K range in flight, on
    DSV4.1-Flash's dense shapes) into the table, then the FP8 bench on it (OUT/fp8_sweep.json, fp8_tuning.json,
    bench.json)."""
    return sweep_into_table_and_bench(out, 16)


def warps(out: Path) -> dict[str, Any]:
    """Session 41: sweep 17 (kernels_fp8_sweep.sweep17_candidates: the swapped MMA kernel with more warps per row
    block, on DSV4.1-Flash's dense shapes) into the table, then the FP8 bench on it."""
    return sweep_into_table_and_bench(out, 17)


# sweep 18's DECODER 5 (the packed PTX decoder, the blocks' powers of two on the activations, one dot per step): parity
# at every M, both FMA variants, on 1, 2 and 4 warps, 16 and 32 rows, split or not
SWAP5_PARITY = (
    (32, 128, 2, 4, 4, 5, 1, 0, 1, 1), (16, 256, 1, 3, 1, 5, 1, 0, 1, 0), (32, 256, 4, 3, 2, 5, 1, 0, 1, 1),
    (32, 128, 1, 3, 1, 5, 1, 0, 1, 0),
)  # fmt: skip


def swap5(out: Path) -> dict[str, Any]:
    """Session 41: swap's checks for SWAP5_PARITY (parity at every M with and without FMA contraction, the
    subnormal-only weights, the planted scale-bit fault: OUT/swap5.json), then sweep 18 into the table and the FP8
    bench on it."""
    doc = swap(out, SWAP5_PARITY, sweep=False)
    (out / "swap.json").rename(out / "swap5.json")
    sweep_into_table_and_bench(out, 18)
    return doc


# fp8_gemv_mma's (num_warps, S[, SPLIT]): parity at M = 1..8, both FMA variants (sweep 19; sweep 20's split K)
GLUON_PARITY = ((4, 4), (1, 4), (8, 1), (2, 4))
GLUON_SPLIT_PARITY = ((4, 4, 2), (8, 4, 4), (2, 4, 8))
GLUON_DEEP_PARITY = ((4, 8), (2, 8, 4), (1, 8))  # sweep 21's eight blocks ahead


def gluon2(out: Path) -> dict[str, Any]:
    """gluon for sweep 20 (K split over programs, the serial sum): GLUON_SPLIT_PARITY's checks, then sweep 20."""
    return gluon(out, GLUON_SPLIT_PARITY, 20)


def gluon3(out: Path) -> dict[str, Any]:
    """gluon for sweep 21 (eight blocks per iteration, the next eight ahead): GLUON_DEEP_PARITY's checks, sweep 21."""
    return gluon(out, GLUON_DEEP_PARITY, 21)


def floor(out: Path) -> dict[str, Any]:
    """Session 42: where fp8_gemv_mma's time goes at DSV4.1's sizes (M = 1). Its time per call as the bytes grow at
    a fixed grid (N = 8192, K 128..8192, (4, 4)) and as the grid grows at a fixed row length (K = 1280, N 512..32768,
    (1, 4)), beside a copy moving the same bytes, a pure read of them (read_roofline: the fastest plain Triton
    reader) and an empty kernel of the same grid (OUT/floor.json)."""
    import torch  # lazy: pulls torch

    from recipekit.bench.kernels import read_roofline  # lazy: imports triton

    doc = timed_doc()
    doc["rows"] = []
    g = torch.Generator().manual_seed(42)
    series = [("K", 8192, k, (4, 4)) for k in (128, 256, 512, 1024, 2048, 4096, 8192)]
    series += [("N", n, 1280, (1, 4)) for n in (512, 2048, 8192, 32768)]
    for axis, n, k, cfg in series:
        w0, s0, ws, ss = roofline.fp8_weights(n, k, g)
        x = synth.bf16((1, k), g).cuda()
        nbytes = w0.numel() + s0.numel() + 2 * k + 2 * n
        t = timing.per_call_seconds([partial(fp8_gemv_mma.fp8_gemv_mma, x, w, s, cfg) for w, s in zip(ws, ss)])
        t_read, read_cfg = read_roofline.read_seconds(nbytes)
        row = {
            "axis": axis, "n": n, "k": k, "config": list(cfg), "bytes": nbytes, "us": t * 1e6,
            "copy_same_us": timing.copy_seconds(nbytes) * 1e6, "read_same_us": t_read * 1e6,
            "read_config": list(read_cfg), "empty_same_grid_us": read_roofline.empty_seconds(-(-n // 16), cfg[0]) * 1e6,
            "x_copy": nbytes / t / 1e9 / doc["copy"]["gb_s"],
        }  # fmt: skip
        print(row, flush=True)
        doc["rows"].append(row)
        del ws, ss
        (out / "floor.json").write_text(json.dumps(doc, indent=1))
    doc["read_256mib"] = read_roofline.read_seconds(256 << 20)
    print("read 256 MiB", doc["read_256mib"], (256 << 20) / doc["read_256mib"][0] / 1e9, "GB/s", flush=True)
    (out / "floor.json").write_text(json.dumps(doc, indent=1))
    return doc


# fp8_gemv_mma on pack()ed weights: parity configurations, and the timed ones per shape (those whose K fits)
PACKED_PARITY = ((4, 4), (2, 4, 4), (1, 8), (8, 1), (2, 8, 2))  # packed-4 ran the last with IL 1 (7898003)
PACKED_TIMED = tuple((w, st, sp) for w in (1, 2, 4, 8) for st in (4, 8) for sp in (1, 2, 4, 5, 8, 10))


def packed(out: Path) -> dict[str, Any]:
    """Session 42: fp8_gemv_mma on pack()ed weights (each warp's run of blocks one span of memory: the floor run
    found the row layout's marginal rate 3.66 TB/s against a pure read's 4.52). PACKED_PARITY's checks at M = 1,
    2, 4, 8, 12 and 16 (both FMA variants, the planted scale bit; the row layout's at M = 9, 12, 16: the second token
    group), then per DSV4.1-Flash dense shape and M = 1, 2, 4, 8, 16 every PACKED_TIMED configuration that fits,
    timed on packed weight copies, beside the table's entry on the weights as stored, torch bf16, a copy and a pure
    read of the same bytes (OUT/packed.json); the fastest per shape and M as the packed weights' table
    (OUT/fp8_tuning_packed.json, packed_table)."""
    import torch  # lazy: pulls torch

    from recipekit.bench.kernels import read_roofline  # lazy: imports triton
    from recipekit.cli import kernels_fp8_sweep  # lazy: the sweep imports this module (driver)

    fn = fp8_gemv_mma.fp8_gemv_mma_packed
    ms = (1, 2, 4, 8, 16)  # 9..16: the second token group
    checks = fp8_checks(fn, PACKED_PARITY, [*ms[:4], 12, 16])
    doc: dict[str, Any] = {"provenance": roofline.provenance(driver()), **checks}
    doc["row_layout_parity"] = fp8_checks(fp8_gemv_mma.fp8_gemv_mma, ((4, 4), (2, 4, 4), (1, 8)), [9, 12, 16])["parity"]
    (out / "packed.json").write_text(json.dumps(doc, indent=1))
    cands = {
        (n, k, m): [c for c in PACKED_TIMED if fp8_gemv_mma.fits(k, *c)] for n, k in roofline.FP8_SHAPES for m in ms
    }
    jobs = {("gluon_packed", c, m, k) for (n, k, m), cs in cands.items() for c in cs}
    kernels_fp8_sweep.precompile(sorted(jobs))
    doc.update(method=timing.METHOD, copy=roofline.copy_bandwidth(), rows=[])
    gbs = doc["copy"]["gb_s"]
    for n, k in roofline.FP8_SHAPES:
        g = torch.Generator().manual_seed(n + k)
        w0, s0, ws, ss = roofline.fp8_weights(n, k, g)
        pws = [fp8_gemv_mma.pack(w) for w in ws]
        wbs = roofline.torch_weights(w0, s0)
        for m in ms:
            x = synth.bf16((m, k), g).cuda()
            nbytes = w0.numel() + s0.numel() + x.numel() * 2 + m * n * 2
            times = {}
            for c in cands[(n, k, m)]:
                times[c] = timing.per_call_seconds([partial(fn, x, p, s, c) for p, s in zip(pws, ss)])
            best = min(times, key=lambda c: times[c])
            check = roofline._parity("fp8_gemm", m, fn(x, pws[0], s0, best), (x, w0, s0))
            entry = fp8_gemm.tuning.fp8_choice(x.device, n, k, m)
            t_row = timing.per_call_seconds([partial(fp8_gemm.fp8_gemm, x, w, s) for w, s in zip(ws, ss)])
            t_read, _ = read_roofline.read_seconds(nbytes)
            row = {
                "n": n, "k": k, "m": m, "tensor": roofline.SHAPE_NAMES.get((n, k)), "bytes": nbytes,
                "config": list(best), "us": times[best] * 1e6, "x_copy": nbytes / times[best] / 1e9 / gbs,
                "row_layout": [entry[0], list(entry[1])], "row_layout_us": t_row * 1e6,
                "torch_us": timing.per_call_seconds([partial(torch.matmul, x, wb.T) for wb in wbs]) * 1e6,
                "copy_same_us": timing.copy_seconds(nbytes) * 1e6, "read_same_us": t_read * 1e6, **check,
                "all": [[list(c), v * 1e6] for c, v in sorted(times.items(), key=lambda i: i[1])],
            }  # fmt: skip
            print({k_: v for k_, v in row.items() if k_ != "all"}, flush=True)
            doc["rows"].append(row)
            (out / "packed.json").write_text(json.dumps(doc, indent=1))
        del ws, ss, pws, wbs
        torch.cuda.empty_cache()
    doc["copy_after"] = roofline.copy_bandwidth()
    (out / "packed.json").write_text(json.dumps(doc, indent=1))
    (out / "fp8_tuning_packed.json").write_text(json.dumps(packed_table(doc), indent=1) + "\n")
    return doc


def gluon16(out: Path) -> dict[str, Any]:
    """Session 42: sweep 24 (the Gluon kernel at M = 16 on the weights as stored, two token groups) into the table,
    then the FP8 bench on it (OUT/fp8_sweep.json, fp8_tuning.json, bench.json)."""
    return sweep_into_table_and_bench(out, 24)


def packed_bench(out: Path) -> dict[str, Any]:
    """packed, its table put in place of the backend's packed table, then the FP8 bench (row layout, packed, torch,
    same-size copy and read: OUT/bench.json)."""
    import shutil  # lazy: these modes only

    doc = packed(out)
    shutil.copyfile(
        out / "fp8_tuning_packed.json", Path(fp8_gemm.tuning.__file__).parent / "data" / "fp8_tuning_packed.json"
    )
    fp8_gemm.tuning.table.cache_clear()
    bench(out, ("fp8",))
    return doc


def packed_table(doc: dict[str, Any]) -> dict[str, Any]:
    """The packed weights' tuning table (tuning.table(packed=True)) from a packed run's rows: per shape and M the
    fastest configuration, where it passed parity."""
    import torch  # lazy: pulls torch

    card = torch.cuda.get_device_name(0)
    return {
        "source": "python -m recipekit.cli.kernels_device_run packed OUT (fastest of PACKED_TIMED per shape and M on "
        f"pack()ed weights, where it passed parity; timed as: {timing.METHOD})",
        "provenance": doc["provenance"],
        "config_fields": {"gluon_packed": "num_warps, S, SPLIT: fp8_gemv_mma on fp8_gemv_mma.pack()ed weights"},
        "entries": [
            {"card": card, "n": r["n"], "k": r["k"], "m": r["m"], "path": "gluon_packed", "config": r["config"]}
            for r in doc["rows"]
            if r["parity_pass"]
        ],
    }


def gluon(out: Path, configs: tuple[tuple[int, ...], ...] = GLUON_PARITY, sweep: int = 19) -> dict[str, Any]:
    """Session 41: fp8_gemv_mma (hand-placed mma.sync, Gluon). Parity of `configs` at M = 1, 2, 4 and 8 with and
    without FMA contraction, the subnormal-only weights, the planted scale-bit fault (OUT/gluon.json), then sweep
    `sweep` into the table and the FP8 bench on it."""
    checks = fp8_checks(fp8_gemv_mma.fp8_gemv_mma, configs, [1, 2, 4, 8])
    doc: dict[str, Any] = {"provenance": roofline.provenance(driver()), **checks}
    (out / "gluon.json").write_text(json.dumps(doc, indent=1))
    sweep_into_table_and_bench(out, sweep)
    return doc


def moe_parity_everywhere(config: tuple[int, ...], label: str) -> list[dict[str, Any]]:
    """The MoE's parity under `config` at every M, with and without FMA contraction, on the default shape and on
    EVEN_SHAPES; each line printed under `label`."""
    rows = []
    for shapes in (None, EVEN_SHAPES):
        for fusion in (True, False):
            impl = partial(mxfp4_moe.mxfp4_moe, config=config, fp_fusion=fusion)
            for r in parity.run({"mxfp4_moe": impl}, "cuda", shapes=shapes):
                print(label, "even" if shapes else "default", fusion, r.line(), flush=True)
                rows.append({"shape": "even" if shapes else "default", "fp_fusion": fusion, **r.to_dict()})
    return rows


def moe_best_beside_base(
    doc: dict[str, Any],
    path: Path,
    base: tuple[int, ...],
    best: tuple[int, ...],
    label: str,
    ms: tuple[int, ...] = (1, 8),
) -> None:
    """The MoE modes' common tail: `best` beside `base` launch by launch at `ms` (M = 1 and 8), best's parity
    everywhere (moe_parity_everywhere), the copy baseline once more; doc written to `path` after each stage."""
    pair = tuple(dict.fromkeys((base, best)))
    doc["rows"] += roofline.bench_moe_launches(kernels.modules(), doc["copy"]["gb_s"], pair, ms=ms)
    path.write_text(json.dumps(doc, indent=1))
    doc["parity"] = moe_parity_everywhere(best, label)
    doc["copy_after"] = roofline.copy_bandwidth()
    path.write_text(json.dumps(doc, indent=1))


def moe_fastest_beside_base(
    doc: dict[str, Any], path: Path, base: tuple[int, ...], cfgs: tuple[tuple[int, ...], ...], label: str,
    ms: tuple[int, ...] = (1,), best_ms: tuple[int, ...] = (1, 8),
) -> None:  # fmt: skip
    """The candidate modes' common tail: `cfgs` launch by launch at `ms`, then the fastest at M = 1 of those that
    pass parity (doc["fastest_m1"]) through moe_best_beside_base at `best_ms`."""
    doc["rows"] = roofline.bench_moe_launches(kernels.modules(), doc["copy"]["gb_s"], cfgs, ms=ms)
    path.write_text(json.dumps(doc, indent=1))
    best = tuple(min((r for r in doc["rows"] if r["parity_pass"] and r["m"] == 1), key=lambda r: r["us"])["config"])
    doc["fastest_m1"] = list(best)
    moe_best_beside_base(doc, path, base, best, label, ms=best_ms)


def swap2(out: Path, configs: tuple[tuple[int, ...], ...] = SWAP2_PARITY, sweep: int = 8) -> dict[str, Any]:
    """Session 34, second run: swap's checks for SWAP2_PARITY (parity at every M with and without FMA contraction, the
    subnormal-only weights, the planted scale-bit fault), sweep 8 (kernels_fp8_sweep --new: the committed table's
    entry, sweep 7's winners, beside SWAP2, torch bf16 timed too) writing OUT/fp8_tuning.json, then that table put in
    place of the backend's and the roofline bench's FP8 part run on it (OUT/bench.json): the final table's figures
    against torch at every M from this one run."""
    doc = swap(out, configs, sweep=False)
    (out / "swap.json").rename(out / f"swap{sweep - 6}.json")
    sweep_into_table_and_bench(out, sweep)
    return doc


# serial split-K (SERIAL): register-tile and swapped-kernel configurations whose parity is checked at every M they take
# (the register tile M <= 8) with and without FMA contraction, and whose bits are compared with the same
# configuration summed by split_sum_kernel
SERIAL_CASES = (
    ("gemv", (16, 256, 4, 4, 3, 1, 3, 0, 1)), ("gemv", (8, 512, 4, 2, 3, 0, 3, 0, 1)),
    ("mma", (64, 128, 2, 3, 4, 4, 1, 0, 0, 1)), ("mma", (128, 128, 4, 3, 2, 4, 1, 0, 1, 1)),
    ("mma", (32, 128, 1, 4, 8, 4, 1, 0, 0, 1)),
)  # fmt: skip


def serial_checks() -> dict[str, Any]:
    """SERIAL_CASES: parity at every M (both FMA variants) on the harness's shape; then on 5120 x 16384 (the widest K,
    the most programs per row block) at M = 1, 2, 8 the output bits of 200 eager calls and of 20 replays of a CUDA
    graph of 8 calls, each against the same configuration without SERIAL (split_sum_kernel), and the counters all
    zero after."""
    import torch  # lazy: pulls torch

    doc: dict[str, Any] = {"parity": [], "bits": []}
    for path, cfg in SERIAL_CASES:
        fn = fp8_gemm.fp8_gemv if path == "gemv" else fp8_gemm.fp8_gemm
        ms = [1, 2, 4, 8] if path == "gemv" else [1, 2, 4, 8, 16]
        for fusion in (True, False):
            for r in parity.run({"fp8_gemm": partial(fn, config=cfg, fp_fusion=fusion)}, "cuda", ms=ms):
                print("serial parity", path, cfg, fusion, r.line(), flush=True)
                doc["parity"].append({"path": path, "config": list(cfg), "fp_fusion": fusion, **r.to_dict()})
    g = torch.Generator().manual_seed(21)
    n, k = 5120, 16384
    w = synth.fp8_bytes((n, k), g).cuda()
    s = synth.e8m0_codes((n // 32, k // 32), g).cuda()
    for path, cfg in SERIAL_CASES:
        fn = fp8_gemm.fp8_gemv if path == "gemv" else fp8_gemm.fp8_gemm
        plain = cfg[:-1] + (0,)
        for m in (1, 2, 8):
            x = synth.bf16((m, k), g).cuda()
            want = fn(x, w, s, plain).view(torch.int16)
            eager = sum(not torch.equal(fn(x, w, s, cfg).view(torch.int16), want) for _ in range(200))
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outs = [fn(x, w, s, cfg) for _ in range(8)]
            bad_replays = 0
            for _ in range(20):
                for o in outs:
                    o.fill_(0)
                graph.replay()
                torch.cuda.synchronize()
                bad_replays += sum(not torch.equal(o.view(torch.int16), want) for o in outs)
            del graph
            counters = int(serial_split._serial_state[w.device][0].abs().sum())
            row = {"path": path, "config": list(cfg), "m": m, "eager_calls": 200, "eager_differing": eager,
                   "graph_outputs": 160, "graph_differing": bad_replays, "counters_left": counters}  # fmt: skip
            print("serial bits", row, flush=True)
            doc["bits"].append(row)
    return doc


def serial(out: Path) -> dict[str, Any]:
    """Session 35, issue 26: serial split-K. serial_checks, the subnormal-only weights through the table's path, then
    sweep 10 (kernels_fp8_sweep --new: the committed table's entry, it with SERIAL, SERIAL_GEMV_M1 at M = 1, SERIAL_MMA
    above) writing OUT/fp8_tuning.json, that table put in place of the backend's and the FP8 bench run on it."""
    doc: dict[str, Any] = {"provenance": roofline.provenance(driver()), **serial_checks()}
    doc["subnormal_parity"] = subnormal_parity()
    (out / "serial.json").write_text(json.dumps(doc, indent=1))
    sweep_into_table_and_bench(out, 10)
    return doc


# the register tile with its loads staged through shared memory (STAGES): parity at M = 1..8 in both FMA variants
STAGED_CASES = (
    (8, 1024, 4, 1, 3, 0, 3, 0, 0, 3), (16, 512, 4, 1, 3, 0, 3, 0, 0, 2), (8, 512, 4, 2, 3, 0, 3, 0, 1, 3),
    (32, 256, 8, 1, 3, 0, 3, 0, 0, 4), (16, 256, 4, 4, 3, 0, 3, 0, 1, 3),
)  # fmt: skip


# sweep 13's register caps and tiles around sweep 12's winner
STAGED2_CASES = (
    (16, 512, 4, 1, 3, 0, 3, 96, 0, 3),
    (16, 512, 8, 1, 3, 0, 3, 0, 0, 3),
    (16, 512, 4, 2, 3, 0, 3, 0, 1, 3),
)


def staged2(out: Path) -> dict[str, Any]:
    """staged for sweep 13 (kernels_fp8_sweep.STAGED2_GEMV_M1 beside the committed table's entries)."""
    return staged(out, STAGED2_CASES, 13, "staged-2.json")


def staged(
    out: Path, cases: tuple[tuple[int, ...], ...] | None = None, sweep: int = 12, name: str = "staged.json"
) -> dict[str, Any]:
    """Session 36, issue 26: the register tile with its loop's loads staged through shared memory (STAGES).
    STAGED_CASES' parity at M = 1..8 in both FMA variants and the subnormal-only weights (a staged case among them),
    then sweep 12 (kernels_fp8_sweep --new: the committed table's entry beside STAGED_GEMV) writing
    OUT/fp8_tuning.json, that table put in place of the backend's and the FP8 bench run on it."""
    doc: dict[str, Any] = {"provenance": roofline.provenance(driver()), "parity": []}
    for cfg in cases or STAGED_CASES:
        for fusion in (True, False):
            fn = partial(fp8_gemm.fp8_gemv, config=cfg, fp_fusion=fusion)
            for r in parity.run({"fp8_gemm": fn}, "cuda", ms=[1, 2, 4, 8]):
                print("staged parity", cfg, fusion, r.line(), flush=True)
                doc["parity"].append({"config": list(cfg), "fp_fusion": fusion, **r.to_dict()})
    doc["subnormal_parity"] = subnormal_parity()
    (out / name).write_text(json.dumps(doc, indent=1))
    sweep_into_table_and_bench(out, sweep)
    return doc


def moe_serial_bits() -> list[dict[str, Any]]:
    """SERIAL_CONFIG's output bits against MASKLESS_CONFIG's (the sum launch) on DSV4.1-Flash's experts at M = 1, 8
    and 16: 100 eager calls and 10 replays of a CUDA graph of 4 calls, and the counters left."""
    import torch  # lazy: pulls torch

    weights = roofline._moe_weights()
    gc = torch.Generator().manual_seed(12)
    rows = []
    for m in (1, 8, 16):
        sels, wts, x, _, _ = roofline._moe_call(m, gc, weights)
        fn = partial(mxfp4_moe.mxfp4_moe, x, sels[0], wts, *weights, 10.0)
        want = fn(mxfp4_moe.MASKLESS_CONFIG).view(torch.int16)
        eager = sum(not torch.equal(fn(mxfp4_moe.SERIAL_CONFIG).view(torch.int16), want) for _ in range(100))
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = [fn(mxfp4_moe.SERIAL_CONFIG) for _ in range(4)]
        bad = 0
        for _ in range(10):
            for o in outs:
                o.fill_(0)
            graph.replay()
            torch.cuda.synchronize()
            bad += sum(not torch.equal(o.view(torch.int16), want) for o in outs)
        del graph
        left = int(serial_split._serial_state[x.device][0].abs().sum())
        rows.append({"m": m, "eager_calls": 100, "eager_differing": eager, "graph_outputs": 40, "graph_differing": bad,
                     "counters_left": left})  # fmt: skip
        print("moe serial bits", rows[-1], flush=True)
    return rows


def moe_serial(out: Path) -> dict[str, Any]:
    """Session 35, issue 26: the MoE with serial split-K (mxfp4_moe.SERIAL_CONFIG). Its parity at every M with and
    without FMA contraction on the default shape and on EVEN_SHAPES, its bits against the default's
    (moe_serial_bits), then `moe`'s roofline rows (MOE_CONFIGS) and MASKLESS_CONFIG (the sum launch), SERIAL_CONFIG
    (serial at every M) and the default (serial at M = 1) launch by launch at M = 1 and 8, the copy baseline in the
    same run (OUT/moe_serial.json). Run 1 (moe-serial-1) had the default as MASKLESS_CONFIG and SERIAL_CONFIG serial
    at every M, under the names DEFAULT_CONFIG and SERIAL_CONFIG."""
    doc: dict[str, Any] = {"provenance": roofline.provenance(driver())}
    doc["parity"] = moe_parity_everywhere(mxfp4_moe.SERIAL_CONFIG, "serial")
    doc["bits"] = moe_serial_bits()
    path = out / "moe_serial.json"
    path.write_text(json.dumps(doc, indent=1))
    doc.update(roofline.run(kernels.modules(), driver(), parts=("moe",)))
    path.write_text(json.dumps(doc, indent=1))
    pair = (mxfp4_moe.MASKLESS_CONFIG, mxfp4_moe.SERIAL_CONFIG, mxfp4_moe.DEFAULT_CONFIG)
    doc["moe_launch_rows"] = roofline.bench_moe_launches(kernels.modules(), doc["copy"]["gb_s"], pair, ms=(1, 8))
    path.write_text(json.dumps(doc, indent=1))
    return doc


# the MoE's TILE 14 launches with their word loops' loads staged through shared memory: (up STAGES, down STAGES)
MOE_STAGED = ((2, 1), (3, 1), (4, 1), (1, 2), (1, 3), (2, 2), (3, 3), (4, 3))


def moe_staged(out: Path) -> dict[str, Any]:
    """Session 36, issue 26: the MoE default with its loads staged (config indices 17, 18: MOE_STAGED) launch by
    launch at M = 1 beside the default, with parity at M = 1; the fastest and the default at M = 8; the fastest's
    parity at every M with and without FMA contraction on the default shape and on EVEN_SHAPES; the copy baseline
    in the same run (OUT/moe_staged.json, rewritten after each stage)."""
    doc = timed_doc()
    path = out / "moe_staged.json"
    base = mxfp4_moe.SERIAL_M1_CONFIG  # session 35's default (the run: moe-staged-1)
    cfgs = (base,) + tuple(base + st for st in MOE_STAGED)
    moe_fastest_beside_base(doc, path, base, cfgs, "staged", best_ms=(8,))
    return doc


# run 2: the up launch's tile (BLOCK_N, BLOCK_KB, num_warps) with its loads staged 3 deep, and the down launch's
# (BLOCK_N, BLOCK_KB, num_warps, STAGES), each beside the default's other launch
MOE_STAGED_UP = ((16, 1024, 4), (8, 512, 4), (32, 512, 8), (16, 512, 8), (16, 256, 4), (8, 1024, 4), (16, 512, 2),
                 (32, 256, 4))  # fmt: skip
MOE_STAGED_DOWN = ((32, 128, 4, 1), (64, 128, 8, 1), (32, 128, 2, 1), (128, 128, 8, 1), (64, 64, 4, 1),
                   (32, 64, 2, 1), (32, 128, 4, 2), (64, 128, 8, 2), (128, 128, 8, 2))  # fmt: skip


def moe_staged2(out: Path) -> dict[str, Any]:
    """Session 36, run 2: MOE_STAGED_UP and MOE_STAGED_DOWN launch by launch at M = 1 beside the default
    (mxfp4_moe.DEFAULT_CONFIG: the up launch staged 3 deep), each with its parity at M = 1; the best up launch
    with the best down launch at M = 1 and 8 beside the default, and its parity at every M with and without FMA
    contraction on the default shape and on EVEN_SHAPES; the copy baseline in the same run (OUT/moe_staged_2.json)."""
    doc = timed_doc()
    path = out / "moe_staged_2.json"
    base = mxfp4_moe.DEFAULT_CONFIG
    ups = tuple(t + base[3:] for t in MOE_STAGED_UP)
    downs = tuple(base[:4] + (bn,) + base[5:6] + (bk, w) + base[8:18] + (st,) for bn, bk, w, st in MOE_STAGED_DOWN)
    gbs = doc["copy"]["gb_s"]
    doc["rows"] = roofline.bench_moe_launches(kernels.modules(), gbs, (base,) + ups + downs, ms=(1,))
    path.write_text(json.dumps(doc, indent=1))
    ok = [r for r in doc["rows"] if r["parity_pass"]]
    up = tuple(min(ok, key=lambda r: r["launches_us"]["up"])["config"])
    down = tuple(min(ok, key=lambda r: r["launches_us"]["down"])["config"])
    best = up[:4] + down[4:5] + up[5:6] + down[6:8] + up[8:18] + down[18:19]
    doc["combined"] = list(best)
    moe_best_beside_base(doc, path, base, best, "combined")
    return doc


# session 37: the up launch prefetching its experts' down weights into L2 (config indices 19-22: up to M tokens,
# eighths of each expert's w2, before (0) or after (1) the up loop, the up loads evict_first), on the default's
# tiles; the unstaged up launch (index 17 = 1) where evict_first reaches the PTX (cp.async carries no L2 hint)
MOE_L2 = ((1, 8, 0, 0), (1, 8, 1, 0), (1, 4, 0, 0), (1, 6, 0, 0), (2, 4, 0, 0))
MOE_L2_UNSTAGED = ((1, 8, 0, 1), (1, 8, 0, 0))


def moe_l2(out: Path) -> dict[str, Any]:
    """Session 37, issue 26: the default (mxfp4_moe.DEFAULT_CONFIG) with its up launch prefetching the down weights
    into L2 (MOE_L2, MOE_L2_UNSTAGED; with the down launch staged 2 deep too) launch by launch at M = 1 and 2 beside
    the default, each with its parity; the fastest at M = 1, 2 and 8 beside the default, and its parity at every M
    with and without FMA contraction on the default shape and on EVEN_SHAPES; the copy baseline in the same run
    (OUT/moe_l2.json, rewritten after each stage)."""
    doc = timed_doc()
    path = out / "moe_l2.json"
    base = mxfp4_moe.DEFAULT_CONFIG
    unstaged = base[:17] + (1,) + base[18:]
    cfgs = (base,) + tuple(base + v for v in MOE_L2) + tuple(unstaged + v for v in MOE_L2_UNSTAGED)
    cfgs += (base[:18] + (2,) + MOE_L2[0],)
    moe_fastest_beside_base(doc, path, base, cfgs, "l2", ms=(1, 2))
    return doc


# session 37: the up launch's register cap (index 13) with its stages (index 17): 117 registers and 43 KB of shared
# memory (3 stages) give 4 programs per SM, so its 864 programs at M = 1 run in two waves (528 slots on 132 SMs);
# ptxas -v on sm_90: 96 registers spill nothing at 3 stages, 72 with 2 stages (160 bytes) fit 7 programs (one wave)
MOE_CAPS = ((3, 96), (3, 80), (3, 72), (2, 96), (2, 80), (2, 72), (2, 64))


def moe_caps(out: Path) -> dict[str, Any]:
    """Session 37, issue 26: the default with its up launch capped (MOE_CAPS: stages, registers) launch by launch at
    M = 1 beside the default, each with its parity; the fastest at M = 1 and 8 beside the default and its parity at
    every M with and without FMA contraction on both shapes; the copy baseline in the same run (OUT/moe_caps.json)."""
    doc = timed_doc()
    path = out / "moe_caps.json"
    base = mxfp4_moe.DEFAULT_CONFIG
    cfgs = (base,) + tuple(base[:13] + (cap,) + base[14:17] + (st,) + base[18:] for st, cap in MOE_CAPS)
    moe_fastest_beside_base(doc, path, base, cfgs, "caps")
    return doc


def moe_warm(out: Path) -> dict[str, Any]:
    """Session 37, issue 26: is the MoE's M = 1 down (and up) launch bound by HBM or by its own issue? Each launch of
    the default alone in its own graph: cold (MOE_SELECTIONS routings, other experts each call, as the bench) against
    warm (one routing replayed: its weights stay in L2), with 6 distinct experts and with 3 experts each taken twice
    (half the bytes, surely inside the L2); the copy baseline in the same run (OUT/moe_warm.json)."""
    import torch  # lazy: pulls torch

    doc = timed_doc()
    weights = roofline._moe_weights()
    gc = torch.Generator().manual_seed(11)
    sels, wts, x, _, _ = roofline._moe_call(1, gc, weights)
    twice = [torch.cat([s[:, :3], s[:, :3]], dim=1).contiguous() for s in sels]  # 3 experts, each in two slots
    rows = []
    for label, group in (("6 experts", sels), ("3 experts twice", twice)):
        plans = [dict(mxfp4_moe.moe_launches(x, s, wts, *weights, 10.0)[0]) for s in group]
        for name in plans[0]:
            cold = roofline.timing.per_call_seconds([p[name] for p in plans]) * 1e6
            warm = roofline.timing.per_call_seconds([plans[0][name]]) * 1e6
            rows.append({"routing": label, "launch": name, "cold_us": cold, "warm_us": warm})
            print(rows[-1], flush=True)
    doc["rows"] = rows
    (out / "moe_warm.json").write_text(json.dumps(doc, indent=1))
    return doc


# the MoE's default padded to index 23, where the tensor-core and slot-group indices begin
MOE_PAD = mxfp4_moe.DEFAULT_CONFIG + (0,) * (23 - len(mxfp4_moe.DEFAULT_CONFIG))


def moe_candidates(
    out: Path, name: str, cfgs: tuple[tuple[int, ...], ...], parities: tuple[tuple[str, tuple[int, ...], str], ...],
    label: str,
) -> dict[str, Any]:  # fmt: skip
    """The candidate modes' common run: each (key, configuration, printed label) of `parities` checked at every M
    (moe_parity_everywhere) into doc[key], then `cfgs` through moe_fastest_beside_base beside the default; the copy
    baseline in the same run (OUT/`name`.json, written after each part)."""
    doc = timed_doc()
    path = out / f"{name}.json"
    for key, cfg, printed in parities:
        doc[key] = moe_parity_everywhere(cfg, printed)
    path.write_text(json.dumps(doc, indent=1))
    moe_fastest_beside_base(doc, path, mxfp4_moe.DEFAULT_CONFIG, cfgs, label)
    return doc


# session 38: the up launch on the tensor cores through hand-placed mma.sync (config indices 23-25: on (2: with
# the next words loaded first), warps, steps per iteration), TILE 14's down launch unchanged
MOE_MMA = ((1, 8, 4), (2, 8, 4), (1, 4, 4), (2, 4, 4), (1, 16, 4), (1, 8, 2))
# then the down launch the same way (indices 26-28: on, warps, steps per iteration) behind the up launch's (1, 8, 4)
MOE_MMA_DOWN = ((1, 8, 4, 1, 4, 1), (1, 8, 4, 1, 8, 1), (1, 8, 4, 1, 2, 1), (1, 8, 4, 1, 8, 2), (1, 8, 4, 1, 16, 1))


def moe_mma(out: Path) -> dict[str, Any]:
    """Session 38, issue 26: the default with its up launch (and then its down launch) on the tensor cores
    (mxfp4_moe_mma; MOE_MMA, MOE_MMA_DOWN): the first of each's parity at every M first (printed), then each launch
    by launch at M = 1 beside the default with its parity; the fastest at M = 1 and 8 beside the default and its
    parity at every M with and without FMA contraction on both shapes; the copy baseline in the same run
    (OUT/moe_mma.json)."""
    cfgs = (mxfp4_moe.DEFAULT_CONFIG,) + tuple(MOE_PAD + v for v in MOE_MMA + MOE_MMA_DOWN)
    parities = (
        ("first_parity", cfgs[1], "mma first"),
        ("first_down_parity", MOE_PAD + MOE_MMA_DOWN[0], "mma down first"),
    )
    return moe_candidates(out, "moe_mma", cfgs, parities, "mma")


# session 40: the tensor-core up launch with its words staged through shared memory by cp.async (index 29: stages),
# beside session 38's fastest (1, 8, 2); indices 23-29 after the pad
MOE_MMA_STAGED = (
    (1, 8, 2, 0, 0, 0, 1), (1, 8, 2, 0, 0, 0, 3), (1, 8, 2, 0, 0, 0, 4), (1, 8, 2, 0, 0, 0, 6), (1, 8, 1, 0, 0, 0, 4),
    (1, 8, 1, 0, 0, 0, 8), (1, 4, 2, 0, 0, 0, 3), (1, 4, 2, 0, 0, 0, 4), (1, 4, 1, 0, 0, 0, 6), (1, 2, 2, 0, 0, 0, 4),
    (1, 16, 2, 0, 0, 0, 3), (1, 8, 4, 0, 0, 0, 3),
)  # fmt: skip


def moe_mma_staged(out: Path) -> dict[str, Any]:
    """Session 40, issue 26: MOE_MMA_STAGED (the tensor-core up launch's words staged through shared memory by
    cp.async): the parity of (1, 8, 2, .., 4) and (1, 4, 1, .., 6) at every M first (printed), then each launch by
    launch at M = 1 beside the default with its parity; the fastest at M = 1 and 8 beside the default and its parity
    at every M with and without FMA contraction on both shapes; the copy baseline in the same run
    (OUT/moe_mma_staged.json)."""
    cfgs = (mxfp4_moe.DEFAULT_CONFIG,) + tuple(MOE_PAD + v for v in MOE_MMA_STAGED)
    parities = (
        ("first_parity", MOE_PAD + MOE_MMA_STAGED[2], "staged 4"),
        ("second_parity", MOE_PAD + MOE_MMA_STAGED[8], "staged 6 w4 s1"),
    )
    return moe_candidates(out, "moe_mma_staged", cfgs, parities, "staged")


# session 40: the slots in groups, each group's up and down launch on its own stream (index 30: groups), with the
# default's up launch and with session 38's tensor-core up launch (1, 8, 2); indices 23-30 after the pad
MOE_GROUPS = (
    (0, 0, 0, 0, 0, 0, 0, 1), (0, 0, 0, 0, 0, 0, 0, 2), (0, 0, 0, 0, 0, 0, 0, 3), (0, 0, 0, 0, 0, 0, 0, 6),
    (1, 8, 2, 0, 0, 0, 1, 1), (1, 8, 2, 0, 0, 0, 1, 2), (1, 8, 2, 0, 0, 0, 1, 3), (1, 8, 2, 0, 0, 0, 1, 6),
)  # fmt: skip


def moe_groups(out: Path) -> dict[str, Any]:
    """Session 40, issue 26: MOE_GROUPS (the slots in groups on their own streams): the parity of (.., 2) and
    (1, 8, 2, .., 3) at every M first (printed), then each whole call (and its launches alone) at M = 1 beside the
    default with its parity; the fastest at M = 1 and 8 beside the default and its parity at every M with and without
    FMA contraction on both shapes; the copy baseline in the same run (OUT/moe_groups.json)."""
    cfgs = (mxfp4_moe.DEFAULT_CONFIG,) + tuple(MOE_PAD + v for v in MOE_GROUPS)
    parities = (
        ("first_parity", MOE_PAD + MOE_GROUPS[1], "groups 2"),
        ("second_parity", MOE_PAD + MOE_GROUPS[6], "groups 3 mma"),
    )
    return moe_candidates(out, "moe_groups", cfgs, parities, "groups")


def _down_rows(cfg: tuple[int, ...], rows: int) -> tuple[int, ...]:
    """`cfg` with `rows` output rows per down program (index 4)."""
    return cfg[:4] + (rows,) + cfg[5:]


def moe_groups2(out: Path) -> dict[str, Any]:
    """Session 40, issue 26, second run: the slot groups with shorter down programs (32 or 16 rows, index 4, so the
    last group's down launch, which nothing runs beside, ends sooner), with session 38's tensor-core up launch (and
    with 4 warps per up program); the
    parity of 3 groups with 32 rows at every M first (printed), then each whole call at M = 1 beside the default and
    moe-groups' fastest with its parity; the fastest at M = 1 and 8 beside the default and its parity at every M with
    and without FMA contraction on both shapes (OUT/moe_groups2.json)."""
    mma = MOE_PAD + (1, 8, 2, 0, 0, 0, 1)
    base = mxfp4_moe.DEFAULT_CONFIG
    cfgs: tuple[tuple[int, ...], ...] = (base, mma + (3,), _down_rows(base, 32), _down_rows(mma + (1,), 32))
    cfgs += tuple(_down_rows(mma + (g,), r) for r in (32, 16) for g in (2, 3, 6))
    mma4 = MOE_PAD + (1, 4, 2, 0, 0, 0, 1)  # 4-warp up programs: each ends sooner too
    cfgs += (mma4 + (3,), _down_rows(mma4 + (3,), 32))
    parities = (("first_parity", _down_rows(mma + (3,), 32), "groups 3 rows 32"),)
    return moe_candidates(out, "moe_groups2", cfgs, parities, "groups2")


def moe_groups3(out: Path) -> dict[str, Any]:
    """Session 40, issue 26, third run: moe-groups-2's fastest (3 groups, 16-row down programs, the tensor-core up
    launch) beside its down launches on high-priority streams (index 31, URGENT), 8-row down programs, and 2-warp
    down programs; the parity of URGENT at every M first (printed), then each whole call at M = 1 beside the default
    with its parity; the fastest at M = 1 and 8 beside the default and its parity at every M with and without FMA
    contraction on both shapes (OUT/moe_groups3.json)."""
    mma = MOE_PAD + (1, 8, 2, 0, 0, 0, 1)
    best = _down_rows(mma + (3,), 16)
    cfgs: tuple[tuple[int, ...], ...] = (mxfp4_moe.DEFAULT_CONFIG, best, best + (1,))
    cfgs += tuple(_down_rows(mma + (g, 1), r) for r in (64, 32, 16, 8) for g in (2, 3) if (r, g) != (16, 3))
    cfgs += (_down_rows(mma + (3,), 8), best[:7] + (2,) + best[8:], best[:7] + (2,) + best[8:] + (1,))
    parities = (("first_parity", best + (1,), "groups 3 rows 16 urgent"),)
    return moe_candidates(out, "moe_groups3", cfgs, parities, "groups3")


def moe_groups4(out: Path) -> dict[str, Any]:
    """Session 40, issue 26, fourth run: the tensor-core down launch (index 26: 1 h as hi + lo, 2 h in bf16, 3 that
    with its next loads first; index 27 its warps), now with the serial slot sum, alone and in 3 slot groups, beside
    moe-groups-2's fastest (3 groups, 16-row TILE 14 down programs); the parity of (.., 3, 4, 1, .., 3) at every M
    first (printed), then each whole call at M = 1 beside the default with its parity; the fastest at M = 1 and 8
    beside the default and its parity at every M with and without FMA contraction on both shapes
    (OUT/moe_groups4.json)."""
    best = _down_rows(MOE_PAD + (1, 8, 2, 0, 0, 0, 1, 3), 16)
    cfgs: tuple[tuple[int, ...], ...] = (mxfp4_moe.DEFAULT_CONFIG, best)
    cfgs += tuple(MOE_PAD + (1, 8, 2, d, w, 1, 1, g) for g in (1, 3) for d in (1, 2, 3) for w in (4, 8))
    parities = (("first_parity", MOE_PAD + (1, 8, 2, 3, 4, 1, 1, 3), "groups 3 down mma bf16"),)
    return moe_candidates(out, "moe_groups4", cfgs, parities, "groups4")


def moe_groups5(out: Path) -> dict[str, Any]:
    """Session 40, issue 26, fifth run: the tensor-core down launch with h and the weights in fp16 (index 26: 4, 5 with
    its next loads first; index 27 its warps), alone and in 3 slot groups, beside the M = 1 default (DEFAULT_M1_CONFIG);
    the parity of (.., 5, 8, 1, .., 3) at every M first (printed), then each whole call at M = 1 beside the default
    with its parity; the fastest at M = 1 and 8 beside the default and its parity at every M with and without FMA
    contraction on both shapes (OUT/moe_groups5.json)."""
    cfgs: tuple[tuple[int, ...], ...] = (mxfp4_moe.DEFAULT_CONFIG, mxfp4_moe.DEFAULT_M1_CONFIG)
    cfgs += tuple(MOE_PAD + (1, 8, 2, d, w, 1, 1, g) for g in (3, 1) for d in (4, 5) for w in (4, 8))
    parities = (("first_parity", MOE_PAD + (1, 8, 2, 5, 8, 1, 1, 3), "groups 3 down mma fp16"),)
    return moe_candidates(out, "moe_groups5", cfgs, parities, "groups5")


def moe_groups6(out: Path) -> dict[str, Any]:
    """Session 40, issue 26, sixth run (lean: M = 1 only, each row with its parity at M = 1): moe-groups-5's fastest
    (3 groups, the fp16 tensor-core down launch with 8 warps) beside 2 steps per down iteration, 16 warps, 2 and 6
    groups (OUT/moe_groups6.json)."""
    doc = timed_doc()
    cfgs = tuple(MOE_PAD + v for v in (
        (1, 8, 2, 4, 8, 1, 1, 3), (1, 8, 2, 4, 8, 2, 1, 3), (1, 8, 2, 4, 16, 1, 1, 3), (1, 8, 2, 4, 8, 1, 1, 2),
        (1, 8, 2, 4, 8, 1, 1, 6), (1, 8, 2, 5, 8, 2, 1, 3), (1, 8, 2, 4, 8, 1, 1, 3),
    ))  # fmt: skip
    doc["rows"] = roofline.bench_moe_launches(kernels.modules(), doc["copy"]["gb_s"], cfgs, ms=(1,))
    (out / "moe_groups6.json").write_text(json.dumps(doc, indent=1))
    return doc


def moe_groups7(out: Path) -> dict[str, Any]:
    """Session 40, issue 26, seventh run (run as this code, inline, with 110 s of device time left): moe-groups-6's
    fastest (3 groups, the fp16 tensor-core down launch with its next loads first, 8 warps, 2 steps per iteration):
    its parity at every M with and without FMA contraction on both shapes, then it three times beside the default
    at M = 1, each with its parity (OUT/moe_groups7.json)."""
    doc = timed_doc()
    best = MOE_PAD + (1, 8, 2, 5, 8, 2, 1, 3)
    doc["parity"] = moe_parity_everywhere(best, "fp16 pf s2 groups 3")
    (out / "moe_groups7.json").write_text(json.dumps(doc, indent=1))
    cfgs = (best, mxfp4_moe.DEFAULT_CONFIG, best, best)
    doc["rows"] = roofline.bench_moe_launches(kernels.modules(), doc["copy"]["gb_s"], cfgs, ms=(1,))
    (out / "moe_groups7.json").write_text(json.dumps(doc, indent=1))
    return doc


def moe_final(out: Path) -> dict[str, Any]:
    """Session 34's last run: `moe` (the default's parity at every M with and without FMA contraction, then the
    roofline rows of roofline.MOE_CONFIGS: the new default first, then TILE 14 masked and the previous default, the
    copy baseline in the same run), the default's parity on EVEN_SHAPES (its up launch unmasked there too), then the
    previous default (mxfp4_moe.TILE6_CONFIG), TILE14_CONFIG and the new one launch by launch at M = 1 and 8."""
    doc = moe(out)
    res = []
    for fusion in (True, False):
        impl = partial(mxfp4_moe.mxfp4_moe, fp_fusion=fusion)
        res += parity.run({"mxfp4_moe": impl}, "cuda", shapes=EVEN_SHAPES)
    for r in res:
        print("even shape", r.line(), flush=True)
    doc["parity_even_shape_default_then_no_fusion"] = [r.to_dict() for r in res]
    pair = (mxfp4_moe.TILE6_CONFIG, mxfp4_moe.TILE14_CONFIG, mxfp4_moe.DEFAULT_CONFIG)
    doc["moe_launch_rows"] = roofline.bench_moe_launches(kernels.modules(), doc["copy"]["gb_s"], pair, ms=(1, 8))
    doc["copy_after_launches"] = roofline.copy_bandwidth()
    (out / "moe.json").write_text(json.dumps(doc, indent=1))
    return doc


def bench(out: Path, parts: tuple[str, ...] = ("fp8", "moe", "engram", "sinkhorn")) -> dict[str, Any]:
    doc = roofline.run(kernels.modules(), driver(), parts=parts)
    (out / "bench.json").write_text(json.dumps(doc, indent=1))
    return doc


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    try:
        if mode == "bench" and len(sys.argv) > 3:  # bench OUT fp8,moe: those parts only
            bench(folder, tuple(sys.argv[3].split(",")))
        else:
            modes = {"check": check, "bench": bench, "micro": micro, "moe": moe, "moe-launches": moe_launches}
            modes.update(diag=diag, trial=trial, trial2=trial2, final=final, mma=mma, fold=fold, words=words)
            modes.update({"words2": words2, "moe-final": moe_final, "even": even})
            modes.update({"swap": swap, "swap2": swap2, "swap3": swap3, "serial": serial, "moe-serial": moe_serial})
            modes.update({"staged": staged, "staged2": staged2, "moe-staged": moe_staged, "moe-staged2": moe_staged2})
            modes.update({"moe-l2": moe_l2, "moe-warm": moe_warm, "dsv41": dsv41, "moe-caps": moe_caps})
            modes.update({"dsv41b": dsv41b, "moe-mma": moe_mma, "moe-mma-staged": moe_mma_staged})
            modes.update({"deep": deep, "warps": warps, "swap5": swap5, "gluon": gluon})
            modes.update({"gluon2": gluon2, "gluon3": gluon3, "floor": floor, "packed": packed})
            modes.update({"packed-bench": packed_bench, "gluon16": gluon16})
            modes.update({"moe-groups": moe_groups, "moe-groups2": moe_groups2, "moe-groups3": moe_groups3})
            modes.update(
                {
                    "moe-groups4": moe_groups4,
                    "moe-groups5": moe_groups5,
                    "moe-groups6": moe_groups6,
                    "moe-groups7": moe_groups7,
                }
            )
            modes[mode](folder)
    except Exception:
        traceback.print_exc()
        raise
