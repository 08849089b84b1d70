"""sm_80 validity: every kernel compiled for GPUTarget("cuda", 80, 32) (no GPU of that kind needed,
Triton's own ptxas does the work) and its PTX checked for `.target sm_80` and for none of the
sm_89+/sm_90 features: wgmma, TMA (cp.async.bulk), setmaxnreg, mbarrier try_wait (Hopper
pipelines), e4m3/e5m2 converts (sm_89+).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# (pattern, why it is not sm_80) — research: Triton's and PTX ISA's feature lists
FORBIDDEN = (
    (r"\bwgmma\b", "warpgroup MMA (sm_90a)"),
    (r"cp\.async\.bulk", "TMA bulk copies (sm_90)"),
    (r"\bsetmaxnreg\b", "register reallocation (sm_90a)"),
    (r"mbarrier\.try_wait", "mbarrier try_wait (sm_90)"),
    (r"\b(?:e4m3|e5m2)(?:x2)?\b", "FP8 converts (sm_89)"),
    (r"\bstmatrix\b", "stmatrix (sm_90)"),
)

# kernel -> (module, jit function, signature of the runtime arguments, constexprs)
_PTR_FP8 = {"x_ptr": "*bf16", "w_ptr": "*u8", "s_ptr": "*u8", "y_ptr": "*bf16"}
_I32 = "i32"


def _specs(kernels: Mapping[str, Any]) -> list[tuple[str, Any, dict[str, str], dict[str, Any]]]:
    engram_gather, fp8_gemm = kernels["engram_gather"], kernels["fp8_gemm"]
    mxfp4_moe, sinkhorn, dequant = kernels["mxfp4_moe"], kernels["sinkhorn"], kernels["dequant"]

    i32 = dict.fromkeys
    # signatures that several entries compile (one kernel under other constexprs)
    fp8 = {**_PTR_FP8, **i32(("M", "N", "K", "stride_xm", "stride_wn", "stride_sn", "stride_ym", "K_PER_SPLIT"), _I32)}
    serial = {"yb_ptr": "*bf16", "cnt_ptr": "*i32"}  # serial split-K's bf16 output and counters
    fp8_tokens = {
        **_PTR_FP8, **serial, **i32(("N", "stride_xm", "stride_wn", "stride_sn", "stride_ym", "K_PER_SPLIT"), _I32)
    }  # fmt: skip
    fp8_swap = {
        **_PTR_FP8, **serial,
        **i32(("M", "N", "K", "stride_xm", "stride_wn", "stride_sn", "stride_ym", "K_PER_SPLIT"), _I32),
    }  # fmt: skip
    gluon_fp8 = {"x_ptr": "*i32", "w_ptr": "*i32", "s_ptr": "*u8", "y_ptr": "*bf16"} | i32(
        ("M", "N", "stride_xm", "stride_wn", "stride_sn", "stride_ym"), _I32
    )
    dequant_fp8 = {"w_ptr": "*u8", "s_ptr": "*u8", "y_ptr": "*fp32", **i32(("rows", "cols", "s_cols"), _I32)}
    up_tile = {
        "x_ptr": "*i32",
        "sel_ptr": "*i32",
        "wts_ptr": "*fp32",
        "w13_ptr": "*u8",
        "s13_ptr": "*u8",
        "h_ptr": "*fp32",
        "H": _I32,
        "INTER": _I32,
        "limit": "fp32",
        **i32(("stride_we", "stride_wr", "stride_se", "stride_sr"), _I32),
        "w2b_ptr": "*u8",
        "s2b_ptr": "*u8",
        **i32(("w2_bytes", "s2_bytes"), _I32),
    }  # fmt: skip
    down_tile = {
        "h_ptr": "*fp32",
        "sel_ptr": "*i32",
        "w2_ptr": "*u8",
        "s2_ptr": "*u8",
        "p_ptr": "*fp32",
        "yb_ptr": "*bf16",
        "cnt_ptr": "*i32",
        "M": _I32,
        "H": _I32,
        "INTER": _I32,
        **i32(("stride_we", "stride_wr", "stride_se", "stride_sr"), _I32),
        "KCHUNK": _I32,
        "SLOT0": _I32,
    }  # fmt: skip
    down_mma = (
        {"h_ptr": "*fp32", "sel_ptr": "*i32", "w2_ptr": "*i32", "s2_ptr": "*u8", "p_ptr": "*fp32"}
        | dict.fromkeys(("M", "H", "stride_we", "stride_wr", "stride_se", "stride_sr", "SLOT0"), _I32)
        | {"y_ptr": "*bf16", "cnt_ptr": "*i32"}
    )
    # TILE 14's down launch unmasked with the serial slot sum (the default's), also compiled with its loads staged
    down_serial = {"TOPK": 6, "BLOCK_N": 64, "BLOCK_KB": 128, "DENORM": 1, "KSPLIT": 1, "ASM": 1, "HWORDS": 1, "EVEN": 1,
                   "SERIAL": 1}  # fmt: skip
    return [
        (
            "fp8_gemm",
            fp8_gemm.fp8_gemm_kernel,
            fp8,
            {"BLOCK_M": 16, "BLOCK_N": fp8_gemm.DEFAULT_CONFIG[0], "BLOCK_K": fp8_gemm.DEFAULT_CONFIG[1], "SPLIT": 4},
        ),
        (
            "fp8_gemm.bf16",
            fp8_gemm.fp8_gemm_kernel,
            fp8,
            {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 256, "SPLIT": 1, "DECODER": 1},
        ),
        (  # the swapped MMA kernel (decoded weights as the A operand): packed-PTX decoder, split K
            "fp8_gemm.swap",
            fp8_gemm.fp8_gemm_swap_kernel,
            {**fp8_swap, "y_ptr": "*fp32"},
            {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "SPLIT": 4, "DECODER": 2},
        ),
        (  # DECODER 4: the next step's E8M0 codes loaded a step ahead
            "fp8_gemm.swap_prefetch",
            fp8_gemm.fp8_gemm_swap_kernel,
            {**fp8_swap, "y_ptr": "*fp32"},
            {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT": 2, "DECODER": 4},
        ),
        (  # serial split-K: the last program of a row block sums the splits (no split_sum_kernel launch)
            "fp8_gemm.swap_serial",
            fp8_gemm.fp8_gemm_swap_kernel,
            {**fp8_swap, "y_ptr": "*fp32"},
            {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT": 4, "DECODER": 4, "SERIAL": 1},
        ),
        (  # DECODER 5: the blocks' powers of two on the activations, one dot per step (session 41, not in the table)
            "fp8_gemm.swap_scaled_activations",
            fp8_gemm.fp8_gemm_swap_kernel,
            {**fp8_swap, "y_ptr": "*fp32"},
            {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "SPLIT": 2, "DECODER": 5, "SERIAL": 1},
        ),
        (  # M <= 8 on hand-placed mma.sync (Gluon, fp8_gemv_mma: the table's path "gluon"), four blocks loaded ahead
            "fp8_gemm.gluon_mma",
            fp8_gemm.fp8_gemv_mma.fp8_gemv_mma_kernel,
            gluon_fp8,
            {"K": 5120, "S": 4, "FUSED": 1, "SPLIT": 1, "PK": 0, "TW": 1},
        ),
        (  # the same on pack()ed weights (one 16-byte load per lane and block), M 9..16 (two token groups)
            "fp8_gemm.gluon_mma_packed",
            fp8_gemm.fp8_gemv_mma.fp8_gemv_mma_kernel,
            gluon_fp8,
            {"K": 5120, "S": 8, "FUSED": 1, "SPLIT": 1, "PK": 1, "TW": 2},
        ),
        (  # the same with K split over 4 programs, the last of a row tile summing their partials (sweep 20)
            "fp8_gemm.gluon_mma_split",
            fp8_gemm.fp8_gemv_mma.fp8_gemv_mma_kernel,
            gluon_fp8 | {"p_ptr": "*fp32", "cnt_ptr": "*i32"},
            {"K": 5120, "S": 4, "FUSED": 1, "SPLIT": 4, "PK": 0, "TW": 1},
        ),
        (
            "fp8_gemm.swap_fp32",
            fp8_gemm.fp8_gemm_swap_kernel,
            fp8_swap,
            {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "SPLIT": 1, "DECODER": 0},
        ),
        (
            "fp8_gemv",
            fp8_gemm.fp8_gemv_kernel,
            fp8,
            {"BLOCK_M": 4, "BLOCK_N": 4, "BLOCK_K": 1024, "SPLIT": 2, "SEXT": 2, "PREFETCH": 0, "ACC_TILE": 1},
        ),
        (
            "fp8_gemv.m1",
            fp8_gemm.fp8_gemv_kernel,
            fp8,
            {"BLOCK_M": 1, "BLOCK_N": 16, "BLOCK_K": 512, "SPLIT": 1, "SEXT": 2, "PREFETCH": 0, "ACC_TILE": 2},
        ),
        (
            "fp8_gemv.tokens",
            fp8_gemm.fp8_gemv_tokens_kernel,
            fp8_tokens,
            {"MT": 4, "BLOCK_N": 8, "BLOCK_K": 256, "SPLIT": 2, "DECODER": 3},
        ),
        (  # the next step's tile loaded before this step's decode (the table's M = 2 entries, run 13)
            "fp8_gemv.tokens_prefetch",
            fp8_gemm.fp8_gemv_tokens_kernel,
            fp8_tokens,
            {"MT": 2, "BLOCK_N": 8, "BLOCK_K": 512, "SPLIT": 1, "DECODER": 3, "PREFETCH": 1},
        ),
        (  # serial split-K (the table's 5120 x 16384 M = 1 tile with SERIAL)
            "fp8_gemv.tokens_serial",
            fp8_gemm.fp8_gemv_tokens_kernel,
            {**fp8_tokens, "y_ptr": "*fp32"},
            {
                "MT": 1,
                "BLOCK_N": 16,
                "BLOCK_K": 256,
                "SPLIT": 4,
                "DECODER": 3,
                "PREFETCH": 1,
                "SERIAL": 1,
                "BLOCK_MT": 1,
            },
        ),
        (  # the loop's loads staged through shared memory by Triton's pipeliner (cp.async: sm_80)
            "fp8_gemv.tokens_staged",
            fp8_gemm.fp8_gemv_tokens_kernel,
            fp8_tokens,
            {"MT": 1, "BLOCK_N": 8, "BLOCK_K": 1024, "SPLIT": 1, "DECODER": 3, "BLOCK_MT": 1, "STAGES": 3},
        ),
        (
            "fp8_gemm.split_sum",
            fp8_gemm.split_sum_kernel,
            {"p_ptr": "*fp32", "y_ptr": "*bf16", "MN": _I32},
            {"SPLIT": 4, "BLOCK": 1024},
        ),
        (
            "mxfp4_moe.up",
            mxfp4_moe.moe_up_kernel,
            {
                "x_ptr": "*bf16",
                "sel_ptr": "*i32",
                "wts_ptr": "*fp32",
                "w13_ptr": "*u8",
                "s13_ptr": "*u8",
                "h_ptr": "*fp32",
                "H": _I32,
                "INTER": _I32,
                "limit": "fp32",
                **i32(("stride_we", "stride_wr", "stride_se", "stride_sr"), _I32),
            },  # fmt: skip
            {
                "TOPK": 6,
                "BLOCK_N": mxfp4_moe.ROW_CONFIG[0],
                "BLOCK_KB": mxfp4_moe.ROW_CONFIG[1],
                "SCALE_EACH": 0,
            },
        ),
        (
            "mxfp4_moe.down",
            mxfp4_moe.moe_down_kernel,
            {
                "h_ptr": "*fp32",
                "sel_ptr": "*i32",
                "w2_ptr": "*u8",
                "s2_ptr": "*u8",
                "y_ptr": "*bf16",
                "H": _I32,
                "INTER": _I32,
                **i32(("stride_we", "stride_wr", "stride_se", "stride_sr"), _I32),
            },  # fmt: skip
            {
                "TOPK": 6,
                "BLOCK_N": mxfp4_moe.ROW_CONFIG[4],
                "BLOCK_KB": mxfp4_moe.ROW_CONFIG[1],
                "SCALE_EACH": 0,
            },
        ),
        (
            "mxfp4_moe.up_tile",
            mxfp4_moe.moe_up_tile_kernel,
            up_tile,
            {"TOPK": 6, "BLOCK_N": mxfp4_moe.TILE_CONFIG[0], "BLOCK_KB": mxfp4_moe.TILE_CONFIG[1], "DENORM": 1},
        ),
        (
            "mxfp4_moe.down_tile",
            mxfp4_moe.moe_down_tile_kernel,
            down_tile,
            {
                "TOPK": 6,
                "BLOCK_N": mxfp4_moe.TILE_CONFIG[4],
                "BLOCK_KB": mxfp4_moe.TILE_CONFIG[6],
                "DENORM": 1,
                "KSPLIT": 1,
            },
        ),
        (  # TILE 5 / 6: the up launch's words decoded in PTX (ASM: an FMA chain, mul + add without fusion)
            "mxfp4_moe.up_tile_asm",
            mxfp4_moe.moe_up_tile_kernel,
            {**up_tile, "w13_ptr": "*i32"},
            {"TOPK": 6, "BLOCK_N": 16, "BLOCK_KB": 512, "DENORM": 1, "ASM": 1},
        ),
        (  # TILE 5's down launch: words decoded in PTX, split-K and the next step's words prefetched
            "mxfp4_moe.down_tile_asm",
            mxfp4_moe.moe_down_tile_kernel,
            {**down_tile, "w2_ptr": "*i32"},
            {"TOPK": 6, "BLOCK_N": 32, "BLOCK_KB": 128, "DENORM": 1, "KSPLIT": 3, "ASM": 1, "PREFETCH": 1},
        ),
        (  # TILE 7 / 8: the up launch on the tensor cores (mma.sync via tl.dot on the decoded bf16 tile)
            "mxfp4_moe.up_tile_mma",
            mxfp4_moe.moe_up_tile_kernel,
            up_tile,
            {"TOPK": 6, "BLOCK_N": 16, "BLOCK_KB": 256, "DENORM": 1, "MMA": 1},
        ),
        (  # TILE 8's down launch: the tensor cores, h as bf16 hi + lo
            "mxfp4_moe.down_tile_mma",
            mxfp4_moe.moe_down_tile_kernel,
            down_tile,
            {"TOPK": 6, "BLOCK_N": 32, "BLOCK_KB": 256, "DENORM": 1, "KSPLIT": 1, "MMA": 1},
        ),
        (  # TILE 9 / 10: the same with the nibbles decoded in PTX (MMA 2)
            "mxfp4_moe.up_tile_mma_asm",
            mxfp4_moe.moe_up_tile_kernel,
            up_tile,
            {"TOPK": 6, "BLOCK_N": 32, "BLOCK_KB": 256, "DENORM": 1, "MMA": 2},
        ),
        (
            "mxfp4_moe.down_tile_mma_asm",
            mxfp4_moe.moe_down_tile_kernel,
            down_tile,
            {"TOPK": 6, "BLOCK_N": 64, "BLOCK_KB": 256, "DENORM": 1, "KSPLIT": 1, "MMA": 2},
        ),
        (  # TILE 11 / 12: the up launch on the tensor cores, the group scales folded into the decoded weights
            "mxfp4_moe.up_tile_fold",
            mxfp4_moe.moe_up_tile_kernel,
            up_tile,
            {"TOPK": 6, "BLOCK_N": 32, "BLOCK_KB": 64, "DENORM": 1, "FOLD": 2},
        ),
        (
            "mxfp4_moe.up_tile_fold_triton",
            mxfp4_moe.moe_up_tile_kernel,
            up_tile,
            {"TOPK": 6, "BLOCK_N": 32, "BLOCK_KB": 64, "DENORM": 1, "FOLD": 1},
        ),
        (  # TILE 13's down launch: the same, h as bf16 hi + lo
            "mxfp4_moe.down_tile_fold",
            mxfp4_moe.moe_down_tile_kernel,
            down_tile,
            {"TOPK": 6, "BLOCK_N": 64, "BLOCK_KB": 64, "DENORM": 1, "KSPLIT": 1, "FOLD": 2},
        ),
        (  # TILE 14: the up launch storing h per word of w2 and times 2^63
            "mxfp4_moe.up_tile_asm_hwords",
            mxfp4_moe.moe_up_tile_kernel,
            {**up_tile, "w13_ptr": "*i32"},
            {"TOPK": 6, "BLOCK_N": 16, "BLOCK_KB": 512, "DENORM": 1, "ASM": 1, "HWORDS": 1},
        ),
        (  # TILE 14's down launch: the PTX word decoder, a word's 8 activations one vector load
            "mxfp4_moe.down_tile_asm_hwords",
            mxfp4_moe.moe_down_tile_kernel,
            {**down_tile, "w2_ptr": "*i32"},
            {"TOPK": 6, "BLOCK_N": 64, "BLOCK_KB": 128, "DENORM": 1, "KSPLIT": 1, "ASM": 1, "HWORDS": 1},
        ),
        (  # TILE 14 with MASKLESS (the default since session 34): the same two launches, no load masks
            "mxfp4_moe.up_tile_asm_hwords_even",
            mxfp4_moe.moe_up_tile_kernel,
            {**up_tile, "w13_ptr": "*i32"},
            {"TOPK": 6, "BLOCK_N": 16, "BLOCK_KB": 512, "DENORM": 1, "ASM": 1, "HWORDS": 1, "EVEN": 1},
        ),
        (  # the same with SERIAL: the last program of a (token, row block) sums the slots (no sum launch)
            "mxfp4_moe.down_tile_asm_hwords_even_serial",
            mxfp4_moe.moe_down_tile_kernel,
            {**down_tile, "w2_ptr": "*i32"},
            down_serial,
        ),
        (  # the word loops' loads staged through shared memory by Triton's pipeliner (STAGES, cp.async)
            "mxfp4_moe.up_tile_asm_hwords_even_staged",
            mxfp4_moe.moe_up_tile_kernel,
            {**up_tile, "w13_ptr": "*i32"},
            {"TOPK": 6, "BLOCK_N": 16, "BLOCK_KB": 512, "DENORM": 1, "ASM": 1, "HWORDS": 1, "EVEN": 1, "STAGES": 3},
        ),
        (  # the default's up launch prefetching its experts' down weights into L2 (evict_last), its loads evict_first
            "mxfp4_moe.up_tile_asm_hwords_even_staged_l2",
            mxfp4_moe.moe_up_tile_kernel,
            {**up_tile, "w13_ptr": "*i32"},
            {
                "TOPK": 6,
                "BLOCK_N": 16,
                "BLOCK_KB": 512,
                "DENORM": 1,
                "ASM": 1,
                "HWORDS": 1,
                "EVEN": 1,
                "STAGES": 3,
                "L2": 1,
                "L2_SHARE": 8,
                "L2_AT": 0,
                "EVICT": 1,
            },
        ),  # fmt: skip
        (  # the up launch on the tensor cores through hand-placed mma.sync (Gluon; config indices 23-25)
            "mxfp4_moe.up_mma",
            mxfp4_moe.moe_up_mma_kernel,
            {k: v for k, v in up_tile.items() if k not in ("H", "w2b_ptr", "s2b_ptr", "w2_bytes", "s2_bytes")}
            | {"w13_ptr": "*i32"},
            {"H": 5120, "XS": 32, "TOPK": 6, "FUSED": 1, "PF": 1, "S": 4, "ST": 1},
        ),
        (  # the same with its words staged through shared memory by cp.async (config index 29)
            "mxfp4_moe.up_mma_staged",
            mxfp4_moe.moe_up_mma_kernel,
            {k: v for k, v in up_tile.items() if k not in ("H", "w2b_ptr", "s2b_ptr", "w2_bytes", "s2_bytes")}
            | {"w13_ptr": "*i32"},
            {"H": 5120, "XS": 32, "TOPK": 6, "FUSED": 1, "PF": 0, "S": 2, "ST": 4},
        ),
        (  # the down launch the same way (config indices 26-28): h split into bf16 hi + lo, slot partials
            "mxfp4_moe.down_mma",
            mxfp4_moe.moe_down_mma_kernel,
            down_mma,
            {"INTER": 2304, "XS": 16, "TOPK": 6, "FUSED": 1, "S": 1, "HB": 0, "PF": 0, "SERIAL": 0, "NSLOT": 0},
        ),
        (  # h in bf16 (index 26: 3), its next loads first, the serial slot sum over a slot group's 6 partials
            "mxfp4_moe.down_mma_bf16_serial",
            mxfp4_moe.moe_down_mma_kernel,
            down_mma,
            {"INTER": 2304, "XS": 16, "TOPK": 3, "FUSED": 1, "S": 1, "HB": 1, "PF": 1, "SERIAL": 1, "NSLOT": 6},
        ),
        (  # h and the weights in fp16 (index 26: 5)
            "mxfp4_moe.down_mma_f16_serial",
            mxfp4_moe.moe_down_mma_kernel,
            down_mma,
            {"INTER": 2304, "XS": 16, "TOPK": 3, "FUSED": 1, "S": 1, "HB": 2, "PF": 1, "SERIAL": 1, "NSLOT": 6},
        ),
        (
            "mxfp4_moe.down_tile_asm_hwords_even_staged",
            mxfp4_moe.moe_down_tile_kernel,
            {**down_tile, "w2_ptr": "*i32"},
            {**down_serial, "STAGES": 3},
        ),
        (
            "mxfp4_moe.down_tile_asm_hwords_even",
            mxfp4_moe.moe_down_tile_kernel,
            {**down_tile, "w2_ptr": "*i32"},
            {"TOPK": 6, "BLOCK_N": 64, "BLOCK_KB": 128, "DENORM": 1, "KSPLIT": 1, "ASM": 1, "HWORDS": 1, "EVEN": 1},
        ),
        (  # run 10's variant: split-K of the down launch (KSPLIT 3) and the sign-extended byte decode (TILE 4)
            "mxfp4_moe.down_tile_splitk",
            mxfp4_moe.moe_down_tile_kernel,
            down_tile,
            {"TOPK": 6, "BLOCK_N": 32, "BLOCK_KB": 128, "DENORM": 2, "KSPLIT": 3},
        ),
        (
            "mxfp4_moe.down_sum_tile",
            mxfp4_moe.moe_down_sum_tile_kernel,
            {
                "h_ptr": "*fp32",
                "sel_ptr": "*i32",
                "w2_ptr": "*u8",
                "s2_ptr": "*u8",
                "y_ptr": "*bf16",
                "H": _I32,
                "INTER": _I32,
                **i32(("stride_we", "stride_wr", "stride_se", "stride_sr"), _I32),
            },  # fmt: skip
            {"TOPK": 6, "BLOCK_N": 16, "BLOCK_KB": mxfp4_moe.TILE_CONFIG[6], "DENORM": 1},
        ),
        (
            "engram_gather",
            engram_gather.engram_gather_kernel,
            {"t_ptr": "*u8", "s_ptr": "*u8", "ids_ptr": "*i64", "y_ptr": "*bf16", "n": _I32},
            {"D": 256, "BLOCK_R": engram_gather.BLOCK_R},
        ),
        (
            "dequant.fp8",
            dequant.fp8_dequant_kernel,
            dequant_fp8,
            {"BM": 32, "BN": 32, "BLOCK_R": dequant.FP8_TILE[0], "BLOCK_C": dequant.FP8_TILE[1]},
        ),
        (  # the Engram tables' rows: one E8M0 code per row per 32 columns
            "dequant.fp8_rows",
            dequant.fp8_dequant_kernel,
            dequant_fp8,
            {"BM": 1, "BN": 32, "BLOCK_R": dequant.FP8_TILE[0], "BLOCK_C": dequant.FP8_TILE[1]},
        ),
        (
            "dequant.mxfp4",
            dequant.mxfp4_dequant_kernel,
            {"p_ptr": "*u8", "s_ptr": "*u8", "y_ptr": "*fp32", **i32(("rows", "half", "s_cols"), _I32)},
            {"GROUP": 32, "BLOCK_R": dequant.MXFP4_TILE[0], "BLOCK_H": dequant.MXFP4_TILE[1]},
        ),
        (
            "sinkhorn",
            sinkhorn.sinkhorn_kernel,
            {
                "mix_ptr": "*fp32",
                "scale_ptr": "*fp32",
                "base_ptr": "*fp32",
                "pre_ptr": "*fp32",
                "post_ptr": "*fp32",
                "comb_ptr": "*fp32",
                "eps": "fp32",
            },  # fmt: skip
            {"HC": 4, "ITERS": 20},
        ),
    ]


def _compile(fn: Any, signature: dict[str, str], constexprs: dict[str, Any], fp_fusion: bool) -> Any:
    import triton  # lazy: optional dependency
    from triton.backends.compiler import GPUTarget  # lazy: optional dependency
    from triton.compiler import ASTSource  # lazy: optional dependency

    names = list(fn.arg_names)
    sig = {n: signature.get(n, "constexpr") for n in names}
    consts = {(names.index(k),): v for k, v in constexprs.items()}
    # what Triton's launcher specializes for DSV4.1's shapes: every pointer, and every int argument, a multiple of 16
    # (so the PTX holds the vectorized loads and the cp.async stages of the real launch)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, t in signature.items() if t[0] == "*" or t == "i32"}
    if getattr(fn, "is_gluon", lambda: False)():  # a Gluon kernel (layouts by hand) compiles from its own source
        from triton.experimental.gluon._runtime import GluonASTSource  # lazy: optional dependency

        src = GluonASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    else:
        src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 80, 32), options={"enable_fp_fusion": fp_fusion})


def check_ptx(ptx: str) -> list[str]:
    """The problems of one PTX text for sm_80 (empty when valid)."""
    problems = []
    target = re.search(r"^\s*\.target\s+(\S+)", ptx, re.M)
    if not target or target.group(1).rstrip(",") != "sm_80":
        problems.append(f".target is {target.group(1) if target else 'missing'}, not sm_80")
    for pat, why in FORBIDDEN:
        hits = re.findall(pat, ptx)
        if hits:
            problems.append(f"{len(hits)} x {hits[0]} ({why})")
    return problems


def run(kernels: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per kernel and FMA-contraction variant: compiled?, PTX size, problems. `kernels`: the kernel
    modules by name, handed in by the application (a bench imports no backend)."""
    out = []
    for name, fn, sig, consts in _specs(kernels):
        for fusion in (True, False):
            row: dict[str, Any] = {"kernel": name, "enable_fp_fusion": fusion}
            # the PTX decoder's FMA chain is written out: without fusion the launcher picks its mul + add (ASM 2)
            cs = {**consts, "ASM": 1 if fusion else 2} if consts.get("ASM") else consts
            cs = {**cs, "FUSED": int(fusion)} if "FUSED" in cs else cs  # the MMA launches' written-out FMA
            try:
                ck = _compile(fn, sig, cs, fusion)
            except Exception as e:  # a compile error is the result being recorded (e.g. fp8e4nv refused)
                row.update(compiled=False, problems=[f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"])
            else:
                ptx = ck.asm["ptx"]
                row.update(
                    compiled=True,
                    ptx_bytes=len(ptx),
                    cubin_bytes=len(ck.asm.get("cubin", b"")),
                    fma_count=len(re.findall(r"\bfma\.rn\.f32\b", ptx)),
                    problems=check_ptx(ptx),
                )
            row["valid"] = bool(row["compiled"]) and not row["problems"]
            out.append(row)
    return out
