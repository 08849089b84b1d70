"""The oracle's torch decoders (bench/oracle/decode.py) against two independent decoders: the numpy
codecs the converters use, and ml_dtypes with the scale applied in float64 (one rounding to fp32,
as the fp32 product does). Bit-identical on random bytes covering every e4m3 / e2m1 byte, every
E8M0 code (0: 2^-127 subnormal products, 254: overflow to inf, 255: NaN) and ragged edge blocks."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch  # a test dependency (the oracle's decode)

from recipekit.bench.oracle import decode
from recipekit.checkpoint import codecs

pytestmark = pytest.mark.timeout(120)


def _same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype == np.float32
    na, nb = np.isnan(a), np.isnan(b)
    assert (na == nb).all(), "NaN positions differ"
    assert (a.view(np.uint32)[~na] == b.view(np.uint32)[~nb]).all(), "bits differ"


def _ml_dtypes_fp8(w: np.ndarray, sc: np.ndarray, block: tuple[int, int]) -> np.ndarray:
    v = w.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    s = np.where(sc == 255, np.nan, np.ldexp(1.0, sc.astype(np.int64) - 127))
    s = np.repeat(np.repeat(s, block[0], 0), block[1], 1)[: w.shape[0], : w.shape[1]]
    with np.errstate(over="ignore", invalid="ignore"):
        return (v * s).astype(np.float32)


@pytest.mark.parametrize("shape,block", [((64, 96), (32, 32)), ((70, 45), (32, 32)), ((5, 64), (1, 32))])
def test_fp8_dequant_is_bit_identical(shape, block):
    rng = np.random.default_rng(1)
    w = rng.integers(0, 256, shape, dtype=np.uint8)
    w.reshape(-1)[:256] = np.arange(256, dtype=np.uint8)  # every e4m3 byte incl. 0x7F/0xFF (NaN), subnormals
    sc = rng.integers(0, 256, codecs.expected_scale_shape(shape, block), dtype=np.uint8)
    sc.reshape(-1)[:4] = [0, 1, 254, 255]
    got = decode.fp8_dequant(w, sc, block)
    assert got.dtype == torch.float32
    _same_bits(got.numpy(), codecs.fp8_dequant_f32(w, sc, block))
    _same_bits(got.numpy(), _ml_dtypes_fp8(w, sc, block))
    assert np.isinf(got.numpy()).any() and np.isnan(got.numpy()).any()  # the edge codes were exercised


def test_fp8_dequant_read_only_bytes_and_bad_scale_shape():
    w = np.frombuffer(bytes(range(256)) * 4, dtype=np.uint8).reshape(32, 32)  # read-only, as np.frombuffer gives
    sc = np.full((1, 1), 127, dtype=np.uint8)
    _same_bits(decode.fp8_dequant(w, sc).numpy(), codecs.fp8_dequant_f32(w, sc))
    with pytest.raises(ValueError, match="scale shape"):
        decode.fp8_dequant(w, np.zeros((2, 1), dtype=np.uint8))


@pytest.mark.parametrize("rows,k", [(8, 64), (3, 96)])
def test_mxfp4_dequant_is_bit_identical(rows, k):
    rng = np.random.default_rng(2)
    p = rng.integers(0, 256, (rows, k // 2), dtype=np.uint8)
    p.reshape(-1)[: min(256, p.size)] = np.arange(min(256, p.size), dtype=np.uint8)
    sc = rng.integers(0, 256, (rows, k // 32), dtype=np.uint8)
    sc.reshape(-1)[:3] = [0, 254, 255]
    got = decode.mxfp4_dequant(p, sc).numpy()
    _same_bits(got, codecs.mxfp4_dequant_f32(p, sc))
    # independent: low nibble first, e2m1 table by hand, scale in float64
    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)
    codes = np.stack((p & 15, p >> 4), axis=-1).reshape(rows, k)
    s = np.repeat(np.where(sc == 255, np.nan, np.ldexp(1.0, sc.astype(np.int64) - 127)), 32, axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        _same_bits(got, (e2m1[codes] * s).astype(np.float32))


def test_mxfp4_dequant_non_contiguous_rows():
    """The Gaudi reader decodes w13[0::2] (a strided view): same bits as the contiguous copy."""
    rng = np.random.default_rng(3)
    p = rng.integers(0, 256, (8, 32), dtype=np.uint8)
    sc = rng.integers(110, 130, (8, 2), dtype=np.uint8)
    _same_bits(decode.mxfp4_dequant(p[0::2], sc[0::2]).numpy(), codecs.mxfp4_dequant_f32(p[0::2].copy(), sc[0::2]))


def test_widen_bf16_and_f32():
    rng = np.random.default_rng(4)
    bits = rng.integers(0, 2**16, 4096, dtype=np.uint16)
    bits[:4] = [0x7F80, 0xFF80, 0x7FC1, 0x0001]  # inf, -inf, NaN, smallest subnormal
    a = bits.view(ml_dtypes.bfloat16)
    _same_bits(decode.widen(a).numpy(), a.astype(np.float32))
    f = rng.standard_normal(16).astype(np.float32)
    _same_bits(decode.widen(f).numpy(), f)
