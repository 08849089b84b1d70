"""The FP8 GEMM's tuning sweep on the card (issue 26): for each of DSV4.1's dense FP8 shapes and
M = 1, 2, 4, 8, 16, every candidate tile of the GEMV path (no tensor cores) and of the MMA kernel,
timed honestly (recipekit.bench.kernels.timing: one CUDA graph of back-to-back calls over rotated
weight copies, so no host gap and no L2 hit), the fastest kept with its parity against the fp32
reference. `python -m recipekit.cli.kernels_fp8_sweep OUT [TABLE]` writes OUT/fp8_sweep.json (every
timing) and the table (OUT/fp8_tuning.json, or TABLE) that `fp8_gemm` reads
(backends/cuda_sm80/kernels/data/fp8_tuning.json)."""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

import torch

from recipekit.backends.cuda_sm80.kernels.fp8_gemm import fp8_gemm, fp8_gemv, gemv_fits
from recipekit.bench.kernels import roofline, synth, timing
from recipekit.cli.kernels_device_run import driver

MS = (1, 2, 4, 8, 16)
# GEMV candidates (BLOCK_N, BLOCK_K, num_warps, SPLIT_K, DECODER, PREFETCH, ACC_TILE) per M; the second
# H200 sweep (results/h200-2026-12-02-fp8-sweep-2.json) found prefetching and the per-step K reduction slower;
# ACC_TILE 2 (M = 1, 2-D tile) came after sweep 3
_TILES = ((8, 512, 4), (16, 512, 4), (16, 256, 4), (32, 256, 4), (32, 256, 8), (16, 1024, 8), (8, 1024, 4))
GEMV_BY_M = {
    1: [(bn, bk, w, 1, dec, 0, 2) for bn, bk, w in _TILES[:6] for dec in (1, 2)]
    + [(8, 1024, 4, 1, 1, 0, 1), (8, 512, 4, 1, 1, 0, 1), (16, 256, 4, 1, 1, 0, 1)],  # sweep 3's M = 1 winners
    2: [(bn, bk, w, 1, 2, 0, 1) for bn, bk, w in _TILES[:5]] + [(8, 256, 4, 1, 2, 0, 1)],
    4: [(bn, bk, w, 1, 2, 0, 1) for bn, bk, w in ((8, 256, 4), (16, 256, 4), (16, 256, 8), (32, 128, 8), (8, 512, 4))],
    8: [(bn, bk, w, 1, 2, 0, 1) for bn, bk, w in ((4, 256, 4), (8, 256, 4), (8, 256, 8), (16, 128, 8), (16, 256, 8))],
    16: [(4, 256, 4, 1, 2, 0, 1), (8, 128, 4, 1, 2, 0, 1), (8, 256, 8, 1, 2, 0, 1)],
}
MMA = [(16, 256, 4, 3, 1), (32, 256, 4, 3, 1), (32, 256, 4, 3, 4), (16, 512, 4, 3, 2)]


def main(out: Path, table_path: Path | None = None) -> dict[str, Any]:
    card = torch.cuda.get_device_name(0)
    doc: dict[str, Any] = {"provenance": roofline.provenance(driver()), "method": timing.METHOD}
    doc["copy"] = timing.copy_bandwidth()
    gbs = doc["copy"]["gb_s"]
    print("copy", doc["copy"], flush=True)
    rows, entries = [], []
    for n, k in roofline.FP8_SHAPES:
        g = torch.Generator().manual_seed(n + k)
        w0 = synth.fp8_bytes((n, k), g).cuda()
        s0 = synth.e8m0_codes((-(-n // 32), -(-k // 32)), g).cuda()
        copies = timing.copies_needed(w0.numel())
        ws = [w0] + [w0.clone() for _ in range(copies - 1)]
        ss = [s0] + [s0.clone() for _ in range(copies - 1)]
        for m in MS:
            x = synth.bf16((m, k), g).cuda()
            nbytes = w0.numel() + s0.numel() + x.numel() * 2 + m * n * 2
            cands = [("gemv", c) for c in GEMV_BY_M[m] if gemv_fits(k, c)] + [("mma", c) for c in MMA]
            times: dict[tuple[str, tuple[int, ...]], float] = {}
            for path, cfg in cands:
                fn = fp8_gemv if path == "gemv" else fp8_gemm
                try:
                    times[(path, cfg)] = timing.per_call_seconds([partial(fn, x, w, s, cfg) for w, s in zip(ws, ss)])
                except Exception as e:  # a tile Triton cannot build is skipped, and said
                    print(f"{n}x{k} M={m} {path} {cfg}: {type(e).__name__}: {str(e)[:120]}", flush=True)
            # the fastest candidate that passes parity (a wrong fast one is no result): up to 4 tried in time order
            for best in sorted(times, key=lambda c: times[c])[:4]:
                fn = fp8_gemv if best[0] == "gemv" else fp8_gemm
                check = roofline._parity("fp8_gemm", m, fn(x, w0, s0, best[1]), (x, w0, s0))
                if check["parity_pass"]:
                    break
                print(f"{n}x{k} M={m} {best}: parity FAIL {check['parity_rel_error']}", flush=True)
            t = times[best]
            row = {
                "n": n, "k": k, "m": m, "path": best[0], "config": list(best[1]), "us": t * 1e6,
                "x_copy": nbytes / t / 1e9 / gbs, **check,
                "all": [{"path": p, "config": list(c), "us": v * 1e6} for (p, c), v in sorted(times.items(), key=lambda i: i[1])],
            }  # fmt: skip
            rows.append(row)
            print({k_: v for k_, v in row.items() if k_ != "all"}, flush=True)
            if check["parity_pass"]:
                entries.append({"card": card, "n": n, "k": k, "m": m, "path": best[0], "config": list(best[1])})
        del ws, ss
        torch.cuda.empty_cache()
        _write(out, table_path, doc, rows, entries)  # after every shape: a cut-off run keeps what it measured
    return doc


def _write(out: Path, table_path: Path | None, doc: dict[str, Any], rows: list[Any], entries: list[Any]) -> None:
    doc["rows"] = rows
    table = {
        "source": "python -m recipekit.cli.kernels_fp8_sweep (fastest parity-passing candidate per shape and M, "
        f"timed as: {timing.METHOD})",
        "provenance": doc["provenance"],
        "config_fields": {"gemv": "BLOCK_N, BLOCK_K, num_warps, SPLIT_K, DECODER (0 ALU, 1 sign-extension, 2 PTX four-at-once), PREFETCH, ACC_TILE", "mma": "BLOCK_N, BLOCK_K, num_warps, num_stages, SPLIT_K"},
        "entries": entries,
    }  # fmt: skip
    (out / "fp8_sweep.json").write_text(json.dumps(doc, indent=1))
    (table_path or out / "fp8_tuning.json").write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
