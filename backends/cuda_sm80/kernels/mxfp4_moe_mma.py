"""The MoE's launches on the tensor cores through hand-placed `mma.sync` (Gluon: layouts fixed by hand, sm_80 PTX).

Why not `tl.dot`: H200 runs 15 and session 34 fed the tensor cores through `tl.dot`, and its plumbing (an activation
tile stored to shared memory every step, operands moved into the MMA's lane layout) cost more issue slots than the
cheaper decode saved. Here each lane loads exactly the words its MMA fragment needs, so nothing moves between lanes.

One warp computes one m16n8k16 tile per step: its A operand is two weight rows (the up launch: a unit's w1 row on
rows 0-7 and its w3 row on rows 8-15; the down launch: two w2 rows), where row g of step k is the row's group 8k + g.
Lane L (g = L / 4, q = L % 4) loads word q (bytes 4q..4q+3, values 8q..8q+7) of that group from each row, so a warp's
load is 128 contiguous bytes of one row. The MMA's k order is a permutation of the group's values (any permutation
works when the activations follow it): the register pairs hold nibbles (j, j + 4) of a word, so one shift places both
halves. Each nibble becomes bf16 bits worth value x 2^-126 (sign on bit 15, the 3 magnitude bits on 6..8; 0.5 is the
denormal 2^-127, kept by the MMA). B column n holds the activations of the step's group n as pairs (x_j, x_j+4) x 2^63
(the down launch: h's bf16 hi and lo pairs, two MMAs each), prepared once per program into shared memory. Each row's
own products are then the diagonal C[g][g] and C[g + 8][g]; the fresh sum of a step's MMAs is multiplied by the
group's factor 2^(s - 64) (exact: a power of two, codes 0..191) and added in fp32, as the FMA kernels do, and the 8
rows' partial dots are summed across the warp at the end.
The up launch stores TILE 14's h (h x 2^63, per word of w2: a word's 4 even units, then its 4 odd ones), so TILE 14's
down launch reads it unchanged; the down launch writes slot partials for the sum launch.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

# bf16 pair (nibble j of word W, nibble j + 4) -> bits value x 2^-126: magnitude bits to 6..8 (and 22..24), sign
# bit to 15 (and 31). `DST`, `W`, shifts filled in below; ptxas fuses the and/or pairs into LOP3s.
_PAIR = (
    "{sh_m} %t0, {w}, {am};\n and.b32 %t0, %t0, {mask};\n"
    "{sh_s}and.b32 %t1, {ws}, 0x80008000;\n or.b32 {dst}, %t0, %t1;\n"
)


def _pair(dst: str, w: str, j: int, f16: bool = False) -> str:
    """f16: fp16 bits worth value x 2^-14 instead (the magnitude on bits 9..11: exponent 10..11, mantissa 9)."""
    am = (9 if f16 else 6) - 4 * j
    sh_m = "shl.b32" if am >= 0 else "shr.b32"
    bs = 12 - 4 * j
    sh_s = f"shl.b32 %t1, {w}, {bs};\n " if bs else ""
    mask = "0x0E000E00" if f16 else "0x01C001C0"
    return _PAIR.format(sh_m=sh_m, w=w, am=abs(am), mask=mask, sh_s=sh_s, ws="%t1" if bs else w, dst=dst)


def _prep_asm() -> str:
    """The token's activations for one group (pack 4): $4-$7 its words (bf16 pairs x_2i, x_2i+1 of values 8q..8q+7)
    -> $0-$3 the MMA's B pairs (x_j, x_j+4), times 2^63 (exact; -0.0 added keeps every value)."""
    return (
        "{\n.reg .b32 %k, %nz;\n"
        "prmt.b32 $0, $4, $6, 0x5410;\n prmt.b32 $1, $4, $6, 0x7632;\n"
        "prmt.b32 $2, $5, $7, 0x5410;\n prmt.b32 $3, $5, $7, 0x7632;\n"
        "mov.b32 %k, 0x5F005F00;\n mov.b32 %nz, 0x80008000;\n"
        + "".join(f"fma.rn.bf16x2 ${i}, ${i}, %k, %nz;\n" for i in range(4))
        + "}"
    )


