"""The launch step shared by backends: reuse our running server when its launch inputs are
unchanged, stop it when they changed, refuse a port held by anything else, start the server
through a runner and record it in state/server.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from recipekit.apply import identity, server
from recipekit.apply.runners.base import LaunchRequest
from recipekit.apply.runners.registry import get_runner, runner_for
from recipekit.apply.server import ServerRecord
from recipekit.apply.stamps import inputs_key
from recipekit.apply.state import remove
from recipekit.deployment import Deployment, address_overridden
from recipekit.errors import RecipekitError
from recipekit.server_url import base_url

__all__ = [
    "alive",
    "base_url",
    "check_port",
    "early_port_check",
    "launch",
    "launch_inputs",
    "launch_native",
    "launch_verified",
    "load_server",
    "port_in_use",
    "reuse_or_stop",
    "serving_url",
    "stop_server",
]


def port_in_use(host: str, port: int) -> bool:
    """True when something listens on host:port (a bind there fails with EADDRINUSE, or a
    listener that allows port sharing is there)."""
    return bool(identity.listeners(host, port)) or identity.bind_refused(host, port)


def load_server(state: Path) -> Optional[ServerRecord]:
    """The recorded server of this state folder (None when none is recorded)."""
    return server.load(state / server.SERVER_FILE)


def serving_url(dep: Deployment) -> str:
    """The URL of the deployment's server: the address the user gave (.env, env, --set), else the
    one apply recorded in the state folder while that server runs (started with other overrides,
    e.g. `PORT=18123 ./start.sh`), else the address the recipe names (deployment.server_address)."""
    if address_overridden(dep.eff):
        return dep.url
    try:
        rec = load_server(dep.state)
    except RecipekitError:  # a damaged record names no server we can trust
        rec = None
    if rec is not None and rec.base_url and rec.recipe in (None, dep.id) and alive(rec):
        return rec.base_url
    return dep.url


def alive(rec: Optional[ServerRecord]) -> bool:
    if rec is None:
        return False
    try:
        return runner_for(rec).alive(rec)
    except RecipekitError:  # e.g. the docker daemon is gone: nothing we can reach runs
        return False


def stop_server(
    state: Path, rec: Optional[ServerRecord], log: Callable[[str], None] = lambda s: None, timeout_s: float = 20.0
) -> str:
    """Stop the recorded server (only if it is ours) and forget it."""
    if rec is None:
        return "not running"
    what = runner_for(rec).stop(rec, timeout_s, log)
    remove(state / server.SERVER_FILE)
    return what


def launch_inputs(argv: list[str], env: dict, extra: Optional[dict] = None) -> dict:
    return {"argv": list(argv), "env": dict(sorted(env.items())), **(extra or {})}


def reuse_or_stop(ctx: Any, inputs: dict) -> bool:
    """True when our server is running with the same launch inputs (nothing to do)."""
    rec = ctx.server
    if rec is None:
        return False
    if alive(rec):
        if rec.launch_key == inputs_key(inputs):
            return True
        ctx.log("  the running server was started with other settings; stopping it")
    what = stop_server(ctx.state, rec, ctx.log)
    ctx.log(f"  previous server: {what}")
    ctx.server = None
    return False


def check_port(host: str, port: int) -> None:
    """`error[port-taken]` naming the program that listens on host:port (nothing is sent to it)."""
    identity.check_port_free(host, port)


def early_port_check(ctx: Any, host: str, port: int) -> None:
    """Before the slow steps (engine install, downloads, conversions): refuse a port another
    program holds, so a user learns it in seconds. A port our own live server holds is left to
    the launch step (reuse, or stop and start again)."""
    rec = ctx.server
    if rec is not None and alive(rec) and rec.port == port:
        return
    check_port(host, port)


# A rehearsal's declared rewrite of the launch argv (recipekit/rehearse): (runner kind, argv) ->
# the argv to start. Set by the rehearsal (and by its child commands, `restart`); None otherwise.
LaunchRewrite = Callable[[str, list[str]], list[str]]
_rewrite: Optional[LaunchRewrite] = None


def set_launch_rewrite(fn: Optional[LaunchRewrite]) -> None:
    global _rewrite
    _rewrite = fn


def launch(ctx: Any, kind: str, argv: list[str], env_add: dict[str, str], host: str, port: int) -> dict:
    """Start the server with the `kind` runner unless ours already runs with these inputs;
    record it (runner record + where it listens + launch key) in state/server.json. The launch
    key is the recipe's argv's: a rehearsal's rewrite (set_launch_rewrite) changes what starts."""
    inputs = launch_inputs(argv, env_add)
    if reuse_or_stop(ctx, inputs):
        ctx.log(f"  already running ({ctx.server.label}) with these settings: reused")
        return {"reused": True, **ctx.server.handle}
    check_port(host, port)
    if _rewrite is not None:
        argv = _rewrite(kind, list(argv))
    req = LaunchRequest(
        argv=list(argv),
        recipe_id=ctx.recipe.id,
        log_path=ctx.log_path,
        env=dict(env_add),
        cwd=ctx.state,
        docker_host=ctx.docker_host,
    )
    rec = get_runner(kind).start(req)
    rec = rec.model_copy(
        update={
            "recipe": ctx.recipe.id,
            "host": host,
            "port": port,
            "launch_key": inputs_key(inputs),
            "base_url": base_url(host, port),
        }
    )
    ctx.server = rec
    ctx.started_server = True
    server.save(ctx.server_path, rec)
    ctx.log(f"  started {rec.started_note}")
    return {"reused": False, **rec.handle}


def launch_native(ctx: Any, argv: list[str], env_add: dict[str, str], host: str, port: int) -> dict:
    return launch(ctx, "native", argv, env_add, host, port)


def launch_verified(ctx: Any, outputs: dict) -> bool:
    return alive(ctx.server)
