"""One command per device run (GPU time is scarce): `python -m recipekit.cli.kernels_device_run
check OUT` runs the parity harness on the Triton kernels at every M and the sm_80 validity compile;
`... bench OUT` runs the roofline bench; `... micro OUT` the throughput microbench and the
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
from recipekit.bench.kernels import microbench, parity, roofline, validity
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
    doc["validity"] = validity.run(kernels.modules())
    for v in doc["validity"]:
        print(v, flush=True)
    (out / "check.json").write_text(json.dumps(doc, indent=1))
    return doc


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
    """Where the MoE's time goes: each configuration of roofline.MOE_LAUNCH_CONFIGS at M = 1 and 8, the whole
    call and each launch alone (up, down[, sum]), with its parity; the copy baseline measured in the same run."""
    doc: dict[str, Any] = {"provenance": roofline.provenance(driver()), "method": roofline.timing.METHOD}
    doc["copy"] = roofline.copy_bandwidth()
    print("copy", doc["copy"], flush=True)
    doc["rows"] = roofline.bench_moe_launches(
        kernels.modules(), doc["copy"]["gb_s"], roofline.MOE_LAUNCH_CONFIGS, ms=(1, 8)
    )
    doc["copy_after"] = roofline.copy_bandwidth()
    (out / "moe_launches.json").write_text(json.dumps(doc, indent=1))
    return doc


def bench(out: Path) -> dict[str, Any]:

    doc = roofline.run(kernels.modules(), driver())
    (out / "bench.json").write_text(json.dumps(doc, indent=1))
    return doc


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    try:
        {"check": check, "bench": bench, "micro": micro, "moe": moe, "moe-launches": moe_launches}[mode](folder)
    except Exception:
        traceback.print_exc()
        raise
