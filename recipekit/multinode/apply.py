"""`recipe apply --layout L --node N`, `recipe status|stop --layout L`: one node of a layout.

A node is applied like a single-node recipe (the backend's steps on the node's effective
config) in a state folder of its own (`state/<id>.<layout>.node<N>/`), so several nodes can
run on one host (the loopback tests). Changes to the steps:
  doctor      the usual checks, then the node's own: VLLM_HOST_IP is an address of this
              host, the head's rendezvous port is free; what only other nodes can check is printed.
  launch      refused before start when the checkpoint on disk does not have the layout's
              CHECKPOINT_SHA256 (`error[mn-checkpoint-mismatch]`, exit 4).
  wait-ready  the head waits for its API; on time-out it names the nodes that are not up.
              Headless workers serve no API: they must stay alive for a few seconds.
  smoke       head (or replica) only.
"""

from __future__ import annotations

import hashlib
import re
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from recipekit import bounded
from recipekit.apply import stamps
from recipekit.apply.auto import load_recipe
from recipekit.apply.set_flags import check_set_flags
from recipekit.apply.state import state_path
from recipekit.deployment import Deployment, node_state_id
from recipekit.errors import ExitCode, RecipekitError
from recipekit.multinode.forms import Role, serves_api
from recipekit.multinode.nodes import NodeConfig, multinode_spec
from recipekit.multinode.render import checked_nodes
from recipekit.step import Step

CHECKPOINT_MANIFESTS = ("recipekit-manifest.json", "hybrid-assembly.json")
CHECKPOINT_DIR_SETTINGS = ("MODEL_DIR", "CHECKPOINT_DIR")
WORKER_SETTLE_S = 5.0
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def node_state(recipe_id: str, layout: str, node: int) -> Path:
    return state_path(node_state_id(recipe_id, layout, node))


# --------------------------------------------------------------------------- identity


def checkpoint_dir(eff: Any) -> Path | None:
    for k in CHECKPOINT_DIR_SETTINGS:
        if k in eff.settings and eff.settings[k].value:
            return Path(str(eff.settings[k].value))
    return None


def checkpoint_sha256(folder: Path) -> tuple[str, str]:
    """(manifest file name, sha256 of its bytes): the checkpoint's hash as its manifest states it."""
    for name in CHECKPOINT_MANIFESTS:
        p = folder / name
        if p.is_file():
            data = bounded.read_bytes(p, name, 256 * 1024 * 1024, code="mn-checkpoint-manifest-unreadable")
            return name, hashlib.sha256(data).hexdigest()
    raise RecipekitError(
        code="mn-checkpoint-unknown",
        exit_code=ExitCode.DRIFT,
        location=str(folder),
        message="the checkpoint has no manifest to hash",
        hint=f"expected one of {', '.join(CHECKPOINT_MANIFESTS)}",
    )


def verify_identity(node: NodeConfig) -> str | None:
    """Refuse (exit 4) when the checkpoint on disk is not the one the layout names; the hash, or None."""
    eff = node.eff
    want = str(eff.settings["CHECKPOINT_SHA256"].value or "") if "CHECKPOINT_SHA256" in eff.settings else ""
    if not HEX64.match(want):
        return None
    folder = checkpoint_dir(eff)
    if folder is None:
        return None
    name, have = checkpoint_sha256(folder)
    if have != want:
        raise RecipekitError(
            code="mn-checkpoint-mismatch",
            exit_code=ExitCode.DRIFT,
            location=f"{node.label}",
            message=f"checkpoint {folder}/{name} has sha256 {have[:16]}..., the layout needs "
            f"{want[:16]}...; refused before start",
            hint="every node must serve the same checkpoint: fetch/convert it again or fix CHECKPOINT_SHA256",
        )
    return have


# --------------------------------------------------------------------------- doctor


def _arg(eff: Any, flag: str) -> str:
    a = eff.arg(flag)
    return "" if a is None or a.value is None else str(a.value)


