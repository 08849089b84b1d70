"""What the site takes from the rest of the toolkit: the export's JSON API and the launch text.

Both come from the library functions behind `recipe export` and `recipe render`, with the same
clean inputs the export uses (no .env, process environment ignored, <placeholders> for host
paths), so a page shows exactly what `recipe render ID --layout L` prints in a clean shell and
exactly what the recipe's JSON document holds.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from recipekit.backends.registry import render_artifact
from recipekit.config import effective_config
from recipekit.export import export


def export_api(site_root: Path, loaded: list) -> list[str]:
    """Write api/v1/... into `site_root` with the export; return the written paths (relative)."""
    return sorted(export(site_root, recipes=loaded))


def layouts_in_order(recipe) -> list[Optional[str]]:
    """The recipe's layouts, default first (None for a recipe without layouts)."""
    layouts: list[Optional[str]] = list(recipe.layouts) or [None]
    if recipe.default_layout in recipe.layouts:
        layouts.remove(recipe.default_layout)
        layouts.insert(0, recipe.default_layout)
    return layouts


def launch_texts(lr) -> list[tuple[Optional[str], str]]:
    """(layout, text of `recipe render ID [--layout LAYOUT]`) for each layout, default first."""
    out = []
    for layout in layouts_in_order(lr.recipe):
        eff = effective_config(lr, layout=layout, environ={})
        out.append((layout, render_artifact(eff, None).text))
    return out
