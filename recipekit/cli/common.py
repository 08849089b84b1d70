"""Small helpers shared by the recipe command modules (light imports only)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional


def default_env_file(env_file: Optional[str]) -> Optional[str]:
    """--env-file, else ./.env when it exists, else None."""
    if env_file:
        return env_file
    return ".env" if Path(".env").is_file() else None


def effective(recipe_ref: str, layout: Optional[str], env_file: Optional[str], sets: Optional[list[str]],
              host_paths: bool = False):
    """Load a recipe and build its effective config from the CLI options."""
    from recipekit.catalog import load_recipe
    from recipekit.config import effective_config
    loaded = load_recipe(recipe_ref)
    return loaded, effective_config(loaded, layout=layout, env_file=default_env_file(env_file),
                                    sets=sets or (), host_paths=host_paths)


def print_table(rows: list[dict], cols: list[str], max_width: int = 60) -> None:
    """Plain aligned columns (no truncation of ids; long values wrap to their own lines)."""
    from recipekit.textsafe import shown   # recipe text is shown, control sequences never emitted

    def cell(v) -> str:
        return shown("" if v is None else (",".join(map(str, v)) if isinstance(v, list) else str(v)))
    widths = {c: min(max_width, max([len(c)] + [len(cell(r.get(c))) for r in rows])) for c in cols}
    print("  ".join(c.ljust(widths[c]) for c in cols).rstrip())
    for r in rows:
        print("  ".join(cell(r.get(c)).ljust(widths[c]) for c in cols).rstrip())
