"""Plain-torch references of the sm_80 kernels, built on the oracle's own math: its decoders
(bench/oracle/decode.py, bit-identical to recipekit.checkpoint.codecs), its clamped SwiGLU
(bench/oracle/moe.py) and its Sinkhorn (bench/oracle/mhc.py). All in fp32 on the CPU; each takes
the same arguments as its kernel (recipekit.backends.cuda_sm80.kernels) and returns fp32.
"""

from __future__ import annotations

from typing import Any

from recipekit.bench.oracle import decode, mhc, moe
from recipekit.checkpoint import codecs


def _np(t: Any) -> Any:
    return t.detach().cpu().numpy()


def fp8_gemm(x: Any, w: Any, s: Any) -> Any:
    wf = decode.fp8_dequant(_np(w), _np(s), codecs.FP8_BLOCK)
    return x.detach().cpu().float() @ wf.T


def mxfp4_moe(x: Any, sel: Any, wts: Any, w13: Any, s13: Any, w2: Any, s2: Any, limit: float) -> Any:
    import torch  # lazy: pulls torch

    xf = x.detach().cpu().float()
    sel_c = sel.detach().cpu().long()
    wts_c = wts.detach().cpu().float()
    inter = w2.shape[2] * 2
    out = torch.zeros_like(xf)
    for mi in range(xf.shape[0]):
        for slot in range(sel_c.shape[1]):  # summed in slot order, as the oracle's moe()
            e = int(sel_c[mi, slot])
            w13f = decode.mxfp4_dequant(_np(w13[e]), _np(s13[e]))
            w2f = decode.mxfp4_dequant(_np(w2[e]), _np(s2[e]))
            out[mi] += moe.swiglu(xf[mi : mi + 1], w13f[:inter], w2f, w13f[inter:], limit, wts_c[mi, slot])[0]
    return out


def engram_gather(table: Any, scales: Any, ids: Any) -> Any:
    idx = ids.detach().cpu().long()
    return decode.fp8_dequant(_np(table[idx.to(table.device)]), _np(scales[idx.to(scales.device)]), codecs.ENGRAM_BLOCK)


def sinkhorn(mixes: Any, scale: Any, base: Any, iters: int, eps: float) -> tuple[Any, Any, Any]:
    import torch  # lazy: pulls torch

    m = mixes.detach().cpu().float()
    sc = scale.detach().cpu().float()
    b = base.detach().cpu().float()
    t, width = m.shape
    hc = round((1 + width) ** 0.5) - 1
    pre = torch.sigmoid(m[:, :hc] * sc[0] + b[:hc]) + eps
    post = 2 * torch.sigmoid(m[:, hc : 2 * hc] * sc[1] + b[hc : 2 * hc])
    comb = mhc.sinkhorn((m[:, 2 * hc :] * sc[2] + b[2 * hc :]).reshape(t, hc, hc), iters, eps)
    return pre, post, comb
