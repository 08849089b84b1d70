"""The FP8 GEMM for M = 1..16 on the tensor cores through hand-placed `mma.sync` (Gluon: layouts fixed by hand).

Why: Nsight Compute (results/h200-2026-12-04-ncu-fp8-*.txt) counts 7.3 SASS instructions per weight in the register
tile's loop at M = 1 (decode 3, the FMA, the activations' scaling, staging) and about as many in the swapped `tl.dot`
kernel (operands moved into the MMA's lane layout through shared memory), while torch's bf16 GEMV issues 2.4.

One program owns a 16-row tile (inside one 32-row block of codes) and a K range (all of K, or one of SPLIT; the
partials then summed by the last program of the tile); its warps split that range, each taking NB = K / 32 / NW /
SPLIT consecutive 32-wide blocks, and a warp runs one m16n8k16 MMA pair per block: A is the tile's 16 rows x the
block's 32 values, B the block's activations of up to 8 tokens (column n = token n). Lane L (g = L / 4, q = L % 4)
loads words 2q and 2q + 1 of rows g and g + 8 (bytes 8q..8q+7 of the block: a quad reads the block's 32 bytes of a
row) and the activations 8q..8q+7 of token g (16 bytes, as stored): the MMA's k order is a permutation of the
block's values that the activations follow, so nothing moves between lanes. Each word becomes two bf16 pairs worth
value x 2^-120 (the decoder of decode.e4m3_bf16_bits_asm, 1.5 operations per value); the block's fresh MMA sum is
multiplied by its power of two x 2^60 and added in fp32 (every 32-wide partial dot scaled exactly, as the
reference), 2^60 on the result. The warps' accumulators are summed at the end; C[row][token] lands in the lanes as
the MMA leaves it. Subnormal weights become bf16 denormals, which the MMA keeps (kernels_device_run
SUBNORMAL_CASES). M = 9..16 (TW 2): a second MMA pair per block on the same decoded A against token g + 8's
activations, into a second accumulator.

The weights are read as stored ([N, K] rows: a lane's words two 8-byte loads from rows g and g + 8) or pack()ed once
at load time (PK: each tile's blocks in K order, lane L's four words its own 16 bytes, so a block is one 16-byte load
per lane and a warp's run of blocks one span). Packed, DSV4.1-Flash's largest weights run at 0.71-0.82x of the copy
bandwidth at M = 1, against 0.67-0.73x as stored (results/h200-2026-12-04-bench-fp8-18.json). Measured and
removed (session 42; the code is at commit 7898003): the warps interleaved over K and cache hints on the words (sweep
22, within 3 %), the group PF ahead prefetched into L2 and two groups loaded alternately (sweep 23, packed-3: slower
on the large weights). In the SASS of the S 4 loop ptxas issues the next group's loads after the current group's
first MMA pair, reusing its registers; more loads in flight was slower all the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from recipekit.backends.cuda_sm80.kernels.serial import serial_counters


def _step_asm(fused: bool, groups: int = 1) -> str:
    """One block for one lane (pack 4 on [NW, 32, 4] tensors), groups 1: $0-$3 the accumulators out (c0, c1: row g,
    tokens 2q, 2q + 1; c2, c3: row g + 8), $4-$7 them in, $8-$11 the activations (bf16 pairs of values 8q..8q+7 of
    token g), $12-$15 the words (row g: 2q, 2q + 1; row g + 8: 2q, 2q + 1), $16 the block's factor (fp32; $17-$19
    unused). groups 2 (tokens 8..15 too, the same A): $0-$7 out (tokens 0-7, then 8-15), $8-$15 in, $16-$19 token g's
    activations, $20-$23 token g + 8's, $24-$27 the words, $28 the factor."""
    words, factor = 12 * groups, 12 * groups + 4
    body = [".reg .b32 %a<8>, %z;", ".reg .f32 %d<4>, %f;", "mov.b32 %z, 0;"]
    # A registers: MMA 0 {row g pair 0, row g+8 pair 0, row g pair 1, row g+8 pair 1} of the first words, MMA 1 the same
    # of the second words; pair 0 holds bytes 0, 1 of a word, pair 1 bytes 2, 3 (k = 2q, 2q + 1 and 2q + 8, 2q + 9)
    for w, lo, hi in ((0, 0, 2), (2, 1, 3), (1, 4, 6), (3, 5, 7)):
        word = f"${words + w}"
        body += [
            f"prmt.b32 %a{lo}, {word}, %z, 0x9180;",
            f"prmt.b32 %a{hi}, {word}, %z, 0xB3A2;",
            f"shl.b32 %a{lo}, %a{lo}, 4;",
            f"shl.b32 %a{hi}, %a{hi}, 4;",
            f"and.b32 %a{lo}, %a{lo}, 0x87F087F0;",
            f"and.b32 %a{hi}, %a{hi}, 0x87F087F0;",
        ]
    body.append("mov.f32 %f, 0f00000000;")
    mma = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
    for j in range(groups):  # token group j: its activations as B, its accumulators
        x, out, acc = 8 * groups + 4 * j, 4 * j, 4 * groups + 4 * j
        body.append(f"{mma} {{%d0, %d1, %d2, %d3}}, {{%a0, %a1, %a2, %a3}}, {{${x}, ${x + 1}}}, {{%f, %f, %f, %f}};")
        body.append(
            f"{mma} {{%d0, %d1, %d2, %d3}}, {{%a4, %a5, %a6, %a7}}, {{${x + 2}, ${x + 3}}}, {{%d0, %d1, %d2, %d3}};"
        )
        for i in range(4):
            if fused:
                body.append(f"fma.rn.f32 ${out + i}, %d{i}, ${factor}, ${acc + i};")
            else:  # no contraction (FMA-throttled cards): .rn keeps ptxas from fusing
                body.append(f"mul.rn.f32 %d{i}, %d{i}, ${factor};\n add.rn.f32 ${out + i}, %d{i}, ${acc + i};")
    return "{\n" + "\n".join(body) + "\n}"


