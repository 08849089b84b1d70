"""The MoE's tensor-core up launch (mxfp4_moe_mma) checked on the CPU: its PTX text run by a small interpreter of the
opcodes it uses, for all 32 lanes of a warp, with mma.sync's fragment layout as the PTX ISA gives it (m16n8k16,
.row.col: lane L = 4 g + q holds A rows g and g + 8 at k = 2q, 2q+1, 2q+8, 2q+9; B column g at the same k; C rows
g and g + 8 at columns 2q, 2q+1), against the plain sum of the decoded weights times the activations. The GPU
parity (recipe kernels parity) is the real check; this one fails on a wrong shift, mask, pairing or lane order
without a GPU."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("triton.experimental.gluon")

from recipekit.backends.cuda_sm80.kernels import mxfp4_moe_mma as mm  # noqa: E402

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
MASK = 0xFFFFFFFF


def _f32(bits: int) -> float:
    return float(np.array([bits & MASK], dtype=np.uint32).view(np.float32)[0])


def _bits(v: float) -> int:
    return int(np.array([v], dtype=np.float32).view(np.uint32)[0])


def _bf16(half: int) -> float:
    return _f32((half & 0xFFFF) << 16)


def _f16(half: int) -> float:
    return float(np.array([half & 0xFFFF], dtype=np.uint16).view(np.float16)[0])


def _f16_bits_rn(v: float) -> int:
    """fp32 -> fp16 bits, rounded to nearest even (what cvt.rn does)."""
    return int(np.array([v], dtype=np.float32).astype(np.float16).view(np.uint16)[0])


def _to_bf16(v: float) -> int:
    bits = _bits(v)
    assert bits & 0xFFFF == 0, "an exact bf16 value"
    return bits >> 16


def _bf16_bits_rn(v: float) -> int:
    """fp32 -> bf16 bits, rounded to nearest even (what cvt.rn does; no NaN here)."""
    b = _bits(v)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def _prmt(a: int, b: int, sel: int) -> int:
    src = [(a >> (8 * i)) & 255 for i in range(4)] + [(b >> (8 * i)) & 255 for i in range(4)]
    return sum(src[(sel >> (4 * i)) & 7] << (8 * i) for i in range(4))


def _value(regs: dict[str, int], tok: str) -> int:
    tok = tok.strip().rstrip(";")
    if tok.startswith("0f"):
        return int(tok[2:], 16)
    if tok.startswith("0x"):
        return int(tok, 16)
    if tok.lstrip("-").isdigit():
        return int(tok)
    return regs[tok]


def _lines(asm: str) -> list[str]:
    out = []
    for raw in asm.replace("{\n", "\n").split("\n"):
        line = raw.strip()
        if not line or line in ("{", "}") or line.startswith(".reg"):
            continue
        out += [s.strip() + ";" for s in line.split(";") if s.strip()]
    return out


def _run_lane(lines: list[str], regs: dict[str, int]) -> None:
    """Every non-MMA instruction of `lines` on one lane's registers (32-bit patterns)."""
    for line in lines:
        op, _, rest = line.partition(" ")
        args = [a.strip() for a in rest.rstrip(";").split(",")]
        v = [_value(regs, a) for a in args[1:]]
        if op == "shl.b32":
            r = v[0] << v[1]
        elif op == "shr.b32":
            r = (v[0] & MASK) >> v[1]
        elif op == "and.b32":
            r = v[0] & v[1]
        elif op == "or.b32":
            r = v[0] | v[1]
        elif op in ("mov.b32", "mov.f32"):
            r = v[0]
        elif op == "prmt.b32":
            r = _prmt(v[0], v[1], v[2])
        elif op == "fma.rn.bf16x2":  # exact here: times a power of two, plus -0.0
            r = sum(_to_bf16(_bf16(v[0] >> s) * _bf16(v[1] >> s) + _bf16(v[2] >> s)) << s for s in (0, 16))
        elif op == "cvt.rn.bf16x2.f32":  # the first source on the upper half
            r = (_bf16_bits_rn(_f32(v[0])) << 16) | _bf16_bits_rn(_f32(v[1]))
        elif op == "cvt.rn.f16x2.f32":  # the first source on the upper half
            r = (_f16_bits_rn(_f32(v[0])) << 16) | _f16_bits_rn(_f32(v[1]))
        elif op == "mul.f32":
            r = _bits(np.float32(_f32(v[0])) * np.float32(_f32(v[1])))
        elif op == "sub.f32":
            r = _bits(np.float32(_f32(v[0])) - np.float32(_f32(v[1])))
        elif op == "fma.rn.f32":
            r = _bits(np.float32(_f32(v[0])) * np.float32(_f32(v[1])) + np.float32(_f32(v[2])))
        elif op == "mul.rn.f32":
            r = _bits(np.float32(_f32(v[0])) * np.float32(_f32(v[1])))
        elif op == "add.rn.f32":
            r = _bits(np.float32(_f32(v[0])) + np.float32(_f32(v[1])))
        else:
            raise AssertionError(f"an opcode the model does not know: {line}")
        regs[args[0]] = r & MASK


