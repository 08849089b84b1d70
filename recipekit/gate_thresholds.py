"""The gates' ids and one typed threshold model per gate, validated when a recipe loads.

`GateId` is the one list of gate ids (the schema's `Gate.id`, the gate runner and `--only` read
it). `MODELS` maps each id to a pydantic model (extra="forbid", finite numbers only) holding the
thresholds that gate reads, with their defaults; the seeds' alternative names (`concurrent`,
`repeats`, `depth`) are mapped to the gate's own name, and giving both is refused. A key no gate
reads is refused at load time (`recipe lint`, `render`), not after a model is served: a threshold
that is silently ignored would be a false PASS.
"""

from __future__ import annotations

import typing
from typing import Any, ClassVar, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_core.core_schema import ErrorType

from recipekit.errors import did_you_mean

# the gates `recipe gate` runs, in the order it runs them
BenchGateId = Literal["smoke", "perplexity", "decode-prefill", "needle", "isolation", "structured", "soak", "lm-eval"]
# gates whose figures other tools measure (install checks, conversion, kernel tests); recorded, not run
ToolGateId = Literal["kernel", "install", "conversion"]
GateId = Literal[BenchGateId, ToolGateId]
BENCH_GATE_IDS: tuple[str, ...] = typing.get_args(BenchGateId)
TOOL_GATE_IDS: tuple[str, ...] = typing.get_args(ToolGateId)
GATE_IDS: tuple[str, ...] = BENCH_GATE_IDS + TOOL_GATE_IDS

Seed = Union[int, str]


class Thresholds(BaseModel):
    """Base: unknown keys refused (with a did-you-mean), NaN/inf refused, ints not taken from bools."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    ALIASES: ClassVar[dict[str, str]] = {}  # the seeds' name -> this gate's name

    @model_validator(mode="before")
    @classmethod
    def _map_aliases(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for alias, name in cls.ALIASES.items():
            if alias in out:
                if name in out:
                    raise PydanticCustomError(
                        "threshold_alias_twice",
                        "'{alias}' and '{name}' are the same threshold; give one",
                        {"alias": alias, "name": name},
                    )
                out[name] = out.pop(alias)
        return out

    @classmethod
    def known_keys(cls) -> list[str]:
        return sorted(set(cls.model_fields) | set(cls.ALIASES))


def _int(default: Optional[int], ge: int = 0, le: Optional[int] = None, doc: str = "") -> Any:
    return Field(default, ge=ge, le=le, description=doc)


def _num(
    default: Optional[float],
    ge: Optional[float] = None,
    le: Optional[float] = None,
    gt: Optional[float] = None,
    doc: str = "",
) -> Any:
    return Field(default, ge=ge, le=le, gt=gt, description=doc)


class PerplexityThresholds(Thresholds):
    tokens: int = _int(1536, ge=2, doc="tokens of the pinned text scored (the reference must hold as many)")
    max_rel_diff: float = _num(0.01, ge=0, doc="largest |ppl_server / ppl_oracle - 1|")
    max_missing: int = _int(0, doc="scored tokens the server may leave without a finite log-prob <= 0")
    oracle_ppl: Optional[float] = _num(None, gt=0, doc="a published oracle perplexity instead of running the oracle")
    max_nll_increase_pct: Optional[float] = _num(None, doc="largest paired NLL increase over the oracle, in %")


class DecodePrefillThresholds(Thresholds):
    ALIASES = {"concurrent": "prompts"}
    prompts: int = _int(4, ge=1, doc="concurrent prompts")
    tokens: int = _int(64, ge=1, doc="forced tokens decoded per prompt (every one must come back)")
    max_mean_abs_dlogprob: float = _num(0.05, ge=0)
    max_off_argmax_frac: float = _num(0.05, ge=0, le=1)
    max_gap_nats: float = _num(2.0, ge=0)


class NeedleThresholds(Thresholds):
    ALIASES = {"depth": "depths"}
    prompt_tokens: Union[int, list[int]] = Field([2000], description="prompt lengths in tokens")
    depths: list[float] = Field([0.5], description="needle depths, 0..1 (a single depth is one)")
    min_hit_frac: float = _num(1.0, ge=0, le=1)
    max_tokens: int = _int(24, ge=1)
    min_pass: Optional[int] = _int(None)
    total: Optional[int] = _int(None, ge=1)
    seed: Optional[Seed] = None

    @field_validator("depths", mode="before")
    @classmethod
    def _one_depth(cls, v: Any) -> Any:
        return v if isinstance(v, list) else [v]

    @field_validator("depths")
    @classmethod
    def _depth_range(cls, v: list[float]) -> list[float]:
        if not v or any(not 0 <= d <= 1 for d in v):
            raise ValueError("depths are fractions of the prompt, 0..1, at least one")
        return v

    @field_validator("prompt_tokens")
    @classmethod
    def _lengths(cls, v: Union[int, list[int]]) -> Union[int, list[int]]:
        vs = v if isinstance(v, list) else [v]
        if not vs or any(n < 1 for n in vs):
            raise ValueError("prompt_tokens are positive token counts, at least one")
        return v


class IsolationThresholds(Thresholds):
    ALIASES = {"repeats": "rounds"}
    requests: int = _int(24, ge=1)
    rounds: int = _int(2, ge=1)
    prefix_words: int = _int(4000, ge=1)
    abort_frac: float = _num(0.2, ge=0, le=1)
    max_tokens: int = _int(48, ge=1)
    min_own_frac: float = _num(1.0, ge=0, le=1)
    max_foreign: int = _int(0)
    min_own: Optional[int] = _int(None)
    seed: Optional[Seed] = None
    abort_after_tokens: int = _int(3, ge=1)
    require_cache_hits: bool = True


class StructuredThresholds(Thresholds):
    ALIASES = {"concurrent": "requests"}
    rounds: int = _int(2, ge=1)
    requests: int = _int(12, ge=1)
    max_tokens: int = _int(96, ge=1)
    min_pass_frac: float = _num(1.0, ge=0, le=1)
    min_pass: Optional[int] = _int(None)
    total: Optional[int] = _int(None, ge=1)
    groups: Optional[int] = _int(None, ge=1)


class SmokeThresholds(Thresholds):
    min_completion_tokens: int = _int(1, ge=1)
    chat: int = _int(1, le=1, doc="1: also a chat completion")
    tool_call: int = _int(0, le=1, doc="1: also a tool call (tool_choice required)")
    image: int = _int(0, le=1, doc="1: also an image message")


class SoakThresholds(Thresholds):
    duration_s: float = _num(60, gt=0)
    streams: int = _int(4, ge=1)
    max_requests: int = _int(400, ge=1)
    max_tokens: int = _int(128, ge=1)
    max_errors: int = _int(0)
    max_loop_frac: float = _num(0.05, ge=0, le=1)
    temperature: float = _num(1.0, ge=0)


class LmEvalThresholds(Thresholds):
    # counts published from the seed's own harness runs; lm_eval's `task` run cannot compare with
    # them, so the gate reports that it could not check them (recorded here so the recipe loads)
    NOT_CHECKED: ClassVar[tuple[str, ...]] = (
        "humaneval_min",
        "humaneval_total",
        "gsm8k_min",
        "gsm8k_total",
        "mcnemar_p_min",
    )
    task: str = "arc_easy"
    limit: int = _int(100, ge=1)
    expected: Optional[float] = _num(None, ge=0)
    rtol: float = _num(0.06, ge=0, le=1)
    timeout_s: float = _num(3600, gt=0)
    humaneval_min: Optional[int] = _int(None)
    humaneval_total: Optional[int] = _int(None, ge=1)
    gsm8k_min: Optional[int] = _int(None)
    gsm8k_total: Optional[int] = _int(None, ge=1)
    mcnemar_p_min: Optional[float] = _num(None, ge=0, le=1)


class KernelThresholds(Thresholds):
    ranks: Optional[int] = _int(None, ge=1, doc="ranks the kernel tests passed on")


class InstallThresholds(Thresholds):
    image_gate_pass: Optional[int] = _int(None)
    image_gate_total: Optional[int] = _int(None, ge=1)


class ConversionThresholds(Thresholds):
    tensors_equal: Optional[int] = _int(None)
    tensors_total: Optional[int] = _int(None, ge=1)
    validator_mismatches: Optional[int] = _int(None)


MODELS: dict[str, type[Thresholds]] = {
    "smoke": SmokeThresholds,
    "perplexity": PerplexityThresholds,
    "decode-prefill": DecodePrefillThresholds,
    "needle": NeedleThresholds,
    "isolation": IsolationThresholds,
    "structured": StructuredThresholds,
    "soak": SoakThresholds,
    "lm-eval": LmEvalThresholds,
    "kernel": KernelThresholds,
    "install": InstallThresholds,
    "conversion": ConversionThresholds,
}
assert tuple(MODELS) == GATE_IDS  # one list: a gate id without a model (or the reverse) fails at import


_BUILTIN_TYPES = frozenset(typing.get_args(ErrorType))


def overlaid(gate_id: str, base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with `over` on top, each key under the gate's own name (an alias in one and the
    name in the other are the same threshold)."""
    aliases = MODELS[gate_id].ALIASES
    out = {aliases.get(k, k): v for k, v in base.items()}
    out.update({aliases.get(k, k): v for k, v in over.items()})
    return out


