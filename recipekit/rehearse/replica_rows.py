"""A replicas layout's rehearsal rows: every node of the layout served by the stand-in engine on
loopback behind the rendered HAProxy config (recipekit/rehearse/replicas.py), after node 0's
rehearsal of apply's plan.

Rows: `replicas` (N stand-in engines started natively, HAProxy's own health check reports every
server UP), `balancer` (/v1/models through HAProxy lists the served name; each node answers it
too), `completion via balancer` (one completion per node through HAProxy; HAProxy's per-server
session counts say which nodes took requests) and `replicas stop` (every process gone, no port
answers). The layout's nodes are resolved with the rehearsal's settings and each node's address
setting (`NODE_ADDRESS: '${NAME}'` in the layout's per_node) made 127.0.0.<rank+1>, declared.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable, Optional

from recipekit.apply.lifecycle import stop
from recipekit.backends.docker_run import docker_argv
from recipekit.deployment import Deployment
from recipekit.errors import ExitCode, RecipekitError
from recipekit.multinode.nodes import NodeConfig
from recipekit.multinode.render import checked_nodes
from recipekit.rehearse.replicas import ReplicasRun, replicas_running
from recipekit.rehearse.report import FAILED, OK, REAL, STANDIN, Rehearsal, Row
from recipekit.rehearse.standin_launch import StandinContext, Substitution

_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
COMPLETION_TIMEOUT_S = 120
ROWS = ("replicas", "balancer", "completion via balancer", "replicas stop")


def is_replicas(dep: Deployment) -> bool:
    ml = (dep.recipe.multinode or {}).get(dep.multinode or "")
    return ml is not None and ml.backend == "replicas"


def loopback_addresses(dep: Deployment) -> list[tuple[str, str]]:
    """(`NAME=127.0.0.<rank+1>`, why) for each node whose NODE_ADDRESS is a `${NAME}` setting."""
    ml = dep.recipe.multinode[dep.multinode or ""]
    out = []
    for rank, pn in enumerate(ml.per_node or []):
        m = _REF.match(str((pn.settings or {}).get("NODE_ADDRESS", "")))
        if m:
            out.append((f"{m.group(1)}=127.0.0.{rank + 1}", f"node {rank}'s address, on loopback here"))
    return out


def host_model_dir(node: NodeConfig, model: str, cwd: Path) -> Path:
    """The host folder behind the serve command's model path: a docker recipe's `-v HOST:CTR`
    mount with the longest container prefix; a native recipe's path as it is."""
    if str(node.eff.recipe.launch.runner) != "docker":
        return Path(model)
    argv = docker_argv(node.eff)
    best: Optional[tuple[str, str]] = None
    for flag, value in zip(argv, argv[1:]):
        if flag not in ("-v", "--volume"):
            continue
        host, _, rest = value.partition(":")
        ctr = rest.split(":")[0].rstrip("/")
        if (model == ctr or model.startswith(ctr + "/")) and (best is None or len(ctr) > len(best[1])):
            best = (host, ctr)
    if best is None:
        return Path(model)
    return (cwd / best[0] / model[len(best[1]) :].lstrip("/")).resolve()


def _serve_model(node: NodeConfig) -> str:
    from recipekit.backends.base import argv_of, serve_groups  # lazy: only for a replicas layout

    words = argv_of([w for g in serve_groups(node.eff) for w in g], node.eff)
    return words[2] if len(words) > 2 and not words[2].startswith("-") else ""


def session_counts(run: ReplicasRun) -> dict[str, int]:
    """HAProxy's total sessions per server (show stat column stot), read from its admin socket."""
    import socket  # lazy: only for a replicas layout

    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(run.stat_socket))
        s.sendall(b"show stat\n")
        data = b""
        while len(data) < (1 << 20) and (chunk := s.recv(65536)):
            data += chunk
    rows = [ln.split(",") for ln in data.decode(errors="replace").splitlines() if ln and not ln.startswith("#")]
    return {r[1]: int(r[7]) for r in rows if len(r) > 7 and r[0] == "replicas" and r[1].startswith("node")}


def balancer_note(states: dict[str, str], ids: list[str], node_ids: list[list[str]], served: str) -> Optional[str]:
    """Why the balancer check fails (None: it passed): every server UP, the balancer's and every
    node's /v1/models list exactly the served name."""
    if not states or set(states.values()) != {"UP"}:
        return f"haproxy says {states}"
    if ids != [served]:
        return f"/v1/models through haproxy lists {ids}, not [{served!r}]"
    bad = [i for i, got in enumerate(node_ids) if got != [served]]
    return f"node(s) {bad} list {[node_ids[i] for i in bad]}" if bad else None


def completion_note(before: dict[str, int], after: dict[str, int], n: int) -> tuple[str, bool]:
    """The per-server sessions the completions added, and whether every server took one."""
    added = {k: after.get(k, 0) - before.get(k, 0) for k in sorted(after)}
    return ", ".join(f"{k} +{v}" for k, v in added.items()), len(added) == n and all(v > 0 for v in added.values())


def _row(reh: Rehearsal, step: str, kind: str, what: str = "") -> Row:
    row = Row(step=step, kind=kind, standin=what)
    reh.rows.append(row)
    return row


