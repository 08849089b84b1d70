"""What bench/gate run against: a server URL, and (when a recipe is named) the recipe's
protocol, gate thresholds, published results and provenance."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from recipekit.deployment import Deployment
from recipekit.errors import ExitCode, RecipekitError


@dataclass
class Target:
    url: str
    loaded: Any = None  # catalog.LoadedRecipe or None
    layout: str | None = None
    recipe_info: dict | None = None  # provenance block
    gates: list | None = None  # recipe gate entries, or None (defaults)
    bench: Any = None  # schema.BenchProtocol or None
    results: list = field(default_factory=list)  # schema.Result entries
    model_dir: str | None = None


def resolve(dep: Deployment | None, url: str | None) -> Target:
    """The target of bench/gate: the deployment's server (`url` is the one the application found
    for it: recipekit.apply.launch.serving_url) or, without a recipe, the server at `url`."""
    if dep is None and not url:
        raise RecipekitError(
            code="no-target",
            message="name a recipe or pass --url",
            hint="e.g. `recipe bench tiny-deepseek-cpu` or `recipe bench --url http://127.0.0.1:8000`",
        )
    if dep is None:
        assert url  # one of the two is given (checked above)
        return Target(url=_check_url(url))
    loaded, eff, r = dep.loaded, dep.eff, dep.recipe
    model_dir = eff.setting("MODEL_DIR", None)
    pins = [p.model_dump(mode="json", exclude_none=True) for p in (r.engine.pins or [])]
    info = {
        "id": r.id,
        "content_sha256": loaded.content_hash,
        "origin": loaded.origin,
        "layout": eff.layout,
        "pins": pins,
        "version": getattr(getattr(r, "revision", None), "version", None),
    }
    results = [x for x in r.results if x.layout in (None, eff.layout)]
    return Target(
        url=_check_url(url or dep.url),
        loaded=loaded,
        layout=eff.layout,
        recipe_info=info,
        gates=list(r.gates),
        bench=r.bench,
        results=results,
        model_dir=None if model_dir is None else str(model_dir),
    )


def _check_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise RecipekitError(code="bad-url", message=f"not an http(s) URL: {url!r}", hint="e.g. http://127.0.0.1:8000")
    return url.rstrip("/")


def protocol_from_recipe(bench: Any, quick: bool):
    """ProtocolConfig from the recipe's `bench:` block (or the defaults); --quick shrinks it."""
    from recipekit.bench.protocol import PROMPT_TYPES, ProtocolConfig  # lazy: pulls aiohttp, frozenlist, multidict

    if quick:
        cfg = ProtocolConfig.quick_config()
        if bench is not None and bench.prompt_types:
            cfg.prompt_types = [t for t in PROMPT_TYPES if t in bench.prompt_types] or cfg.prompt_types
        return cfg
    cfg = ProtocolConfig()
    if bench is None:
        return cfg
    cfg.prompt_types = [t for t in PROMPT_TYPES if t in (bench.prompt_types or PROMPT_TYPES)]
    cfg.levels = list(bench.streams or cfg.levels)
    cfg.single_runs, cfg.multi_runs = bench.single_stream_runs, bench.multi_stream_runs
    cfg.prefill_runs, cfg.max_tokens, cfg.warmups = bench.cold_prefill_runs, bench.max_tokens, bench.warmups
    if bench.prefill_prompt_tokens:
        cfg.prefill_tokens = int(bench.prefill_prompt_tokens[0])
    return cfg


def published_points(results: list) -> list[dict]:
    """The recipe's `results:` entries that the protocol measures, normalised for compare()."""
    out = []
    for x in results:
        if not isinstance(x.value, (int, float)):
            continue
        if x.metric in ("decode_tps_per_stream", "decode_tps_aggregate") and x.streams:
            if (x.metric == "decode_tps_per_stream") != (x.streams == 1):
                continue  # the protocol's figure is per stream at 1, aggregate above
            out.append(
                {
                    "metric": "decode_tps",
                    "streams": x.streams,
                    "prompt_type": x.prompt_type or "prose",
                    "value": float(x.value),
                }
            )
        elif x.metric == "prefill_tps":
            out.append({"metric": "prefill_tps", "streams": None, "prompt_type": None, "value": float(x.value)})
    return out


__all__ = ["Target", "resolve", "protocol_from_recipe", "published_points", "ExitCode"]
