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
        "fp8_gemm.swap_scaled_activations",
        "fp8_gemm.gluon_mma",
        "fp8_gemm.gluon_mma_packed",
        "fp8_gemm.gluon_mma_split",
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
        "mxfp4_moe.up_tile_asm_hwords_even_staged_l2",
        "mxfp4_moe.down_tile_asm_hwords_even_staged",
        "mxfp4_moe.up_mma",
        "mxfp4_moe.up_mma_staged",
        "mxfp4_moe.down_mma",
        "mxfp4_moe.down_mma_bf16_serial",
        "mxfp4_moe.down_mma_f16_serial",
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


@pytest.mark.slow
def test_the_l2_prefetch_reaches_the_ptx_as_an_sm80_prefetch_and_the_default_has_none():
    specs = {name: (fn, sig, consts) for name, fn, sig, consts in validity._specs(sm80.modules())}

    def ptx(name: str, **extra: int) -> str:
        fn, sig, consts = specs[name]
        return validity._compile(fn, sig, {**consts, "ASM": 1, **extra}, True).asm["ptx"]

    with_l2 = ptx("mxfp4_moe.up_tile_asm_hwords_even_staged_l2")
    # one loop for the w2 bytes, one for the scale codes; sm_80's prefetch (PTX ISA 7.4), not a load
    assert with_l2.count("prefetch.global.L2::evict_last") == 2
    assert validity.check_ptx(with_l2) == []
    assert "prefetch.global" not in ptx("mxfp4_moe.up_tile_asm_hwords_even_staged")
    # unstaged, evict_first reaches the word loads as an L2 cache policy; staged (cp.async) it carries none
    unstaged = ptx("mxfp4_moe.up_tile_asm_hwords_even_staged_l2", STAGES=1)
    assert "createpolicy.fractional.L2::evict_first" in unstaged and ".L2::cache_hint" in unstaged
    assert "createpolicy" not in with_l2
