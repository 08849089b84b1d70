"""Codec round trips: every e4m3 byte x edge scale codes, every e2m1 nibble, nibble order,
and the exactness refusals at scale codes 0-2 and 247-255."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from recipekit.checkpoint import codecs
from recipekit.errors import RecipekitError

ALL_E4M3 = np.arange(256, dtype=np.uint8)
NAN_BYTES = {0x7F, 0xFF}


def _ref_e4m3(b: int) -> float:
    """Independent decode of one e4m3fn byte from its bit fields."""
    s = -1.0 if b & 0x80 else 1.0
    e = (b >> 3) & 0xF
    m = b & 0x7
    if e == 0xF and m == 0x7:
        return float("nan")
    if e == 0:
        return s * m * 2.0**-9
    return s * (1 + m / 8) * 2.0 ** (e - 7)


@pytest.mark.parametrize("code", [3, 4, 100, 115, 120, 127, 128, 200, 245, 246])
def test_fp8_all_bytes_round_trip_exact(code):
    w = np.tile(ALL_E4M3, 4).reshape(32, 32)  # every byte, a full 32x32 block
    sc = np.array([[code]], dtype=np.uint8)
    bf = codecs.fp8_to_bf16(w, sc, "t")
    assert bf.dtype == ml_dtypes.bfloat16
    got = bf.astype(np.float64).reshape(-1)
    want = np.array([_ref_e4m3(int(b)) * 2.0 ** (code - 127) for b in w.reshape(-1)])
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan], want[~nan])  # exact, no rounding
    # the sign of zero survives
    assert np.signbit(got[w.reshape(-1) == 0x80]).all() and not np.signbit(got[w.reshape(-1) == 0]).any()
    back = codecs.fp8_encode(bf.astype(np.float32), sc)
    ok = ~np.isin(w, list(NAN_BYTES))
    assert np.array_equal(back[ok], w[ok])  # bytes come back unchanged
    assert np.isin(back[~ok], list(NAN_BYTES)).all()


@pytest.mark.parametrize("code", [0, 1, 2, *range(247, 256)])
def test_fp8_refuses_inexact_codes_naming_tensor_and_block(code):
    w = np.zeros((64, 96), dtype=np.uint8)
    sc = np.full((2, 3), 120, dtype=np.uint8)
    sc[1, 2] = code
    with pytest.raises(RecipekitError) as ei:
        codecs.fp8_to_bf16(w, sc, "layers.3.attn.wq_a.weight")
    e = ei.value
    assert e.code == "fp8-scale-not-exact"
    assert "layers.3.attn.wq_a.weight" in e.message and "[1, 2]" in e.message
    assert "rows 32..63, cols 64..95" in e.message and f"code {code}" in e.message


def test_fp8_boundary_codes_are_the_exact_limits():
    # at code 3 the smallest subnormal lands on bf16's smallest subnormal 2^-133
    v = codecs.fp8_to_bf16(np.array([[1] + [0] * 31] * 32, np.uint8), np.array([[3]], np.uint8), "t")
    assert float(v[0, 0]) == 2.0**-133
    # at code 246 the largest value 448 * 2^119 is finite in bf16
    v = codecs.fp8_to_bf16(np.array([[0x7E] * 32] * 32, np.uint8), np.array([[246]], np.uint8), "t")
    assert float(v[0, 0]) == 448 * 2.0**119
    # one code further each way would not be exact (checked arithmetically, not by the codec)
    assert 2.0**-134 < 2.0**-133 and 448 * 2.0**120 > float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)


def test_fp8_ragged_edges_and_engram_row_blocks():
    rng = np.random.default_rng(0)
    w = rng.integers(0, 0x7E, size=(40, 64), dtype=np.uint8)
    sc = rng.integers(110, 126, size=(2, 2), dtype=np.uint8)
    got = codecs.fp8_to_bf16(w, sc, "t").astype(np.float64)
    want = np.array(
        [[_ref_e4m3(int(w[i, j])) * 2.0 ** (int(sc[i // 32, j // 32]) - 127) for j in range(64)] for i in range(40)]
    )
    assert np.array_equal(got, want)
    # per row per 32 columns (Engram table)
    sc_rows = rng.integers(110, 126, size=(40, 2), dtype=np.uint8)
    got = codecs.fp8_to_bf16(w, sc_rows, "t", block=codecs.ENGRAM_BLOCK).astype(np.float64)
    want = np.array(
        [[_ref_e4m3(int(w[i, j])) * 2.0 ** (int(sc_rows[i, j // 32]) - 127) for j in range(64)] for i in range(40)]
    )
    assert np.array_equal(got, want)
    with pytest.raises(ValueError):
        codecs.fp8_to_bf16(w, sc_rows, "t")  # wrong scale shape for 32x32 blocks


def test_e8m0_values():
    v = codecs.e8m0_to_float(np.array([127, 128, 120, 0, 254, 255], np.uint8))
    assert v[:5].tolist() == [1.0, 2.0, 2.0**-7, 2.0**-127, 2.0**127]
    assert np.isnan(v[5])
    assert codecs.float_to_e8m0([1.0, 0.5, 2.0**-12]).tolist() == [127, 126, 115]
    with pytest.raises(ValueError):
        codecs.float_to_e8m0([3.0])


def test_mxfp4_all_nibbles_and_order():
    # every byte = every (low, high) nibble pair
    packed = np.arange(256, dtype=np.uint8).reshape(16, 16)
    codes = codecs.mxfp4_unpack(packed)
    assert codes.shape == (16, 32)
    flat_p, flat_c = packed.reshape(-1), codes.reshape(-1)
    assert np.array_equal(flat_c[0::2], flat_p & 0xF)  # low nibble = even index
    assert np.array_equal(flat_c[1::2], flat_p >> 4)
    assert np.array_equal(codecs.mxfp4_pack(codes), packed)
    # byte 0x21: element 0 = code 1 (0.5), element 1 = code 2 (1.0)
    one = np.zeros((1, 16), np.uint8)
    one[0, 0] = 0x21
    vals = codecs.mxfp4_dequant_f32(one, np.array([[127]], np.uint8))
    assert vals[0, 0] == 0.5 and vals[0, 1] == 1.0 and not vals[0, 2:].any()
    table = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    for code in (100, 127, 130):
        sc = np.full((16, 1), code, np.uint8)
        v = codecs.mxfp4_dequant_f32(packed, sc)
        assert np.array_equal(v.reshape(-1), np.array([table[c] * 2.0 ** (code - 127) for c in flat_c], np.float32))
        assert np.array_equal(np.signbit(v.reshape(-1)), np.array([c >= 8 for c in flat_c]))
        assert np.array_equal(codecs.mxfp4_encode_codes(v, sc), codes)  # -0.0 keeps code 8


def test_mxfp4_per_row_scales():
    packed = np.full((2, 32), 0x22, np.uint8)  # 64 columns of 1.0
    sc = np.array([[127, 128], [120, 126]], np.uint8)
    v = codecs.mxfp4_dequant_f32(packed, sc)
    assert v[0, :32].tolist() == [1.0] * 32 and v[0, 32:].tolist() == [2.0] * 32
    assert v[1, :32].tolist() == [2.0**-7] * 32 and v[1, 32:].tolist() == [0.5] * 32
