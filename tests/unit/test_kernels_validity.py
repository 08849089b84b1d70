"""sm_80 validity in CI: Triton compiles for GPUTarget("cuda", 80, 32) on a host without a GPU
(its wheel ships ptxas), so every kernel's PTX is checked here; and a kernel with a native FP8
convert, the thing sm_80 lacks, is refused, so the check can fail."""

from __future__ import annotations

import pytest

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from recipekit.backends.cuda_sm80 import kernels as sm80  # noqa: E402
from recipekit.bench.kernels import validity  # noqa: E402


@triton.jit
def _native_fp8_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.load(x_ptr + r).to(tl.float8e4nv).to(tl.float32))


@pytest.mark.slow
def test_every_kernel_compiles_valid_for_sm80_in_both_fma_variants():
    rows = validity.run(sm80.modules())
    names = {r["kernel"] for r in rows}
    assert names == {
        "fp8_gemm",
        "fp8_gemm.bf16",
        "fp8_gemm.swap",
        "fp8_gemm.swap_prefetch",
        "fp8_gemm.swap_serial",
        "fp8_gemm.swap_fp32",
        "fp8_gemv",
        "fp8_gemv.m1",
        "fp8_gemv.tokens",
        "fp8_gemv.tokens_prefetch",
        "fp8_gemv.tokens_serial",
        "fp8_gemv.tokens_staged",
        "fp8_gemm.split_sum",
        "mxfp4_moe.up",
        "mxfp4_moe.down",
        "mxfp4_moe.up_tile",
        "mxfp4_moe.down_tile",
        "mxfp4_moe.up_tile_asm",
        "mxfp4_moe.down_tile_asm",
        "mxfp4_moe.up_tile_mma",
        "mxfp4_moe.down_tile_mma",
        "mxfp4_moe.up_tile_mma_asm",
        "mxfp4_moe.down_tile_mma_asm",
        "mxfp4_moe.down_tile_splitk",
        "mxfp4_moe.up_tile_fold",
        "mxfp4_moe.up_tile_fold_triton",
        "mxfp4_moe.down_tile_fold",
        "mxfp4_moe.up_tile_asm_hwords",
        "mxfp4_moe.down_tile_asm_hwords",
        "mxfp4_moe.up_tile_asm_hwords_even",
        "mxfp4_moe.down_tile_asm_hwords_even",
        "mxfp4_moe.down_tile_asm_hwords_even_serial",
        "mxfp4_moe.up_tile_asm_hwords_even_staged",
        "mxfp4_moe.down_tile_asm_hwords_even_staged",
        "mxfp4_moe.down_sum_tile",
        "engram_gather",
        "sinkhorn",
        "dequant.fp8",
        "dequant.fp8_rows",
        "dequant.mxfp4",
    }
    assert [(r["kernel"], r["problems"]) for r in rows if not r["valid"]] == []
    assert all(r["ptx_bytes"] > 1000 for r in rows)
    # enable_fp_fusion=False leaves no contracted fp32 FMA (the variant for FMA-throttled cards)
    assert all(r["fma_count"] == 0 for r in rows if not r["enable_fp_fusion"])
    assert any(r["fma_count"] > 0 for r in rows if r["enable_fp_fusion"])
    # the dequant kernels multiply and add nothing: no FMA to contract in either variant
    assert all(r["fma_count"] == 0 for r in rows if r["kernel"].startswith("dequant."))


@pytest.mark.slow
def test_a_native_fp8_convert_is_refused_for_sm80():
    with pytest.raises(Exception, match="fp8e4nv not supported in this architecture"):
        validity._compile(_native_fp8_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32"}, {"BLOCK": 32}, True)
