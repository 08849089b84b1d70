"""In-kernel decoders by integer ALU, valid on sm_80 (Triton refuses fp8e4nv converts below sm_89).

- e4m3 byte b -> fp16 bit pattern (sign << 15 | (b & 0x7F) << 7) is the value times 2^-8, subnormals
  included (e4m3 bias 7, fp16 bias 15; the 3 mantissa bits land on fp16's top mantissa bits).
  NaN bytes 0x7F/0xFF decode to 480*2^-8 instead of NaN: the parity weights never hold them.
- e2m1 nibble n -> fp16 bits (sign << 15 | (n & 7) << 9) is the value times 2^-14 (subnormal 0.5 too);
  mxfp4_pair_dot gets there from the nibble sign-extended out of its byte.
- e4m3 byte b -> fp32 bits (sign << 31 | (b & 0x7F) << 20) is the value times 2^-120 (subnormals land on
  fp32 denormals, exact as long as the arithmetic keeps denormals: Triton's fp32 ops do not flush); no
  fp16 -> fp32 convert (16 per clock per SM on sm_80/sm_90, 1/8 of the FMA rate).
- E8M0 code s -> fp32 bits s << 23 = 2^(s-127) for 1 <= s <= 254 (code 0 gives +0 instead of
  2^-127, 255 gives inf instead of NaN, as vLLM's decode).
The factors 2^8 / 2^14 are folded into the block scale, a power of two: every product stays exact.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def e4m3_times_2e8(b):
    """uint8/int tensor of e4m3 bytes -> fp32 values * 2^-8 (exact)."""
    b = b.to(tl.int32)
    bits = ((b & 0x80) << 8) | ((b & 0x7F) << 7)
    return bits.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def e8m0(s):
    """uint8 E8M0 codes -> fp32 2^(s-127)."""
    return (s.to(tl.int32) << 23).to(tl.float32, bitcast=True)


@triton.jit
def e4m3_sext_times_2e8(b):
    """The same as e4m3_times_2e8 in fewer integer ops: the byte sign-extended from int8, shifted by 7
    (sign lands on bit 15, and a copy on bit 14 that the mask 0xBF80 clears)."""
    s = b.to(tl.int8, bitcast=True).to(tl.int32)
    return ((s << 7) & 0xBF80).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def e4m3_bits_times_2em120(b):
    """uint8 e4m3 bytes -> fp32 values * 2^-120 (exact) in two integer ops after the sign extension: the
    byte sign-extended and shifted by 20 puts its sign on bits 27..31 and its 7 low bits on 20..26; the
    mask 0x87F00000 keeps bit 31 and bits 20..26 (e4m3's 4 exponent bits on fp32's low exponent bits)."""
    s = b.to(tl.int8, bitcast=True).to(tl.int32)
    return ((s << 20) & -2014314496).to(tl.float32, bitcast=True)  # 0x87F00000 as int32


@triton.jit
def e4m3_bf16_bits_times_2em120(b):
    """uint8 e4m3 bytes -> bf16 values * 2^-120 (exact), no convert at all: the byte sign-extended to 16 bits
    and shifted by 4 puts its sign on bits 11..15 and its 7 low bits on 4..10; the mask 0x87F0 keeps bit 15
    and bits 4..10 (e4m3's exponent on bf16's low exponent bits, its 3 mantissa bits on bf16's top ones).
    Subnormals land on bf16 denormals (the MMA keeps them: the parity shape holds them)."""
    s = b.to(tl.int8, bitcast=True).to(tl.int16)
    return ((s << 4) & -30736).to(tl.bfloat16, bitcast=True)  # 0x87F0 as int16


# e4m3_bf16_bits_asm's PTX: 4 e4m3 bytes ($2) -> two pairs of bf16 values x 2^-120 ($0: bytes 0, 1; $1: bytes 2, 3).
# prmt places byte i in the low byte of a 16-bit half and its sign replicated in the high byte (selector nibble 8 | i):
# two sign-extended int16 at once; one 32-bit shift by 4 and the mask 0x87F0 on both halves (the bits a shift carries
# from the low half into the high one land on bits 0..3, which the mask clears): 3 operations per two values.
E4M3_BF16_ASM = tl.constexpr(
    "{\n"
    ".reg .b32 z;\n"
    "mov.b32 z, 0;\n"
    "prmt.b32 $0, $2, z, 0x9180;\n"
    "prmt.b32 $1, $2, z, 0xB3A2;\n"
    "shl.b32 $0, $0, 4;\n"
    "shl.b32 $1, $1, 4;\n"
    "and.b32 $0, $0, 0x87F087F0;\n"
    "and.b32 $1, $1, 0x87F087F0;\n"
    "}"
)


@triton.jit
def e4m3_bf16_bits_asm(b):
    """e4m3_bf16_bits_times_2em120 in plain sm_80 PTX on four bytes per 32-bit register: 1.5 operations per value."""
    return tl.inline_asm_elementwise(
        asm=E4M3_BF16_ASM, constraints="=r,=r,r", args=[b], dtype=tl.bfloat16, is_pure=True, pack=4
    )


@triton.jit
def mxfp4_pair_dot(q, v_even, v_odd):
    """MXFP4 bytes q (low nibble = even index) times their two activations: the per-byte products
    lo * v_even + hi * v_odd, each value * 2^-14 (exact; the caller folds 2^14 into the group scale).
    Each nibble is sign-extended from its byte (int8 arithmetic shifts), so bit 3 lands on fp16's sign."""
    s = q.to(tl.int8, bitcast=True).to(tl.int32)
    lo = (((s << 28) >> 28) << 9) & 0x8E00
    hi = ((s >> 4) << 9) & 0x8E00
    lo_f = lo.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    hi_f = hi.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    return lo_f * v_even + hi_f * v_odd


@triton.jit
def e4m3_asm_times_2e8(b):
    """The same as e4m3_times_2e8 on four bytes per 32-bit register (plain sm_80 PTX: prmt, shifts and
    masks on two fp16 halves at once, then cvt.f32.f16): about 4 instructions per value instead of ~9."""
    return tl.inline_asm_elementwise(
        asm="""
        {
        .reg .b32 z, p, q, m, s;
        .reg .b16 h0, h1, h2, h3;
        mov.b32 z, 0;
        prmt.b32 p, $4, z, 0x4140;
        prmt.b32 q, $4, z, 0x4342;
        shl.b32 m, p, 7;
        and.b32 m, m, 0x3F803F80;
        shl.b32 s, p, 8;
        and.b32 s, s, 0x80008000;
        or.b32 p, m, s;
        shl.b32 m, q, 7;
        and.b32 m, m, 0x3F803F80;
        shl.b32 s, q, 8;
        and.b32 s, s, 0x80008000;
        or.b32 q, m, s;
        mov.b32 {h0, h1}, p;
        mov.b32 {h2, h3}, q;
        cvt.f32.f16 $0, h0;
        cvt.f32.f16 $1, h1;
        cvt.f32.f16 $2, h2;
        cvt.f32.f16 $3, h3;
        }
        """,
        constraints="=r,=r,=r,=r,r",
        args=[b],
        dtype=tl.float32,
        is_pure=True,
        pack=4,
    )


@triton.jit
def mxfp4_pair_dot_denorm(q, v_even, v_odd):
    """mxfp4_pair_dot without the fp16 -> fp32 converts (8x slower than an FMA on recent SMs): each nibble
    placed straight into fp32 bits, sign on bit 31 and its 3 magnitude bits on 22..24, is the value times
    2^-126 (0.5 a denormal, exact as long as the arithmetic keeps denormals: Triton's fp32 ops do not
    flush). The caller hands activations times 2^63 and folds the other 2^63 into the group scale, so the
    products land in fp32's normal range. Per byte: two shift pairs and masks, two FMAs."""
    s = q.to(tl.int32)
    lo = ((s << 28) >> 6) & -2118123520  # 0x81C00000 as int32
    hi = ((s << 24) >> 6) & -2118123520
    return lo.to(tl.float32, bitcast=True) * v_even + hi.to(tl.float32, bitcast=True) * v_odd


@triton.jit
def mxfp4_pair_dot_denorm_sext(q, v_even, v_odd):
    """mxfp4_pair_dot_denorm with one integer op less per byte: the byte sign-extended from int8, so the high
    nibble needs one shift (its 3 magnitude bits 4..6 to 22..24, the byte's sign copies onto bit 31) and a
    mask; the low nibble as before (shift its sign to bit 31, arithmetic shift back, mask)."""
    s = q.to(tl.int8, bitcast=True).to(tl.int32)
    lo = ((s << 28) >> 6) & -2118123520  # 0x81C00000 as int32
    hi = (s << 18) & -2118123520
    return lo.to(tl.float32, bitcast=True) * v_even + hi.to(tl.float32, bitcast=True) * v_odd


@triton.jit
def mxfp4_bf16_bits(q):
    """uint8 MXFP4 bytes -> (low nibble, high nibble) as bf16 values times 2^-126 (exact), for the tensor cores:
    sign on bf16's bit 15, the 3 magnitude bits on 6..8 (exponent's low two bits and mantissa's top bit; 0.5
    lands on the bf16 denormal 2^-127, which the MMA keeps). The byte sign-extended from int8: the low nibble by a
    shift pair (its sign to bit 31, arithmetic back by 22) and a mask, the high one by a shift and the same mask
    0x81C0; no convert (bits truncated to 16, then reinterpreted)."""
    s = q.to(tl.int8, bitcast=True).to(tl.int32)
    lo = ((s << 28) >> 22) & 0x81C0
    hi = (s << 2) & 0x81C0
    return (
        lo.to(tl.int16).to(tl.bfloat16, bitcast=True),
        hi.to(tl.int16).to(tl.bfloat16, bitcast=True),
    )


# mxfp4_bf16_bits_asm's PTX: 4 bytes ($4) -> the low nibbles of bytes 0, 1 ($0) and 2, 3 ($1) and the high ones ($2,
# $3) as bf16 pairs. prmt puts byte 2p at bits 8..15 and byte 2p + 1 at 24..31 (zeros between), so both high nibbles
# sit at the top of their 16-bit half: the sign is in place (bits 15, 31) and the magnitude moves by 6 (to 6..8 and
# 22..24); the low nibbles get there after a shift by 4 first. 4 to 5 operations per pair of values.
def _bf16_bits_asm() -> str:
    body = [".reg .b32 t, u, x, y, z;", "mov.b32 z, 0;"]
    for p, sel in ((0, "0x1404"), (1, "0x3424")):
        body.append(f"prmt.b32 t, $4, z, {sel};")
        for src, dst in (("u", p), ("t", 2 + p)):
            if src == "u":
                body.append("shl.b32 u, t, 4;")
            body += [
                f"and.b32 x, {src}, 0x80008000;",
                f"shr.b32 y, {src}, 6;",
                "and.b32 y, y, 0x01C001C0;",
                f"or.b32 ${dst}, x, y;",
            ]
    return "{\n" + "\n".join(body) + "\n}"


BF16_BITS_ASM = tl.constexpr(_bf16_bits_asm())


@triton.jit
def mxfp4_bf16_bits_asm(q):
    """mxfp4_bf16_bits in plain sm_80 PTX on four bytes per 32-bit register (prmt, shifts and masks on two bf16
    halves at once): (low nibbles, high nibbles) as bf16 values times 2^-126, exact."""
    return tl.inline_asm_elementwise(
        asm=BF16_BITS_ASM,
        constraints="=r,=r,=r,=r,r",
        args=[q],
        dtype=(tl.bfloat16, tl.bfloat16),
        is_pure=True,
        pack=4,
    )


# mxfp4_bf16_scaled_asm's PTX: mxfp4_bf16_bits_asm's decode, then each bf16 pair times its pair of scale factors
# ($5: bytes 0, 1; $6: bytes 2, 3) by fma.rn.bf16x2 with -0.0 added (sm_80 has no bf16x2 mul; adding -0.0 leaves
# every product as it is, zeros' signs included): 4 to 5 operations per pair of values and one FMA
def _bf16_scaled_asm() -> str:
    text = _bf16_bits_asm()
    tail = [".reg .b32 nz;", "mov.b32 nz, 0x80008000;"]
    tail += [f"fma.rn.bf16x2 ${d}, ${d}, ${5 + d % 2}, nz;" for d in range(4)]
    return text[: text.rindex("}")] + "\n".join(tail) + "\n}"


BF16_SCALED_ASM = tl.constexpr(_bf16_scaled_asm())


@triton.jit
def mxfp4_bf16_scaled_asm(q, f):
    """mxfp4_bf16_bits_asm times f (bf16, one factor per byte: its group's power of two), in PTX: (low nibbles,
    high nibbles) as bf16 values times 2^-126 times f, exact where the product is a bf16 normal (the decoded 0.5 is
    the denormal 2^-127: the FMA takes it as it is)."""
    return tl.inline_asm_elementwise(
        asm=BF16_SCALED_ASM,
        constraints="=r,=r,=r,=r,r,r,r",
        args=[q, f],
        dtype=(tl.bfloat16, tl.bfloat16),
        is_pure=True,
        pack=4,
    )


@triton.jit
def e8m0_codec(s):
    """uint8 E8M0 codes -> fp32 2^(s-127) with the codecs' semantics for every code: 0 is 2^-127 (an fp32
    denormal, bits 0x00400000) and 255 is NaN (e8m0 above gives +0 and inf there, as vLLM's decode)."""
    s = s.to(tl.int32)
    bits = tl.where(s == 0, 0x00400000, tl.where(s == 255, 0x7FC00000, s << 23))
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def e2m1_bits_times_2em126(n):
    """int32 e2m1 nibbles (0..15) -> fp32 values * 2^-126 (exact): sign (bit 3) on bit 31, the 3 magnitude
    bits on 22..24 (0.5 lands on the denormal 2^-127; code 8 is -0.0, as the codecs' table)."""
    return (((n & 8) << 28) | ((n & 7) << 22)).to(tl.float32, bitcast=True)


# mxfp4_word_dot's PTX: nibble j of the word ($9) into fp32 bits by (w << (28 - 4j)) >> 6 (arithmetic) & 0x81C00000
# (the value x 2^-126: mxfp4_pair_dot_denorm's decode, on the word, no byte extraction), times its activation
# ($1..$8: even values of bytes 0..3, then odd ones), summed in nibble order; FUSED 0: mul + add (no FMA)
_WORD_SHIFTS = ((28, 1), (24, 5), (20, 2), (16, 6), (12, 3), (8, 7), (4, 4), (0, 8))


def _word_dot_asm(fused: bool) -> str:
    body = [".reg .b32 t;", ".reg .f32 p;"]
    for i, (sh, arg) in enumerate(_WORD_SHIFTS):
        body.append(f"shl.b32 t, $9, {sh};" if sh else "mov.b32 t, $9;")
        body += ["shr.s32 t, t, 6;", "and.b32 t, t, 0x81C00000;"]
        if i == 0:
            body.append(f"mul.rn.f32 $0, t, ${arg};")
        elif fused:
            body.append(f"fma.rn.f32 $0, t, ${arg}, $0;")
        else:
            body += [f"mul.rn.f32 p, t, ${arg};", "add.rn.f32 $0, $0, p;"]
    return "{\n" + "\n".join(body) + "\n}"


WORD_DOT_FMA = tl.constexpr(_word_dot_asm(True))
WORD_DOT_NOFMA = tl.constexpr(_word_dot_asm(False))


@triton.jit
def mxfp4_word_dot(w, e0, e1, e2, e3, o0, o1, o2, o3, FUSED: tl.constexpr):
    """int32 words of MXFP4 bytes (4 bytes, 8 nibbles, byte b = values 2b (low nibble) and 2b + 1) times their
    activations (eb: the even value of byte b, ob: the odd one; each already times 2^63) -> fp32 sum of the 8
    products (each exact: the nibble x 2^-126, 2^63 on the activation; the caller folds the other 2^63 into the
    group scale), in plain sm_80 PTX: 3 integer ops per nibble straight from the word and one FMA (FUSED 0:
    mul + add, for FMA-throttled cards) instead of a byte extraction, 6 integer ops and 1.5 FP ops per byte."""
    return tl.inline_asm_elementwise(
        asm=WORD_DOT_FMA if FUSED else WORD_DOT_NOFMA,
        constraints="=r,r,r,r,r,r,r,r,r,r",
        args=[e0, e1, e2, e3, o0, o1, o2, o3, w],
        dtype=tl.float32,
        is_pure=True,
        pack=1,
    )
