"""One command per device run (GPU time is scarce): `python -m recipekit.cli.kernels_device_run
check OUT` runs the parity harness on the Triton kernels at every M and the sm_80 validity compile;
`... bench OUT [fp8,moe,...]` runs the roofline bench (or those parts of it); `... micro OUT` the throughput microbench and the
no-FMA variant's parity; `... moe OUT` the MoE kernel's parity and roofline rows alone;
`... moe-launches OUT` the MoE's time launch by launch. Each writes its JSON into OUT (committed beside this
script, under bench/kernels/results/). It lives with the application: it hands the sm_80 backend's
kernels to the checks of recipekit.bench.kernels."""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from functools import partial
from pathlib import Path
from typing import Any

from recipekit.backends.cuda_sm80 import kernels
from recipekit.backends.cuda_sm80.kernels import fp8_gemm, mxfp4_moe
from recipekit.bench.kernels import microbench, parity, reference, roofline, synth, validity
from recipekit.cli.kernels import driver_version


def driver() -> str | None:
    """The doctor's driver version; None (said in the output) where the device image lacks a package
    the doctor's collector needs: the result is still worth its figures."""
    try:
        return driver_version()
    except ImportError as e:  # the device image has no pydantic: nvidia-smi's own answer, said as such
        print(f"the doctor's collector cannot run here ({e}): driver version from nvidia-smi", flush=True)
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = proc.stdout.split()
    return f"{lines[0]} (nvidia-smi)" if proc.returncode == 0 and lines else None


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
            fn = fp8_gemm.fp8_gemv if path == "gemv" else fp8_gemm.fp8_gemm
            got = fn(x.cuda(), w.cuda(), s.cuda(), cfg).cpu()
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
    doc: dict[str, Any] = {"provenance": roofline.provenance(driver()), "method": roofline.timing.METHOD}
    doc["copy"] = roofline.copy_bandwidth()
    print("copy", doc["copy"], flush=True)
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
            {"check": check, "bench": bench, "micro": micro, "moe": moe, "moe-launches": moe_launches}[mode](folder)
    except Exception:
        traceback.print_exc()
        raise
