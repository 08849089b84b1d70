"""The rendered part of an agent document (`api/v1/recipes/<id>.json`): each layout's effective
config, rendered artifacts and host requirements, built from the recipe alone.

`recipe export` writes what `document_layouts` builds; a fetched document is compared with it
(`check_document_layouts`). Its recipe hash covers only the recipe, so renders replaced after export
(a launch block turned into `curl ... | sh`) would otherwise ride along with an intact hash: a
document whose layouts differ from what its recipe renders to is refused, naming the first
differing artifact.
"""

from __future__ import annotations

import json
from typing import Any

from recipekit import textsafe
from recipekit.backends.registry import get_backend, render_all
from recipekit.errors import ExitCode, RecipekitError


def document_layouts(loaded: Any) -> dict[str, Any]:
    """layout name ('default' for none) -> {layout, effective, renders, host_requirements}."""
    from recipekit.config import effective_config  # lazy: pulls pydantic

    r = loaded.recipe
    backend = get_backend(r.backend)
    layouts: dict[str, Any] = {}
    for lay in list(r.layouts) or [None]:
        eff = effective_config(loaded, layout=lay, environ={})
        renders = render_all(eff)
        layouts[lay or "default"] = {
            "layout": lay,
            "effective": eff.flat(),
            "renders": {name: rd.to_dict() for name, rd in renders.items()},
            "host_requirements": [
                {"id": h.id, "what": h.what, "value": h.value, "constraint": h.constraint}
                for h in backend.host_requirements(eff)
            ],
        }
    return layouts


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, ensure_ascii=False) == json.dumps(b, sort_keys=True, ensure_ascii=False)


def first_difference(stated: Any, built: dict[str, Any]) -> tuple[str, str] | None:
    """(JSON path, what) of the first place the document's layouts differ from the rebuilt ones."""
    if not isinstance(stated, dict):
        return "$.layouts", "layouts is not an object"
    for name in sorted(set(stated) | set(built)):
        if name not in built:
            return f"$.layouts.{name}", f"layout {name!r} is not one of the recipe's"
        if name not in stated:
            return f"$.layouts.{name}", f"layout {name!r} of the recipe is missing"
        s, b = stated[name], built[name]
        if not isinstance(s, dict):
            return f"$.layouts.{name}", f"layout {name!r} is not an object"
        sr, br = s.get("renders"), b["renders"]
        if not isinstance(sr, dict):
            return f"$.layouts.{name}.renders", f"layout {name!r}: renders is not an object"
        for art in sorted(set(sr) | set(br)):
            if art not in br:
                return (
                    f"$.layouts.{name}.renders.{art}",
                    f"layout {name!r}: artifact {art!r} is not rendered by the recipe",
                )
            if art not in sr or not _same(sr[art], br[art]):
                return f"$.layouts.{name}.renders.{art}", f"layout {name!r}: artifact {art!r} differs"
        for key in sorted(set(s) | set(b)):
            if key != "renders" and not _same(s.get(key), b.get(key)):
                return f"$.layouts.{name}.{key}", f"layout {name!r}: {key} differs"
    return None


def check_document_layouts(stated: Any, loaded: Any) -> None:
    """Refuse a document whose layouts are not what its recipe renders to (exit 2)."""

    diff = first_difference(stated, document_layouts(loaded))
    if diff is None:
        return
    path, what = diff
    raise RecipekitError(
        code="document-renders-differ",
        location=f"{loaded.origin} {textsafe.shown(path)[:200]}",
        message=f"{textsafe.shown(what)[:200]} from what the document's recipe renders to (its recipe hash "
        "covers only the recipe)",
        hint="the rendered blocks were changed after export: do not run them; fetch the document again from "
        "its API, or render the recipe yourself (`recipe render`)",
        exit_code=ExitCode.INVALID_INPUT,
    )
