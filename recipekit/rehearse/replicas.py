"""A replicas layout run for real on loopback: one stand-in engine per node behind the rendered HAProxy.

`replicas_running(nodes, standin=..., model_dir=..., root=...)` (a context manager) starts every
node's serve command under the stand-in engine (recipekit.rehearse.standin_engine, natively),
each bound to the address the balancer reaches that node at (recipekit.multinode.balancer
replica_address: its NODE_ADDRESS and PORT; give each node a loopback address, e.g. 127.0.0.1
and 127.0.0.2), then HAProxy with the layout's rendered, read-back and `haproxy -c`-checked
configuration (balancer.checked_config). It waits until HAProxy's own health check reports every
server UP and /v1/models through the balancer lists the served name, yields a ReplicasRun, and
stops HAProxy and every node (SIGINT, then SIGKILL) on the way out.

Declared substitutions (ReplicasRun.substitutions): the model folder each node serves (the
container path of a docker recipe does not exist natively), each node's listen address (the
balancer's address for it; the real node binds its BIND on its own host), the frontend's
wildcard bind made loopback (this machine is shared), and HAProxy's admin socket added for the
UP/DOWN read-out.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

from recipekit import bounded
from recipekit.backends.base import argv_of, serve_groups
from recipekit.errors import ExitCode, RecipekitError
from recipekit.multinode.balancer import checked_config, replica_address
from recipekit.multinode.nodes import NodeConfig
from recipekit.rehearse import standin_engine as se
from recipekit.rehearse.standin_launch import StandinContext, Substitution, standin_launch_argv

STOP_S = 30


@dataclass
class ReplicasRun:
    lb_url: str  # the balancer's frontend, on loopback
    served_name: str
    node_urls: list[str]
    haproxy_cfg: Path
    stat_socket: Path
    logs: list[Path]
    substitutions: list[Substitution] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list, repr=False)
    haproxy: Optional[subprocess.Popen] = field(default=None, repr=False)

    def server_states(self) -> dict[str, str]:
        return haproxy_states(self.stat_socket)


def haproxy_states(sock: Path) -> dict[str, str]:
    """server name -> HAProxy's status column ("UP", "DOWN", "DOWN 1/2", ...) of backend `replicas`."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(sock))
        s.sendall(b"show stat\n")
        data = b""
        while len(data) < (1 << 20) and (chunk := s.recv(65536)):
            data += chunk
    rows = [ln.split(",") for ln in data.decode(errors="replace").splitlines() if ln and not ln.startswith("#")]
    return {r[1]: r[17] for r in rows if len(r) > 17 and r[0] == "replicas" and r[1].startswith("node")}


def node_serve_argv(node: NodeConfig, engine_venv: Path, model_dir: Path) -> tuple[list[str], Substitution]:
    """The node's serve command with its model folder replaced by `model_dir` (declared)."""
    words = argv_of([w for g in serve_groups(node.eff) for w in g], node.eff)
    if words[:2] != ["vllm", "serve"] and not (words and Path(words[0]).name == "vllm" and words[1:2] == ["serve"]):
        raise RecipekitError(code="rehearse-launch-invalid", message=f"{node.label}: not a `vllm serve` command")
    model = words[2] if len(words) > 2 and not words[2].startswith("-") else None
    flags = words[3:] if model is not None else words[2:]
    sub = Substitution(f"model {model}", str(model_dir), "the node's model folder on this machine (run natively)")
    return [str(engine_venv / "bin" / "vllm"), "serve", str(model_dir), *flags], sub


