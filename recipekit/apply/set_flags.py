"""`--set --flag=VALUE` checked against the pinned engine's flag catalog before anything runs (render, plan,
apply, apply --node), with the judgement lint applies to the recipe's own flags: a removed name with its
replacement, a did-you-mean otherwise; and that judgement itself on the recipe's serve flags and env knobs
(`engine_name_errors`: lint on every layout, apply's preflight on the deployed one). Here, not in lint.py,
because apply calls it and lint sits above apply."""

from __future__ import annotations

from typing import Any, Iterable, Optional

from recipekit.errors import ErrorList, RecipekitError
from recipekit.patches import catalogs


def load_flag_catalog(spec: Optional[str]) -> Optional[catalogs.Catalog]:
    """The engine flag/env catalog for 'engine/version', or None when there is none."""
    if not spec or "/" not in spec:
        return None
    engine, version = spec.split("/", 1)
    try:
        return catalogs.load(engine, version)
    except (FileNotFoundError, LookupError):
        return None


def set_flag_errors(recipe: Any, sets: Iterable[str]) -> list[RecipekitError]:
    """The `--set --flag=VALUE` items whose flag the pinned engine does not accept, judged like
    the recipe's own flags (removed names with their replacement, did-you-mean otherwise)."""
    from recipekit.config import FLAG_NAME, parse_set_items  # lazy: pulls pydantic

    items, _ = parse_set_items(sets)  # a malformed item or flag name is the effective config's error
    flags = [k for k, v in items if FLAG_NAME.match(k) and v is not None]
    spec = recipe.engine.flag_catalog
    cat = load_flag_catalog(spec) if flags else None
    if cat is None:
        return []
    errs = []
    for flag in flags:
        prob = cat.flag_problem(flag)
        if prob:
            errs.append(RecipekitError(code=prob[0], message=f"--set {prob[1]}", hint=prob[2], location="--set"))
    return errs


def check_set_flags(recipe: Any, sets: Iterable[str]) -> None:
    """Raise the problems of set_flag_errors (render, plan and apply call it before anything runs)."""
    errs = set_flag_errors(recipe, sets)
    if errs:
        raise ErrorList(errs)


def engine_name_errors(loaded: Any, layouts: Iterable[str]) -> list[RecipekitError]:
    """The engine-names judgement on the recipe's serve flags, the named layouts' flags and the
    env knobs: lint passes every layout, apply's preflight the one it deploys."""
    r = loaded.recipe
    cat = load_flag_catalog(r.engine.flag_catalog)
    if cat is None:
        return []
    sites = [(f"$.serve.args[{i}].flag", a.flag) for i, a in enumerate(r.serve.args)]
    sites += [
        (f"$.layouts.{name}.args[{j}].flag", ov.flag)
        for name in layouts
        if name in r.layouts
        for j, ov in enumerate(r.layouts[name].args)
    ]
    problems = [(path, cat.flag_problem(flag)) for path, flag in sites]
    problems += [(f"$.env[{i}].name", cat.env_problem(k.name)) for i, k in enumerate(r.env)]
    return [
        RecipekitError(
            code=prob[0], message=prob[1] + f" ({r.engine.flag_catalog})", hint=prob[2], location=loaded.where(path)
        )
        for path, prob in problems
        if prob
    ]
