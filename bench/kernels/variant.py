"""Which FMA-contraction variant of the kernels a card should run, from its measured throughput.

The stock CMP 170HX throttles FP32 FMA to ~0.39 TFLOPS while separate FP32 multiply and add run
at ~6.25 TFLOPS (the niconiconi CMP 170HX review; FluidX3D issue 8: "non-FMA single precision
~6200 GFLOPS"); on other cards FMA is the fast path. Triton contracts mul+add into FMA unless a
kernel is launched with enable_fp_fusion=False, so the choice is a launch option, taken from the
figures of `microbench.run()` (throughput counted as 2 flops per FMA and per mul+add pair).
"""

from __future__ import annotations

from typing import Any

# FMA must be at least this fraction of mul+add's throughput to keep it (both count 2 flops per
# element step: FMA is one instruction, mul+add two, so a healthy card shows FMA ~2x faster)
KEEP_FMA_AT = 0.9


def choose(figures: dict[str, Any]) -> dict[str, Any]:
    """{"enable_fp_fusion": bool, "why": str} from {"ffma_tflops", "fmul_fadd_tflops", ...}."""
    ffma = figures.get("ffma_tflops")
    sep = figures.get("fmul_fadd_tflops")
    if not isinstance(ffma, int | float) or not isinstance(sep, int | float) or not (ffma > 0 and sep > 0):
        return {"enable_fp_fusion": True, "why": "no FFMA/FMUL+FADD figures: the compiler's default (fusion on)"}
    if ffma >= KEEP_FMA_AT * sep:
        return {"enable_fp_fusion": True, "why": f"FFMA {ffma:.2f} TFLOPS >= {KEEP_FMA_AT} x FMUL+FADD {sep:.2f}"}
    return {
        "enable_fp_fusion": False,
        "why": f"FFMA {ffma:.2f} TFLOPS < {KEEP_FMA_AT} x FMUL+FADD {sep:.2f}: FMA throttled, contraction off",
    }


# the recipe setting that records the choice (the CMP recipe's settings), and its values
SETTING = "KERNELS_FP_FUSION"
SETTING_VALUES = {True: "on", False: "off"}


def against_recipe(choice: dict[str, Any], recorded: Any) -> dict[str, Any]:
    """The doctor's verdict on a recipe's recorded variant: ok when it matches the measured choice or is
    `auto` (the kernels then take the choice at start), warn when it names the other variant."""
    want = SETTING_VALUES[bool(choice["enable_fp_fusion"])]
    if recorded is None:
        return {"status": "info", "want": want, "why": f"the recipe has no {SETTING} setting"}
    got = str(recorded).strip().lower()
    if got in (want, "auto"):
        return {"status": "ok", "want": want, "why": f"{SETTING}={got}"}
    return {
        "status": "warn",
        "want": want,
        "why": f"{SETTING}={got} but this card measured {choice['why']}: --set {SETTING}={want}",
    }
