"""Triton kernels for DeepSeek-V4.1's formats that compile for sm_80 (no native FP8 convert, no
wgmma/TMA, nothing sm_89+): FP8 e4m3 weight-only GEMM (32x32 E8M0 blocks), the MXFP4 MoE GEMV,
the Engram row gather + dequant, the mHC Sinkhorn, and whole-tensor FP8 / MXFP4 dequant to fp32 with
the codecs' bits (dequant.py: what the oracle's streaming reader decodes with on CUDA).

Each module imports triton at module level: import them lazily (`load(name)`), torch and triton
are optional dependencies of recipekit. Every kernel's Python entry takes torch tensors in the
checkpoint's own encodings (uint8 bytes, uint8 E8M0 codes) and is the signature that
`recipe kernels parity --impl module:function` checks for any other implementation.
"""

from __future__ import annotations

import importlib
from typing import Any

# kernel name -> "module:function" of its Triton entry point
ENTRIES = {
    "fp8_gemm": "recipekit.backends.cuda_sm80.kernels.fp8_gemm:fp8_gemm",
    "mxfp4_moe": "recipekit.backends.cuda_sm80.kernels.mxfp4_moe:mxfp4_moe",
    "engram_gather": "recipekit.backends.cuda_sm80.kernels.engram_gather:engram_gather",
    "sinkhorn": "recipekit.backends.cuda_sm80.kernels.sinkhorn:sinkhorn",
}


def load(spec: str) -> Any:
    """The callable named by "module:function"."""
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)


MODULES = ("fp8_gemm", "mxfp4_moe", "engram_gather", "sinkhorn", "dequant")


def modules() -> dict[str, Any]:
    """The kernel modules by name (imports triton): what the kernel checks (recipekit.bench.kernels) are
    handed by the application."""
    return {name: importlib.import_module(f"{__name__}.{name}") for name in MODULES}


def builtin(name: str) -> Any:
    """The Triton entry point of kernel `name` (imports triton)."""
    return load(ENTRIES[name])
