"""The DeepSeek-V4.1-Flash prefill forward in fp32, layer-major over a whole prompt set.

Streaming: per layer, each dense weight is read (and FP8-dequantized) once for all prompts and
dropped when the layer ends; routed experts are read one at a time and only when routed to; Engram
rows are read by id; the embedding by row; the head in vocabulary chunks with a streaming
log-sum-exp, so the full [T, vocab] logits never exist. Resident: the residual streams
[T, hc, h] of the prompts plus one layer's dense weights in fp32.

Schedule (single-pass mHC with the delayed pre, research/dsv41-format.md §5): the attention site
collapses the stream with the previous block's ffn `pre` (layer 0: one-hot), the ffn site with this
block's attention `pre`; the final norm collapses with the last ffn `pre`. DSpark (mtp.*) and vision
are out of scope: the forward is text-only and never reads them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recipekit.bench.oracle import attention as att
from recipekit.bench.oracle.engram import engram_update
from recipekit.bench.oracle.mhc import hc_mix, hc_post, hc_pre, rms_norm
from recipekit.bench.oracle.moe import moe, route, swiglu
from recipekit.bench.oracle.numerics import Numerics, fp8_act_quant
from recipekit.bench.oracle.reader import WeightReader
from recipekit.checkpoint.engram_addressing import EngramAddresser
from recipekit.errors import ExitCode, RecipekitError

HEAD_CHUNK = 8192
OUT_OF_SCOPE = [
    "DSpark drafter (mtp.*)",
    "vision tower and aligner (vision.*, aligner.*)",
    "image tokens (gate bias_vl, Engram dead tokens)",
]


@dataclass
class PromptResult:
    logprobs: list[float]  # log p(token t | tokens < t) for t = 1 .. T-1, full-vocabulary normalizer
    argmax: list[int]  # the arg-max next token at positions 0 .. T-2
    nll: float = 0.0


@dataclass
class ForwardReport:
    results: list[PromptResult]
    seconds: float
    tokens: int
    experts_used: dict[int, int] = field(default_factory=dict)


def set_cuda_fp32_flags() -> dict[str, bool | str]:
    """Full-precision fp32 on CUDA: no TF32 in matmuls or cuDNN, no reduced-precision fp16/bf16
    reductions, deterministic cuDNN. Returns the flags as set (recorded in the reference file)."""
    import torch  # lazy: pulls torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.set_float32_matmul_precision("highest")
    return backend_flags()


def backend_flags() -> dict[str, bool | str]:
    """The torch backend flags that change fp32 results, as they are now."""
    import torch  # lazy: pulls torch

    m = torch.backends.cuda.matmul
    return {
        "cuda.matmul.allow_tf32": bool(m.allow_tf32),
        "cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cuda.matmul.allow_fp16_reduced_precision_reduction": bool(m.allow_fp16_reduced_precision_reduction),
        "cuda.matmul.allow_bf16_reduced_precision_reduction": bool(m.allow_bf16_reduced_precision_reduction),
        "cudnn.deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn.benchmark": bool(torch.backends.cudnn.benchmark),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


class Oracle:
    """fp32 reference forward over a `WeightReader`, on `device` ("cpu" or "cuda")."""

    def __init__(
        self,
        reader: WeightReader,
        numerics: Numerics | None = None,
        device: str = "cpu",
        progress: Callable[[str], None] | None = None,
        dtype: str = "float32",
        stream: bool | None = None,
        decoders: Any = None,
    ):
        import torch  # lazy: pulls torch

        self.torch = torch
        self.r = reader
        self.text = reader.text
        self.g = reader.geom
        self.num = numerics or Numerics()
        self.device = torch.device(device)
        # float64: the same model computed in double, a yardstick for fp32's own rounding (not the oracle)
        if dtype not in ("float32", "float64"):
            raise ValueError(f"dtype {dtype!r} is not float32 or float64")
        self.dtype = getattr(torch, dtype)
        self.progress = progress
        if self.device.type == "cuda":
            set_cuda_fp32_flags()
        self._layer_cache: dict[str, Any] = {}
        # a layer's dense weights streamed to the device and decoded there (default on CUDA)
        self.stream = self.device.type == "cuda" if stream is None else stream
        self._streamed: set[str] = set()
        self.decoders = decoders  # the streamed weights' device decoders (bench/oracle/decoders.py), None: torch ops

    # ------------------------------------------------------------------ weights
    def w(self, name: str) -> Any:
        """A dense weight of the current layer (read once per layer, dropped by `_drop`)."""
        if self.stream and name not in self._layer_cache and name.startswith("layers."):
            prefix = ".".join(name.split(".")[:2]) + "."
            if prefix not in self._streamed:
                self._streamed.add(prefix)
                for n, t in self.r.stream_dense(prefix, self.device, decoders=self.decoders):
                    self._layer_cache[n] = self._on(t)
        if name not in self._layer_cache:
            self._layer_cache[name] = self._on(self.r.dense(name))
        return self._layer_cache[name]

    def _on(self, t: Any) -> Any:
        """A weight (fp32 from the reader, exact) on the compute device in the compute dtype."""
        return t.to(self.device, self.dtype)

    def _drop(self) -> None:
        self._layer_cache.clear()
        self._streamed.clear()

    def quant(self, x: Any) -> Any:
        return fp8_act_quant(x) if self.num.act_quant else x

    def kv_round(self, x: Any) -> Any:
        return fp8_act_quant(x) if self.num.kv_fp8 else x

    def _finite(self, t: Any, where: str) -> Any:
        """`t` unchanged when every value is finite; else error[oracle-non-finite] naming the first
        layer/component (in compute order) that produced NaN or inf: no reference is written from it."""
        if not bool(self.torch.isfinite(t).all()):
            bad = int((~self.torch.isfinite(t)).sum())
            raise RecipekitError(
                code="oracle-non-finite",
                location=str(self.r.folder),
                message=f"{where} produced {bad} non-finite value(s) (NaN/inf) of {t.numel()}",
                hint="the checkpoint's weights overflow fp32 there (check its scales and values); "
                "no reference was written",
                exit_code=ExitCode.FAILURE,
            )
        return t

    def _say(self, msg: str) -> None:
        if self.progress:
            self.progress(msg)

    # ------------------------------------------------------------------ forward
    def layer_order(self) -> list[int]:
        order = list(range(self.g.n_layers))
        swap: Any = self.num.wrong.get("swap_layers")
        if swap:
            a, b = (int(v) for v in swap)  # a 2-list from the options
            order[a], order[b] = order[b], order[a]
        return order

    def forward(self, prompts: list[list[int]]) -> ForwardReport:
        torch = self.torch
        t0 = time.perf_counter()
        eps = float(self.text["rms_norm_eps"])
        hc, iters, hc_eps = int(self.text["hc_mult"]), int(self.text["hc_sinkhorn_iters"]), float(self.text["hc_eps"])
        delay = not self.num.wrong.get("no_mhc_delay")
        use_engram = not self.num.wrong.get("no_engram")
        tmax = max(len(p) for p in prompts)
        tables = self._rope_tables(tmax)
        all_ids = np.concatenate([np.asarray(p, dtype=np.int64) for p in prompts])
        emb = self._finite(self._on(self.r.plain_rows("embed.weight", all_ids)), "the embedding (embed.weight rows)")
        xs, start = [], 0
        for p in prompts:
            xs.append(emb[start : start + len(p)][:, None, :].expand(-1, hc, -1).contiguous())
            start += len(p)
        del emb
        pre_prev = [self._one_hot(len(p), hc) for p in prompts]
        states = [att.PromptState() for _ in prompts]
        addresser = self._addresser() if self.g.engram_layers and use_engram else None
        experts_used: dict[int, int] = {}
        for pos, L in enumerate(self.layer_order()):
            self._say(f"layer {L} ({pos + 1}/{self.g.n_layers})")
            pfx = f"layers.{L}."
            if addresser is not None and L in self.g.engram_layers:
                xs = [self._finite(x, f"layer {L} engram") for x in self._engram(L, prompts, xs, addresser, eps)]
            ffn_in, f_mix = [], []
            for i, x in enumerate(xs):
                a_pre, a_post, a_comb = hc_mix(
                    x,
                    self.w(f"{pfx}hc_attn_fn"),
                    self.w(f"{pfx}hc_attn_base"),
                    self.w(f"{pfx}hc_attn_scale"),
                    iters,
                    hc_eps,
                    eps,
                )
                xin = rms_norm(hc_pre(x, pre_prev[i] if delay else a_pre), self.w(f"{pfx}attn_norm.weight"), eps)
                f = att.attention(
                    xin,
                    tables,
                    self.w,
                    self.r.has,
                    pfx,
                    self.text,
                    L,
                    states[i],
                    self.quant,
                    self.kv_round,
                    self.num.topk_ties,
                    self.num.select_f64,
                )
                self._finite(f, f"layer {L} attention")
                x = self._finite(hc_post(f, x, a_post, a_comb), f"layer {L} attention mHC (hc_attn_*)")
                f_pre, f_post, f_comb = hc_mix(
                    x,
                    self.w(f"{pfx}hc_ffn_fn"),
                    self.w(f"{pfx}hc_ffn_base"),
                    self.w(f"{pfx}hc_ffn_scale"),
                    iters,
                    hc_eps,
                    eps,
                )
                ffn_in.append(rms_norm(hc_pre(x, a_pre if delay else f_pre), self.w(f"{pfx}ffn_norm.weight"), eps))
                f_mix.append((f_post, f_comb))
                xs[i] = x
                pre_prev[i] = f_pre
            ffn_x = self._finite(torch.cat(ffn_in, dim=0), f"layer {L} ffn input (hc_ffn_* mix, ffn_norm)")
            out, used = self._ffn(pfx, ffn_x)
            self._finite(out, f"layer {L} ffn (MoE experts + shared expert)")
            experts_used[L] = len(used)
            start = 0
            for i, x in enumerate(xs):
                n = x.shape[0]
                xs[i] = self._finite(hc_post(out[start : start + n], x, *f_mix[i]), f"layer {L} ffn mHC (hc_ffn_*)")
                start += n
            self._drop()
        finals = [
            self._finite(rms_norm(hc_pre(x, pre_prev[i]), self._on(self.r.dense("norm.weight")), eps), "final norm")
            for i, x in enumerate(xs)
        ]
        results = self._head(finals, prompts)
        for k, res in enumerate(results):
            bad = next((j for j, v in enumerate(res.logprobs) if not math.isfinite(v)), None)
            if bad is not None:
                self._finite(
                    self.torch.tensor([res.logprobs[bad]]), f"the head (head.weight), prompt {k} token {bad + 1}"
                )
        return ForwardReport(results, time.perf_counter() - t0, int(sum(len(p) for p in prompts)), experts_used)

    def _one_hot(self, t: int, hc: int) -> Any:
        a = self.torch.zeros((t, hc), dtype=self.dtype, device=self.device)
        a[:, 0] = 1.0
        return a

    def _rope_tables(self, tmax: int) -> dict[str, tuple[Any, Any]]:
        rope = int(self.text["qk_rope_head_dim"])
        maxpos = int(self.text["max_position_embeddings"])
        win = att.rope_inv_freq(rope, float(self.text["rope_theta"]), None, maxpos)
        comp = att.rope_inv_freq(rope, float(self.text["compress_rope_theta"]), self.text.get("rope_scaling"), maxpos)
        pos = np.arange(tmax)
        return {
            "window": att.rope_table(win, pos, self.device, self.dtype),
            "compressed": att.rope_table(comp, pos, self.device, self.dtype),
        }

    def _addresser(self) -> Any:
        return EngramAddresser.from_checkpoint(self.r.folder)

    def _engram(self, L: int, prompts: list[list[int]], xs: list[Any], addresser: Any, eps: float) -> list[Any]:
        p = f"layers.{L}.engram."
        out = []
        for x, ids in zip(xs, prompts):
            rid = addresser.row_ids(L, np.asarray(ids, dtype=np.int64))  # [T, n_cols]
            rows = self._on(self.r.engram_rows(L, rid.reshape(-1))).reshape(len(ids), -1)
            out.append(
                engram_update(
                    x, rows, self.w(f"{p}wkv.weight"), self.w(f"{p}q_weight"), self.w(f"{p}k_weight"), eps, self.quant
                )
            )
        return out

    def _ffn(self, p: str, x: Any) -> tuple[Any, list[int]]:
        text = self.text
        limit = float(text["swiglu_limit"])
        sel, wts = route(
            x,
            self.w(f"{p}ffn.gate.weight"),
            self.w(f"{p}ffn.gate.bias"),
            int(text["num_experts_per_tok"]),
            float(text["routed_scaling_factor"]),
            bool(text.get("norm_topk_prob", True)),
            self.num.topk_ties,
            self.num.select_f64,
        )

        def expert(e: int) -> tuple[Any, Any, Any]:
            return tuple(self._on(t) for t in self.r.expert(p, e))  # (w1, w2, w3)

        routed, used = moe(x, sel, wts, expert, limit, self.quant)
        shared = swiglu(
            self.quant(x),
            self.w(f"{p}ffn.shared_experts.w1.weight"),
            self.w(f"{p}ffn.shared_experts.w2.weight"),
            self.w(f"{p}ffn.shared_experts.w3.weight"),
            limit,
        )
        return routed + shared, used

    def _head(self, finals: list[Any], prompts: list[list[int]]) -> list[PromptResult]:
        """log p(next token) with a streaming log-sum-exp over vocabulary chunks of the head.
        The logits are fp32 matmuls; the running max/sum and the target logit are float64 (cheap: [T]
        vectors), so the normaliser's own rounding does not depend on the chunking or the device."""
        torch = self.torch
        x = torch.cat(finals, dim=0)
        n = x.shape[0]
        tgt = torch.tensor(
            np.concatenate([np.append(np.asarray(p[1:], dtype=np.int64), -1) for p in prompts]), device=self.device
        )
        f64 = torch.float64
        m = torch.full((n,), -float("inf"), dtype=f64, device=self.device)
        s = torch.zeros((n,), dtype=f64, device=self.device)
        tlogit = torch.zeros((n,), dtype=f64, device=self.device)
        best = torch.full((n,), -float("inf"), device=self.device)
        arg = torch.zeros((n,), dtype=torch.long, device=self.device)
        vocab = self.g.vocab
        for v0 in range(0, vocab, HEAD_CHUNK):
            v1 = min(vocab, v0 + HEAD_CHUNK)
            logits = x @ self._on(self.r.plain_range("head.weight", v0, v1)).T
            cm, ci = logits.max(-1)
            better = cm > best
            best = torch.where(better, cm, best)
            arg = torch.where(better, ci + v0, arg)
            m2 = torch.maximum(m, cm.to(f64))
            s = s * torch.exp(m - m2) + torch.exp(logits.to(f64) - m2[:, None]).sum(-1)
            m = m2
            inside = (tgt >= v0) & (tgt < v1)
            if inside.any():
                idx = (tgt - v0).clamp(0, v1 - v0 - 1)
                tlogit = torch.where(inside, logits.gather(1, idx[:, None])[:, 0].to(f64), tlogit)
        lp = (tlogit - (m + torch.log(s))).cpu()
        arg_c = arg.cpu()
        out, start = [], 0
        for p in prompts:
            k = len(p)
            lps = lp[start : start + k - 1].tolist()
            out.append(PromptResult(lps, arg_c[start : start + k - 1].tolist(), -float(sum(lps))))
            start += k
        return out
