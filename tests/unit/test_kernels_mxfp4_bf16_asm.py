"""The tensor-core path's PTX nibble decoder (decode.mxfp4_bf16_bits_asm, MoE TILE 9 / 10) run instruction by
instruction by a small model of the PTX it is made of (mov, prmt, shl, shr, and, or on 32-bit registers), on
every byte in every position of the 4-byte register, against the codecs' e2m1 values: Triton's CPU interpreter
cannot run inline PTX, so this checks the text the GPU runs."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest

pytest.importorskip("triton")

from recipekit.backends.cuda_sm80.kernels import decode  # noqa: E402
from recipekit.checkpoint.codecs import E2M1_VALUES, mxfp4_unpack  # noqa: E402

MASK = 0xFFFFFFFF


def _prmt(a: int, b: int, sel: int) -> int:
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    return sum(src[(sel >> (4 * i)) & 7] << (8 * i) for i in range(4))


def _bf16_bits_of(x: float) -> int:
    """x as bf16 bits, rounded to nearest even (the 16 low bits of its fp32 dropped)."""
    u = int(np.array([x], np.float32).view(np.uint32)[0])
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def _fma_bf16x2(a: int, b: int, c: int) -> int:
    halves = (
        [(a >> s) & 0xFFFF for s in (0, 16)],
        [(b >> s) & 0xFFFF for s in (0, 16)],
        [(c >> s) & 0xFFFF for s in (0, 16)],
    )
    out = 0
    for i in range(2):
        x, y, z = (_bf16(h[i]) for h in halves)
        r = x * y + z  # exact in float64 for these operands (a power of two times a 2-bit significand)
        bits = _bf16_bits_of(r) if r != 0 else (0x8000 if np.signbit(x * y) and np.signbit(z) else 0)
        out |= bits << (16 * i)
    return out


def run_ptx(text: str, word: int, extra: dict[str, int] | None = None) -> list[int]:
    """The asm's outputs $0..$3 for the input register $4 = word (and $5, ... from `extra`)."""
    regs: dict[str, int] = {"$4": word, **(extra or {})}

    def val(tok: str) -> int:
        return int(tok, 0) if re.match(r"^(0x[0-9a-fA-F]+|\d+)$", tok) else regs[tok]

    for line in text.splitlines():
        line = line.strip().rstrip(";")
        if not line or line in "{}" or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        args = [t.strip() for t in rest.split(",")]
        d, src = args[0], [val(t) for t in args[1:]]
        if op == "mov.b32":
            regs[d] = src[0]
        elif op == "prmt.b32":
            regs[d] = _prmt(src[0], src[1], src[2])
        elif op == "shl.b32":
            regs[d] = (src[0] << src[1]) & MASK
        elif op == "shr.b32":
            regs[d] = src[0] >> src[1]
        elif op == "and.b32":
            regs[d] = src[0] & src[1]
        elif op == "or.b32":
            regs[d] = src[0] | src[1]
        elif op == "fma.rn.bf16x2":
            regs[d] = _fma_bf16x2(src[0], src[1], src[2])
        else:
            raise AssertionError(f"the model does not know {op}")
    return [regs[f"${i}"] for i in range(4)]


def _bf16(bits: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0])


def mismatches(text: str) -> list[tuple[int, int]]:
    """(byte, position in the register) where the decoded low or high nibble is not the codecs' value x 2^-126
    (sign of zero included: code 8 is -0.0)."""
    bad = []
    for byte in range(256):
        want = [float(v) for v in E2M1_VALUES[mxfp4_unpack(np.array([byte], np.uint8))]]
        for pos in range(4):
            # the other bytes: anything, they must not leak in
            word = sum(((byte if i == pos else (0x5A + 37 * i + pos) & 0xFF) << (8 * i)) for i in range(4))
            out = run_ptx(text, word)
            got = [_bf16(out[k + pos // 2] >> (16 * (pos % 2))) for k in (0, 2)]
            for g, w in zip(got, want):
                if g * 2.0**126 != w or np.signbit(g) != np.signbit(w):
                    bad.append((byte, pos))
    return bad


def test_the_ptx_nibble_decoder_gives_every_e2m1_value_times_2_to_the_minus_126():
    assert mismatches(decode.BF16_BITS_ASM.value) == []


def test_planted_wrong_decoders_are_caught():
    text = decode.BF16_BITS_ASM.value
    assert "0x3424" in text and "0x01C001C0" in text
    assert mismatches(text.replace("0x3424", "0x2434"))  # bytes 2 and 3 swapped
    assert mismatches(text.replace("0x01C001C0", "0x03C003C0"))  # the sign's copy leaks onto bit 9


def scaled_mismatches(text: str, codes: tuple[int, int]) -> list[tuple[int, int]]:
    """(byte, position) where mxfp4_bf16_scaled_asm's output is not the codecs' value x 2^(s - 190), s the E8M0 code
    of the byte's pair of the register (codes[0] for bytes 0, 1 in $5; codes[1] for bytes 2, 3 in $6), the factor
    2^(s - 64) given as the kernel builds it, bf16 bits (s + 63) << 7 in both halves."""
    f = [((c + 63) << 7) * 0x10001 for c in codes]
    bad = []
    for byte in range(256):
        want = [float(v) for v in E2M1_VALUES[mxfp4_unpack(np.array([byte], np.uint8))]]
        for pos in range(4):
            word = sum(((byte if i == pos else (0x5A + 37 * i + pos) & 0xFF) << (8 * i)) for i in range(4))
            out = run_ptx(text, word, {"$5": f[0], "$6": f[1]})
            got = [_bf16(out[k + pos // 2] >> (16 * (pos % 2))) for k in (0, 2)]
            scale = 2.0 ** (codes[pos // 2] - 190)
            for g, w in zip(got, want):
                if g != w * scale or np.signbit(g) != np.signbit(w):
                    bad.append((byte, pos))
    return bad


@pytest.mark.parametrize("codes", [(118, 122), (65, 191), (127, 100)])
def test_the_scaled_decoder_gives_every_e2m1_value_times_its_groups_power_of_two(codes):
    assert scaled_mismatches(decode.BF16_SCALED_ASM.value, codes) == []


def test_planted_wrong_scaled_decoders_are_caught():
    text = decode.BF16_SCALED_ASM.value
    assert "$0, $0, $5, nz" in text
    assert scaled_mismatches(text.replace("$0, $0, $5, nz", "$0, $0, $6, nz"), (118, 122))  # the other pair's scale
    assert scaled_mismatches(text.replace("0x80008000;\nfma", "0x00008000;\nfma"), (118, 122))  # +0 added: -0 lost
