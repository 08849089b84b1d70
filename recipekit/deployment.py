"""One deployment, resolved once: recipe + layout (a single-node variant such as `tp4`/`pp4`, or a
multi-node layout such as `pp2-tp4-mp`) + node + overrides (.env, process env, --set) -> the
effective config, the server's address, the state folder and the runner kind.

Every command that acts on a deployment (apply, plan, status, stop, logs, restart, bench, gate,
doctor, render, smoke, oracle capture) builds one `Deployment` and hands it down; nothing below
works out the address, the layout kind or the state folder again.

This module is part of the core: it names the runner by its kind ("native", "docker") and the
application turns that into a Runner. A multi-node node's config is built by the application's
`node_config` (recipekit.multinode.nodes), passed in as a function.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional

from recipekit import paths
from recipekit.errors import RecipekitError, did_you_mean
from recipekit.server_url import base_url

if TYPE_CHECKING:
    from recipekit.catalog import LoadedRecipe
    from recipekit.config import EffectiveConfig
    from recipekit.schema import Recipe

LOOPBACK = "127.0.0.1"
# vLLM's `--port` default (vllm/entrypoints/openai/cli_args.py, FrontendArgs.port = 8000): the
# port a recipe that declares no PORT setting serves on (the Gaudi seed passes no --port)
ENGINE_DEFAULT_PORT = 8000
# the settings a recipe names its listen address with (a recipe declares one of them: the CPU
# recipe HOST, the CMP recipe BIND, which docker publishes the port on)
LISTEN_SETTINGS = ("BIND", "HOST")
# a node's private-network address (multi-node layouts): where other hosts reach its API
NODE_ADDRESS_SETTING = "NODE_ADDRESS"
WILDCARDS = ("", "0.0.0.0", "::", "[::]")

SINGLE = "single-node"
MULTI = "multi-node"


@dataclass(frozen=True)
class Address:
    """Where a deployment's server listens, and how a client reaches it."""

    listen_host: str  # what the server binds (may be a wildcard)
    port: int
    node_address: Optional[str] = None  # NODE_ADDRESS when the recipe declares it

    @property
    def local_host(self) -> str:
        """The host a client on this machine connects to: a wildcard bind is reached on loopback."""
        return LOOPBACK if self.listen_host in WILDCARDS else self.listen_host

    @property
    def reach_host(self) -> str:
        """The host another machine (a load balancer) connects to: the node's address when declared."""
        return self.node_address or self.local_host

    @property
    def url(self) -> str:
        return url_of(self.local_host, self.port)


def url_of(host: str, port: int) -> str:
    """http://host:port; a wildcard host is reached on loopback, an IPv6 literal goes in brackets."""
    return base_url(host, port)


def _declared(eff: EffectiveConfig, name: str) -> Optional[Any]:
    """The setting's value; None when the recipe does not declare it or it is empty."""
    v = eff.setting(name, None)
    return None if v in (None, "") else v


def server_address(eff: EffectiveConfig) -> Address:
    """The one place the server's address is worked out: the listen host from BIND or HOST
    (LISTEN_SETTINGS; loopback when the recipe declares neither), PORT (vLLM's 8000 when not
    declared) and NODE_ADDRESS for multi-node layouts."""
    host = next((str(v) for v in (_declared(eff, k) for k in LISTEN_SETTINGS) if v is not None), LOOPBACK)
    port = _declared(eff, "PORT")
    try:
        port_n = int(port) if port is not None else ENGINE_DEFAULT_PORT
    except (TypeError, ValueError):
        raise RecipekitError(
            code="invalid-setting", message=f"PORT={port!r} is not a port number", hint="e.g. --set PORT=8001"
        ) from None
    if not 0 < port_n < 65536:
        raise RecipekitError(
            code="invalid-setting", message=f"PORT={port_n} is not in 1..65535", hint="e.g. --set PORT=8001"
        )
    node = _declared(eff, NODE_ADDRESS_SETTING)
    return Address(listen_host=host, port=port_n, node_address=None if node is None else str(node))


def address_overridden(eff: EffectiveConfig) -> bool:
    """True when the address settings were given by the user (.env, process env, --set), not by
    the recipe or its layout: that address is the one asked for, whatever server is recorded."""
    sources = [eff.source_of(k) for k in (*LISTEN_SETTINGS, "PORT")]
    return any(s is not None and s != "recipe" and not s.startswith("layout:") for s in sources)