@contextmanager
def replicas_running(
    nodes: list[NodeConfig],
    *,
    standin: StandinContext,
    model_dir: Path,
    root: Path,
    ready_timeout_s: float = 900,
    log: Callable[[str], None] = lambda s: None,
) -> Iterator[ReplicasRun]:
    exe = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not Path(exe).exists():
        raise RecipekitError(
            code="rehearse-replicas-failed",
            exit_code=ExitCode.FAILURE,
            message="haproxy is not installed",
            hint="Debian package haproxy",
        )
    root.mkdir(parents=True, exist_ok=True)
    text, note = checked_config(nodes)
    log(f"balancer config: {note}")
    served = _served_name(nodes[0])
    run = ReplicasRun(
        lb_url="",
        served_name=served,
        node_urls=[],
        haproxy_cfg=root / "haproxy.cfg",
        stat_socket=root / "haproxy.sock",
        logs=[],
    )
    try:
        for n in nodes:
            address = replica_address(n)
            argv, sub = node_serve_argv(n, standin.engine_venv, model_dir)
            cmd, subs = standin_launch_argv(argv, runner="native", standin=standin, env={se.ENV_BIND: address})
            run.substitutions += [sub, *subs]
            run.substitutions.append(
                Substitution(f"node {n.role.rank} listen address", address, "what the balancer reaches the node at")
            )
            path = root / f"node{n.role.rank}.log"
            run.logs.append(path)
            with open(path, "wb") as f:
                run.procs.append(subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True))
            run.node_urls.append(f"http://{address}")
            log(f"node {n.role.rank}: stand-in engine on {address} (log {path})")
        lb_text, lb_port = _loopback_frontend(text, run)
        lb_text += f"\nglobal\n    stats socket {run.stat_socket} mode 600 level admin\n"
        run.substitutions.append(Substitution("(none)", f"stats socket {run.stat_socket}", "the UP/DOWN read-out"))
        run.haproxy_cfg.write_text(lb_text)
        hlog = root / "haproxy.log"
        with open(hlog, "wb") as f:
            run.haproxy = subprocess.Popen(
                [exe, "-db", "-f", str(run.haproxy_cfg)], stdout=f, stderr=subprocess.STDOUT, start_new_session=True
            )
        run.lb_url = f"http://127.0.0.1:{lb_port}"
        _wait_all_up(run, len(nodes), ready_timeout_s, log)
        yield run
    finally:
        _stop(run, log)


def _served_name(node: NodeConfig) -> str:
    words = argv_of([w for g in serve_groups(node.eff) for w in g], node.eff)
    return words[words.index("--served-model-name") + 1] if "--served-model-name" in words else ""


def _loopback_frontend(text: str, run: ReplicasRun) -> tuple[str, int]:
    out, port = [], 0
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("bind "):
            host, _, p = s.split()[1].rpartition(":")
            port = int(p)
            if host in ("0.0.0.0", "*", "::", ""):
                run.substitutions.append(
                    Substitution(f"bind {host}:{p}", f"bind 127.0.0.1:{p}", "the balancer listens on loopback here")
                )
                line = line.replace(f"{host}:{p}", f"127.0.0.1:{p}")
        out.append(line)
    if not port:
        raise RecipekitError(
            code="rehearse-replicas-failed",
            exit_code=ExitCode.FAILURE,
            message="the balancer config has no frontend bind",
        )
    return "\n".join(out) + "\n", port


def _wait_all_up(run: ReplicasRun, n: int, timeout_s: float, log: Callable[[str], None]) -> None:
    import httpx  # lazy: only when a replicas run waits

    deadline = time.monotonic() + timeout_s
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        for i, p in enumerate(run.procs):
            if p.poll() is not None:
                raise _failed(f"node {i}'s stand-in engine exited with {p.returncode}", run.logs[i])
        if run.haproxy is not None and run.haproxy.poll() is not None:
            raise _failed(f"haproxy exited with {run.haproxy.returncode}", run.haproxy_cfg.parent / "haproxy.log")
        try:
            states = run.server_states() if run.stat_socket.exists() else {}
        except OSError:
            states = {}
        if len(states) == n and set(states.values()) == {"UP"}:
            try:
                r = httpx.get(run.lb_url + "/v1/models", timeout=10)
                ids = [m.get("id") for m in r.json().get("data", [])] if r.status_code == 200 else []
            except (httpx.HTTPError, ValueError):
                ids = []
            if ids == [run.served_name]:
                log(f"balancer {run.lb_url}: {n} replicas UP, /v1/models lists {run.served_name}")
                return
        time.sleep(1)
    raise RecipekitError(
        code="rehearse-replicas-failed",
        exit_code=ExitCode.FAILURE,
        message=f"the replicas were not all UP behind {run.lb_url} in {timeout_s:.0f} s (haproxy says {states})",
        hint="see " + ", ".join(str(p) for p in run.logs),
    )


def _failed(what: str, path: Path) -> RecipekitError:
    try:
        tail = bounded.read_tail(path, "log", 4096).decode(errors="replace").strip().splitlines()[-5:]
    except (OSError, RecipekitError):
        tail = []
    return RecipekitError(
        code="rehearse-replicas-failed",
        exit_code=ExitCode.FAILURE,
        message=f"{what}" + (": " + " | ".join(tail) if tail else ""),
        hint=f"see {path}",
    )


def _stop(run: ReplicasRun, log: Callable[[str], None]) -> None:
    procs = ([run.haproxy] if run.haproxy is not None else []) + run.procs
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGINT if p is not run.haproxy else signal.SIGTERM)
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)
    if procs:
        log(f"stopped haproxy and {len(run.procs)} stand-in engines")
