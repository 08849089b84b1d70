"""`recipe status | stop | logs | restart`: the server a recipe's apply started.

stop acts only on the recorded server and only while it is ours (native: pid + process group +
start time + /proc cmdline; docker: container id + label); a record whose process is gone is stale and is
cleared. stop and restart take the lifecycle lock, so they never race an apply.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from recipekit.apply import pipeline, stamps
from recipekit.apply.auto import load_recipe
from recipekit.apply.launch import alive, load_server, stop_server
from recipekit.apply.lock import LifecycleLock
from recipekit.apply.ready import healthy
from recipekit.apply.runners import native
from recipekit.apply.runners.base import tail
from recipekit.apply.runners.registry import runner_for
from recipekit.apply.server import NativeServer, ServerRecord
from recipekit.apply.state import read_json
from recipekit.deployment import Deployment, is_multinode, resolve
from recipekit.errors import ExitCode, RecipekitError
from recipekit.step import ORDER

SERVER_STEPS = ("launch", "wait-ready", "smoke")


def _deployment(target: Deployment | str) -> Deployment:
    """The deployment acted on: as the command resolved it, or a recipe reference's default one."""
    return target if isinstance(target, Deployment) else resolve(load_recipe(target))


def status(target: Deployment | str) -> dict:
    dep = _deployment(target)
    rid, state = dep.id, dep.state
    damaged = None
    try:
        rec = load_server(state)
    except RecipekitError as e:
        if e.code != "server-record-invalid":
            raise
        # status only reports: a record it cannot read identifies no server (stop still refuses it)
        rec, damaged = None, {"path": e.location, "problem": e.message, "hint": e.hint}
    running = alive(rec)
    url = runner_for(rec).base_url(rec) if rec else None
    ok = bool(running and url and healthy(url))
    steps = {}
    for sid in ORDER:
        st = stamps.read_stamp(state, sid)
        steps[sid] = st.get("time") if st else None
    out: dict[str, Any] = {
        "recipe": rid,
        "state_dir": str(state),
        "running": running,
        "healthy": ok,
        "url": url,
        "stale_record": bool(rec and not running),
        "damaged_record": damaged,
        "stamps": steps,
    }
    if rec:
        out["server"] = {
            k: getattr(rec, k, None) for k in ("runner", "pid", "container_id", "port", "log", "started_at")
        }
        out["server"]["label"] = rec.label
        if running and rec.started_at:
            out["uptime_s"] = round(time.time() - rec.started_at)
    out["exit_code"] = int(ExitCode.OK if ok else (ExitCode.FAILURE if running else ExitCode.NOT_FOUND))
    return out


def stop(target: Deployment | str, log: Callable[[str], None] = print, timeout_s: float = 20.0) -> dict:
    dep = _deployment(target)
    rid, state = dep.id, dep.state
    if not state.exists():
        return {"recipe": rid, "result": "not running (never applied here)"}
    with LifecycleLock(state / "apply.lock", "stop", log=log):
        rec = load_server(state)
        _refuse_foreign(state, rec)
        what = stop_server(state, rec, log, timeout_s) if rec else "not running"
        for sid in SERVER_STEPS:
            stamps.clear_stamp(state, sid)
    return {"recipe": rid, "result": what}


def _refuse_foreign(state: Path, rec: Optional[ServerRecord]) -> None:
    """stop/restart signal only our own process: a live process at the recorded pid that does not
    match the record (pgid, start time, command line) is refused and nothing is signalled."""

    if not isinstance(rec, NativeServer):
        return
    why = native.mismatch(rec)
    if why is not None and why != "no such process":
        raise RecipekitError(
            code="server-not-ours",
            exit_code=ExitCode.FAILURE,
            location=str(state / "server.json"),
            message=f"the recorded server is not the process apply started: {why}; nothing was signalled",
            hint="if nothing of ours is running, remove the record and re-run",
        )


def logs(
    target: Deployment | str, lines: int = 50, follow: bool = False, write: Optional[Callable[[str], object]] = None
) -> int:
    write = write or sys.stdout.write  # looked up at call time: stdout may be redirected
    dep = _deployment(target)
    rid, state = dep.state_id, dep.state
    rec = load_server(state)
    path = state / "server.log"
    if rec is not None and alive(rec):
        runner = runner_for(rec)
        if runner.live_log(rec) is None:  # the output is held by the runner (docker), not a growing file
            for line in runner.logs(rec, lines):
                write(line + "\n")
            return 0
    if not path.exists():
        raise RecipekitError(
            code="no-logs",
            exit_code=ExitCode.NOT_FOUND,
            message=f"no server log for {rid}",
            hint="apply the recipe first",
        )
    if not path.is_file():  # a FIFO or device there would block the follow below forever
        raise RecipekitError(
            code="log-unreadable",
            location=str(path),
            message="the server log is not a regular file",
            hint="delete it; the next apply writes a new one",
        )
    for line in tail(path, lines):
        write(line + "\n")
    if follow:
        with open(path, "rb") as f:
            f.seek(0, 2)
            try:
                while True:
                    chunk = f.read()
                    if chunk:
                        write(chunk.decode(errors="replace"))
                    else:
                        time.sleep(0.5)
            except KeyboardInterrupt:
                return 0
    return 0


def restart(target: Deployment | str, log: Callable[[str], None] = print, trust: bool = False) -> dict:
    """Stop, then apply from the launch step, both on one deployment (the same state folder and
    server address). With no layout, .env or --set given, the last apply's ones are reused, so
    the server comes back on the same port with the same settings."""
    dep = _deployment(target)
    if not any(dep.overrides().values()):
        last = read_json(dep.state / pipeline.OVERRIDES_FILE)
        if isinstance(last, dict) and any(last.get(k) for k in ("layout", "env_file", "sets")):
            layout = last.get("layout")
            if layout and is_multinode(dep.recipe, layout):
                _refuse_node_restart(dep.id, layout)
            dep = resolve(dep.loaded, layout, None, last.get("env_file"), tuple(last.get("sets") or ()))
            log(f"restart: reusing the last apply's options: {last}")
    if dep.is_multinode:
        _refuse_node_restart(dep.id, str(dep.multinode))
    res = stop(dep, log=log)
    log(f"stop: {res['result']}")
    return pipeline.apply(dep.id, from_="launch", log=log, trust=trust, deployment=dep)


def _refuse_node_restart(recipe_id: str, layout: str) -> None:
    raise RecipekitError(
        code="restart-of-a-node",
        location="--layout",
        message=f"{layout} is a multi-node layout: restart each node",
        hint=f"recipe stop {recipe_id} --layout {layout} --node N, then recipe apply ... --node N --from launch",
    )