def _mma(line: str, lanes: list[dict[str, int]]) -> None:
    """One mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32 (or .f16.f16) over the 32 lanes' registers."""
    half = _f16 if ".f16.f16." in line else _bf16
    groups = [[t.strip() for t in grp.split(",")] for grp in re.findall(r"\{([^}]*)\}", line)]
    dst, a_regs, b_regs, c_regs = groups
    a, b, c = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
    for lane, regs in enumerate(lanes):
        g, q = lane // 4, lane % 4
        for i, (row, k) in enumerate(((g, 2 * q), (g + 8, 2 * q), (g, 2 * q + 8), (g + 8, 2 * q + 8))):
            w = _value(regs, a_regs[i])
            a[row, k], a[row, k + 1] = half(w), half(w >> 16)
        for i, k in enumerate((2 * q, 2 * q + 8)):
            w = _value(regs, b_regs[i])
            b[k, g], b[k + 1, g] = half(w), half(w >> 16)
        for i, (row, col) in enumerate(((g, 2 * q), (g, 2 * q + 1), (g + 8, 2 * q), (g + 8, 2 * q + 1))):
            c[row, col] = _f32(_value(regs, c_regs[i]))
    d = a @ b + c
    for lane, regs in enumerate(lanes):
        g, q = lane // 4, lane % 4
        for i, (row, col) in enumerate(((g, 2 * q), (g, 2 * q + 1), (g + 8, 2 * q), (g + 8, 2 * q + 1))):
            regs[dst[i]] = _bits(d[row, col])


def _run_warp(asm: str, lanes: list[dict[str, int]]) -> None:
    chunk: list[str] = []
    for line in _lines(asm) + ["end"]:
        if line.startswith("mma.sync") or line == "end":
            for regs in lanes:
                _run_lane(chunk, regs)
            chunk = []
            if line != "end":
                _mma(line, lanes)
        else:
            chunk.append(line)


def _bf16_pairs(x: np.ndarray) -> list[int]:
    """8 bf16-exact values -> the 4 int32 words of bf16 pairs (value 2i low, 2i + 1 high), as x_ptr holds them."""
    h = [_to_bf16(float(v)) for v in x]
    return [h[2 * i] | (h[2 * i + 1] << 16) for i in range(4)]


