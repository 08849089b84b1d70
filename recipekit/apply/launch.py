"""The launch step shared by backends: reuse our running server when its launch inputs are
unchanged, stop it when they changed, refuse a port held by anything else, start the server
through a runner and record it in state/server.json."""

from __future__ import annotations

import errno
import socket
from pathlib import Path
from typing import Any, Callable, Optional

from recipekit.apply import server
from recipekit.apply.runners.base import LaunchRequest
from recipekit.apply.runners.registry import get_runner, runner_for
from recipekit.apply.server import ServerRecord
from recipekit.apply.stamps import inputs_key
from recipekit.apply.state import remove
from recipekit.errors import ExitCode, RecipekitError
from recipekit.server_url import base_url

__all__ = [
    "alive",
    "base_url",
    "check_port",
    "launch",
    "launch_inputs",
    "launch_native",
    "launch_verified",
    "load_server",
    "port_in_use",
    "reuse_or_stop",
    "stop_server",
]


def port_in_use(host: str, port: int) -> bool:
    """True when something listens on host:port (a bind there fails with EADDRINUSE)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        # as the server will: connections of a stopped server in TIME_WAIT do not block it
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def load_server(state: Path) -> Optional[ServerRecord]:
    """The recorded server of this state folder (None when none is recorded)."""
    return server.load(state / server.SERVER_FILE)


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
    if port_in_use(host, port):
        raise RecipekitError(
            code="port-busy",
            exit_code=ExitCode.HOST_CHECK_FAILED,
            message=f"{host}:{port} is already in use by another program",
            hint="stop that program, or pick another port: PORT=<port> ./start.sh (or --set PORT=<port>)",
        )


def launch(ctx: Any, kind: str, argv: list[str], env_add: dict[str, str], host: str, port: int) -> dict:
    """Start the server with the `kind` runner unless ours already runs with these inputs;
    record it (runner record + where it listens + launch key) in state/server.json."""
    inputs = launch_inputs(argv, env_add)
    if reuse_or_stop(ctx, inputs):
        ctx.log(f"  already running ({ctx.server.label}) with these settings: reused")
        return {"reused": True, **ctx.server.handle}
    check_port(host, port)
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