def _step_asm(fused: bool, b_sets: tuple[str, ...] = ("$8",), words: tuple[str, str] = ("$12", "$16"),
              factors: tuple[str, str] = ("$20", "$24"), f16: bool = False) -> str:  # fmt: skip
    """One step for one lane (pack 4 on [warps, 32, 4] tensors). Operands: $0-$3 the accumulators out (c0, c1: the
    tile's first row, c2, c3: its second), $4-$7 them in; per B set (first register of 4: the pairs _prep_asm or
    _hprep_asm gives) two MMAs; the two rows' words and their group factors (fp32). The up launch: one B set at $8,
    the w1 and w3 words at $12 and $16, the factors at $20 and $24; the down launch: B hi at $8 and lo at $12, the two
    rows' words at $16 and $20, the factors at $24 and $28."""
    body = [".reg .b32 %t<2>, %a<8>;", ".reg .f32 %d<4>, %z;"]
    # A registers: MMA 0 {P0(row 1), P0(row 2), P1(row 1), P1(row 2)}, MMA 1 {P2(row 1), P2(row 2), P3(...), P3(...)}
    for j in range(4):
        body.append(_pair(f"%a{2 * j}", words[0], j, f16))
        body.append(_pair(f"%a{2 * j + 1}", words[1], j, f16))
    body.append("mov.f32 %z, 0f00000000;")
    mma = f"mma.sync.aligned.m16n8k16.row.col.f32.{'f16.f16' if f16 else 'bf16.bf16'}.f32"
    acc, zero = "{%d0, %d1, %d2, %d3}", "{%z, %z, %z, %z}"
    for n, first in enumerate(b_sets):
        r = int(first[1:])
        body.append(f"{mma} {acc}, {{%a0, %a1, %a2, %a3}}, {{${r}, ${r + 1}}}, {zero if n == 0 else acc};")
        body.append(f"{mma} {acc}, {{%a4, %a5, %a6, %a7}}, {{${r + 2}, ${r + 3}}}, {acc};")
    for i in range(4):
        f = factors[0] if i < 2 else factors[1]
        if fused:
            body.append(f"fma.rn.f32 ${i}, %d{i}, {f}, ${i + 4};")
        else:  # no contraction (FMA-throttled cards): .rn keeps ptxas from fusing
            body.append(f"mul.rn.f32 %d{i}, %d{i}, {f};\n add.rn.f32 ${i}, %d{i}, ${i + 4};")
    return "{\n" + "\n".join(body) + "\n}"


PREP = gl.constexpr(_prep_asm())
STEP_FMA = gl.constexpr(_step_asm(True))
STEP_NOFMA = gl.constexpr(_step_asm(False))
STEP16_FMA = gl.constexpr(_step_asm(True, f16=True))  # fp16 weights and B (the down launch's h in fp16)
STEP16_NOFMA = gl.constexpr(_step_asm(False, f16=True))
_CONSTRAINTS = gl.constexpr(",".join(["=f"] * 4 + ["f"] * 4 + ["r"] * 12 + ["f"] * 8))


@gluon.jit
def _factor16(s):
    """uint8 E8M0 codes -> fp32 2^(s - 113): 2^(s-127) times the 2^14 that the fp16 nibbles' 2^-14 leave (h in fp16 as
    it is; exact for codes 0..240)."""
    return ((s.to(gl.int32) + 14) << 23).to(gl.float32, bitcast=True)


@gluon.jit
def _factor(s):
    """uint8 E8M0 codes -> fp32 2^(s - 64): 2^(s-127) times the 2^63 that the activations' 2^63 and the nibbles'
    2^-126 leave (exact for codes 0..191)."""
    return ((s.to(gl.int32) + 63) << 23).to(gl.float32, bitcast=True)


def xs_steps(h: int, warps: int, steps_per_iter: int) -> int:
    """moe_up_mma_kernel's XS for hidden size h, `warps` warps and S = steps_per_iter: the prepared steps (H / 256
    rounded up to S, then to the warps), rounded up to a power of two (shared allocations come so)."""
    steps = -(-(h // 256) // steps_per_iter) * steps_per_iter
    steps = -(-steps // warps) * warps
    return 1 << (steps - 1).bit_length()


@gluon.jit
def _warp_lane(L3: gl.constexpr):
    """Index tensors of a [NW, 32, 4] L3 tile: the warp [NW, 1] and the lane [1, 32] (both SliceLayout(2, L3)), the
    slot [1, 1, 4]."""
    SW: gl.constexpr = gl.SliceLayout(2, L3)
    w2d = gl.expand_dims(gl.arange(0, gl.num_warps(), layout=gl.SliceLayout(1, SW)), 1)
    l2d = gl.expand_dims(gl.arange(0, 32, layout=gl.SliceLayout(0, SW)), 0)
    c3 = gl.expand_dims(gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, L3))), 0), 1)
    return w2d, l2d, c3


