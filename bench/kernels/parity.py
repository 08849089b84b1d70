"""The parity harness: each kernel (or a user's `--impl` with the same signature) against its fp32
reference on synthetic weights in the real encodings, at M = 1, 2, 4, 8, 16; thresholds are data
(data/parity.json, citing the seed).

A check passes only on what it observed: the output must have the reference's shape, be finite,
and its largest per-token relative error must not exceed the threshold.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

from recipekit.bench.kernels import reference, synth

KERNELS = ("fp8_gemm", "mxfp4_moe", "engram_gather", "sinkhorn")


@dataclass(frozen=True)
class ParityResult:
    kernel: str
    m: int
    rel_error: float  # largest per-token relative error (inf when not finite or the shape differs)
    threshold: float
    passed: bool
    detail: str = ""

    def line(self) -> str:
        verdict = "PARITY PASS" if self.passed else "PARITY FAIL"
        extra = f" ({self.detail})" if self.detail else ""
        return f"{verdict}  {self.kernel:<14} M={self.m:<3} rel.error {self.rel_error:.3e} (max {self.threshold:.1e}){extra}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rel_error"] = None if math.isinf(self.rel_error) or math.isnan(self.rel_error) else self.rel_error
        return d


def thresholds() -> dict[str, Any]:
    """data/parity.json: per kernel max_rel_error (with why), the Ms, the seed it cites."""
    text = resources.files("recipekit.bench.kernels").joinpath("data/parity.json").read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def _per_token(out: Any, m: int) -> Any:
    """A kernel's output(s) as fp32 [M, -1] (a tuple of outputs is concatenated per token)."""
    import torch  # lazy: pulls torch

    parts = out if isinstance(out, tuple | list) else (out,)
    return torch.cat([p.detach().cpu().float().reshape(m, -1) for p in parts], dim=1)


def compare(kernel: str, m: int, got: Any, want: Any, threshold: float) -> ParityResult:
    import torch  # lazy: pulls torch

    try:
        g = _per_token(got, m)
    except (RuntimeError, AttributeError, TypeError) as e:
        return ParityResult(kernel, m, math.inf, threshold, False, f"output not [M, ...]: {e}")
    w = _per_token(want, m)
    if g.shape != w.shape:
        return ParityResult(kernel, m, math.inf, threshold, False, f"shape {tuple(g.shape)} != {tuple(w.shape)}")
    if not bool(torch.isfinite(g).all()):
        return ParityResult(kernel, m, math.inf, threshold, False, "non-finite output")
    err = ((g.double() - w.double()).norm(dim=1) / w.double().norm(dim=1).clamp_min(1e-300)).max().item()
    return ParityResult(kernel, m, err, threshold, err <= threshold)


def run(
    impls: dict[str, Callable[..., Any]], device: str, ms: list[int] | None = None, shapes: synth.Shapes | None = None
) -> list[ParityResult]:
    """Every kernel of `impls` at every M against its reference."""
    doc = thresholds()
    shapes = shapes or synth.Shapes()
    out = []
    for name, fn in impls.items():
        limit = float(doc["kernels"][name]["max_rel_error"])
        for m in ms or doc["ms"]:
            args = synth.inputs(name, m, shapes)
            want = getattr(reference, name)(*args)
            got = fn(*synth.to_device(args, device))
            if device.startswith("cuda"):
                import torch  # lazy: pulls torch

                torch.cuda.synchronize()
            out.append(compare(name, m, got, want, limit))
    return out