def _can_bind(host: str, port: int = 0) -> bool:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def node_checks(node: NodeConfig) -> tuple[list[tuple[str, str, str]], list[str]]:
    """([(check, OK|FAIL, detail)], [what must be checked on the other nodes])."""
    eff, spec = node.eff, node.spec
    out: list[tuple[str, str, str]] = []
    ip = eff.env_value("VLLM_HOST_IP")
    if ip:
        ok = _can_bind(str(ip))
        out.append(
            (
                "node-interface",
                "OK" if ok else "FAIL",
                f"VLLM_HOST_IP={ip} is {'an address of this host' if ok else 'not an address of this host'}",
            )
        )
    elsewhere: list[str] = []
    if spec.backend == "mp":
        port = int(_arg(eff, "--master-port") or 0)
        addr = _arg(eff, "--master-addr")
        if node.role.head and port:
            ok = _can_bind(addr or "127.0.0.1", port)
            out.append(("rendezvous-port", "OK" if ok else "FAIL", f"{addr}:{port} {'free' if ok else 'in use'}"))
        others = [r for r in range(spec.nodes) if r != node.role.rank]
        elsewhere.append(
            f"nodes {others}: same image, engine and checkpoint (CHECKPOINT_SHA256); "
            f"{addr}:{port} reachable from each; their VLLM_HOST_IP is theirs"
        )
    elif spec.backend == "replicas":
        elsewhere.append("the balancer host reaches every replica's API port; /health answers 200 on each")
    else:
        elsewhere.append("ray status on the head lists every node; same image, engine and checkpoint")
    return out, elsewhere


def doctor_wrap(node: NodeConfig, step: Step) -> Step:
    def run(ctx: Any) -> dict:
        outputs = step.run(ctx) if step.run else {}
        checks, elsewhere = node_checks(node)
        for cid, st, detail in checks:
            ctx.log(f"  {st:<4} {cid}: {detail}")
        for line in elsewhere:
            ctx.log(f"  check on the other nodes: {line}")
        failed = [c for c in checks if c[1] == "FAIL"]
        if failed:
            cid, _, detail = failed[0]
            raise RecipekitError(
                code=f"doctor-{cid}",
                exit_code=ExitCode.HOST_CHECK_FAILED,
                location=node.label,
                message=detail,
                hint="fix the node's address/port settings for this host",
            )
        return {**(outputs or {}), "node_checks": checks}

    return Step(
        step.id,
        step.title + f" (+ {node.label}: interface, ports)",
        does=step.does + ["node: VLLM_HOST_IP is an address of this host; the head's rendezvous port is free"],
        inputs=step.inputs,
        run=run,
        verify=None,
        note=step.note,
    )


# --------------------------------------------------------------------------- launch / wait / smoke


def launch_wrap(node: NodeConfig, step: Step) -> Step:
    def run(ctx: Any) -> dict:
        have = verify_identity(node)
        if have:
            ctx.log(f"  checkpoint sha256 {have[:16]}... matches the layout")
        return step.run(ctx) if step.run else {}

    return Step(
        step.id,
        step.title + f" ({node.label})",
        does=["refuse when the checkpoint hash differs"] + step.does,
        inputs=step.inputs,
        run=run,
        verify=step.verify,
        note=step.note,
    )


def missing_nodes(recipe_id: str, node: NodeConfig) -> list[str]:
    """Which other nodes are not up, as far as this host knows (their state records here)."""
    from recipekit.apply.launch import alive, load_server  # lazy: pulls pydantic

    out = []
    for r in range(node.spec.nodes):
        if r == node.role.rank:
            continue
        rec = load_server(node_state(recipe_id, node.layout, r))
        if not alive(rec):
            out.append(f"node {r} ({'not started on this host' if rec is None else 'process gone'})")
    return out


