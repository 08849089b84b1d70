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


def run_ptx(text: str, word: int) -> list[int]:
    """The asm's outputs $0..$3 for the input register $4 = word."""
    regs: dict[str, int] = {"$4": word}

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
