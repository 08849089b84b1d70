"""What every gate shares: its result record, threshold lookup with defaults, the context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from recipekit.bench.client import Client

GATE_IDS = ("smoke", "perplexity", "decode-prefill", "needle", "isolation", "structured", "soak", "lm-eval")

# Defaults when the recipe does not set a threshold; each gate documents its keys.
DEFAULTS: dict[str, dict[str, Any]] = {
    "perplexity": {"tokens": 1536, "max_rel_diff": 0.01, "max_missing": 0},
    "decode-prefill": {
        "prompts": 4,
        "tokens": 64,
        "max_mean_abs_dlogprob": 0.05,
        "max_off_argmax_frac": 0.05,
        "max_gap_nats": 2.0,
    },
    "needle": {"prompt_tokens": [2000], "depths": [0.5], "min_hit_frac": 1.0, "max_tokens": 24},
    "isolation": {
        "requests": 24,
        "rounds": 2,
        "prefix_words": 4000,
        "abort_frac": 0.2,
        "max_tokens": 48,
        "min_own_frac": 1.0,
        "max_foreign": 0,
    },
    "structured": {"rounds": 2, "requests": 12, "max_tokens": 96, "min_pass_frac": 1.0},
    "smoke": {"min_completion_tokens": 1},
    "soak": {
        "duration_s": 60,
        "streams": 4,
        "max_requests": 400,
        "max_tokens": 128,
        "max_errors": 0,
        "max_loop_frac": 0.05,
        "temperature": 1.0,
    },
    "lm-eval": {"task": "arc_easy", "limit": 100, "expected": None, "rtol": 0.06},
}


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


# Keys a gate also reads when given (no default), and the seeds' names for the same things.
OPTIONAL: dict[str, tuple[str, ...]] = {
    "perplexity": ("oracle_ppl", "max_nll_increase_pct"),
    "needle": ("min_pass", "total", "seed"),
    "isolation": ("min_own", "seed", "abort_after_tokens", "require_cache_hits"),
    "structured": ("min_pass", "total", "groups"),
    "smoke": ("chat", "tool_call", "image"),
    "lm-eval": ("timeout_s",),
}
ALIASES: dict[str, dict[str, str]] = {
    "decode-prefill": {"concurrent": "prompts"},
    "needle": {"depth": "depths"},
    "isolation": {"repeats": "rounds"},
    "structured": {"concurrent": "requests"},
}


class UnknownThreshold(ValueError):
    pass


def thresholds_for(gate_id: str, recipe_thresholds: dict[str, Any] | None) -> dict[str, Any]:
    """Defaults overlaid with the recipe's thresholds (aliases mapped). A key the gate does not
    read raises UnknownThreshold: a threshold that is silently ignored would be a false PASS."""
    from recipekit.errors import did_you_mean

    t = dict(DEFAULTS.get(gate_id, {}))
    known = set(t) | set(OPTIONAL.get(gate_id, ())) | set(ALIASES.get(gate_id, {}))
    unknown = []
    for k, v in (recipe_thresholds or {}).items():
        if k not in known:
            hint = did_you_mean(k, sorted(known))
            unknown.append(f"{k}" + (f" ({hint})" if hint else ""))
            continue
        k = ALIASES.get(gate_id, {}).get(k, k)
        if k == "depths" and not isinstance(v, list):
            v = [v]
        t[k] = v
    t["_unknown"] = unknown
    return t


def check_known(gate_id: str, t: dict[str, Any]) -> None:
    unknown = t.get("_unknown") or []
    if unknown:
        raise UnknownThreshold(
            f"threshold(s) this gate does not read: {', '.join(unknown)}; "
            f"it reads {', '.join(sorted(k for k in t if not k.startswith('_')))}"
        )
