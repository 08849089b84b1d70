"""The roofline bench: the device's copy bandwidth measured in the same run, then per kernel and M
the bytes moved, the time and the fraction of copy bandwidth, beside the plain-torch path
(dequantize once, outside the timing, + torch bf16 matmul). Every time, the copy baseline's too,
comes from timing.per_call_seconds: back-to-back calls in one CUDA graph (no host launch gap)
cycling over weight copies that together exceed the L2 (every call reads HBM).
"""

from __future__ import annotations

import datetime
import platform
from collections.abc import Mapping
from functools import partial
from typing import Any, Optional

from recipekit.bench.kernels import parity, reference, synth, timing
from recipekit.bench.oracle import decode, moe

# DSV4.1-Flash's dense FP8 weights as GEMV shapes, N x K (out x in, as stored; one of each per layer): the goal's
# shapes. wo_a's 8 groups of 1024 rows each take their own 4096-wide slice of the attention output; timed as one
# 8192 x 4096 GEMV, the same bytes. The shared expert's w1 and w3 as one gate-up weight (vLLM's merged layer).
DSV41_FP8_SHAPES = {
    "attn.wq_a": (1280, 5120),
    "attn.wq_b": (32768, 1280),
    "attn.wkv": (512, 5120),
    "attn.wo_a": (8192, 4096),
    "attn.wo_b": (5120, 8192),
    "ffn.shared_experts.w1+w3": (4608, 5120),
    "ffn.shared_experts.w2": (5120, 2304),
    "attn.indexer.wq_b": (4096, 1280),  # index-source layers only
}
FP8_SHAPES = tuple(DSV41_FP8_SHAPES.values())
# the shapes of the research's first H200 measurement, none of them DSV4.1-Flash's: sweeps 1-13 (sessions 30-36)
# tuned and reported on these; still timed beside, so those figures stay comparable
RESEARCH_FP8_SHAPES = ((8192, 5120), (5120, 16384), (24576, 5120), (4096, 4096))
SHAPE_NAMES = {shape: name for name, shape in DSV41_FP8_SHAPES.items()}
MOE = {"experts": 384, "hidden": 5120, "inter": 2304}  # DSV4.1-Flash's routed experts
# (BLOCK_N, BLOCK_KB, num_warps, SCALE_EACH, BLOCK_N of the down launch[, TILE, BLOCK_KB and num_warps of
# the down launch]). Run 6 (results/h200-2026-12-02-moe-tile-1.json) timed the row-loop kernels' fastest per M
# (bench 4) against the 2-D tile path (TILE 1: fp16 nibble decode; 2: the nibble straight into fp32 bits):
# (16, 512, 4, 0, 32, 2, 128, 4) won at every M; run 7 found TILE 3 (the weights read as int32 words, no
# byte extraction) no faster. Bench 5 times it against other down tiles (16 / 64 rows, 256 bytes per step).
MOE_CONFIGS = (
    # session 40: the M = 1 default (mxfp4_moe.DEFAULT_M1_CONFIG): 3 slot groups on their own streams, both launches on
    # the tensor cores, the down launch's h in fp16 (at M > 1 the groups do not apply); then the same with TILE 14's
    # down launch in 16-row programs
    (16, 512, 4, 0, 64, 14, 128, 4, 0, 1, 0, 0, 0, 0, 0, 1, 1, 3, 1, 0, 0, 0, 0, 1, 8, 2, 5, 8, 2, 1, 3),
    (16, 512, 4, 0, 16, 14, 128, 4, 0, 1, 0, 0, 0, 0, 0, 1, 1, 3, 1, 0, 0, 0, 0, 1, 8, 2, 0, 0, 0, 1, 3),
    (16, 512, 4, 0, 64, 14, 128, 4, 0, 1, 0, 0, 0, 0, 0, 1, 1, 3, 1),  # session 36: the up launch's loads staged 3 deep
    (16, 512, 4, 0, 64, 14, 128, 4, 0, 1, 0, 0, 0, 0, 0, 1, 1),  # session 35: TILE 14 + MASKLESS, SERIAL at M = 1
    (16, 512, 4, 0, 64, 14, 128, 4, 0, 1, 0, 0, 0, 0, 0, 1, 16),  # session 35: the same, SERIAL at every M
    (16, 512, 4, 0, 64, 14, 128, 4, 0, 1, 0, 0, 0, 0, 0, 1),  # session 34: TILE 14, its loads unmasked (MASKLESS)
    (16, 512, 4, 0, 64, 14, 128, 4),  # session 34: TILE 14 (the down launch on the PTX word decoder, h per word)
    (16, 512, 4, 0, 32, 6, 128, 4, 0, 1, 0, 0, 0, 0, 64),  # run 13: TILE 6, the down launch capped at 64 registers
    (16, 512, 4, 0, 32, 2, 128, 4),
    (16, 512, 4, 0, 16, 2, 128, 4),
    (16, 512, 4, 0, 32, 2, 256, 4),
    (16, 512, 4, 0, 64, 2, 128, 4),
)
# Run 8 (results/h200-2026-12-02-moe-launches-1.json): where the M = 1 time goes, launch by launch
# (bench_moe_launches): up 40.8 us, down 24.1, sum 1.5 with run 6's default; the slot sum fused into the
# down launch (DOWN_SUM 1) was slower at every tile. Run 10 (moe-launches-2): TILE 4 (the byte sign-extended:
# one integer op less per byte), split-K of the down launch over the intermediate dim (KSPLIT, index 9: the
# splits summed in fixed order by the sum launch) and num_stages of the up / down launch (indices 10, 11)
MOE_LAUNCH_CONFIGS = (
    (16, 512, 4, 0, 32, 2, 128, 4),
    (16, 512, 4, 0, 32, 4, 128, 4),
    (16, 512, 4, 0, 32, 4, 128, 4, 0, 2),
    (16, 512, 4, 0, 32, 4, 128, 4, 0, 3),
    (16, 512, 4, 0, 32, 4, 128, 4, 0, 9),
    (16, 512, 4, 0, 32, 4, 64, 4, 0, 3),
    (16, 512, 4, 0, 64, 4, 128, 4, 0, 3),
    (16, 512, 4, 0, 32, 4, 128, 4, 0, 3, 2, 2),
    (16, 512, 4, 0, 32, 4, 128, 4, 0, 3, 4, 4),
    (16, 1024, 8, 0, 32, 4, 128, 4, 0, 3),
    (32, 256, 4, 0, 32, 4, 128, 4, 0, 3),
    (16, 512, 4, 0, 16, 4, 128, 2, 0, 3),
)
MOE_SELECTIONS = 8  # routings cycled in the timing: different experts each call (6 x 18.8 MB each)
MS = (1, 2, 4, 8, 16)


