"""What every gate shares: its result record, its typed thresholds as a dict, the context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from recipekit import gate_thresholds
from recipekit.bench.client import Client
from recipekit.errors import RecipekitError
from recipekit.gate_thresholds import BENCH_GATE_IDS

GATE_IDS = BENCH_GATE_IDS  # the gates `recipe gate` runs (the one list: recipekit.gate_thresholds)


@dataclass
class GateResult:
    id: str
    passed: bool | None  # None = skipped (not applicable / not installed)
    summary: str
    metrics: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, Any] = field(default_factory=dict)
    details: list[Any] = field(default_factory=list)
    seconds: float = 0.0
    required: bool = True

    @property
    def status(self) -> str:
        return "SKIP" if self.passed is None else ("PASS" if self.passed else "FAIL")

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "status": self.status,
            "summary": self.summary,
            "metrics": self.metrics,
            "thresholds": self.thresholds,
            "required": self.required,
            "seconds": round(self.seconds, 2),
            "details": self.details,
        }


@dataclass
class GateContext:
    client: Client
    model_dir: str | None = None  # local checkpoint for the oracle (None: from /v1/models root)
    oracle_python: str | None = None  # a python with torch + transformers (the engine venv's)
    reference: str | None = None  # an oracle reference file (`recipe oracle run`) for the perplexity gate
    model_id: str | None = None  # the recipe's model (hf_id): picks the DSV4.1 oracle
    progress: Any = None

    def say(self, msg: str) -> None:
        if self.progress:
            self.progress(msg)


def thresholds_for(gate_id: str, thresholds: dict[str, Any] | None) -> dict[str, Any]:
    """The gate's typed thresholds (recipekit.gate_thresholds) as the plain dict it reads: defaults
    overlaid with `thresholds`, the seeds' names mapped. A key the gate does not read, or a value of
    the wrong type or range, is error[bad-threshold]: a threshold silently ignored is a false PASS."""

    try:
        return gate_thresholds.resolved(gate_id, thresholds or {})
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        where = ".".join(str(x) for x in err["loc"])
        hint = (err.get("ctx") or {}).get("hint") if err["type"] == "unknown_threshold" else None
        raise RecipekitError(
            code="bad-threshold",
            location=f"gate {gate_id}" + (f" threshold {where}" if where else ""),
            message=err["msg"],
            hint=hint or "it reads: " + ", ".join(gate_thresholds.MODELS[gate_id].known_keys()),
        ) from None


def canonical_key(gate_id: str, key: str) -> str:
    """The gate's own name for a threshold given under a seed's name (`concurrent` -> `prompts`)."""
    return gate_thresholds.MODELS[gate_id].ALIASES.get(key, key)