def _fail(reh: Rehearsal, row: Row, t0: float, e: BaseException) -> None:
    row.seconds = row.seconds if row.seconds is not None else round(time.monotonic() - t0, 1)
    row.result = FAILED
    row.error = f"error[{e.code}] {e.message}" if isinstance(e, RecipekitError) else f"{type(e).__name__}: {e}"
    reh.error_code = reh.error_code or (e.code if isinstance(e, RecipekitError) else "rehearse-replicas-failed")


def _failed(what: str) -> RecipekitError:
    return RecipekitError(code="rehearse-replicas-failed", exit_code=ExitCode.FAILURE, message=what)


def rehearse_replicas(
    dep: Deployment, reh: Rehearsal, ctx: Optional[StandinContext], root: Path, log: Callable[[str], None]
) -> None:
    """Append the replicas rows to `reh`; they are not reached when the rehearsal already failed."""
    import httpx  # lazy: only for a replicas layout

    rows = [_row(reh, ROWS[0], STANDIN), _row(reh, ROWS[1], REAL), _row(reh, ROWS[2], REAL), _row(reh, ROWS[3], REAL)]
    if reh.error_code is not None or ctx is None:
        return
    t0 = time.monotonic()
    try:
        # node 0's rehearsed engine holds the node's PORT: the replicas bind it next
        log(f"replicas: node 0's rehearsed engine: {stop(dep, log=log)['result']}")
        addrs = loopback_addresses(dep)
        sets = (*dep.sets, *(s for s, _ in addrs))
        nodes = checked_nodes(dep.loaded, dep.multinode or "", sets=list(sets), host_paths=True)
        model_dir = host_model_dir(nodes[0], _serve_model(nodes[0]), dep.state)
        if not model_dir.is_dir():
            raise _failed(f"the model folder {model_dir} (node 0's serve path on this host) is not there")
        native = StandinContext(catalog=ctx.catalog, engine_venv=ctx.engine_venv, model=ctx.model)
        with replicas_running(nodes, standin=native, model_dir=model_dir, root=root, log=log) as run:
            subs = [Substitution(s.split("=")[0], s.split("=")[1], why) for s, why in addrs] + run.substitutions
            rows[0].standin = (
                f"{len(nodes)} stand-in engines natively on {', '.join(run.node_urls)} behind haproxy "
                f"({run.lb_url}, the rendered config, `haproxy -c` checked), all UP by its health check; "
                + "; ".join(dict.fromkeys(s.line() for s in subs))
            )
            rows[0].seconds, rows[0].result = round(time.monotonic() - t0, 1), OK

            t0, row = time.monotonic(), rows[1]
            ids = [m.get("id") for m in httpx.get(run.lb_url + "/v1/models", timeout=10).json().get("data", [])]
            node_ids = [
                [m.get("id") for m in httpx.get(u + "/v1/models", timeout=10).json().get("data", [])]
                for u in run.node_urls
            ]
            why = balancer_note(run.server_states(), ids, node_ids, run.served_name)
            row.standin = f"/v1/models through haproxy and on each node lists {run.served_name}"
            row.seconds = round(time.monotonic() - t0, 1)
            if why:
                raise _failed(why)
            row.result = OK

            t0, row = time.monotonic(), rows[2]
            before = session_counts(run)
            for _ in nodes:
                r = httpx.post(
                    run.lb_url + "/v1/completions",
                    json={"model": run.served_name, "prompt": "def", "max_tokens": 4},
                    timeout=COMPLETION_TIMEOUT_S,
                )
                text = r.json()["choices"][0]["text"] if r.status_code == 200 else None
                if not isinstance(text, str):
                    raise _failed(f"a completion through haproxy answered {r.status_code}: {r.text[:200]}")
            spread, every = completion_note(before, session_counts(run), len(nodes))
            row.standin = f"{len(nodes)} completions through haproxy (sessions per server: {spread})"
            row.seconds = round(time.monotonic() - t0, 1)
            if not every:
                raise _failed(f"haproxy did not hand every server a completion ({spread})")
            row.result = OK
            procs = [run.haproxy, *run.procs]
            urls = [*run.node_urls, run.lb_url]
            t3 = time.monotonic()
    except (RecipekitError, httpx.HTTPError, ValueError, KeyError, OSError) as e:
        row = next((r for r in rows if r.result != OK), rows[-1])
        _fail(reh, row, t0, e)
        log(f"replicas: {row.error}")
        return
    # replicas_running stopped everything on the way out: check it
    alive = [p.pid for p in procs if p is not None and p.poll() is None]
    answering = []
    for u in urls:
        try:
            httpx.get(u + "/v1/models", timeout=3)
            answering.append(u)
        except httpx.HTTPError:
            pass
    rows[3].standin = f"haproxy and {len(procs) - 1} stand-in engines stopped; none of {', '.join(urls)} answers"
    rows[3].seconds = round(time.monotonic() - t3, 1)
    if alive or answering:
        _fail(reh, rows[3], t3, _failed(f"still running: {alive}; still answering: {answering}"))
        return
    rows[3].result = OK