@gluon.jit
def _step_ptrs(w_first, s_first, S: gl.constexpr):
    """A row's word and code pointers at this lane's step 0 ([NW, 32] each) as [NW, 32, S] pointers at the S steps of
    an iteration (a step is 8 groups: 32 words, 8 codes), with the step index tensor cs [1, 1, S]."""
    LS: gl.constexpr = gl.BlockedLayout([1, 1, S], [1, 32, 1], [gl.num_warps(), 1, 1], [2, 1, 0])
    cs = gl.expand_dims(gl.expand_dims(gl.arange(0, S, layout=gl.SliceLayout(0, gl.SliceLayout(1, LS))), 0), 1)
    w = gl.convert_layout(gl.expand_dims(w_first, 2), LS) + 32 * cs
    c = gl.convert_layout(gl.expand_dims(s_first, 2), LS) + 8 * cs
    return w, c, cs


@gluon.jit
def _diagonal(acc, l2d, c3):
    """The tile's two rows' own dots from the accumulators: B column n holds step group n, so row g's products are
    C[g][g] and C[g + 8][g], held by lane q = g / 2 in slots g % 2 and 2 + g % 2; summed over the warp's 8 rows ([NW]
    each)."""
    g = l2d // 4
    mine = gl.expand_dims(l2d % 4 == g // 2, 2)
    r0 = gl.sum(gl.sum(gl.where(mine & (c3 == gl.expand_dims(g % 2, 2)), acc, 0.0), axis=2), axis=1)
    r1 = gl.sum(gl.sum(gl.where(mine & (c3 == gl.expand_dims(2 + g % 2, 2)), acc, 0.0), axis=2), axis=1)
    return r0, r1


@gluon.jit
def _load_steps(w1s, w3s, s1s, s3s, cs, k0, NS, MASKED: gl.constexpr):
    """Steps k0 .. k0 + S - 1 of a warp's unit for this lane: w1 and w3 words, their codes ([NW, 32, S] each)."""
    if MASKED:
        live = (k0 + cs) < NS
        return (
            gl.load(w1s + 32 * k0, mask=live, other=0),
            gl.load(w3s + 32 * k0, mask=live, other=0),
            gl.load(s1s + 8 * k0, mask=live, other=0),
            gl.load(s3s + 8 * k0, mask=live, other=0),
        )
    return gl.load(w1s + 32 * k0), gl.load(w3s + 32 * k0), gl.load(s1s + 8 * k0), gl.load(s3s + 8 * k0)


@gluon.jit
def _pick(t, cs, j: gl.constexpr, L3: gl.constexpr):
    """Step j's values of a [NW, 32, S] tensor as [NW, 32, 1] in L3 (a register pick: the select folds away)."""
    return gl.convert_layout(gl.expand_dims(gl.sum(gl.where(cs == j, t, 0), axis=2), 2), L3)


@gluon.jit
def _step(acc, xs, k, w1p, w3p, s1p, s3p, L3: gl.constexpr, FUSED: gl.constexpr, F16: gl.constexpr):
    """Step k (groups 8k..8k+7, one per quad) of a warp's unit: the prepared activations from shared memory, the
    already loaded words and codes, through the MMAs into the accumulators. F16: fp16 weights against fp16 B pairs."""
    xq = gl.expand_dims(xs.index(k).load(gl.SliceLayout(0, L3)), 0)  # every warp the step's same 128 words
    if F16:
        f1, f3 = _factor16(s1p), _factor16(s3p)
    else:
        f1, f3 = _factor(s1p), _factor(s3p)
    return gl.inline_asm_elementwise(
        asm=(STEP16_FMA if FUSED else STEP16_NOFMA) if F16 else (STEP_FMA if FUSED else STEP_NOFMA),
        constraints=_CONSTRAINTS,
        args=[acc, xq, w1p, w3p, f1, f3],
        dtype=gl.float32,
        is_pure=True,
        pack=4,
    )


@gluon.jit
def moe_up_mma_kernel(
    x_ptr,
    sel_ptr,
    wts_ptr,
    w13_ptr,
    s13_ptr,
    h_ptr,
    INTER,
    limit,
    stride_we,
    stride_wr,
    stride_se,
    stride_sr,
    H: gl.constexpr,
    XS: gl.constexpr,
    TOPK: gl.constexpr,
    FUSED: gl.constexpr,
    PF: gl.constexpr = 1,
    S: gl.constexpr = 2,
    ST: gl.constexpr = 1,
):
    """Program (token * TOPK + slot, block of num_warps units). x_ptr: bf16 activations as int32 pairs [M, H/2];
    w13_ptr: int32 words [E, 2I, H/8] (strides in words); s13_ptr: uint8 codes [E, 2I, H/32]; h_ptr: fp32
    [M*TOPK, I] in TILE 14's order. Warp w takes one unit: a 16-row MMA tile, the unit's w1 row on rows 0-7 and its
    w3 row on rows 8-15, where row g of step k is the group 8k + g: the warp's 8 quads read 8 consecutive groups
    (128 contiguous bytes of one row per load), and the 8 partial dots are summed across the quads at the end. The
    token's activations are prepared once per program (pairs (x_j, x_j+4) x 2^63, decode's order) into shared
    memory, each warp a share of the steps. S steps per loop iteration; PF: the next iteration's words and codes
    loaded before this one's MMAs (H a multiple of 256). XS: the shared steps allocated, a power of two of at least
    H / 256 rounded up to S, then to num_warps (xs_steps). ST > 1: the words staged ST iterations deep through shared
    memory by cp.async (ST - 1 iterations in flight that hold no registers; each lane reads back only the words it
    copied, so no barrier), the codes loaded an iteration ahead in registers (PF unused)."""
    NW: gl.constexpr = gl.num_warps()
    NS: gl.constexpr = H // 256
    NSS: gl.constexpr = (NS + S - 1) // S * S  # the steps the loop runs (past NS: zero words, zero activations)
    NSP: gl.constexpr = (NSS + NW - 1) // NW * NW  # the steps prepared (past NS: zeros)
    L3: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, 32, 1], [NW, 1, 1], [2, 1, 0])
    SW: gl.constexpr = gl.SliceLayout(2, L3)
    pid_t = gl.program_id(0)
    pid_n = gl.program_id(1)
    m = pid_t // TOPK
    e = gl.load(sel_ptr + pid_t).to(gl.int64)
    wt = gl.load(wts_ptr + pid_t)
    w2d, l2d, c3 = _warp_lane(L3)
    w3 = gl.expand_dims(w2d, 2)
    l3 = gl.expand_dims(l2d, 2)
    # the token's activations, prepared into shared memory: warp w prepares steps w, w + NW, ...
    LR: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [NW, 1], [1, 0])
    xrows = gl.allocate_shared_memory(gl.int32, [XS, 128], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    for k0 in gl.static_range(0, NSP, NW):
        xv = gl.load(x_ptr + m * (H // 2) + 128 * (k0 + w3) + 4 * l3 + c3, mask=(k0 + w3) < NS, other=0)
        xq = gl.inline_asm_elementwise(
            asm=PREP, constraints="=r,=r,=r,=r,r,r,r,r", args=[xv], dtype=gl.int32, is_pure=True, pack=4
        )
        xrows.slice(k0, NW).store(gl.convert_layout(gl.reshape(xq, [NW, 128]), LR))
    xs = xrows._reinterpret(gl.int32, [XS, 32, 4], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))  # a step per index
    gl.thread_barrier()
    row = gl.minimum(pid_n * NW + w2d, INTER - 1)  # a unit past the end reads the last row; its result is not stored
    # S steps per loop iteration: their words and codes as [NW, 32, S] tensors (S loads per thread), steps past NS
    # masked to zero words (which add nothing); PF: the next iteration's loaded before this one's MMAs
    w1s, s1s, cs = _step_ptrs(
        w13_ptr + e * stride_we + row * stride_wr + l2d, s13_ptr + e * stride_se + row * stride_sr + l2d // 4, S
    )
    w3s = w1s + INTER * stride_wr
    s3s = s1s + INTER * stride_sr
    acc = gl.zeros([NW, 32, 4], gl.float32, L3)
    if ST > 1:
        acc = _staged_loop(acc, xs, w1s, w3s, s1s, s3s, cs, NS, NSS, S, ST, L3, FUSED)
    else:
        acc = _register_loop(acc, xs, w1s, w3s, s1s, s3s, cs, NS, NSS, S, PF, L3, FUSED, 0)
    gate, up = _diagonal(acc, l2d, c3)  # rows 0-7 the gate (w1), 8-15 the up (w3)
    gate = gl.minimum(gate, limit)
    up = gl.minimum(gl.maximum(up, -limit), limit)
    h = gate / (1.0 + gl.exp(-gate)) * up * wt  # the clamped SwiGLU, as bench/oracle/moe.py, times the route weight
    u = pid_n * NW + gl.arange(0, NW, layout=gl.SliceLayout(1, SW))
    hw = (u // 8) * 8 + (u % 2) * 4 + (u % 8) // 2
    gl.store(h_ptr + pid_t * INTER + hw, h * 9.223372036854775808e18, mask=u < INTER)


@gluon.jit
def _register_loop(acc, xs, w1s, w3s, s1s, s3s, cs, NS, NSS: gl.constexpr, S: gl.constexpr, PF: gl.constexpr,
                   L3: gl.constexpr, FUSED: gl.constexpr, F16: gl.constexpr):  # fmt: skip
    """A unit's steps with its words and codes loaded into registers (PF: an iteration ahead)."""
    a1, a3, sa1, sa3 = _load_steps(w1s, w3s, s1s, s3s, cs, 0, NS, NSS != NS)
    for k0 in range(0, NSS, S):
        if PF:  # the next iteration's (the last one's again at the end: in bounds, unused)
            kn = gl.minimum(k0 + S, NSS - S)
            n1, n3, ns1, ns3 = _load_steps(w1s, w3s, s1s, s3s, cs, kn, NS, NSS != NS)
        else:
            a1, a3, sa1, sa3 = _load_steps(w1s, w3s, s1s, s3s, cs, k0, NS, NSS != NS)
        for j in gl.static_range(S):
            acc = _step(acc, xs, k0 + j, _pick(a1, cs, j, L3), _pick(a3, cs, j, L3), _pick(sa1, cs, j, L3),
                        _pick(sa3, cs, j, L3), L3, FUSED, F16)  # fmt: skip
        if PF:
            a1, a3, sa1, sa3 = n1, n3, ns1, ns3
    return acc


@gluon.jit
def _copy_iteration(d1, d3, w1s, w3s, cs, k0, NS, MASKED: gl.constexpr):
    """cp.async of steps k0 .. k0 + S - 1's w1 and w3 words into d1, d3 ([NW, 32, S] each), as one group."""
    if MASKED:
        live = (k0 + cs) < NS
        async_copy.async_copy_global_to_shared(d1, w1s + 32 * k0, mask=live)
        async_copy.async_copy_global_to_shared(d3, w3s + 32 * k0, mask=live)
    else:
        async_copy.async_copy_global_to_shared(d1, w1s + 32 * k0)
        async_copy.async_copy_global_to_shared(d3, w3s + 32 * k0)
    async_copy.commit_group()


@gluon.jit
def _load_codes(s1s, s3s, cs, k0, NS, MASKED: gl.constexpr):
    """Steps k0 .. k0 + S - 1's w1 and w3 codes ([NW, 32, S] each)."""
    if MASKED:
        live = (k0 + cs) < NS
        return gl.load(s1s + 8 * k0, mask=live, other=0), gl.load(s3s + 8 * k0, mask=live, other=0)
    return gl.load(s1s + 8 * k0), gl.load(s3s + 8 * k0)


@gluon.jit
def _staged_loop(acc, xs, w1s, w3s, s1s, s3s, cs, NS, NSS: gl.constexpr, S: gl.constexpr, ST: gl.constexpr,
                 L3: gl.constexpr, FUSED: gl.constexpr):  # fmt: skip
    """A unit's steps with its words staged ST iterations deep through shared memory (cp.async): iteration i's words
    go to stage i % ST, ST - 1 iterations ahead of their use (past the end: the last iteration's again, unused); the
    codes an iteration ahead in registers."""
    NW: gl.constexpr = gl.num_warps()
    LS: gl.constexpr = gl.BlockedLayout([1, 1, S], [1, 32, 1], [NW, 1, 1], [2, 1, 0])
    SL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0])  # (a stage's layout: rank 3)
    MASKED: gl.constexpr = NSS != NS
    b1 = gl.allocate_shared_memory(gl.int32, [ST, NW, 32, S], SL)
    b3 = gl.allocate_shared_memory(gl.int32, [ST, NW, 32, S], SL)
    for i in gl.static_range(ST - 1):  # (the launch keeps ST - 1 <= NSS / S)
        _copy_iteration(b1.index(i), b3.index(i), w1s, w3s, cs, i * S, NS, MASKED)
    sa1, sa3 = _load_codes(s1s, s3s, cs, 0, NS, MASKED)
    for k0 in range(0, NSS, S):
        it = k0 // S
        # the iteration ST - 1 ahead into the stage the last one used (clamped at the end: in bounds, unused)
        stc = (it + ST - 1) % ST
        _copy_iteration(b1.index(stc), b3.index(stc), w1s, w3s, cs, gl.minimum(k0 + (ST - 1) * S, NSS - S), NS, MASKED)
        ns1, ns3 = _load_codes(s1s, s3s, cs, gl.minimum(k0 + S, NSS - S), NS, MASKED)
        async_copy.wait_group(ST - 1)  # this iteration's group has landed
        a1 = b1.index(it % ST).load(LS)
        a3 = b3.index(it % ST).load(LS)
        for j in gl.static_range(S):
            acc = _step(acc, xs, k0 + j, _pick(a1, cs, j, L3), _pick(a3, cs, j, L3), _pick(sa1, cs, j, L3),
                        _pick(sa3, cs, j, L3), L3, FUSED, 0)  # fmt: skip
        sa1, sa3 = ns1, ns3
    async_copy.wait_group(0)
    return acc


# The down launch on the tensor cores, the same way: A is two w2 rows (rows 0-7 and 8-15 of the tile, each the group
# 8k + g of step k), B the token's h in TILE 14's order (fp32 x 2^63) split into bf16 hi + lo pairs once per program
# (h - hi is exact in fp32 and its bf16 keeps 16 bits in all), four MMAs per step (hi, lo; two k halves).
def _hprep_asm() -> str:
    """A word's 8 h values (pack 4: $8-$11 its even values v0, v2, v4, v6 and $12-$15 its odd ones v1, v3, v5, v7,
    fp32) -> $0-$3 the bf16 hi pairs (v_j, v_j+4) and $4-$7 the bf16 pairs of what hi leaves."""
    body = [".reg .b32 %u, %v;", ".reg .f32 %a, %b, %fu, %fv;"]
    # (v0, v4) = (E0, E2), (v1, v5) = (O0, O2), (v2, v6) = (E1, E3), (v3, v7) = (O1, O3); cvt puts its 1st on top
    for i, (lo, hi) in enumerate(((8, 10), (12, 14), (9, 11), (13, 15))):
        body.append(f"cvt.rn.bf16x2.f32 ${i}, ${hi}, ${lo};")
        body.append(f"shl.b32 %u, ${i}, 16;\n and.b32 %v, ${i}, 0xFFFF0000;\n mov.b32 %fu, %u;\n mov.b32 %fv, %v;")
        body.append(f"sub.f32 %a, ${lo}, %fu;\n sub.f32 %b, ${hi}, %fv;\n cvt.rn.bf16x2.f32 ${i + 4}, %b, %a;")
    return "{\n" + "\n".join(body) + "\n}"


def _step2_asm(fused: bool) -> str:
    """The down launch's step (_step_asm with h's hi and lo pairs: four MMAs)."""
    return _step_asm(fused, ("$8", "$12"), ("$16", "$20"), ("$24", "$28"))


# the B pairs (v_j, v_j+4) of a word's 8 h values as (lo, hi) operands when $4-$7 hold its even values E0-E3 and $8-$11
# its odd ones O0-O3: (E0, E2), (O0, O2), (E1, E3), (O1, O3)
_H_PAIRS = ((4, 6), (8, 10), (5, 7), (9, 11))


def _hprep_hi_asm() -> str:
    """_hprep_asm's bf16 hi pairs only ($0-$3 from $4-$11): h rounded to bf16, as the model keeps it between its GEMMs."""
    return "{\n" + "\n".join(f"cvt.rn.bf16x2.f32 ${i}, ${hi}, ${lo};" for i, (lo, hi) in enumerate(_H_PAIRS)) + "\n}"


def _hprep16_asm() -> str:
    """_hprep_hi_asm's pairs in fp16, of h itself (the stored h x 2^63 times 2^-63, exact): 11 significant bits, and
    no overflow while |h| < 65504, which the clamped SwiGLU keeps for route weights below 65504 / limit^2."""
    body = [".reg .f32 %a, %b;"]
    for i, (lo, hi) in enumerate(_H_PAIRS):
        body.append(f"mul.f32 %a, ${lo}, 0f20000000;\n mul.f32 %b, ${hi}, 0f20000000;\n cvt.rn.f16x2.f32 ${i}, %b, %a;")
    return "{\n" + "\n".join(body) + "\n}"


HPREP = gl.constexpr(_hprep_asm())
HPREP_HI = gl.constexpr(_hprep_hi_asm())
HPREP16 = gl.constexpr(_hprep16_asm())
STEP2_FMA = gl.constexpr(_step2_asm(True))
STEP2_NOFMA = gl.constexpr(_step2_asm(False))
_HPREP_CONSTRAINTS = gl.constexpr(",".join(["=r"] * 8 + ["f"] * 8))
_HPREP_HI_CONSTRAINTS = gl.constexpr(",".join(["=r"] * 4 + ["f"] * 8))
_CONSTRAINTS2 = gl.constexpr(",".join(["=f"] * 4 + ["f"] * 4 + ["r"] * 16 + ["f"] * 8))


@gluon.jit
def _step2(acc, hs, ls, k, w1, w3, c1, c3, L3: gl.constexpr, FUSED: gl.constexpr):
    """Step k of a warp's two rows: the prepared h pairs (hi, lo) from shared memory, the loaded words and codes."""
    hq = gl.expand_dims(hs.index(k).load(gl.SliceLayout(0, L3)), 0)
    lq = gl.expand_dims(ls.index(k).load(gl.SliceLayout(0, L3)), 0)
    return gl.inline_asm_elementwise(
        asm=STEP2_FMA if FUSED else STEP2_NOFMA,
        constraints=_CONSTRAINTS2,
        args=[acc, hq, lq, w1, w3, _factor(c1), _factor(c3)],
        dtype=gl.float32,
        is_pure=True,
        pack=4,
    )


@gluon.jit
def moe_down_mma_kernel(
    h_ptr,
    sel_ptr,
    w2_ptr,
    s2_ptr,
    p_ptr,
    M,
    H,
    stride_we,
    stride_wr,
    stride_se,
    stride_sr,
    INTER: gl.constexpr,
    XS: gl.constexpr,
    TOPK: gl.constexpr,
    FUSED: gl.constexpr,
    S: gl.constexpr = 1,
    HB: gl.constexpr = 0,
    PF: gl.constexpr = 0,
    y_ptr=None,
    cnt_ptr=None,
    SERIAL: gl.constexpr = 0,
    SLOT0=0,
    NSLOT: gl.constexpr = 0,
):
    """Program (token * TOPK + slot, block of 2 x num_warps output rows): h_ptr fp32 [M*TOPK, I] in TILE 14's order
    (x 2^63); w2_ptr int32 words [E, H, I/8] (strides in words); s2_ptr uint8 codes [E, H, I/32]; p_ptr fp32 partials
    [TOPK, M, H] (the sum launch adds the slots in order). Warp w takes rows 2w and 2w + 1 of the block as one MMA
    tile, the groups laid out as moe_up_mma_kernel's. S steps per loop iteration (past I/256 masked to zeros).
    XS: xs_steps(I, num_warps, S). HB: h rounded to bf16 (1: its hi pairs only) or fp16 (2: the weights decoded to fp16
    too), two MMAs per step in the up launch's loop, PF its next-iteration loads. SERIAL: the last of a (token, row
    block)'s programs sums the slots' partials in slot order into y_ptr (bf16 [M, H]; counters at cnt_ptr, as
    fp8_gemm._serial_sum_1d, which Gluon cannot call). SLOT0, NSLOT (mxfp4_moe's slot groups): this launch's slots are
    SLOT0 .. SLOT0 + TOPK - 1 of NSLOT (0: TOPK)."""
    NW: gl.constexpr = gl.num_warps()
    NS: gl.constexpr = INTER // 256
    NSS: gl.constexpr = (NS + S - 1) // S * S
    NSP: gl.constexpr = (NSS + NW - 1) // NW * NW
    L3: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, 32, 1], [NW, 1, 1], [2, 1, 0])
    SW: gl.constexpr = gl.SliceLayout(2, L3)
    LR: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [NW, 1], [1, 0])
    pid_t = gl.program_id(0)
    pid_n = gl.program_id(1)
    e = gl.load(sel_ptr + pid_t).to(gl.int64)
    w2d, l2d, c3 = _warp_lane(L3)
    w3 = gl.expand_dims(w2d, 2)
    l3 = gl.expand_dims(l2d, 2)
    # h as bf16 hi + lo pairs in shared memory: lane (g, q) of step k holds word 32k + 4g + q = 32k + lane of h's
    hrows = gl.allocate_shared_memory(gl.int32, [XS, 128], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    lrows = gl.allocate_shared_memory(gl.int32, [XS if not HB else 1, 128], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    hrow = h_ptr + pid_t.to(gl.int64) * INTER
    for k0 in gl.static_range(0, NSP, NW):
        live = (k0 + w3) < NS
        word = 32 * (k0 + w3) + l3
        ev = gl.load(hrow + 8 * word + c3, mask=live, other=0.0)
        od = gl.load(hrow + 8 * word + 4 + c3, mask=live, other=0.0)
        if HB:  # 1: bf16, 2: fp16
            hq = gl.inline_asm_elementwise(
                asm=HPREP16 if HB == 2 else HPREP_HI, constraints=_HPREP_HI_CONSTRAINTS, args=[ev, od], dtype=gl.int32,
                is_pure=True, pack=4,
            )  # fmt: skip
        else:
            hq, lq = gl.inline_asm_elementwise(
                asm=HPREP, constraints=_HPREP_CONSTRAINTS, args=[ev, od], dtype=(gl.int32, gl.int32),
                is_pure=True, pack=4,
            )  # fmt: skip
            lrows.slice(k0, NW).store(gl.convert_layout(gl.reshape(lq, [NW, 128]), LR))
        hrows.slice(k0, NW).store(gl.convert_layout(gl.reshape(hq, [NW, 128]), LR))
    hs = hrows._reinterpret(gl.int32, [XS, 32, 4], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    gl.thread_barrier()
    row = gl.minimum(pid_n * (2 * NW) + 2 * w2d, H - 2)  # a pair past the end reads the last two rows, unstored
    w1s, s1s, cs = _step_ptrs(
        w2_ptr + e * stride_we + row * stride_wr + l2d, s2_ptr + e * stride_se + row * stride_sr + l2d // 4, S
    )
    w3s = w1s + stride_wr
    s3s = s1s + stride_sr
    acc = gl.zeros([NW, 32, 4], gl.float32, L3)
    if HB:  # one B set: the up launch's loop
        acc = _register_loop(acc, hs, w1s, w3s, s1s, s3s, cs, NS, NSS, S, PF, L3, FUSED, HB == 2)
    else:
        ls = lrows._reinterpret(gl.int32, [XS, 32, 4], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
        for k0 in range(0, NSS, S):
            a1, a3, sa1, sa3 = _load_steps(w1s, w3s, s1s, s3s, cs, k0, NS, NSS != NS)
            for j in gl.static_range(S):
                acc = _step2(acc, hs, ls, k0 + j, _pick(a1, cs, j, L3), _pick(a3, cs, j, L3), _pick(sa1, cs, j, L3),
                             _pick(sa3, cs, j, L3), L3, FUSED)  # fmt: skip
    r0, r1 = _diagonal(acc, l2d, c3)
    o = pid_n * (2 * NW) + 2 * gl.arange(0, NW, layout=gl.SliceLayout(1, SW))
    m = pid_t // TOPK
    prow = p_ptr + ((SLOT0 + pid_t % TOPK) * M + m).to(gl.int64) * H
    gl.store(prow + o, r0, mask=o < H)
    gl.store(prow + o + 1, r1, mask=o + 1 < H)
    if SERIAL:  # the last program of this (token, row block) sums every slot's partials in slot order
        NP: gl.constexpr = NSLOT if NSLOT else TOPK
        gl.thread_barrier()
        done = gl.atomic_add(cnt_ptr + m * gl.num_programs(1) + pid_n, 1, sem="acq_rel", scope="gpu")
        if done == NP - 1:
            t0 = gl.zeros([NW], gl.float32, gl.SliceLayout(1, SW))
            t1 = gl.zeros([NW], gl.float32, gl.SliceLayout(1, SW))
            for j in gl.static_range(NP):
                pj = p_ptr + (j * M + m).to(gl.int64) * H
                t0 += gl.load(pj + o, mask=o < H, other=0.0, cache_modifier=".cg")
                t1 += gl.load(pj + o + 1, mask=o + 1 < H, other=0.0, cache_modifier=".cg")
            gl.store(y_ptr + m * H + o, t0.to(gl.bfloat16), mask=o < H)
            gl.store(y_ptr + m * H + o + 1, t1.to(gl.bfloat16), mask=o + 1 < H)
            gl.atomic_xchg(cnt_ptr + m * gl.num_programs(1) + pid_n, 0, sem="relaxed", scope="gpu")
