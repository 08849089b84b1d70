"""The launch step shared by backends: reuse our running server when its launch inputs are
unchanged, stop it when they changed, refuse a port held by anything else, start the server
through a runner and record it in state/server.json."""
from __future__ import annotations

import errno
import os
import socket
from typing import Callable, Optional

from recipekit.apply.state import read_json, remove, write_json
from recipekit.apply.stamps import inputs_key
from recipekit.errors import ExitCode, RecipekitError


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


# server.json fields and the types apply writes; a record with another shape is refused
_SERVER_FIELDS: dict[str, tuple[type, ...]] = {
    "pid": (int,), "pgid": (int,), "start_time": (int,), "cmdline": (list,), "argv": (list,), "log": (str,),
    "started_at": (int, float), "port": (int,), "host": (str,), "base_url": (str,), "container_id": (str,),
    "launch_key": (str,), "recipe": (str,), "docker_host": (str,),
}


def load_server(state) -> Optional[dict]:
    rec = read_json(state / "server.json")
    if not (isinstance(rec, dict) and rec.get("runner") in ("native", "docker")):
        return None
    for key, types in _SERVER_FIELDS.items():
        v = rec.get(key)
        if v is not None and (not isinstance(v, types) or isinstance(v, bool)
                              or (isinstance(v, list) and not all(isinstance(x, str) for x in v))):
            raise RecipekitError(code="state-invalid", location=f"{state / 'server.json'} $.{key}",
                                 message=f"the server record's {key} is {type(v).__name__}, not what apply writes",
                                 hint="remove the file if nothing of ours is running (check with `ps`)")
    return rec


def alive(rec: Optional[dict]) -> bool:
    if not rec:
        return False
    from recipekit.apply.ready import server_alive
    try:
        return server_alive(rec)
    except RecipekitError:
        return False


def stop_server(state, rec: Optional[dict], log: Callable[[str], None] = lambda s: None, timeout_s: float = 20.0) -> str:
    """Stop the recorded server (only if it is ours) and forget it."""
    if rec is None:
        return "not running"
    if rec.get("runner") == "docker":
        from recipekit.apply.runners import docker as dk
        what = dk.stop(dk.client(rec.get("docker_host")), rec, timeout_s=int(timeout_s), log=log)
    else:
        from recipekit.apply.runners import native
        what = native.stop(rec, timeout_s=timeout_s, log=log)
    remove(state / "server.json")
    return what


def launch_inputs(argv: list[str], env: dict, extra: Optional[dict] = None) -> dict:
    return {"argv": list(argv), "env": dict(sorted(env.items())), **(extra or {})}


def reuse_or_stop(ctx, inputs: dict) -> bool:
    """True when our server is running with the same launch inputs (nothing to do)."""
    rec = ctx.server
    if rec is None:
        return False
    if alive(rec):
        if rec.get("launch_key") == inputs_key(inputs):
            return True
        ctx.log("  the running server was started with other settings; stopping it")
    what = stop_server(ctx.state, rec, ctx.log)
    ctx.log(f"  previous server: {what}")
    ctx.server = None
    return False


def check_port(host: str, port: int) -> None:
    if port_in_use(host, port):
        raise RecipekitError(code="port-busy", exit_code=ExitCode.HOST_CHECK_FAILED,
                             message=f"{host}:{port} is already in use by another program",
                             hint="stop that program, or pick another port: PORT=<port> ./start.sh "
                                  "(or --set PORT=<port>)")


def base_url(host: str, port: int) -> str:
    """The URL a client on this host uses: a wildcard or empty bind address is reached on loopback."""
    h = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return f"http://{f'[{h}]' if ':' in h else h}:{port}"     # an IPv6 literal goes in brackets


def record_started(ctx, rec: dict, host: str, port: int, inputs: dict) -> None:
    """Remember the server this run started (runner record + where it listens + launch key)."""
    rec.update({"host": host, "port": port, "launch_key": inputs_key(inputs), "base_url": base_url(host, port)})
    ctx.server = rec
    ctx.started_server = True
    write_json(ctx.server_path, rec)


def launch_native(ctx, argv: list[str], env_add: dict, host: str, port: int) -> dict:
    from recipekit.apply.runners import native
    inputs = launch_inputs(argv, env_add)
    if reuse_or_stop(ctx, inputs):
        ctx.log(f"  already running (pid {ctx.server['pid']}) with these settings: reused")
        return {"reused": True, "pid": ctx.server["pid"]}
    check_port(host, port)
    env = {**os.environ, **env_add}
    rec = native.start(argv, env, ctx.log_path, cwd=ctx.state)
    rec["recipe"] = ctx.recipe.id
    record_started(ctx, rec, host, port, inputs)
    ctx.log(f"  started pid {rec['pid']} (log: {rec['log']})")
    return {"reused": False, "pid": rec["pid"]}


def launch_verified(ctx, outputs: dict) -> bool:
    return alive(ctx.server)
