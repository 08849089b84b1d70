"""Where things live: the source tree, the catalog, and the git-ignored state home.

RECIPEKIT_HOME (default: <repo>/.recipekit, or ~/.cache/recipekit outside a checkout)
holds engine venvs (venvs/), generated/downloaded models (models/), per-recipe state
(state/<recipe-id>/: stamps, pid, logs, lock) and caches (cache/).
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
SOURCE_ROOT = PACKAGE_DIR.parent  # the checkout root in a source/editable install


def in_checkout() -> bool:
    return (SOURCE_ROOT / "pyproject.toml").is_file() and (SOURCE_ROOT / "recipes").is_dir()


def catalog_dir() -> Path:
    """The recipe catalog folder (recipes/<org>/<model>/<target>.yaml)."""
    env = os.environ.get("RECIPEKIT_CATALOG")
    if env:
        return Path(env)
    if in_checkout():
        return SOURCE_ROOT / "recipes"

    return Path(str(files("recipekit.recipes")))


def home() -> Path:
    env = os.environ.get("RECIPEKIT_HOME")
    if env:
        return Path(env).expanduser().resolve()
    if in_checkout():
        return SOURCE_ROOT / ".recipekit"
    return Path.home() / ".cache" / "recipekit"


def venvs_dir() -> Path:
    return home() / "venvs"


def models_dir() -> Path:
    return home() / "models"


def state_dir(recipe_id: str | None = None) -> Path:
    base = home() / "state"
    return base / recipe_id.replace("/", "__") if recipe_id else base


def cache_dir() -> Path:
    return home() / "cache"