def layout_kind(recipe: Recipe, layout: Optional[str]) -> str:
    """SINGLE for no layout or a single-node variant (`layouts:`), MULTI for a multi-node layout
    (`multinode:`); an unknown name is an error naming both kinds."""
    if not layout or layout in recipe.layouts:
        return SINGLE
    if layout in recipe.multinode:
        return MULTI
    choices = list(recipe.layouts) + list(recipe.multinode)
    kinds = [f"layouts: {', '.join(recipe.layouts)}"] if recipe.layouts else []
    kinds += [f"multi-node layouts: {', '.join(sorted(recipe.multinode))}"] if recipe.multinode else []
    raise RecipekitError(
        code="unknown-layout",
        location="--layout",
        message=f"'{layout}' is not a layout of {recipe.id}",
        hint=did_you_mean(layout, choices) or ("; ".join(kinds) if kinds else "it declares none"),
    )


def is_multinode(recipe: Recipe, layout: Optional[str]) -> bool:
    """The one decision "is this layout multi-node?"."""
    return layout_kind(recipe, layout) == MULTI


def node_state_id(recipe_id: str, layout: str, node: int) -> str:
    """The state folder name of node `node` of a multi-node layout."""
    return f"{recipe_id}.{layout}.node{node}"


@dataclass(frozen=True)
class Deployment:
    """A recipe deployed one way: everything a command needs to act on it."""

    loaded: LoadedRecipe
    eff: EffectiveConfig  # the node's config for a multi-node layout
    layout: Optional[str] = None  # as asked (--layout); None: the recipe's default
    multinode: Optional[str] = None  # the multi-node layout, None for a single-node deployment
    node: Optional[int] = None  # the node of a multi-node layout (0 = head)
    nodes: int = 1
    env_file: Optional[str] = None
    sets: tuple[str, ...] = ()

    @property
    def recipe(self) -> Recipe:
        return self.eff.recipe

    @property
    def id(self) -> str:
        return self.loaded.id

    @property
    def is_multinode(self) -> bool:
        return self.multinode is not None

    @property
    def state_id(self) -> str:
        if self.multinode is not None:
            return node_state_id(self.id, self.multinode, self.node or 0)
        return self.id

    @property
    def state(self) -> Path:
        return paths.state_dir(self.state_id)

    @property
    def runner(self) -> str:
        """The runner kind ("native" or "docker") the launch uses."""
        return str(self.recipe.launch.runner)

    @property
    def address(self) -> Address:
        return server_address(self.eff)

    @property
    def url(self) -> str:
        """The URL the recipe's config says the server answers at (the application prefers the
        recorded server's when apply started one: recipekit.apply.launch.serving_url)."""
        return self.address.url

    def overrides(self) -> dict:
        """What restart re-uses: the layout, .env and --set of this deployment."""
        return {"layout": self.layout, "env_file": self.env_file, "sets": list(self.sets)}


# (loaded, layout, node, env_file=, environ=, sets=, host_paths=) -> an object with .eff
NodeConfigFn = Callable[..., Any]


def resolve(
    loaded: LoadedRecipe,
    layout: Optional[str] = None,
    node: Optional[int] = None,
    env_file: Optional[str | Path] = None,
    sets: Iterable[str] = (),
    *,
    environ: Optional[Mapping[str, str]] = None,
    host_paths: bool = True,
    node_config: Optional[NodeConfigFn] = None,
) -> Deployment:
    """The deployment of `loaded` with these overrides. A multi-node layout needs `node_config`
    (the application's recipekit.multinode.nodes.node_config); `node` defaults to the head."""
    from recipekit.config import effective_config  # lazy: pulls pydantic

    recipe = loaded.recipe
    sets = tuple(sets or ())
    ef = None if env_file is None else str(env_file)
    if is_multinode(recipe, layout):
        assert layout is not None and node_config is not None, "a multi-node layout needs node_config"
        spec = recipe.multinode[layout]
        n = node_config(loaded, layout, node or 0, env_file=ef, environ=environ, sets=sets, host_paths=host_paths)
        return Deployment(loaded, n.eff, layout, layout, node or 0, spec.nodes, ef, sets)
    if node is not None:
        raise RecipekitError(
            code="node-needs-multinode-layout",
            location="--node",
            message=f"--node needs a multi-node layout of {recipe.id}",
            hint=f"multi-node layouts: {', '.join(recipe.multinode)}" if recipe.multinode else "it declares none",
        )
    eff = effective_config(loaded, layout=layout, env_file=ef, environ=environ, sets=sets, host_paths=host_paths)
    return Deployment(loaded, eff, layout, None, None, 1, ef, sets)
