"""Small helpers shared by the recipe command modules (light imports only)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from recipekit.apply.auto import load_recipe
from recipekit.config import effective_config


def default_env_file(env_file: Optional[str | Path]) -> Optional[str | Path]:
    """--env-file, else ./.env when it exists, else None."""
    if env_file:
        return env_file
    return ".env" if Path(".env").is_file() else None


def effective(
    recipe_ref: str,
    layout: Optional[str],
    env_file: Optional[str | Path],
    sets: Optional[list[str]],
    host_paths: bool = False,
):
    """Load a recipe and build its effective config from the CLI options."""
    loaded = load_recipe(recipe_ref)
    return loaded, effective_config(
        loaded, layout=layout, env_file=default_env_file(env_file), sets=sets or (), host_paths=host_paths
    )
