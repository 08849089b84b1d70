"""The sm_80 kernels' checks without a GPU: the parity harness passes a right kernel and fails
planted wrong ones (one scale bit, the nibble order, one Sinkhorn round), `recipe kernels`'s errors,
the PTX validity rules, and the decode identities the Triton kernels rely on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from recipekit.bench.kernels import parity, synth, validity  # noqa: E402
from recipekit.checkpoint import codecs  # noqa: E402
from tests.unit import kernels_planted as planted  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SMALL = synth.Shapes(fp8_nk=(256, 512), moe_experts=24, moe_hidden=128, moe_inter=64, engram_rows=512)


def _run(impl, kernel, ms=(1, 4, 16)):
    return parity.run({kernel: impl}, "cpu", ms=list(ms), shapes=SMALL)


def test_right_bf16_kernel_passes_with_a_real_error():
    res = _run(planted.fp8_gemm_bf16, "fp8_gemm")
    assert [r.m for r in res] == [1, 4, 16]
    assert all(r.passed for r in res)
    assert all(1e-3 < r.rel_error <= 3.9e-3 for r in res)  # one bf16 rounding: not zero, within its bound


@pytest.mark.parametrize(
    ("kernel", "impl"),
    [
        ("fp8_gemm", planted.fp8_gemm_scale_bit),
        ("mxfp4_moe", planted.mxfp4_moe_nibble_swap),
        ("engram_gather", planted.engram_gather_scale_bit),
        ("sinkhorn", planted.sinkhorn_19),
    ],
)
def test_planted_wrong_kernel_fails(kernel, impl):
    res = _run(impl, kernel)
    assert res and not any(r.passed for r in res)
    assert all(r.rel_error > r.threshold for r in res)
    assert all(r.line().startswith("PARITY FAIL") for r in res)


def test_fp8_scale_bit_error_is_far_above_threshold():
    r = _run(planted.fp8_gemm_scale_bit, "fp8_gemm", ms=(1,))[0]
    assert r.rel_error > 5 * r.threshold


def test_non_finite_and_wrong_shape_fail():
    want = torch.ones((2, 8))
    bad = want.clone()
    bad[1, 3] = float("nan")
    assert compare_detail(bad, want) == "non-finite output"
    assert "shape" in compare_detail(torch.ones((2, 7)), want)


def compare_detail(got, want):
    r = parity.compare("fp8_gemm", 2, got, want, 3.9e-3)
    assert not r.passed and r.to_dict()["rel_error"] is None
    return r.detail


def test_thresholds_are_data_citing_the_seed():
    doc = parity.thresholds()
    assert doc["ms"] == [1, 2, 4, 8, 16]
    assert "1.6e-3 to 1.7e-3" in doc["source"]
    assert set(doc["kernels"]) == set(parity.KERNELS)
    assert doc["kernels"]["fp8_gemm"]["max_rel_error"] == 3.9e-3


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "recipekit", "kernels", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_cli_impl_planted_fails_with_gate_exit():
    p = _cli(
        "parity",
        "--device",
        "cpu",
        "-k",
        "fp8_gemm",
        "--m",
        "1",
        "--impl",
        "tests.unit.kernels_planted:fp8_gemm_scale_bit",
    )
    assert p.returncode == 5, p.stderr
    assert p.stdout.startswith("PARITY FAIL  fp8_gemm       M=1")
    assert "error[kernels-parity-failed] 1 of 1 checks failed: fp8_gemm M=1" in p.stderr


def test_cli_impl_right_passes_json():
    import json

    p = _cli(
        "parity",
        "--device",
        "cpu",
        "-k",
        "sinkhorn",
        "--m",
        "2",
        "--impl",
        "recipekit.bench.kernels.reference:sinkhorn",
        "-f",
        "json",
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["passed"] is True
    assert [(r["kernel"], r["m"], r["rel_error"]) for r in doc["results"]] == [("sinkhorn", 2, 0.0)]


def test_cli_option_errors():
    from recipekit.backends.cuda_sm80 import kernels as sm80

    def p(kernels, impl, device):
        return parity.resolve(kernels, impl, device, sm80.builtin)

    with pytest.raises(Exception) as e:
        p([], "x:y", "cpu")
    assert e.value.code == "kernels-bad-option"
    with pytest.raises(Exception) as e:
        p(["nope"], None, "cpu")
    assert e.value.code == "kernels-bad-option"
    for spec in ("no_colon", "recipekit.nope:f", "recipekit.bench.kernels.reference:nope"):
        with pytest.raises(Exception) as e:
            p(["fp8_gemm"], spec, "cpu")
        assert e.value.code == "kernels-bad-impl"
    if not torch.cuda.is_available():
        with pytest.raises(Exception) as e:
            p([], None, "cpu")
        assert e.value.code == "kernels-no-gpu" and e.value.exit_code == 3


def test_ptx_rules():
    clean = ".version 8.7\n.target sm_80\n.address_size 64\nmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
    assert validity.check_ptx(clean) == []
    assert validity.check_ptx(clean.replace("sm_80", "sm_90a"))[0] == ".target is sm_90a, not sm_80"
    hopper = clean + "\nwgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16\ncp.async.bulk.tensor.2d.shared"
    probs = validity.check_ptx(hopper)
    assert any("wgmma" in p for p in probs) and any("cp.async.bulk" in p for p in probs)
    assert any("FP8" in p for p in validity.check_ptx(clean + "\ncvt.rn.f16x2.e4m3x2 %r1, %rs1;"))


def test_decode_identities_the_kernels_use():
    """e4m3 byte -> fp16 bits (sign << 15 | low7 << 7) = value * 2^-8; e2m1 nibble -> fp16 bits
    (sign << 15 | low3 << 9) = value * 2^-14; both exact for every finite code (the Triton decoders)."""
    b = np.array([x for x in range(256) if x not in (0x7F, 0xFF)], dtype=np.uint16)
    bits = ((b & 0x80) << 8) | ((b & 0x7F) << 7)
    got = bits.astype(np.uint16).view(np.float16).astype(np.float32) * np.float32(256)
    want = codecs.fp8_dequant_f32(b.astype(np.uint8).reshape(1, -1), np.array([[127] * 8], dtype=np.uint8))[0]
    np.testing.assert_array_equal(got, want)
    n = np.arange(16, dtype=np.uint16)
    got4 = (((n & 8) << 12) | ((n & 7) << 9)).view(np.float16).astype(np.float32) * np.float32(2**14)
    np.testing.assert_array_equal(got4, codecs.E2M1_VALUES.astype(np.float32))


def test_fp32_bits_nibble_decode_is_exact_and_a_swap_is_not():
    """mxfp4_pair_dot_denorm's identity, written as its integer ops on every byte: ((byte << 28) >> 6)
    & 0x81C00000 (low nibble) and ((byte << 24) >> 6) & 0x81C00000 (high) as fp32 bits are the e2m1
    values x 2^-126 (0.5 a denormal), and times 2^63 x 2^63 exact; the nibbles read the other way
    round are not."""
    b = np.arange(256, dtype=np.int32)
    mask = np.int32(-2118123520)  # 0x81C00000
    lo = (((b << 28) >> 6) & mask).view(np.float32).astype(np.float64) * 2.0**126
    hi = (((b << 24) >> 6) & mask).view(np.float32).astype(np.float64) * 2.0**126
    table = codecs.E2M1_VALUES.astype(np.float64)
    np.testing.assert_array_equal(lo, table[b & 15])
    np.testing.assert_array_equal(hi, table[b >> 4])
    assert not np.array_equal(lo, table[b >> 4])
    # the kernel's order: (value x 2^-126) x (x x 2^63) x (scale x 2^63), each step exact in fp32
    x = np.float32(-1.5)
    prod = (lo.astype(np.float32) * np.float32(2.0**-126)).astype(np.float32) * (x * np.float32(2.0**63))
    np.testing.assert_array_equal(prod * np.float32(2.0**63), (table[b & 15] * -1.5).astype(np.float32))


def test_sign_extended_nibble_decode_is_exact_and_a_wrong_shift_is_not():
    """mxfp4_pair_dot_denorm_sext's identity (TILE 4), written as its integer ops on every byte: the byte
    sign-extended from int8, ((s << 28) >> 6) & 0x81C00000 (low nibble) and (s << 18) & 0x81C00000 (high)
    as fp32 bits are the e2m1 values x 2^-126; the high nibble shifted by 17 instead is not."""
    b = np.arange(256, dtype=np.int32)
    s = b.astype(np.uint8).view(np.int8).astype(np.int32)
    mask = np.int32(-2118123520)  # 0x81C00000
    lo = (((s << 28) >> 6) & mask).view(np.float32).astype(np.float64) * 2.0**126
    hi = ((s << 18) & mask).view(np.float32).astype(np.float64) * 2.0**126
    table = codecs.E2M1_VALUES.astype(np.float64)
    np.testing.assert_array_equal(lo, table[b & 15])
    np.testing.assert_array_equal(hi, table[b >> 4])
    wrong = ((s << 17) & mask).view(np.float32).astype(np.float64) * 2.0**126
    assert not np.array_equal(wrong, table[b >> 4])


def test_e4m3_bits_decoders_are_exact_and_a_wrong_mask_is_not():
    """The register tile's and the MMA kernel's decoders, written as their integer ops on every finite byte:
    the byte sign-extended, ((s << 20) & 0x87F00000) as fp32 bits and ((s << 4) & 0x87F0) as bf16 bits are
    the e4m3 value x 2^-120 (subnormals as denormals), so x 2^120 gives the reference's values exactly;
    one mask bit short (the exponent's top bit dropped) does not."""
    b = np.array([x for x in range(256) if x not in (0x7F, 0xFF)], dtype=np.uint8)
    want = codecs.fp8_dequant_f32(b.reshape(1, -1), np.array([[127] * 8], dtype=np.uint8))[0].astype(np.float64)
    s32 = b.view(np.int8).astype(np.int32)
    f32 = ((s32 << 20) & np.int32(-2014314496)).view(np.float32).astype(np.float64) * 2.0**120
    np.testing.assert_array_equal(f32, want)
    s16 = b.view(np.int8).astype(np.int16)
    bf16_bits = ((s16 << 4) & np.int16(-30736)).astype(np.uint16).astype(np.uint32) << 16  # bf16 = fp32's top half
    np.testing.assert_array_equal(bf16_bits.view(np.float32).astype(np.float64) * 2.0**120, want)
    wrong = ((s32 << 20) & np.int32(-2022703104)).view(np.float32).astype(np.float64) * 2.0**120  # 0x87700000
    assert not np.array_equal(wrong, want)


def test_synthetic_e4m3_bytes_are_finite():
    b = synth.fp8_bytes((4096,), synth._gen(1))
    assert not bool(((b == 0x7F) | (b == 0xFF)).any())
    assert int(b.max()) == 0xFE and int(b.min()) == 0
