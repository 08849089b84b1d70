"""Instruction mix of the FP8 GEMV's inner loop as PTX for sm_80, no GPU needed (issue 26's look at why
the path levels off): `python -m recipekit.cli.kernels_ptx_count BN,BK,WARPS,SPLIT,DECODER,PREFETCH,ACC
[BLOCK_M]` prints the loop's PTX instruction count, per weight byte, and the most frequent opcodes."""

from __future__ import annotations

import collections
import re
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from recipekit.backends.cuda_sm80.kernels import fp8_gemm

_ALIGNED = ("x_ptr", "w_ptr", "s_ptr", "y_ptr", "stride_xm", "stride_wn", "stride_sn", "stride_ym", "K", "K_PER_SPLIT")


def loop_mix(config: tuple[int, ...], block_m: int = 1) -> tuple[int, float, list[tuple[str, int]]]:
    fn = fp8_gemm.fp8_gemv_kernel
    names = fn.arg_names
    bn, bk, warps, split, dec, pf, acc = config
    sig = {"x_ptr": "*bf16", "w_ptr": "*u8", "s_ptr": "*u8", "y_ptr": "*bf16"}
    sig.update(dict.fromkeys(("M", "N", "K", "stride_xm", "stride_wn", "stride_sn", "stride_ym", "K_PER_SPLIT"), "i32"))
    cons = {
        "BLOCK_M": block_m,
        "BLOCK_N": bn,
        "BLOCK_K": bk,
        "SPLIT": split,
        "SEXT": dec,
        "PREFETCH": pf,
        "ACC_TILE": acc,
    }
    sig.update(dict.fromkeys(cons, "constexpr"))
    src = ASTSource(
        fn=fn,
        signature=sig,
        constexprs={(names.index(k),): v for k, v in cons.items()},
        attrs={(names.index(k),): [["tt.divisibility", 16]] for k in _ALIGNED},
    )
    lines = triton.compile(src, target=GPUTarget("cuda", 80, 32), options={"num_warps": warps}).asm["ptx"].splitlines()
    start = next(i for i, line in enumerate(lines) if "Inner Loop Header" in line)
    end = next(i for i in range(start, len(lines)) if re.search(r"@%p\d+\s+bra\s+\$L__BB0_\d+;", lines[i]))
    ops: collections.Counter[str] = collections.Counter()
    for line in lines[start + 1 : end + 1]:
        text = re.sub(r"^@!?%p\d+\s+", "", line.strip())
        if text and not text.startswith(("//", ".", "$", "{", "}")):
            ops[".".join(text.split()[0].split(".")[:2])] += 1
    total = sum(ops.values())
    return total, total / (bn * bk / (warps * 32)), ops.most_common(12)


if __name__ == "__main__":
    cfg = tuple(int(v) for v in sys.argv[1].split(","))
    total, per_byte, common = loop_mix(cfg, int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    print(f"{sys.argv[1]}: {total} PTX instructions in the loop, {per_byte:.2f} per weight byte; {common}")