def validate(gate_id: str, thresholds: Any) -> Thresholds:
    """The typed thresholds of `gate_id`. Unknown keys raise a ValidationError whose entries carry
    the type `unknown_threshold` and a did-you-mean (catalog.validation_errors reports them)."""
    model = MODELS[gate_id]
    try:
        return model.model_validate(thresholds)
    except ValidationError as e:
        line_errors: list[Any] = []
        for err in e.errors(include_url=False):
            if err["type"] == "extra_forbidden":
                key = str(err["loc"][-1])
                hint = did_you_mean(key, model.known_keys()) or f"it reads: {', '.join(model.known_keys())}"
                err_type: Any = PydanticCustomError(
                    "unknown_threshold",
                    "gate {gate} has no threshold '{key}'",
                    {"gate": gate_id, "key": key, "hint": hint},
                )
                line_errors.append({"type": err_type, "loc": err["loc"], "input": err["input"]})
            elif err["type"] in _BUILTIN_TYPES:
                line_errors.append({k: err[k] for k in ("type", "loc", "input", "ctx") if k in err})
            else:  # our own (alias given twice): its rendered message as it is
                line_errors.append(
                    {"type": PydanticCustomError(err["type"], err["msg"]), "loc": err["loc"], "input": err["input"]}
                )
        raise ValidationError.from_exception_data(model.__name__, line_errors) from None


def resolved(gate_id: str, thresholds: Any) -> dict[str, Any]:
    """Defaults overlaid with `thresholds`, aliases mapped: the plain dict a gate reads."""
    return validate(gate_id, thresholds).model_dump()
