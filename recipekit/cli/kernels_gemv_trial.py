"""A device trial (issue 26): the small-M FP8 GEMV path without tensor cores against the MMA kernel,
on the roofline's FP8 shapes at M = 1, 2, 4, with parity of every timed configuration.
`python -m recipekit.cli.kernels_gemv_trial OUT` writes OUT/gemv_trial.json.
results/h200-2026-12-02-gemv-trial.json came from the GEMV kernel of commit 76a9f92 timed by do_bench;
the sweep that now picks the FP8 path per shape is kernels_fp8_sweep (graph timing, rotated copies)."""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

import torch

from recipekit.backends.cuda_sm80.kernels.fp8_gemm import fp8_gemm, fp8_gemv
from recipekit.bench.kernels import roofline, synth, timing
from recipekit.cli.kernels_driver import driver

CONFIGS = tuple((bn, bk, w, 1, 0) for bn in (4, 8, 16, 32) for bk in (256, 512, 1024) for w in (2, 4, 8))


def main(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "provenance": roofline.provenance(driver()),
        "copy": timing.copy_bandwidth(),
        "rows": [],
    }
    gbs = doc["copy"]["gb_s"]
    for n, k in roofline.RESEARCH_FP8_SHAPES:
        g = torch.Generator().manual_seed(n + k)
        w = synth.fp8_bytes((n, k), g).cuda()
        s = synth.e8m0_codes((-(-n // 32), -(-k // 32)), g).cuda()
        for m in (1, 2, 4):
            x = synth.bf16((m, k), g).cuda()
            nbytes = w.numel() + s.numel() + x.numel() * 2 + m * n * 2
            times = {}
            for cfg in CONFIGS:
                try:
                    times[cfg] = timing.per_call_seconds([partial(fp8_gemv, x, w, s, cfg)])
                except Exception as e:  # a config that does not build is skipped, and said
                    print(f"gemv {n}x{k} M={m} {cfg}: {type(e).__name__}")
            best = min(times, key=lambda c: times[c])
            t_dot = timing.per_call_seconds([partial(fp8_gemm, x, w, s)])
            check = roofline._parity("fp8_gemm", m, fp8_gemv(x, w, s, best), (x, w, s))
            row = {"n": n, "k": k, "m": m, "gemv_us": times[best] * 1e6, "gemv_config": list(best)}
            row.update(gemv_x_copy=nbytes / times[best] / 1e9 / gbs, dot_default_us=t_dot * 1e6, **check)
            doc["rows"].append(row)
            print(row, flush=True)
    (out / "gemv_trial.json").write_text(json.dumps(doc, indent=1))
    return doc


if __name__ == "__main__":
    main(Path(sys.argv[1]))