STEP_FMA = gl.constexpr(_step_asm(True))
STEP_NOFMA = gl.constexpr(_step_asm(False))
STEP2_FMA = gl.constexpr(_step_asm(True, 2))
STEP2_NOFMA = gl.constexpr(_step_asm(False, 2))


def _constraints(groups: int) -> str:
    """_step_asm's operands: the accumulators out and in (fp32), the activations and the words (b32), the factor."""
    return ",".join(["=f"] * 4 * groups + ["f"] * 4 * groups + ["r"] * (4 * groups + 4) + ["f"] * 4)


_CONSTRAINTS = gl.constexpr(_constraints(1))
_CONSTRAINTS2 = gl.constexpr(_constraints(2))
TOKENS_MAX = 16  # two token groups of the MMA's N (8)


@gluon.jit
def _factor(s):
    """uint8 E8M0 codes -> fp32 2^(s - 67): 2^(s-127) times the 2^120 the decoder's 2^-120 leaves, over the 2^60 put
    on the result (exact for codes 0..194)."""
    return ((s.to(gl.int32) + 60) << 23).to(gl.float32, bitcast=True)


@gluon.jit
def _load_block(wp, xp, sp, xmask, zero, b, NB: gl.constexpr, PK: gl.constexpr, TW: gl.constexpr, xp2, xmask2):
    """Block b of the warp's run for this lane: its words, activations and factor ([NW, 32, 4] each); past NB zero
    words (which add nothing); TW 2: also token g + 8's activations (xp2), else the same tensor again."""
    live = (zero + b) < NB
    wv = gl.load(wp + (128 if PK else 8) * b, mask=live, other=0)  # words to the next block (packed: a tile's block)
    xv = gl.load(xp + 16 * b, mask=xmask & live, other=0)
    xv2 = gl.load(xp2 + 16 * b, mask=xmask2 & live, other=0) if TW == 2 else xv  # tokens 8..15 (TW 2)
    return wv, xv, _factor(gl.load(sp + b, mask=live, other=0)), xv2


@gluon.jit
def _block(acc, acc2, wv, xv, xv2, f, FUSED: gl.constexpr, TW: gl.constexpr):
    """One block through the two MMAs into the accumulators (TW 2: the two of tokens 8..15 too, into acc2)."""
    if TW == 2:
        acc, acc2 = gl.inline_asm_elementwise(
            asm=STEP2_FMA if FUSED else STEP2_NOFMA,
            constraints=_CONSTRAINTS2,
            args=[acc, acc2, xv, xv2, wv, f],
            dtype=(gl.float32, gl.float32),
            is_pure=True,
            pack=4,
        )
    else:
        acc = gl.inline_asm_elementwise(
            asm=STEP_FMA if FUSED else STEP_NOFMA,
            constraints=_CONSTRAINTS,
            args=[acc, xv, wv, f],
            dtype=gl.float32,
            is_pure=True,
            pack=4,
        )
    return acc, acc2


