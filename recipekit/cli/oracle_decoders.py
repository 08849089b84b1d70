"""Which decoders the oracle's streaming reader runs on the device: the application's choice.

A bench imports no backend (the floors), so the oracle takes its device decoders as an object
(bench/oracle/decoders.py). Here, one floor up, `pick` hands it the sm_80 Triton dequant kernels
(backends/cuda_sm80/kernels/dequant.py) whenever the device is CUDA and Triton imports, and the torch ops
otherwise (and on the CPU). `verified` decodes every e4m3 byte, e2m1 byte and E8M0 code with the chosen
decoders on the device and refuses them (oracle-decoder-mismatch) on any bit that differs from the
numpy codecs: the oracle never reports from a decoder it did not check.
"""

from __future__ import annotations

from typing import Any

from recipekit.errors import ExitCode, RecipekitError

SM80_SPEC = "recipekit.cli.oracle_decoders:sm80_decoders"
CHOICES = ("auto", "sm80", "torch")


def sm80_decoders() -> Any:
    """The sm_80 Triton kernels as the oracle's Decoders (imports triton: ImportError where it is absent)."""
    from recipekit.backends.cuda_sm80.kernels import dequant  # lazy: imports triton and torch
    from recipekit.bench.oracle.decoders import Decoders  # lazy: the oracle's package pulls numpy

    return Decoders("sm80-triton", dequant.fp8_dequant, dequant.mxfp4_dequant, SM80_SPEC)


def pick(device: str, choice: str = "auto") -> tuple[Any, str]:
    """(decoders, why) for `device`: "auto" is sm80 on CUDA when Triton imports, else the torch ops;
    "torch" forces the torch ops; "sm80" asks for the kernels and fails where they cannot load."""
    from recipekit.bench.oracle.decoders import TORCH  # lazy: the oracle's package pulls numpy

    if choice not in CHOICES:
        raise RecipekitError(
            code="oracle-bad-option", message=f"decoders {choice!r} is not one of {', '.join(CHOICES)}",
            hint="--decoders auto",
        )  # fmt: skip
    if choice == "torch":
        return TORCH, "asked for (--decoders torch)"
    if not str(device).startswith("cuda"):
        if choice == "sm80":
            raise RecipekitError(
                code="oracle-bad-option", message=f"--decoders sm80 needs a CUDA device, not {device!r}",
                hint="--device cuda, or --decoders auto",
            )  # fmt: skip
        return TORCH, f"device {device}: the Triton kernels run on CUDA only"
    try:
        return sm80_decoders(), "CUDA device and Triton importable"
    except ImportError as e:
        if choice == "sm80":
            raise RecipekitError(
                code="oracle-decoders-unavailable", exit_code=ExitCode.NOT_FOUND,
                message=f"the sm_80 Triton decoders do not load: {e}", hint="pip install triton, or --decoders auto",
            ) from None  # fmt: skip
        return TORCH, f"Triton does not import ({e})"


def verified(decoders: Any, device: str) -> Any:
    """`decoders` when they give the codecs' bits for every byte and code on `device`; else the error."""
    from recipekit.bench.oracle.decoders import problems  # lazy: pulls torch

    found = problems(decoders, device)
    if found:
        raise RecipekitError(
            code="oracle-decoder-mismatch",
            exit_code=ExitCode.FAILURE,
            message=f"the {decoders.name} decoders differ from the codecs on {device}: " + "; ".join(found),
            hint="run with --decoders torch, and report the difference",
        )
    return decoders


def for_device(device: str, choice: str = "auto") -> tuple[Any, str]:
    """pick, then verified: what `recipe oracle run` and `recipe oracle measure` hand the oracle."""
    dec, why = pick(device, choice)
    return verified(dec, device), why
