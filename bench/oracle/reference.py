"""The one strict model of a reference file (`recipe oracle run | capture` write it; the perplexity
gate and `oracle paired` read it): finite log-probs <= 0, one per token after the first, declared
counts equal to the real ones, the prompt-set hash over its own ids, and summary figures that
agree with the values they were computed from. Writing goes through the same model, so a file
holding NaN or a count that lies is never written.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from recipekit.errors import ExitCode, RecipekitError

REFERENCE_FORMAT = "recipekit-oracle-reference/1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class PromptResult(_Strict):
    ids: list[int] = Field(min_length=2)
    logprobs: list[float]
    argmax: Optional[list[Optional[int]]] = None
    nll: float

    @model_validator(mode="after")
    def _consistent(self) -> PromptResult:
        if any(t < 0 for t in self.ids):
            raise ValueError("token ids are >= 0")
        if len(self.logprobs) != len(self.ids) - 1:
            raise ValueError(
                f"{len(self.logprobs)} log-probs for {len(self.ids)} tokens (one per token after the first)"
            )
        bad = next((i for i, v in enumerate(self.logprobs) if v > 0), None)
        if bad is not None:
            raise ValueError(f"log-prob {bad} is {self.logprobs[bad]} > 0 (a probability above 1)")
        if not math.isclose(self.nll, -sum(self.logprobs), rel_tol=1e-9, abs_tol=1e-9):
            raise ValueError(f"nll {self.nll} is not minus the sum of its log-probs ({-sum(self.logprobs)})")
        return self


class PromptSet(_Strict):
    source: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    prompts: int
    tokens: int


class Reference(_Strict):
    format: Literal["recipekit-oracle-reference/1"]
    oracle: str
    prompt_set: PromptSet
    scored_tokens: int
    nll_mean: float
    ppl: float
    results: list[PromptResult] = Field(min_length=1)
    # provenance, recorded as written (run: the checkpoint and numerics; capture: the server)
    model: Optional[str] = None
    out_of_scope: Optional[list[str]] = None
    checkpoint: Optional[dict[str, Any]] = None
    numerics: Optional[dict[str, Any]] = None
    torch: Optional[str] = None
    device: Optional[str] = None
    compute_dtype: Optional[str] = None
    decoders: Optional[str] = None
    backend_flags: Optional[dict[str, Any]] = None
    threads: Optional[int] = None
    measured: Optional[dict[str, Any]] = None
    server: Optional[dict[str, Any]] = None
    tokenizer: Optional[dict[str, Any]] = None
    request: Optional[dict[str, Any]] = None

    @model_validator(mode="after")
    def _counts(self) -> Reference:
        ps = self.prompt_set
        real_tokens = sum(len(r.ids) for r in self.results)
        scored = sum(len(r.logprobs) for r in self.results)
        if ps.prompts != len(self.results):
            raise ValueError(f"prompt_set.prompts says {ps.prompts}, the file holds {len(self.results)} prompts")
        if ps.tokens != real_tokens:
            raise ValueError(f"prompt_set.tokens says {ps.tokens}, the prompts hold {real_tokens} tokens")
        if self.scored_tokens != scored:
            raise ValueError(f"scored_tokens says {self.scored_tokens}, the file holds {scored} log-probs")
        nll = -sum(v for r in self.results for v in r.logprobs) / scored
        if not math.isclose(self.nll_mean, nll, rel_tol=1e-9, abs_tol=1e-12):
            raise ValueError(f"nll_mean says {self.nll_mean}, its log-probs give {nll}")
        if not math.isclose(self.ppl, math.exp(nll), rel_tol=1e-9):
            raise ValueError(f"ppl says {self.ppl}, exp(nll_mean) is {math.exp(nll)}")
        return self


def _where(loc: tuple) -> str:
    out = "$"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def prompt_set_sha256(prompts: list[list[int]]) -> str:
    """The hash that ties a reference to its token ids (compact JSON of the id lists)."""
    return hashlib.sha256(json.dumps(prompts, separators=(",", ":")).encode()).hexdigest()


def check(doc: Any, where: str) -> Reference:
    """The reference as the strict model reads it, or error[oracle-reference-invalid] naming the
    first problem's JSON path; a prompt-set hash that does not match its ids is drift (exit 4)."""
    try:
        ref = Reference.model_validate(doc)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        raise RecipekitError(
            code="oracle-reference-invalid",
            location=f"{where} {_where(tuple(err['loc']))}",
            message=err["msg"].removeprefix("Value error, ") + f" (got {str(err.get('input'))[:60]})",
            hint="make it again with `recipe oracle run` or `recipe oracle capture`",
            exit_code=ExitCode.INVALID_INPUT,
        ) from None
    if prompt_set_sha256([r.ids for r in ref.results]) != ref.prompt_set.sha256:
        raise RecipekitError(
            code="oracle-reference-drift",
            location=where,
            message="the prompt ids do not match the recorded prompt-set sha256",
            hint="the file was edited or truncated; make it again",
            exit_code=ExitCode.DRIFT,
        )
    return ref


def summary_figures(results: list[tuple[list[int], list[float]]]) -> dict[str, Any]:
    """scored_tokens, nll_mean and ppl of per-prompt log-probs, refusing what cannot be a reference:
    no scored token, a non-finite value or a perplexity beyond float range."""
    lps = [v for _, lp in results for v in lp]
    if not lps:
        raise RecipekitError(
            code="oracle-no-tokens",
            message="no token was scored (every prompt needs 2 tokens or more)",
            hint="score a longer text or pass --tokens 2 or more",
        )
    bad = next((i for i, v in enumerate(lps) if not (math.isfinite(v) and v <= 0)), None)
    if bad is not None:
        raise RecipekitError(
            code="oracle-non-finite",
            message=f"log-prob {bad} is {lps[bad]}, not a finite number <= 0",
            hint="the model or server produced it; no reference was written",
            exit_code=ExitCode.FAILURE,
        )
    nll = -sum(lps) / len(lps)
    if nll > 700:  # exp(709.8) is the largest float64
        raise RecipekitError(
            code="oracle-ppl-overflow",
            message=f"mean NLL {nll:.1f} nats: the perplexity exp({nll:.0f}) is beyond float range",
            hint="log-probs this low mean the scorer is broken (or scored another text); no reference was written",
            exit_code=ExitCode.FAILURE,
        )
    return {"scored_tokens": len(lps), "nll_mean": nll, "ppl": math.exp(nll)}