def head_wait(node: NodeConfig, step: Step, timeout_s: float) -> Step:
    def run(ctx: Any) -> dict:
        from recipekit.apply.ready import wait_ready  # lazy: pulls pydantic
        from recipekit.apply.steps import base_url  # lazy: pulls pydantic

        try:
            return wait_ready(ctx, base_url(node.eff), node.eff.recipe.launch.ready_path, timeout_s)
        except RecipekitError as e:
            if e.code != "server-not-ready" or node.spec.backend == "replicas":
                raise
            gone = missing_nodes(node.eff.recipe.id, node)
            who = ", ".join(gone) if gone else ", ".join(f"node {r}" for r in range(1, node.spec.nodes))
            at = f"{_arg(node.eff, '--master-addr')}:{_arg(node.eff, '--master-port')}"
            raise RecipekitError(
                code="mn-node-missing",
                exit_code=ExitCode.FAILURE,
                location=node.label,
                message=f"the head was not ready within {timeout_s:g} s: {who} did not join {at}",
                hint="start the missing node(s) with `recipe apply ... --node N`; the head was stopped",
            ) from None

    return Step(
        step.id,
        step.title + " (head: every node must have joined)",
        does=step.does,
        inputs=step.inputs,
        run=run,
        verify=step.verify,
        note=step.note,
    )


def worker_wait(node: NodeConfig) -> Step:
    def run(ctx: Any) -> dict:
        from recipekit.apply.launch import alive  # lazy: pulls pydantic
        from recipekit.apply.ready import server_log_tail  # lazy: pulls pydantic

        t0 = time.monotonic()
        while time.monotonic() - t0 < WORKER_SETTLE_S:
            if not alive(ctx.server):
                lines = server_log_tail(ctx.server)
                raise RecipekitError(
                    code="server-died",
                    exit_code=ExitCode.FAILURE,
                    location=node.label,
                    message="the headless worker exited; last log lines:\n" + "\n".join("  | " + x for x in lines),
                )
            time.sleep(0.5)
        ctx.log(f"  {node.label}: running headless (no API; the head's readiness covers it)")
        return {"headless": True}

    return Step(
        "wait-ready",
        f"{node.label} stays up (headless: no API of its own)",
        does=[f"the worker process stays alive for {WORKER_SETTLE_S:g} s"],
        run=run,
        verify=lambda ctx, out: server_alive_safe(ctx),
    )


def server_alive_safe(ctx: Any) -> bool:
    from recipekit.apply.launch import alive  # lazy: pulls pydantic

    return alive(ctx.server)


def adjust(node: NodeConfig, timeout_s: float | None) -> Callable[[list[Step]], list[Step]]:
    def change(steps: list[Step]) -> list[Step]:
        out = []
        api = serves_api(node.spec.backend, node.role)
        wait_s = float(timeout_s or node.spec.ready_timeout_s or node.eff.recipe.launch.ready_timeout_s)
        for s in steps:
            if s.id == "doctor":
                out.append(doctor_wrap(node, s))
            elif s.id == "launch":
                out.append(launch_wrap(node, s))
            elif s.id == "wait-ready":
                out.append(head_wait(node, s, wait_s) if api else worker_wait(node))
            elif s.id == "smoke" and not api:
                out.append(
                    Step(
                        "smoke",
                        "no smoke on a headless worker (the head's smoke covers it)",
                        does=["nothing"],
                        run=lambda ctx: {},
                    )
                )
            else:
                out.append(s)
        return out

    return change


