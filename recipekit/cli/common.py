"""Small helpers shared by the recipe command modules (light imports only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from recipekit.apply.auto import load_recipe
from recipekit.apply.set_flags import check_set_flags
from recipekit.config import effective_config
from recipekit.deployment import Deployment, resolve
from recipekit.multinode.nodes import node_config as build


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
    check_set_flags(loaded.recipe, sets or ())
    return loaded, effective_config(
        loaded, layout=layout, env_file=default_env_file(env_file), sets=sets or (), host_paths=host_paths
    )


def deployment(
    recipe_ref: str,
    layout: Optional[str] = None,
    node: Optional[int] = None,
    env_file: Optional[str | Path] = None,
    sets: Optional[list[str]] = None,
    host_paths: bool = True,
) -> Deployment:
    """The deployment a command acts on, from its --layout, --node, --env-file and --set: the one
    place the CLI resolves recipe + layout (either kind) + node + overrides."""
    loaded = load_recipe(recipe_ref)
    check_set_flags(loaded.recipe, sets or ())
    return resolve(
        loaded,
        layout,
        node,
        default_env_file(env_file),
        sets or (),
        host_paths=host_paths,
        node_config=node_config,
    )


def node_config(*args: Any, **kw: Any) -> Any:
    """recipekit.multinode.nodes.node_config, imported when a multi-node layout is resolved."""

    return build(*args, **kw)


def deployment_and_url(
    recipe_ref: Optional[str],
    url: Optional[str],
    layout: Optional[str],
    node: Optional[int],
    sets: Optional[list[str]],
    env_file: Optional[str | Path],
) -> tuple[Optional[Deployment], Optional[str]]:
    """(deployment, server URL) for a command that talks to a server (bench, gate, oracle capture):
    --url wins; else the server apply recorded for the deployment while it runs, else its address."""
    if not recipe_ref:
        return None, url
    from recipekit.apply.launch import serving_url  # lazy: pulls pydantic

    dep = deployment(recipe_ref, layout, node, env_file, sets)
    return dep, url or serving_url(dep)