@gluon.jit
def _load_four(wp, xp, sp, xmask, zero, b, NB: gl.constexpr, PK: gl.constexpr, TW: gl.constexpr, xp2, xmask2):
    """Blocks b .. b + 3 (_load_block) as one tuple."""
    return (
        _load_block(wp, xp, sp, xmask, zero, b, NB, PK, TW, xp2, xmask2),
        _load_block(wp, xp, sp, xmask, zero, b + 1, NB, PK, TW, xp2, xmask2),
        _load_block(wp, xp, sp, xmask, zero, b + 2, NB, PK, TW, xp2, xmask2),
        _load_block(wp, xp, sp, xmask, zero, b + 3, NB, PK, TW, xp2, xmask2),
    )


@gluon.jit
def _four(acc, acc2, t, FUSED: gl.constexpr, TW: gl.constexpr):
    """_load_four's blocks through the MMAs, in order."""
    for i in gl.static_range(4):
        acc, acc2 = _block(acc, acc2, t[i][0], t[i][1], t[i][3], t[i][2], FUSED, TW)
    return acc, acc2


@gluon.jit
def fp8_gemv_mma_kernel(
    x_ptr,
    w_ptr,
    s_ptr,
    y_ptr,
    M,
    N,
    stride_xm,
    stride_wn,
    stride_sn,
    stride_ym,
    K: gl.constexpr,
    S: gl.constexpr,
    FUSED: gl.constexpr,
    p_ptr=None,
    cnt_ptr=None,
    SPLIT: gl.constexpr = 1,
    PK: gl.constexpr = 0,
    TW: gl.constexpr = 1,
):
    """Program (rows 16 * pid .. + 15, K split pid_k). x_ptr: bf16 activations as int32 pairs [M, K/2] (stride_xm in
    words); w_ptr: e4m3 weights as int32 words [N, K/4] (stride_wn in words); s_ptr: uint8 codes [ceil(N/32), K/32];
    y_ptr: bf16 [M, N]. S: 1, or 4 or 8 blocks per loop iteration with the next iteration's loaded before this one's
    MMAs (ptxas issues a block's loads right before its MMAs otherwise: one block in flight per warp). SPLIT > 1: K
    split over that many programs per row tile, each storing fp32 partials into p_ptr [SPLIT, M, N]; the last of a
    tile to finish (its counter at cnt_ptr[pid]) sums them in split order into y, as fp8_gemm._serial_split_sum
    (which Gluon cannot call), and sets the counter back to 0. PK 1: w_ptr is pack()'s layout (stride_wn unused); TW
    2: tokens 8..15 too (M > 8)."""
    NW: gl.constexpr = gl.num_warps()
    NB: gl.constexpr = K // 32 // NW // SPLIT
    L3: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, 32, 1], [NW, 1, 1], [2, 1, 0])
    SW: gl.constexpr = gl.SliceLayout(2, L3)
    pid = gl.program_id(0)
    w2d = gl.expand_dims(gl.arange(0, NW, layout=gl.SliceLayout(1, SW)), 1)
    l2d = gl.expand_dims(gl.arange(0, 32, layout=gl.SliceLayout(0, SW)), 0)
    c3 = gl.expand_dims(gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, L3))), 0), 1)
    w3 = gl.expand_dims(w2d, 2)  # [NW, 1, 1]
    g3 = gl.expand_dims(l2d // 4, 2)  # [1, 32, 1]
    q3 = gl.expand_dims(l2d % 4, 2)
    zero = 0 * (w3 + g3 + c3)  # [NW, 32, 4]
    row = gl.minimum(16 * pid + g3 + 8 * (c3 // 2), N - 1)  # rows past the end read the last one, unstored
    pid_k = gl.program_id(1)
    kb0 = (pid_k * NW + w3) * NB  # the warp's first block
    if PK:  # pack()'s layout: a tile's blocks in K order, 512 bytes each, lane L's 16 bytes its own four words
        wp = w_ptr + (pid.to(gl.int64) * (K // 32) + kb0) * 128 + 4 * gl.expand_dims(l2d, 2) + c3
    else:
        wp = w_ptr + row.to(gl.int64) * stride_wn + 8 * kb0 + 2 * q3 + c3 % 2  # [NW, 32, 4]
    tok = g3 + zero
    xp = x_ptr + tok * stride_xm + 16 * kb0 + 4 * q3 + c3
    xmask = tok < M
    xp2 = xp + 8 * stride_xm  # TW 2: token g + 8
    xmask2 = (tok + 8) < M
    sp = s_ptr + ((16 * pid) // 32) * stride_sn + kb0 + zero
    acc = gl.zeros([NW, 32, 4], gl.float32, L3)
    acc2 = acc  # TW 2: tokens 8..15
    if S == 4:
        a = _load_four(wp, xp, sp, xmask, zero, 0, NB, PK, TW, xp2, xmask2)
        for b0 in range(0, NB, 4):
            an = _load_four(wp, xp, sp, xmask, zero, b0 + 4, NB, PK, TW, xp2, xmask2)
            acc, acc2 = _four(acc, acc2, a, FUSED, TW)
            a = an
    elif S == 8:  # eight blocks per iteration, the next eight loaded ahead
        a = _load_four(wp, xp, sp, xmask, zero, 0, NB, PK, TW, xp2, xmask2)
        b = _load_four(wp, xp, sp, xmask, zero, 4, NB, PK, TW, xp2, xmask2)
        for b0 in range(0, NB, 8):
            an = _load_four(wp, xp, sp, xmask, zero, b0 + 8, NB, PK, TW, xp2, xmask2)
            bn = _load_four(wp, xp, sp, xmask, zero, b0 + 12, NB, PK, TW, xp2, xmask2)
            acc, acc2 = _four(acc, acc2, a, FUSED, TW)
            acc, acc2 = _four(acc, acc2, b, FUSED, TW)
            a = an
            b = bn
    else:
        for b in range(0, NB):
            wv, xv, f, xv2 = _load_block(wp, xp, sp, xmask, zero, b, NB, PK, TW, xp2, xmask2)
            acc, acc2 = _block(acc, acc2, wv, xv, xv2, f, FUSED, TW)
    tot = gl.sum(acc, axis=0) * 1.152921504606846976e18  # [32, 4]: the warps' K ranges summed; 2^60
    LT: gl.constexpr = gl.SliceLayout(0, L3)
    lane = gl.expand_dims(gl.arange(0, 32, layout=gl.SliceLayout(1, LT)), 1)
    slot = gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(0, LT)), 0)
    orow = 16 * pid + lane // 4 + 8 * (slot // 2)
    otok = 2 * (lane % 4) + slot % 2
    omask = (otok < M) & (orow < N)
    if TW == 2:
        tot2 = gl.sum(acc2, axis=0) * 1.152921504606846976e18
        omask2 = (otok + 8 < M) & (orow < N)
    if SPLIT == 1:
        gl.store(y_ptr + otok * stride_ym + orow, tot.to(gl.bfloat16), mask=omask)
        if TW == 2:
            gl.store(y_ptr + (otok + 8) * stride_ym + orow, tot2.to(gl.bfloat16), mask=omask2)
    else:
        off = otok * N + orow
        gl.store(p_ptr + pid_k * M * N + off, tot, mask=omask)
        if TW == 2:
            gl.store(p_ptr + pid_k * M * N + off + 8 * N, tot2, mask=omask2)
        gl.thread_barrier()
        done = gl.atomic_add(cnt_ptr + pid, 1, sem="acq_rel", scope="gpu")
        if done == SPLIT - 1:
            t = gl.zeros([32, 4], gl.float32, LT)
            for j in gl.static_range(SPLIT):
                t += gl.load(p_ptr + j * M * N + off, mask=omask, other=0.0, cache_modifier=".cg")
            gl.store(y_ptr + otok * stride_ym + orow, t.to(gl.bfloat16), mask=omask)
            if TW == 2:
                t2 = gl.zeros([32, 4], gl.float32, LT)
                for j in gl.static_range(SPLIT):
                    t2 += gl.load(p_ptr + j * M * N + off + 8 * N, mask=omask2, other=0.0, cache_modifier=".cg")
                gl.store(y_ptr + (otok + 8) * stride_ym + orow, t2.to(gl.bfloat16), mask=omask2)
            gl.atomic_xchg(cnt_ptr + pid, 0, sem="relaxed", scope="gpu")


def fits(k: int, warps: int, s: int, split: int = 1) -> bool:
    """Whether K splits into `warps` x `split` equal runs of whole 32-wide blocks (S 1, 4 or 8: a run need not be a
    multiple of S, the blocks past it load as zeros)."""
    return k % (32 * warps * split) == 0 and k // (32 * warps * split) > 0 and s in (1, 4, 8)


def config_fits(k: int, config: tuple[int, ...]) -> bool:
    """Whether fp8_gemv_mma takes `config` (num_warps, S[, SPLIT]) at this K: fits, and no field past SPLIT."""
    return len(config) <= 3 and fits(k, *config)


@dataclass(frozen=True)
class Packed:
    """An e4m3 weight [n, k] in pack()'s layout: data is uint8 [ceil(n / 16), 16 k]."""

    data: Any
    n: int
    k: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)


def pack(w: Any) -> Packed:
    """An e4m3 weight [N, K] (uint8, K a multiple of 32) in the order the kernel's lanes read it, done once at load
    time (as the torch path dequantizes once): per 16-row tile, its 32-wide blocks in K order, each 512 bytes; in a
    block, lane L = 4g + q's 16 bytes are row g's bytes 8q..8q+7, then row g + 8's (its four MMA words). A warp's
    load of one block is then 512 consecutive bytes and its run of blocks one span, where the row layout reads 16
    rows' 32 bytes each. Rows past N (to a multiple of 16) are zeros. The E8M0 codes stay as stored."""
    import torch  # lazy: the module compiles without torch (validity)

    n, k = w.shape
    if w.dtype != torch.uint8 or k % 32:
        raise ValueError(f"pack takes uint8 e4m3 bytes [N, K] with K a multiple of 32, got {w.dtype} {tuple(w.shape)}")
    t = -(-n // 16)
    if n % 16:
        w = torch.cat([w, w.new_zeros((16 * t - n, k))])
    tiles = w.reshape(t, 2, 8, k // 32, 4, 8)  # tile, half (row g or g + 8), g, block, q, byte
    return Packed(tiles.permute(0, 3, 2, 4, 1, 5).contiguous().view(t, 16 * k), n, k)


def fp8_gemv_mma(x: Any, w: Any, s: Any, config: tuple[int, ...] = (4, 1), fp_fusion: bool = True) -> Any:
    """The fp8_gemm contract for M <= 16 (config: num_warps, S 1, 4 or 8[, SPLIT]); w the weight as stored [N, K] or
    pack()ed (Packed). N a multiple of 16 is not needed (rows past N are neither read past the weight nor stored).
    SPLIT > 1 takes a slot of the serial counters (serial.py); where none is to be had (during a capture before the
    first call) it raises: run once outside the capture first."""
    import torch  # lazy: the module compiles without torch (validity)

    m, k = x.shape
    packed = isinstance(w, Packed)
    n = w.shape[0]
    warps, steps = config[:2]
    split = config[2] if len(config) > 2 else 1
    if m > TOKENS_MAX or not config_fits(k, config) or (packed and w.k != k):
        raise ValueError(
            f"fp8_gemv_mma takes M <= {TOKENS_MAX}, a config (num_warps, S[, SPLIT]) with K a multiple of 32 x "
            f"num_warps x SPLIT and S 1, 4 or 8, and a packed weight of the activations' K, got M={m} K={k} "
            f"config={tuple(config)}" + (f" packed K={w.k}" if packed else "")
        )
    x = x.contiguous()
    if packed:
        wd, stride_wn = w.data, 0
    else:
        if w.stride(1) != 1 or w.stride(0) % 4 or w.storage_offset() % 4:  # read as int32 words: a row view of
            w = w.contiguous()  # whole words is taken as it is (fp8_gemm's other kernels take any row stride too)
        wd, stride_wn = w, w.stride(0) // 4
    y = torch.empty((m, n), dtype=torch.bfloat16, device=x.device)
    tiles = -(-n // 16)
    extra: dict[str, Any] = {}
    if split > 1:
        cnt = serial_counters(x.device, tiles)
        if cnt is None:
            raise ValueError(f"fp8_gemv_mma has no serial counters for {tiles} row tiles here (SPLIT {split})")
        extra = {"p_ptr": torch.empty((split, m, n), dtype=torch.float32, device=x.device), "cnt_ptr": cnt}
    fp8_gemv_mma_kernel[(tiles, split)](
        x.view(torch.int32), wd.view(torch.int32), s, y, m, n, x.stride(0) // 2, stride_wn, s.stride(0),
        y.stride(0), K=k, S=steps, FUSED=fp_fusion, SPLIT=split, PK=int(packed), TW=2 if m > 8 else 1,
        num_warps=warps, **extra,
    )  # fmt: skip
    return y


def fp8_gemv_mma_packed(x: Any, w: Any, s: Any, config: tuple[int, ...] = (4, 1), fp_fusion: bool = True) -> Any:
    """fp8_gemv_mma on pack()ed weights: a Packed weight is read as it is; a weight as stored is packed first (a
    parity check's or a compile's call; a deployment packs once at load time)."""
    return fp8_gemv_mma(x, w if isinstance(w, Packed) else pack(w), s, config, fp_fusion)
