"""An mp rehearsal's worker as a deployment node: started by apply's own native runner and
recorded where `recipe apply --layout L --node N` records that node (state/<id>.<layout>.nodeN/
server.json, its output in that folder's server.log), so `status`, `logs --node N`, `stop` and
the restart find it without `--url`, as they find a node its own apply started.

The record is the one apply's launch step writes (recipekit/apply/launch.py): the runner's record
(pid, process group, start time, command line, log) plus the recipe, the node's address and port
and the launch key; its base_url is None, as `apply --node N` reports for a headless worker (its
API is the head's). Everything lives in the rehearsal's RECIPEKIT_HOME.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from recipekit.apply import server
from recipekit.apply.launch import alive, launch_inputs, load_server, stop_server
from recipekit.apply.lock import LifecycleLock
from recipekit.apply.runners.base import LaunchRequest
from recipekit.apply.runners.registry import get_runner
from recipekit.apply.server import ServerRecord
from recipekit.apply.stamps import inputs_key
from recipekit.deployment import server_address
from recipekit.multinode.apply import node_state
from recipekit.multinode.nodes import NodeConfig

LOG_FILE = "server.log"  # the name apply's launch gives the server's log (ApplyContext.log_path)


def worker_state(node: NodeConfig) -> Path:
    return node_state(node.eff.recipe.id, node.layout, node.role.rank)


def start_worker(node: NodeConfig, cmd: list[str], rendered: list[str], log: Callable[[str], None]) -> ServerRecord:
    """Start `cmd` (the node's rendered serve command `rendered`, as the stand-in runs it) with
    the native runner in the node's state folder and record it there. A live server an earlier
    rehearsal in this home left in that record is stopped first, as apply's launch does."""
    state = worker_state(node)
    state.mkdir(parents=True, exist_ok=True)
    with LifecycleLock(state / "apply.lock", "launch", log=log):
        old = load_server(state)
        if old is not None:
            log(f"  {node.label}: previous server: {stop_server(state, old, log)}")
        req = LaunchRequest(argv=list(cmd), recipe_id=node.eff.recipe.id, log_path=state / LOG_FILE, cwd=state)
        rec = get_runner("native").start(req)
        addr = server_address(node.eff)
        rec = rec.model_copy(
            update={
                "recipe": node.eff.recipe.id,
                "host": addr.local_host,
                "port": addr.port,
                "launch_key": inputs_key(launch_inputs(rendered, {})),
                "base_url": None,
            }
        )
        server.save(state / server.SERVER_FILE, rec)
    return rec


def wait_ended(rec: ServerRecord, timeout_s: float) -> bool:
    """True once the recorded process is gone (it ended, or a `recipe stop` stopped it)."""
    deadline = time.monotonic() + timeout_s
    while alive(rec):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def forget(node: NodeConfig, rec: ServerRecord, log: Callable[[str], None], timeout_s: float = 5.0) -> str:
    """Stop the worker if it still runs and remove its record (only when the record is still this one)."""
    state = worker_state(node)
    with LifecycleLock(state / "apply.lock", "stop", log=log):
        now = load_server(state)
        if now is not None and now == rec:
            return stop_server(state, rec, log, timeout_s)
    return get_runner("native").stop(rec, timeout_s, log) if alive(rec) else "not running"