def _group_dot(words: np.ndarray, codes: np.ndarray, acts: np.ndarray, grp: int) -> float:
    """The plain dot of group `grp` of a row (int32 words of MXFP4 bytes) with its 32 activations, times its scale."""
    vals = [E2M1[(int(words[4 * grp + i // 8]) >> (4 * (i % 8))) & 15] for i in range(32)]
    return float(np.dot(vals, acts[32 * grp : 32 * grp + 32].astype(np.float64))) * 2.0 ** (codes[grp] - 127)


def _diagonal(lanes: list[dict[str, int]]) -> list[tuple[float, float]]:
    """Per group g the tile's two rows' own dots: C[g][g] and C[g + 8][g], in lane 4g + g // 2, slots g % 2 and
    2 + g % 2 (the kernels' _diagonal reads the same lanes)."""
    return [(_f32(lanes[4 * g + g // 2][f"${g % 2}"]), _f32(lanes[4 * g + g // 2][f"${2 + g % 2}"])) for g in range(8)]


@pytest.mark.parametrize("fused", [True, False])
def test_one_step_of_a_warp_gives_each_units_exact_group_dots(fused: bool) -> None:
    rng = np.random.default_rng(5)
    w1, w3 = rng.integers(0, 2**32, size=32, dtype=np.uint64), rng.integers(0, 2**32, size=32, dtype=np.uint64)
    codes1, codes3 = rng.integers(110, 130, size=8), rng.integers(110, 130, size=8)
    x = rng.standard_normal(256).astype(np.float32).view(np.uint32) & 0xFFFF0000  # bf16-exact activations
    x = x.view(np.float32)
    lanes = []
    for lane in range(32):
        g, q = lane // 4, lane % 4
        xw = _bf16_pairs(x[32 * g + 8 * q : 32 * g + 8 * q + 8])
        prep = {f"${i + 4}": xw[i] for i in range(4)}
        _run_warp(mm._prep_asm(), [prep])
        regs = {f"${i + 4}": _bits(0.0) for i in range(4)} | {f"${i + 8}": prep[f"${i}"] for i in range(4)}
        regs |= {"$12": int(w1[4 * g + q]), "$16": int(w3[4 * g + q])}
        regs |= {"$20": _bits(2.0 ** (codes1[g] - 64)), "$24": _bits(2.0 ** (codes3[g] - 64))}
        lanes.append(regs)
    _run_warp(mm._step_asm(fused), lanes)
    for g, (gate, up) in enumerate(_diagonal(lanes)):
        assert gate == pytest.approx(_group_dot(w1, codes1, x, g), rel=1e-5, abs=1e-30)
        assert up == pytest.approx(_group_dot(w3, codes3, x, g), rel=1e-5, abs=1e-30)


def test_the_pair_decode_places_nibbles_j_and_j_plus_4_as_bf16_times_2_to_minus_126() -> None:
    rng = np.random.default_rng(9)
    for w in rng.integers(0, 2**32, size=2000, dtype=np.uint64):
        for j in range(4):
            regs = {"W": int(w)}
            _run_lane(_lines(mm._pair("%d", "W", j)), regs)
            lo, hi = _bf16(regs["%d"]), _bf16(regs["%d"] >> 16)
            assert lo == E2M1[(int(w) >> (4 * j)) & 15] * 2.0**-126
            assert hi == E2M1[(int(w) >> (4 * j + 16)) & 15] * 2.0**-126
            assert np.signbit(lo) == bool((int(w) >> (4 * j + 3)) & 1)  # -0.0 keeps its sign, as the codec's


def test_a_wrong_shift_in_the_decode_is_caught() -> None:
    regs = {"W": 0x00000002}  # nibble 0 = 1.0
    _run_lane(_lines(mm._pair("%d", "W", 0).replace("shl.b32 %t0, W, 6", "shl.b32 %t0, W, 5")), regs)
    assert _bf16(regs["%d"]) != 1.0 * 2.0**-126


def test_the_down_step_with_h_split_into_bf16_hi_and_lo_gives_two_rows_dots_to_fp32_precision() -> None:
    rng = np.random.default_rng(7)
    r0, r1 = rng.integers(0, 2**32, size=32, dtype=np.uint64), rng.integers(0, 2**32, size=32, dtype=np.uint64)
    codes0, codes1 = rng.integers(110, 130, size=8), rng.integers(110, 130, size=8)
    h = (rng.standard_normal(256) * 2.0**63).astype(np.float32)  # fp32 h x 2^63, as the up launch stores it
    lanes = []
    for lane in range(32):
        g, q = lane // 4, lane % 4
        word = h[32 * g + 8 * q : 32 * g + 8 * q + 8]  # values 0..7 of the word
        prep = {f"${8 + i}": _bits(float(word[2 * i])) for i in range(4)}  # TILE 14's order: evens, then odds
        prep |= {f"${12 + i}": _bits(float(word[2 * i + 1])) for i in range(4)}
        _run_warp(mm._hprep_asm(), [prep])
        for j in range(4):  # hi + lo is the value to 16 bits
            for half, v in ((0, word[j]), (16, word[j + 4])):
                both = _bf16(prep[f"${j}"] >> half) + _bf16(prep[f"${j + 4}"] >> half)
                assert both == pytest.approx(float(v), rel=2.0**-15)
        regs = {f"${i + 4}": _bits(0.0) for i in range(4)}
        regs |= {f"${i + 8}": prep[f"${i}"] for i in range(4)} | {f"${i + 12}": prep[f"${i + 4}"] for i in range(4)}
        regs |= {"$16": int(r0[4 * g + q]), "$20": int(r1[4 * g + q])}
        regs |= {"$24": _bits(2.0 ** (codes0[g] - 64)), "$28": _bits(2.0 ** (codes1[g] - 64))}
        lanes.append(regs)
    _run_warp(mm._step2_asm(True), lanes)
    acts = h.astype(np.float64) * 2.0**-63
    for g, (first, second) in enumerate(_diagonal(lanes)):
        assert first == pytest.approx(_group_dot(r0, codes0, acts, g), rel=1e-4, abs=1e-30)
        assert second == pytest.approx(_group_dot(r1, codes1, acts, g), rel=1e-4, abs=1e-30)


def test_the_fp16_pair_decode_places_nibbles_j_and_j_plus_4_as_fp16_times_2_to_minus_14() -> None:
    rng = np.random.default_rng(19)
    for w in rng.integers(0, 2**32, size=2000, dtype=np.uint64):
        for j in range(4):
            regs = {"W": int(w)}
            _run_lane(_lines(mm._pair("%d", "W", j, f16=True)), regs)
            lo, hi = _f16(regs["%d"]), _f16(regs["%d"] >> 16)
            assert lo == E2M1[(int(w) >> (4 * j)) & 15] * 2.0**-14
            assert hi == E2M1[(int(w) >> (4 * j + 16)) & 15] * 2.0**-14
            assert np.signbit(lo) == bool((int(w) >> (4 * j + 3)) & 1)


def test_the_down_step_with_h_in_fp16_gives_two_rows_dots_of_the_fp16_h() -> None:
    rng = np.random.default_rng(17)
    r0, r1 = rng.integers(0, 2**32, size=32, dtype=np.uint64), rng.integers(0, 2**32, size=32, dtype=np.uint64)
    codes0, codes1 = rng.integers(110, 130, size=8), rng.integers(110, 130, size=8)
    h = (rng.standard_normal(256) * 30 * 2.0**63).astype(np.float32)  # fp32 h x 2^63, as the up launch stores it
    lanes = []
    for lane in range(32):
        g, q = lane // 4, lane % 4
        word = h[32 * g + 8 * q : 32 * g + 8 * q + 8]
        prep = {f"${4 + i}": _bits(float(word[2 * i])) for i in range(4)}  # TILE 14's order: evens, then odds
        prep |= {f"${8 + i}": _bits(float(word[2 * i + 1])) for i in range(4)}
        _run_warp(mm._hprep16_asm(), [prep])
        for j in range(4):  # pairs (v_j, v_j+4) of h itself in fp16
            assert _f16(prep[f"${j}"]) == float(np.float16(np.float32(word[j] * np.float32(2.0**-63))))
            assert _f16(prep[f"${j}"] >> 16) == float(np.float16(np.float32(word[j + 4] * np.float32(2.0**-63))))
        regs = {f"${i + 4}": _bits(0.0) for i in range(4)} | {f"${i + 8}": prep[f"${i}"] for i in range(4)}
        regs |= {"$12": int(r0[4 * g + q]), "$16": int(r1[4 * g + q])}
        regs |= {"$20": _bits(2.0 ** (codes0[g] - 113)), "$24": _bits(2.0 ** (codes1[g] - 113))}
        lanes.append(regs)
    _run_warp(mm._step_asm(True, f16=True), lanes)
    acts = (h * np.float32(2.0**-63)).astype(np.float16).astype(np.float64)
    for g, (first, second) in enumerate(_diagonal(lanes)):
        assert first == pytest.approx(_group_dot(r0, codes0, acts, g), rel=1e-5, abs=1e-30)
        assert second == pytest.approx(_group_dot(r1, codes1, acts, g), rel=1e-5, abs=1e-30)
    # against h itself: within fp16's rounding
    exact = h.astype(np.float64) * 2.0**-63
    for g, (first, _) in enumerate(_diagonal(lanes)):
        assert first == pytest.approx(_group_dot(r0, codes0, exact, g), rel=5e-3, abs=1e-2)