def provenance(driver: Optional[str] = None) -> dict[str, Any]:
    """GPU, driver, CUDA, torch, Triton, python and date of a result; `driver` is the host's driver
    version as the doctor read it (handed in by the application: a bench probes no host)."""
    import torch  # lazy: pulls torch
    import triton  # lazy: optional dependency

    return {
        "gpu": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
        "driver": driver,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def fp8_weights(n: int, k: int, g: Any) -> tuple[Any, Any, list[Any], list[Any]]:
    """Synthetic FP8 weights of one N x K shape on the GPU (e4m3 bytes and E8M0 codes from generator `g`) and
    the copies the timing rotates over (timing.copies_needed of the weight bytes, the first the original):
    (w0, s0, weight copies, code copies)."""
    w0 = synth.fp8_bytes((n, k), g).cuda()
    s0 = synth.e8m0_codes((-(-n // 32), -(-k // 32)), g).cuda()
    copies = timing.copies_needed(w0.numel())
    return w0, s0, [w0] + [w0.clone() for _ in range(copies - 1)], [s0] + [s0.clone() for _ in range(copies - 1)]


def torch_weights(w0: Any, s0: Any) -> list[Any]:
    """The torch path's weight: w0 dequantized once on the CPU by the oracle's decoder, bf16 on the GPU, and the
    copies the timing rotates over (timing.copies_needed of its bytes, the first the original)."""
    import torch  # lazy: pulls torch

    wb0 = decode.fp8_dequant(w0.cpu().numpy(), s0.cpu().numpy()).to(torch.bfloat16).cuda()
    return [wb0] + [wb0.clone() for _ in range(timing.copies_needed(wb0.numel() * 2) - 1)]


def copy_bandwidth() -> dict[str, Any]:
    return timing.copy_bandwidth()


def _row(
    kernel: str, m: int, nbytes: int, t: float, t_torch: float, torch_bytes: int, copy_gbs: float, **extra: Any
) -> dict[str, Any]:
    """x_copy: the kernel's bytes / time over the copy bandwidth; torch_x_copy: the torch path's own bytes."""
    gbs = nbytes / t / 1e9
    return {
        "kernel": kernel, "m": m, "bytes": nbytes, "us": t * 1e6, "gb_s": gbs, "x_copy": gbs / copy_gbs,
        "torch_bytes": torch_bytes, "torch_us": t_torch * 1e6, "torch_x_copy": torch_bytes / t_torch / 1e9 / copy_gbs,
        "faster_than_torch": t < t_torch, **extra,
    }  # fmt: skip


def _parity(kernel: str, m: int, got: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    """The timed configuration's output against the fp32 reference (a fast wrong kernel is no result)."""
    limit = float(parity.thresholds()["kernels"][kernel]["max_rel_error"])
    r = parity.compare(kernel, m, got, getattr(reference, kernel)(*args), limit)
    return {"parity_rel_error": r.to_dict()["rel_error"], "parity_pass": r.passed}


def bench_fp8(
    kernels: Mapping[str, Any], copy_gbs: float, shapes: tuple[tuple[int, int], ...] = FP8_SHAPES + RESEARCH_FP8_SHAPES
) -> list[dict[str, Any]]:
    """fp8_gemm as it runs by default (the path and tile of its tuning table) against dequantize-once
    + torch bf16 matmul, both over rotated weight copies; against a device copy moving the same bytes
    (x_copy_same: what a launch of this size reaches; DSV4.1's small weights are a few MB) and a pure read of them
    (x_read_same, read_roofline: a GEMV only reads); and, where the backend packs weights (a `pack` beside
    fp8_gemm), fp8_gemm on the pack()ed weights (packed_*: its own table; packing is done once, as the torch path's
    dequantizing)."""
    import torch  # lazy: pulls torch

    from recipekit.bench.kernels import read_roofline  # lazy: imports triton

    fp8_gemm = kernels["fp8_gemm"].fp8_gemm
    choice = getattr(kernels["fp8_gemm"], "tuning", None)
    mma: Any = getattr(kernels["fp8_gemm"], "fp8_gemv_mma", None)
    pack = getattr(mma, "pack", None)

    rows = []
    for n, k in shapes:
        g = torch.Generator().manual_seed(n + k)
        w0, s0, ws, ss = fp8_weights(n, k, g)
        copies = len(ws)
        pws = [pack(w) for w in ws] if pack else []
        wbs = torch_weights(w0, s0)  # dequantize once
        for m in MS:
            x = synth.bf16((m, k), g).cuda()
            nbytes = w0.numel() + s0.numel() + x.numel() * 2 + m * n * 2
            t = timing.per_call_seconds([partial(fp8_gemm, x, w, s) for w, s in zip(ws, ss)])
            t_torch = timing.per_call_seconds([partial(torch.matmul, x, wb.T) for wb in wbs])
            torch_bytes = wbs[0].numel() * 2 + x.numel() * 2 + m * n * 2
            t_same = timing.copy_seconds(nbytes)
            t_read = read_roofline.read_seconds(nbytes)[0]
            check = _parity("fp8_gemm", m, fp8_gemm(x, w0, s0), (x, w0, s0))
            path = choice.fp8_choice(x.device, n, k, m) if choice else None
            extra: dict[str, Any] = {}
            if pws:
                t_pk = timing.per_call_seconds([partial(fp8_gemm, x, p, s) for p, s in zip(pws, ss)])
                pk_check = _parity("fp8_gemm", m, fp8_gemm(x, pws[0], s0), (x, w0, s0))
                extra = {
                    "packed_us": t_pk * 1e6, "packed_x_copy": nbytes / t_pk / 1e9 / copy_gbs,
                    "packed_x_read_same": t_read / t_pk, "packed_faster_than_torch": t_pk < t_torch,
                    "packed_config": list(choice.packed_choice(x.device, n, k, m, mma.fits))
                    if choice else None,
                    "packed_parity_rel_error": pk_check["parity_rel_error"], "packed_parity_pass": pk_check["parity_pass"],
                }  # fmt: skip
            rows.append(
                _row("fp8_gemm", m, nbytes, t, t_torch, torch_bytes, copy_gbs, n=n, k=k, weight_copies=copies,
                     path=list(path) if path else None, tensor=SHAPE_NAMES.get((n, k), "research shape"),
                     copy_same_us=t_same * 1e6, x_copy_same=t_same / t, read_same_us=t_read * 1e6,
                     x_read_same=t_read / t, **check, **extra)
            )  # fmt: skip
            print(rows[-1], flush=True)
        del ws, ss, wbs, pws
        torch.cuda.empty_cache()
    return rows


def _torch_moe(x: Any, plan: list[tuple[Any, Any, Any, Any, Any]], swiglu: Any) -> Any:
    """The plain-torch path: per used expert, its tokens (device index tensors prepared outside the timing,
    so no host sync) through the (already bf16) clamped SwiGLU."""
    import torch  # lazy: pulls torch

    out = torch.zeros_like(x)
    for tok, wt, w1, w2b, w3 in plan:
        out.index_add_(0, tok, swiglu(x[tok], w1, w2b, w3, 10.0, wt))
    return out


def _moe_weights() -> tuple[Any, Any, Any, Any]:
    """DSV4.1-Flash's routed experts in MXFP4 (random bytes, checkpoint-like E8M0 codes) on the GPU."""
    import torch  # lazy: pulls torch

    e, h, i = MOE["experts"], MOE["hidden"], MOE["inter"]
    g = torch.Generator(device="cuda").manual_seed(7)
    w13 = torch.randint(0, 256, (e, 2 * i, h // 2), generator=g, device="cuda", dtype=torch.uint8)
    w2 = torch.randint(0, 256, (e, h, i // 2), generator=g, device="cuda", dtype=torch.uint8)
    s13 = torch.randint(119, 123, (e, 2 * i, h // 32), generator=g, device="cuda", dtype=torch.uint8)
    s2 = torch.randint(119, 123, (e, h, i // 32), generator=g, device="cuda", dtype=torch.uint8)
    return w13, s13, w2, s2


def _moe_call(m: int, gc: Any, weights: tuple[Any, Any, Any, Any]) -> tuple[list[Any], Any, Any, list[int], float]:
    """MOE_SELECTIONS routings of M tokens (other experts each), route weights, activations, the experts each
    routing reads and the mean bytes per call (the experts read, the activations in and out)."""
    import torch  # lazy: pulls torch

    e, h = MOE["experts"], MOE["hidden"]
    per_expert = sum(int(w[0].numel()) for w in weights)
    sels = [
        torch.stack([torch.randperm(e, generator=gc)[: synth.TOPK] for _ in range(m)]).to(torch.int32).cuda()
        for _ in range(MOE_SELECTIONS)
    ]
    wts = (torch.rand((m, synth.TOPK), generator=gc) * 2.5).cuda()
    x = synth.bf16((m, h), gc).cuda()
    used_each = [len(set(s.flatten().tolist())) for s in sels]
    nbytes = sum(used_each) / len(sels) * per_expert + x.numel() * 2 * 2  # mean bytes per call
    return sels, wts, x, used_each, nbytes


def bench_moe_launches(
    kernels: Mapping[str, Any], copy_gbs: float, configs: tuple[tuple[int, ...], ...], ms: tuple[int, ...] = (1,)
) -> list[dict[str, Any]]:
    """Where the MoE's time goes: per M and configuration the whole call and then each of its launches
    (mxfp4_moe.moe_launches: up, down[, sum]) alone in its own CUDA graph, over the same MOE_SELECTIONS
    routings, with the whole call's parity against the fp32 reference."""
    import torch  # lazy: pulls torch

    mod = kernels["mxfp4_moe"]
    weights = _moe_weights()
    rows = []
    gc = torch.Generator().manual_seed(11)
    for m in ms:
        sels, wts, x, used_each, nbytes = _moe_call(m, gc, weights)
        for cfg in configs:
            row: dict[str, Any] = {"m": m, "config": list(cfg), "bytes": int(nbytes)}
            try:
                t = timing.per_call_seconds([partial(mod.mxfp4_moe, x, sel, wts, *weights, 10.0, cfg) for sel in sels])
                plans = [mod.moe_launches(x, sel, wts, *weights, 10.0, cfg)[0] for sel in sels]
                row["launches_us"] = {
                    name: timing.per_call_seconds([p[j][1] for p in plans]) * 1e6 for j, (name, _) in enumerate(plans[0])
                }  # fmt: skip
            except Exception as ex:  # a config Triton cannot build is skipped, and said
                print(f"moe launches M={m} config {cfg}: {type(ex).__name__}: {str(ex)[:120]}", flush=True)
                continue
            w13, s13, w2, s2 = weights
            args = (x, sels[0], wts, w13, s13, w2, s2, 10.0)
            row.update(
                us=t * 1e6,
                x_copy=nbytes / t / 1e9 / copy_gbs,
                **_parity("mxfp4_moe", m, mod.mxfp4_moe(*args, cfg), args),
            )
            rows.append(row)
            print(row, flush=True)
        torch.cuda.empty_cache()
    return rows


def bench_moe(kernels: Mapping[str, Any], copy_gbs: float) -> list[dict[str, Any]]:
    """The kernel cycles over MOE_SELECTIONS routings (other experts each call); the torch path over one
    routing, whose dequantized experts (>= 6 x 70 MB of bf16) already exceed the L2 several times."""
    import torch  # lazy: pulls torch

    mxfp4_moe = kernels["mxfp4_moe"].mxfp4_moe

    i = MOE["inter"]
    w13, s13, w2, s2 = _moe_weights()
    rows = []
    gc = torch.Generator().manual_seed(11)
    for m in MS:
        sels, wts, x, used_each, nbytes = _moe_call(m, gc, (w13, s13, w2, s2))
        times = {}
        for cfg in MOE_CONFIGS:
            try:
                times[cfg] = timing.per_call_seconds(
                    [partial(mxfp4_moe, x, sel, wts, w13, s13, w2, s2, 10.0, cfg) for sel in sels]
                )
            except Exception as ex:  # a config Triton cannot build is skipped, and said
                print(f"moe M={m} config {cfg}: {type(ex).__name__}: {str(ex)[:120]}", flush=True)
        best = min(times, key=lambda c: times[c])
        t_default = timing.per_call_seconds([partial(mxfp4_moe, x, sel, wts, w13, s13, w2, s2, 10.0) for sel in sels])
        # plain torch: the used experts of routing 0 dequantized once to bf16, then per expert matmuls + SwiGLU
        sel = sels[0]
        plan = []
        for ex_id in sorted(set(sel.flatten().tolist())):
            a = decode.mxfp4_dequant(w13[ex_id].cpu().numpy(), s13[ex_id].cpu().numpy()).to(torch.bfloat16).cuda()
            b = decode.mxfp4_dequant(w2[ex_id].cpu().numpy(), s2[ex_id].cpu().numpy()).to(torch.bfloat16).cuda()
            tok, slot = torch.nonzero(sel == ex_id, as_tuple=True)
            plan.append((tok, wts[tok, slot][:, None].to(x.dtype), a[:i], b, a[i:]))
        t_torch = timing.per_call_seconds([partial(_torch_moe, x, plan, moe.swiglu)])
        torch_bytes = sum(p[2].numel() * 2 + p[3].numel() * 2 + p[4].numel() * 2 for p in plan)
        check = _parity("mxfp4_moe", m, mxfp4_moe(x, sel, wts, w13, s13, w2, s2, 10.0, best),
                        (x, sel, wts, w13, s13, w2, s2, 10.0))  # fmt: skip
        rows.append(
            _row("mxfp4_moe", m, int(nbytes), times[best], t_torch, torch_bytes, copy_gbs,
                 experts_read_mean=sum(used_each) / len(sels), config=list(best), default_us=t_default * 1e6,
                 default_x_copy=nbytes / t_default / 1e9 / copy_gbs, **check)
        )  # fmt: skip
        print(rows[-1], flush=True)
        del plan
        torch.cuda.empty_cache()
    return rows


def bench_engram(kernels: Mapping[str, Any], copy_gbs: float) -> list[dict[str, Any]]:
    import torch  # lazy: pulls torch

    engram_gather = kernels["engram_gather"].engram_gather

    rows_n, d = 1 << 22, 256
    g = torch.Generator(device="cuda").manual_seed(3)
    t_dev = torch.randint(0, 0x7F, (rows_n, d), generator=g, device="cuda", dtype=torch.uint8)
    s_dev = torch.randint(115, 124, (rows_n, d // 32), generator=g, device="cuda", dtype=torch.uint8)
    out = []
    for where in ("device", "pinned-host"):
        if where == "device":
            t, s = t_dev, s_dev
        else:
            t, s = t_dev.cpu().pin_memory(), s_dev.cpu().pin_memory()
        for n_rows in (24, 384, 65536):
            # 8 id sets cycled: random rows of a 1.1 GB table, so a row is rarely met twice in L2
            ids = [torch.randint(0, rows_n, (n_rows,), generator=g, device="cuda") for _ in range(8)]
            try:
                sec = timing.per_call_seconds([partial(engram_gather, t, s, i) for i in ids])
            except Exception as e:  # e.g. Triton refusing a host pointer: recorded as the result
                out.append(
                    {
                        "kernel": "engram_gather",
                        "table": where,
                        "rows": n_rows,
                        "error": f"{type(e).__name__}: {str(e)[:200]}",
                    }
                )
                print(out[-1])
                continue
            nbytes = n_rows * (d + d // 32 + 8 + 2 * d)
            row: dict[str, Any] = {"kernel": "engram_gather", "table": where, "rows": n_rows}
            row.update(us=sec * 1e6, rows_per_s=n_rows / sec, gb_s=nbytes / sec / 1e9)
            out.append(row)
            print(out[-1])
    return out


def bench_sinkhorn(kernels: Mapping[str, Any]) -> list[dict[str, Any]]:
    sinkhorn = kernels["sinkhorn"].sinkhorn

    sh = synth.Shapes()
    out = []
    for m in MS:
        mixes, scale, base, iters, eps = synth.to_device(synth.inputs("sinkhorn", m, sh), "cuda")
        sec = timing.per_call_seconds([partial(sinkhorn, mixes, scale, base, iters, eps)])
        out.append({"kernel": "sinkhorn", "m": m, "us_per_call": sec * 1e6, "launches_per_call": 1})
        print(out[-1])
    return out


def run(
    kernels: Mapping[str, Any],
    driver: Optional[str] = None,
    parts: tuple[str, ...] = ("fp8", "moe", "engram", "sinkhorn"),
) -> dict[str, Any]:
    """`kernels`: the kernel modules by name (fp8_gemm, mxfp4_moe, engram_gather, sinkhorn), handed in by
    the application (the kernels are the sm_80 backend's; a bench imports no backend)."""
    doc: dict[str, Any] = {"provenance": provenance(driver), "method": timing.METHOD}
    cp = copy_bandwidth()
    doc["copy"] = cp
    print("copy", cp)
    gbs = cp["gb_s"]
    if "fp8" in parts:
        doc["fp8_gemm"] = bench_fp8(kernels, gbs)
    if "moe" in parts:
        doc["mxfp4_moe"] = bench_moe(kernels, gbs)
    if "engram" in parts:
        doc["engram_gather"] = bench_engram(kernels, gbs)
    if "sinkhorn" in parts:
        doc["sinkhorn"] = bench_sinkhorn(kernels)
    doc["copy_after"] = copy_bandwidth()  # the same run's bandwidth once more: drift shows here
    return doc
