"""The parity harness: each kernel (or a user's `--impl` with the same signature) against its fp32
reference on synthetic weights in the real encodings, at M = 1, 2, 4, 8, 16; thresholds are data
(data/parity.json, citing the seed).

A check passes only on what it observed: the output must have the reference's shape, be finite,
and its largest relative error over each token's groups of 32 outputs must not exceed the threshold.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

from recipekit.bench.kernels import reference, synth
from recipekit.errors import ExitCode, RecipekitError

KERNELS = ("fp8_gemm", "mxfp4_moe", "engram_gather", "sinkhorn")


@dataclass(frozen=True)
class ParityResult:
    kernel: str
    m: int
    rel_error: float  # largest relative error over 32-output groups (inf: not finite, or the shape differs)
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


GROUP = 32  # outputs per group: one FP8 block's rows, one Engram scale's columns


def _group_rel_error(g: Any, w: Any) -> float:
    """The largest ||g - w|| / ||w|| over every token's consecutive groups of GROUP outputs (the last
    group may be shorter): a wrong scale on one block cannot hide in a long row's norm."""
    import torch  # lazy: pulls torch

    m, n = w.shape
    pad = (-n) % GROUP
    d = torch.nn.functional.pad(g - w, (0, pad)).reshape(m, -1, GROUP).norm(dim=2)
    r = torch.nn.functional.pad(w, (0, pad)).reshape(m, -1, GROUP).norm(dim=2)
    return float((d / r.clamp_min(1e-300)).max().item())


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
    err = _group_rel_error(g.double(), w.double())
    return ParityResult(kernel, m, err, threshold, err <= threshold)


def run(
    impls: Mapping[str, Callable[..., Any]],
    device: str,
    ms: list[int] | None = None,
    shapes: synth.Shapes | None = None,
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


def resolve(
    kernels: list[str], impl: str | None, device: str, builtin: Callable[[str], Callable[..., Any]]
) -> dict[str, Callable[..., Any]]:
    """The implementations to check: `impl` ("module:function") for the one kernel named, else the
    built-in Triton kernels (which need torch, triton and a CUDA device), each got from `builtin(name)`:
    the application hands that in (the kernels are the sm_80 backend's; a bench imports no backend)."""
    unknown = [k for k in kernels if k not in KERNELS]
    if unknown:
        raise RecipekitError(
            code="kernels-bad-option",
            message=f"unknown kernel(s) {unknown}",
            hint=f"--kernel one of {', '.join(KERNELS)}",
            exit_code=ExitCode.INVALID_INPUT,
        )
    try:
        import torch  # lazy: optional dependency
    except ImportError:
        raise RecipekitError(
            code="kernels-needs-torch", message="torch is not installed", exit_code=ExitCode.FAILURE
        ) from None
    if impl is not None:
        if len(kernels) != 1:
            raise RecipekitError(
                code="kernels-bad-option",
                message="--impl checks one kernel: name it with --kernel",
                hint=f"--kernel one of {', '.join(KERNELS)} --impl module:function",
                exit_code=ExitCode.INVALID_INPUT,
            )
        return {kernels[0]: load_impl(impl)}
    if not device.startswith("cuda") or not torch.cuda.is_available():
        raise RecipekitError(
            code="kernels-no-gpu",
            message=f"the Triton kernels need a CUDA device (device {device!r}, cuda available: {torch.cuda.is_available()})",
            exit_code=ExitCode.HOST_CHECK_FAILED,
        )
    need_triton()
    return {name: builtin(name) for name in (kernels or KERNELS)}


def need_triton() -> None:
    try:
        import triton  # noqa: F401  # lazy: optional dependency
    except ImportError:
        raise RecipekitError(
            code="kernels-needs-triton", message="triton is not installed", exit_code=ExitCode.FAILURE
        ) from None


def load_impl(spec: str) -> Callable[..., Any]:
    """The callable of "module:function" (imported as given; run from the folder that holds it)."""
    mod, sep, fn = spec.partition(":")
    if not sep or not mod or not fn:
        raise RecipekitError(
            code="kernels-bad-impl", message=f"{spec!r} is not module:function", exit_code=ExitCode.INVALID_INPUT
        )
    try:
        obj = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise RecipekitError(
            code="kernels-bad-impl", message=f"cannot load {spec!r}: {e}", exit_code=ExitCode.INVALID_INPUT
        ) from None
    if not callable(obj):
        raise RecipekitError(
            code="kernels-bad-impl", message=f"{spec!r} is not callable", exit_code=ExitCode.INVALID_INPUT
        )
    return obj
