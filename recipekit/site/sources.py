"""What the site takes from the rest of the toolkit: the export's JSON API and the launch text.

Both come from the same library functions the CLI uses (`recipe export`, `recipe render`), so
the pages show exactly what those commands print.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from recipekit.errors import ExitCode, RecipekitError


def _missing(what: str, exc: ImportError) -> RecipekitError:
    return RecipekitError(code="site-dependency-missing", message=f"{what} is not available: {exc}",
                          hint="the site needs the export and render modules of this toolkit",
                          exit_code=ExitCode.FAILURE)


def export_api(site_root: Path, loaded: list) -> list[str]:
    """Write api/v1/... into `site_root` with the export; return the written paths (relative)."""
    try:
        from recipekit.export import export_catalog
    except ImportError as exc:
        raise _missing("the JSON export", exc) from None

    export_catalog(site_root, recipes=loaded)
    return sorted(p.relative_to(site_root).as_posix() for p in (site_root / "api").rglob("*") if p.is_file())


def launch_texts(lr) -> list[tuple[Optional[str], str]]:
    """(layout, text of `recipe render ID --layout LAYOUT`) for each layout, default first."""
    try:
        from recipekit.render import render_artifact
    except ImportError as exc:
        raise _missing("rendering", exc) from None

    r = lr.recipe
    layouts: list[Optional[str]] = list(r.layouts) or [None]
    if r.default_layout in r.layouts:
        layouts.remove(r.default_layout)
        layouts.insert(0, r.default_layout)
    return [(layout, render_artifact(lr, layout=layout, artifact="launch")) for layout in layouts]
