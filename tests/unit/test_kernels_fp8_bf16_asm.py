"""The swapped FP8 MMA kernel's PTX decoder (decode.e4m3_bf16_bits_asm, DECODER 2) run instruction by instruction by
a small model of the PTX it is made of (mov, prmt with its sign-replicate selectors, shl, and on 32-bit registers), on
every e4m3 byte in every position of the 4-byte register, against the codecs' e4m3 values times 2^-120: Triton's CPU
interpreter cannot run inline PTX, so this checks the text the GPU runs. A decoder with a wrong selector or mask fails."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest

pytest.importorskip("triton")

from recipekit.backends.cuda_sm80.kernels import decode  # noqa: E402
from recipekit.checkpoint.codecs import _E4M3_TO_F32  # noqa: E402

MASK = 0xFFFFFFFF


def _prmt(a: int, b: int, sel: int) -> int:
    """PTX prmt.b32 (default mode): output byte i is source byte sel[i] & 7 of {b, a}; with sel[i] & 8 set, that
    byte's sign bit replicated over all 8 bits."""
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    out = 0
    for i in range(4):
        nib = (sel >> (4 * i)) & 0xF
        byte = src[nib & 7]
        out |= (0xFF if byte & 0x80 else 0) << (8 * i) if nib & 8 else byte << (8 * i)
    return out


def run_ptx(text: str, word: int) -> list[int]:
    """The asm's outputs $0, $1 for the input register $2 = word."""
    regs: dict[str, int] = {"$2": word}

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
        elif op == "and.b32":
            regs[d] = src[0] & src[1]
        else:
            raise AssertionError(f"the model does not know {op}")
    return [regs["$0"], regs["$1"]]


def _bf16(bits: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0])


def mismatches(text: str) -> list[tuple[int, int]]:
    """(byte, position in the register) where the decoded value is not the codecs' e4m3 value x 2^-120 (sign of
    zero included; NaN bytes 0x7F / 0xFF skipped: the decoder gives 480 x 2^-120 there, as decode.py says)."""
    bad = []
    for byte in range(256):
        if byte & 0x7F == 0x7F:
            continue
        want = float(_E4M3_TO_F32[byte])
        for pos in range(4):
            # the other bytes: anything, they must not leak in (their signs set and clear in turn)
            word = sum(((byte if i == pos else (0x5A + 0x61 * i + 37 * pos) & 0xFF) << (8 * i)) for i in range(4))
            out = run_ptx(text, word)
            got = _bf16(out[pos // 2] >> (16 * (pos % 2)))
            if got * 2.0**120 != want or np.signbit(got) != np.signbit(want):
                bad.append((byte, pos))
    return bad


def test_the_ptx_e4m3_decoder_gives_every_value_times_2_to_the_minus_120():
    assert mismatches(decode.E4M3_BF16_ASM.value) == []


def test_the_model_catches_a_wrong_selector_and_a_wrong_mask():
    text = decode.E4M3_BF16_ASM.value
    no_sign = text.replace("0x9180", "0x1100")  # high bytes copied instead of sign-replicated
    assert no_sign != text and mismatches(no_sign)
    mask = text.replace("0x87F087F0", "0x87F887F0")  # a bit the shift carries from the low half into the high kept
    assert mask != text and mismatches(mask)
