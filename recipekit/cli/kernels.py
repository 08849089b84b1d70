"""`recipe kernels parity | validity | bench`: the sm_80 kernels for DSV4.1's formats checked
against the oracle's math, compiled for sm_80, and timed against the device's copy bandwidth.

Thin: options here, work in recipekit.bench.kernels, which is handed the sm_80 backend's kernels
from here (a bench imports no backend). torch and triton are imported only when a command runs, and
are optional: their absence is a named error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from recipekit import atomic
from recipekit.backends.cuda_sm80 import kernels as sm80_kernels
from recipekit.cli.help import new_group
from recipekit.cli.options import FormatOpt
from recipekit.errors import ExitCode, RecipekitError
from recipekit.output import Format, Output


def driver_version() -> str | None:
    """The accelerator driver's version as the doctor reads it (the one host detection)."""
    from recipekit.tools.doctor.collect import collect_facts  # lazy: the doctor's collector runs only for a result

    return collect_facts(with_docker=False).driver_version


def register(app: typer.Typer) -> None:
    grp = new_group(
        "The sm_80 kernels for DSV4.1's formats: parity against the oracle's math, sm_80 validity, roofline bench."
    )
    app.add_typer(grp, name="kernels")

    @grp.command("parity")
    def parity_cmd(
        kernel: Annotated[
            list[str] | None,
            typer.Option("--kernel", "-k", help="fp8_gemm | mxfp4_moe | engram_gather | sinkhorn (default: all)."),
        ] = None,
        impl: Annotated[
            str | None,
            typer.Option("--impl", help="module:function with the kernel's signature, checked instead of ours."),
        ] = None,
        device: Annotated[str, typer.Option("--device", help="cuda | cpu (cpu only for an --impl).")] = "cuda",
        m: Annotated[
            list[int] | None, typer.Option("--m", help="Token counts (default: the data's 1 2 4 8 16).")
        ] = None,
        fmt: FormatOpt = Format.human,
    ) -> None:
        """Each kernel against its fp32 reference on synthetic weights in the real encodings: PARITY PASS/FAIL
        per kernel and M with the relative error; exit 5 when one fails."""
        from recipekit.bench.kernels import parity  # lazy: torch when it runs

        impls = parity.resolve(list(kernel or []), impl, device, sm80_kernels.builtin)
        results = parity.run(impls, device, ms=list(m) if m else None)
        out = Output(fmt)
        failed = [r for r in results if not r.passed]
        out.result(
            {"thresholds": parity.thresholds(), "results": [r.to_dict() for r in results], "passed": not failed},
            human=lambda: print("\n".join(r.line() for r in results)),
        )
        if failed:
            raise RecipekitError(
                code="kernels-parity-failed",
                message=f"{len(failed)} of {len(results)} checks failed: "
                + ", ".join(f"{r.kernel} M={r.m}" for r in failed[:6]),
                exit_code=ExitCode.GATE_FAILED,
            )

    @grp.command("validity")
    def validity_cmd(fmt: FormatOpt = Format.human) -> None:
        """Compile every kernel for GPUTarget("cuda", 80, 32) (no GPU needed) and check its PTX for .target
        sm_80 and no sm_89+/sm_90 instruction; exit 5 when one is not valid."""
        from recipekit.bench.kernels import parity, validity  # lazy: triton when it runs

        parity.need_triton()
        rows = validity.run(sm80_kernels.modules())
        Output(fmt).result(
            {"target": "cuda sm_80", "kernels": rows},
            human=lambda: print(
                "\n".join(
                    f"{'VALID' if r['valid'] else 'INVALID'}  {r['kernel']:<20} fp_fusion={r['enable_fp_fusion']!s:<5} "
                    + ("; ".join(r["problems"]) or f"PTX {r.get('ptx_bytes', 0):,} B, .target sm_80")
                    for r in rows
                )
            ),
        )
        bad = [r["kernel"] for r in rows if not r["valid"]]
        if bad:
            raise RecipekitError(
                code="kernels-parity-failed",
                message=f"not valid for sm_80: {', '.join(sorted(set(bad)))}",
                hint="see the problems listed per kernel",
                exit_code=ExitCode.GATE_FAILED,
            )

    @grp.command("microbench")
    def microbench_cmd(
        seconds: Annotated[float, typer.Option("--seconds", help="Time per figure.")] = 1.0,
        fmt: FormatOpt = Format.human,
    ) -> None:
        """The card's FP32 FFMA, FP32 FMUL+FADD, FP16 HFMA and tensor-core FP16 throughput (~1 s each), and the
        kernel variant they choose (FMA contraction off where FMA is throttled, as on a stock CMP 170HX)."""
        from recipekit.bench.kernels import parity  # lazy: torch + triton when it runs

        parity.resolve([], None, "cuda", sm80_kernels.builtin)  # torch, CUDA and triton, or a named error
        from recipekit.bench.kernels import microbench  # lazy: imports triton

        res = microbench.run(seconds)
        keys = ("ffma_tflops", "fmul_fadd_tflops", "hfma_tflops", "mma_fp16_tflops")
        Output(fmt).result(
            res,
            human=lambda: print(
                f"{res['card']}: "
                + ", ".join(f"{k.removesuffix('_tflops')} {res[k]:.2f} TFLOPS" for k in keys)
                + f"\nvariant: enable_fp_fusion={res['variant']['enable_fp_fusion']} ({res['variant']['why']})"
            ),
        )

    @grp.command("bench")
    def bench_cmd(
        out_path: Annotated[Path, typer.Option("--out", "-o", help="Result file to write (JSON).")],
        fmt: FormatOpt = Format.human,
    ) -> None:
        """Copy bandwidth measured in the same run, then per kernel and M: bytes moved, time, fraction of copy
        bandwidth, beside dequantize-once + torch matmul; written with provenance (GPU, driver, torch, Triton, date)."""
        from recipekit.bench.kernels import parity, roofline  # lazy: torch + triton when it runs

        parity.resolve([], None, "cuda", sm80_kernels.builtin)  # torch, CUDA and triton, or a named error
        doc = roofline.run(sm80_kernels.modules(), driver_version())
        atomic.atomic_write_text(out_path, json.dumps(doc, indent=1) + "\n")
        Output(fmt).result(doc, human=lambda: print(f"wrote {out_path}"))
