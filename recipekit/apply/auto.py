"""`auto`: the recipe that matches this host, and loading a reference that may say `auto`.

The application's part of the catalog: it asks the doctor (tools/doctor: one host detection)
what the host has, so it sits above the domain floor; the catalog itself (core) only loads
recipes by id, path or URL. Gaudi -> the Gaudi recipe; NVIDIA -> the recipe whose host match
(vendor, model names, compute capability) fits best; no accelerator, or one no recipe
supports -> the local CPU default.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping, Optional

from recipekit.apply.agent_document import (
    check_document_layouts,  # renders through the backends: documents only
)
from recipekit.catalog import LOCAL_DEFAULT_ID, LoadedRecipe, list_recipes
from recipekit.catalog import load_recipe as load_ref


def load_recipe(ref: str, host_facts: Optional[Mapping[str, Any]] = None) -> LoadedRecipe:
    """Load by catalog id, 'auto', path to a YAML/JSON file, or http(s) URL. An agent document's
    stated renders are rebuilt from its recipe and compared (error[document-renders-differ])."""
    loaded = load_ref(resolve_auto(host_facts) if ref == "auto" else ref)
    if loaded.stated_layouts is not None:
        check_document_layouts(loaded.stated_layouts, loaded)
    return loaded


def detect_host_facts() -> dict[str, Any]:
    """The accelerators of this host as the doctor sees them, summarized for matching:
    {accelerator kind, count, models, compute_capability}."""
    # lazy: pulls pydantic; the doctor's collector (subprocess probes of the host) is only needed for `auto`
    from recipekit.tools.doctor.collect import accelerator_summary, collect_facts

    return accelerator_summary(collect_facts(with_docker=False))


def _facts_dict(host_facts: Any) -> dict[str, Any]:
    if host_facts is None:
        return detect_host_facts()
    if isinstance(host_facts, Mapping):
        return dict(host_facts)
    if hasattr(host_facts, "model_dump"):
        return host_facts.model_dump()
    if hasattr(host_facts, "__dataclass_fields__"):
        return asdict(host_facts)
    return dict(vars(host_facts))


def resolve_auto(host_facts: Any = None, recipes: Optional[list[LoadedRecipe]] = None) -> str:
    """The id of the recipe `auto` means on this host."""
    facts = _facts_dict(host_facts)
    kind = (facts.get("accelerator") or "none").lower()
    if kind in ("", "none"):
        return LOCAL_DEFAULT_ID
    recipes = recipes if recipes is not None else list_recipes()
    models = " ".join(facts.get("models") or []).lower()
    cc = facts.get("compute_capability")
    best: tuple[int, str] | None = None
    for lr in recipes:
        h = lr.recipe.host
        if h.accelerator != kind:
            continue
        score = h.priority
        if h.compute_capability and cc and str(cc) != h.compute_capability:
            continue
        if h.models and models and any(m.lower() in models for m in h.models):
            score += 10
        if h.count and facts.get("count") is not None and facts["count"] >= h.count:
            score += 5
        if best is None or score > best[0]:
            best = (score, lr.id)
    if best is None:
        # An accelerator no recipe supports: the embedded local default still runs (on CPU).
        return LOCAL_DEFAULT_ID
    return best[1]