def apply_node(
    ref: str,
    layout: str,
    node: int,
    *,
    env_file: str | None = None,
    sets: Iterable[str] = (),
    dry_run: bool = False,
    only: list[str] | None = None,
    from_: str | None = None,
    trust: bool = False,
    ready_timeout_s: float | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    from recipekit.apply.pipeline import apply  # lazy: pulls filelock, pydantic, yaml

    loaded = load_recipe(ref)
    check_set_flags(loaded.recipe, sets or ())
    nodes = checked_nodes(loaded, layout, env_file=env_file, sets=tuple(sets or ()), host_paths=True)
    if not 0 <= node < len(nodes):
        raise RecipekitError(
            code="node-out-of-range",
            location="--node",
            message=f"{layout} has nodes 0..{len(nodes) - 1}, not {node}",
            hint="0 is the head",
        )
    n = nodes[node]
    ef = None if env_file is None else str(env_file)
    dep = Deployment(loaded, n.eff, layout, layout, node, len(nodes), ef, tuple(sets or ()))
    rep = apply(
        ref,
        dry_run=dry_run,
        only=only,
        from_=from_,
        trust=trust,
        log=log,
        adjust_steps=adjust(n, ready_timeout_s),
        deployment=dep,
    )
    rep["layout"], rep["node"] = layout, node
    if rep.get("server") and not serves_api(n.spec.backend, n.role):
        rep["server"] = {**rep["server"], "base_url": None}  # headless: the API is the head's
    return rep


# --------------------------------------------------------------------------- status / stop


def _multinode(target: Deployment | str, layout: str | None) -> tuple[Any, str]:
    """(loaded, multi-node layout name) of a deployment, or of a recipe reference and a layout name."""

    if isinstance(target, Deployment):
        loaded, layout = target.loaded, target.multinode
    else:
        loaded = load_recipe(target)
    multinode_spec(loaded.recipe, layout)  # an unknown name: a one-line error naming the choices
    assert layout is not None
    return loaded, layout


def layout_status(target: Deployment | str, layout: str | None = None) -> dict:
    """Every node's state on this host; exit 0 all up and the API healthy, 1 a node down, 6 none running."""
    from recipekit.apply.launch import alive, load_server  # lazy: pulls pydantic
    from recipekit.apply.ready import healthy  # lazy: pulls pydantic

    loaded, layout = _multinode(target, layout)
    spec = loaded.recipe.multinode[layout]
    rows = []
    for r in range(spec.nodes):
        role = Role(r, spec.nodes)
        rec = load_server(node_state(loaded.id, layout, r))
        up = alive(rec)
        url = rec.base_url if rec is not None and serves_api(spec.backend, role) else None
        rows.append(
            {
                "node": r,
                "role": role.name,
                "recorded": rec is not None,
                "running": up,
                "pid": getattr(rec, "pid", None),
                "label": rec.label if rec is not None else None,  # "pid N" or "container ID"
                "url": url,
                "healthy": bool(up and url and healthy(url)) if url else None,
            }
        )
    down = [x for x in rows if x["recorded"] and not x["running"]]
    sick = [x for x in rows if x["running"] and x["healthy"] is False]
    if not any(x["running"] for x in rows):
        code = ExitCode.NOT_FOUND
    elif down or sick or any(not x["recorded"] for x in rows):
        code = ExitCode.FAILURE
    else:
        code = ExitCode.OK
    return {
        "recipe": loaded.id,
        "layout": layout,
        "nodes": rows,
        "exit_code": int(code),
        "down": [f"node {x['node']} ({x['role']})" for x in down + [y for y in rows if not y["recorded"]]],
    }


def stop_layout(
    target: Deployment | str,
    node: int | None = None,
    log: Callable[[str], None] = print,
    timeout_s: float = 20.0,
    layout: str | None = None,
) -> dict:
    """Stop node `node` of a multi-node deployment, or every node (workers first)."""
    from recipekit.apply.launch import load_server, stop_server  # lazy: pulls pydantic
    from recipekit.apply.lock import LifecycleLock  # lazy: pulls filelock

    loaded, layout = _multinode(target, layout)
    spec = loaded.recipe.multinode[layout]
    results = {}
    for r in [node] if node is not None else list(range(spec.nodes - 1, -1, -1)):
        state = node_state(loaded.id, layout, r)
        if not state.exists():
            results[r] = "not running (never applied here)"
            continue
        with LifecycleLock(state / "apply.lock", "stop", log=log):
            rec = load_server(state)
            results[r] = stop_server(state, rec, log, timeout_s) if rec else "not running"
            for sid in ("launch", "wait-ready", "smoke"):
                stamps.clear_stamp(state, sid)
    return {"recipe": loaded.id, "layout": layout, "nodes": results}
