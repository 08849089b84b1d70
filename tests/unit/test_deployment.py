"""One deployment, resolved once (recipekit/deployment.py): the one server address, the one
"is this layout multi-node?" decision, and the commands that act on a deployment finding the
server its apply starts: bench and gate against a stand-in server on the recipe's address,
a changed PORT found by status, bench and gate through the state record apply writes, and
stop/status/logs reading both layout kinds."""

from __future__ import annotations

import json
import os

import pytest

from recipekit.apply.runners.native import ProcessIdentity
from recipekit.apply.server import SERVER_FILE, NativeServer, save
from recipekit.catalog import load_recipe
from recipekit.config import effective_config
from recipekit.deployment import (
    LOOPBACK,
    MULTI,
    SINGLE,
    Address,
    is_multinode,
    layout_kind,
    resolve,
    server_address,
)
from recipekit.errors import RecipekitError
from tests.lying_server import LyingServer
from tests.ports import free_port

CPU = "tiny-deepseek-cpu"
CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"
GAUDI = "deepseek-v4.1-flash-1017-gaudi2-8x"
ADDRESS_KEYS = ("HOST", "BIND", "PORT", "NODE_ADDRESS", "LAYOUT")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private RECIPEKIT_HOME, no address overrides in the process env, no ./.env."""
    h = tmp_path / "home"
    monkeypatch.setenv("RECIPEKIT_HOME", str(h))
    for k in ADDRESS_KEYS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.chdir(tmp_path)
    return h


def _eff(ref, **kw):
    return effective_config(load_recipe(ref), environ=kw.pop("environ", {}), **kw)


# --------------------------------------------------------------------------- the one address


def test_server_address_of_each_recipe():
    # the CPU recipe names HOST, the CMP recipe BIND (docker publishes the port there), the Gaudi
    # recipe neither and passes no --host/--port: vLLM's defaults, reached on loopback
    assert server_address(_eff(CPU)) == Address("127.0.0.1", 8000)
    cmp = server_address(_eff(CMP))
    assert (cmp.listen_host, cmp.port, cmp.url) == ("127.0.0.1", 8000, "http://127.0.0.1:8000")
    gaudi = server_address(_eff(GAUDI))
    assert (gaudi.listen_host, gaudi.port) == (LOOPBACK, 8000)
    assert server_address(_eff(GAUDI)).url == "http://127.0.0.1:8000"


def test_server_address_follows_every_override_layer(tmp_path):
    envf = tmp_path / "x.env"
    envf.write_text("PORT=18001\n")
    assert server_address(_eff(CPU, env_file=envf)).port == 18001
    assert server_address(_eff(CPU, env_file=envf, environ={"PORT": "18002"})).port == 18002
    assert server_address(_eff(CPU, env_file=envf, environ={"PORT": "18002"}, sets=["PORT=18003"])).port == 18003
    a = server_address(_eff(CMP, sets=["BIND=0.0.0.0", "PORT=18004"]))
    assert (a.listen_host, a.local_host, a.url) == ("0.0.0.0", "127.0.0.1", "http://127.0.0.1:18004")
    assert server_address(_eff(CPU, sets=["HOST=::1"])).url == "http://[::1]:8000"


def test_a_node_is_reached_at_its_node_address():
    from recipekit.multinode.nodes import node_config

    n1 = node_config(load_recipe(CMP), "2x-tp4-replicas", 1, environ={}, sets=["NODE1_ADDRESS=10.0.0.7"])
    a = server_address(n1.eff)
    assert (a.listen_host, a.reach_host, a.local_host) == ("0.0.0.0", "10.0.0.7", "127.0.0.1")


def test_one_layout_kind_decision():
    r = load_recipe(CMP).recipe
    assert [layout_kind(r, x) for x in (None, "tp4", "pp4")] == [SINGLE] * 3
    assert [layout_kind(r, x) for x in ("pp2-tp4-mp", "2x-tp4-replicas")] == [MULTI] * 2
    assert is_multinode(r, "pp2-tp4-mp") and not is_multinode(r, "pp4")
    with pytest.raises(RecipekitError) as ei:
        layout_kind(r, "pp5")
    assert ei.value.code == "unknown-layout" and ei.value.hint == "did you mean 'pp4'?"


def test_deployment_state_folder_and_runner(home):
    from recipekit.cli.common import node_config

    loaded = load_recipe(CMP)
    single = resolve(loaded, "pp4", environ={})
    assert (single.state_id, single.runner, single.eff.layout, single.is_multinode) == (CMP, "docker", "pp4", False)
    assert single.state == home / "state" / CMP
    multi = resolve(loaded, "pp2-tp4-mp", 1, environ={}, node_config=node_config)
    assert (multi.state_id, multi.node, multi.nodes, multi.is_multinode) == (f"{CMP}.pp2-tp4-mp.node1", 1, 2, True)
    with pytest.raises(RecipekitError) as ei:
        resolve(loaded, "pp4", 1, environ={})
    assert ei.value.code == "node-needs-multinode-layout"


# --------------------------------------------------------------------------- bench and gate find the server


def _record(home, state_id: str, port: int, recipe: str) -> None:
    """The server record apply writes (recipekit.apply.launch.launch): the runner's record of a
    live process (here the test's own, which runs the stand-in server) plus where it listens."""
    me = ProcessIdentity.of(os.getpid())
    assert me is not None and me.cmdline
    rec = NativeServer(
        pid=os.getpid(),
        pgid=me.pgid,
        start_time=me.start_time,
        cmdline=me.cmdline,
        argv=["vllm", "serve"],
        recipe=recipe,
        host="127.0.0.1",
        port=port,
        launch_key="0" * 64,
        base_url=f"http://127.0.0.1:{port}",
    )
    state = home / "state" / state_id
    state.mkdir(parents=True, exist_ok=True)
    save(state / SERVER_FILE, rec)


def _served_paths(s: LyingServer) -> set[str]:
    return {path for _, path in s.hits}


@pytest.mark.parametrize("ref", [GAUDI, CMP])
def test_bench_quick_finds_the_server_on_the_recipes_address(ref, home, tmp_path, run_cli):
    port = free_port()
    with LyingServer("honest", port=port) as s:
        code, out, err = run_cli("bench", ref, "--quick", "--out", str(tmp_path / "b"), "--set", f"PORT={port}")
        assert "no-server-url" not in err and "server-unreachable" not in err, err
        assert "/v1/completions" in _served_paths(s) or "/v1/chat/completions" in _served_paths(s)
    assert code == 0, err
    report = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert f"127.0.0.1:{port}" in json.dumps(report)


@pytest.mark.parametrize("ref", [GAUDI, CMP])
def test_gate_finds_the_server_on_the_recipes_address(ref, home, monkeypatch, run_cli):
    port = free_port()
    monkeypatch.setenv("PORT", str(port))
    with LyingServer("honest", port=port) as s:
        code, out, err = run_cli("gate", ref, "--only", "structured", "--format", "json")
    assert "no-server-url" not in err and "server-unreachable" not in err, err
    assert ("GET", "/v1/models") in s.hits and "/v1/chat/completions" in _served_paths(s)
    doc = json.loads(out)
    assert f"127.0.0.1:{port}" in json.dumps(doc)


def test_a_changed_port_is_found_by_status_bench_and_gate(home, tmp_path, run_cli):
    """`PORT=N ./start.sh` then plain `recipe status|bench|gate`: the state record apply wrote names N."""
    port = free_port()
    with LyingServer("honest", port=port) as s:
        _record(home, CPU, port, CPU)
        code, out, err = run_cli("status", CPU, "--format", "json")
        st = json.loads(out)
        assert (code, st["url"], st["healthy"]) == (0, f"http://127.0.0.1:{port}", True), err
        s.hits.clear()
        code, out, err = run_cli("bench", CPU, "--quick", "--out", str(tmp_path / "b"))
        assert code == 0, err
        assert "/v1/completions" in _served_paths(s) or "/v1/chat/completions" in _served_paths(s)
        s.hits.clear()
        code, out, err = run_cli("gate", CPU, "--only", "structured", "--format", "json")
        assert "server-unreachable" not in err, err
        assert ("GET", "/v1/models") in s.hits
    assert f"127.0.0.1:{port}" in out


def test_without_a_record_the_config_address_is_used(home, run_cli):
    code, out, err = run_cli("bench", CPU, "--quick", "--set", "PORT=9")
    assert code != 0 and "http://127.0.0.1:9/" in err and "no-server-url" not in err


# --------------------------------------------------------------------------- every layout kind


@pytest.mark.parametrize("layout", ["tp4", "pp4"])
def test_stop_status_logs_read_a_single_node_variant(layout, home, run_cli):
    code, out, err = run_cli("status", CMP, "--layout", layout, "--format", "json")
    assert code == 6 and json.loads(out)["running"] is False and "unknown-multinode-layout" not in err
    code, out, err = run_cli("stop", CMP, "--layout", layout)
    assert (code, out.strip()) == (0, f"{CMP}: not running (never applied here)"), err
    code, out, err = run_cli("logs", CMP, "--layout", layout)
    assert code == 6 and f"error[no-logs] no server log for {CMP}" in err
    state = home / "state" / CMP
    state.mkdir(parents=True)
    (state / "server.log").write_text("line one\nline two\n")
    code, out, err = run_cli("logs", CMP, "--layout", layout, "-n", "1")
    assert (code, out) == (0, "line two\n"), err


@pytest.mark.parametrize("layout", ["pp2-tp4-mp", "2x-tp4-replicas"])
def test_stop_status_logs_read_a_multinode_layout(layout, home, run_cli):
    code, out, err = run_cli("status", CMP, "--layout", layout)
    assert code == 6 and f"{CMP} {layout} node 1 (worker 1): not started on this host" in out, err
    code, out, err = run_cli("stop", CMP, "--layout", layout)
    assert code == 0 and out.splitlines() == [
        f"{CMP} {layout} node 1: not running (never applied here)",
        f"{CMP} {layout} node 0: not running (never applied here)",
    ], err
    state = home / "state" / f"{CMP}.{layout}.node1"
    state.mkdir(parents=True)
    (state / "server.log").write_text("worker says hi\n")
    code, out, err = run_cli("logs", CMP, "--layout", layout, "--node", "1")
    assert (code, out) == (0, "worker says hi\n"), err
    code, out, err = run_cli("logs", CMP, "--layout", layout)  # the head's log: none yet
    assert code == 6 and f"no server log for {CMP}.{layout}.node0" in err


def test_an_unknown_layout_names_both_kinds(home, run_cli):
    for cmd in ("status", "stop", "logs"):
        code, out, err = run_cli(cmd, CMP, "--layout", "pp2-tp4")
        assert code == 2 and "error[unknown-layout]" in err and "did you mean 'pp2-tp4-mp'" in err, (cmd, err)


# --------------------------------------------------------------------------- --set serve flags


@pytest.mark.parametrize(
    "cmd", [("render", CPU), ("plan", CPU), ("apply", CPU, "--dry-run"), ("render", CMP, "--layout", "pp2-tp4-mp")]
)
def test_set_serve_flags_are_checked_against_the_engine_catalog(cmd, home, run_cli):
    code, out, err = run_cli(*cmd, "--set", "--no-such-flag=1")
    assert code == 2 and "error[unknown-engine-flag] --set: --set --no-such-flag is not a `serve` flag" in err, err
    code, out, err = run_cli(*cmd, "--set", "--max-num-seq=4")
    assert code == 2 and "did you mean '--max-num-seqs'?" in err, err
    code, out, err = run_cli(*cmd, "--set", "--max-num-seqs=4")
    assert code == 0, err


def test_a_removed_flag_given_with_set_names_its_replacement(home, run_cli):
    code, out, err = run_cli("render", CPU, "--set", "--num-scheduler-steps=4")
    assert code == 2 and "error[removed-engine-flag]" in err and "multi-step scheduling was removed" in err


# --------------------------------------------------------------------------- the other commands


def test_oracle_capture_defaults_to_the_recipes_server(home, tmp_path, run_cli):
    port = free_port()
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"prompts": [[104, 105, 33, 10]]}))
    with LyingServer("honest", port=port) as s:
        _record(home, CPU, port, CPU)
        code, out, err = run_cli("oracle", "capture", "--recipe", CPU, "--prompts", str(prompts), "-o", "r.json")
        assert code == 0, err
        assert ("POST", "/v1/completions") in s.hits
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["server"]["base_url"] == f"http://127.0.0.1:{port}"
    code, out, err = run_cli("oracle", "capture", "--prompts", str(prompts), "-o", "r2.json")
    assert code == 2 and "error[no-target]" in err and not (tmp_path / "r2.json").exists()


def test_multinode_layouts_in_apply_plan_restart(home, run_cli):
    code, out, err = run_cli("apply", CMP, "--layout", "pp2-tp4-mp", "--dry-run")
    assert code == 2 and "error[multinode-needs-node]" in err and "--node 0 on the head" in err
    code, out, err = run_cli("apply", CMP, "--layout", "pp4", "--node", "1", "--dry-run")
    assert code == 2 and "error[node-needs-multinode-layout]" in err
    code, out, err = run_cli("plan", CMP, "--layout", "2x-tp4-replicas")
    assert code == 2 and "error[plan-of-a-node]" in err
    code, out, err = run_cli("restart", CMP, "--layout", "2x-tp4-replicas")
    assert code == 2 and "error[restart-of-a-node]" in err
    code, out, err = run_cli("plan", CMP, "--layout", "pp4", "--format", "json")
    assert code == 0 and json.loads(out)["layout"] == "pp4", err


def test_no_module_works_out_the_address_again():
    """The server's address is read in recipekit/deployment.py only (it was worked out six ways)."""
    import re
    from pathlib import Path

    import recipekit

    root = Path(recipekit.__file__).resolve().parent.parent
    # the pod's containerPort is the port inside the pod, not where a client reaches the server
    allowed = {
        "recipekit/multinode/k8s.py": {'"PORT"'},
        # the rehearsal finds which `${NAME}` setting a node's NODE_ADDRESS names, to set it to loopback
        # (it reads the recipe's per-node declaration, not the address: that comes from deployment.py)
        "recipekit/rehearse/replica_rows.py": {'"NODE_ADDRESS"'},
    }
    pattern = re.compile(r'"(HOST|BIND|PORT|NODE_ADDRESS)"')
    found = []
    for folder in ("recipekit", "backends", "bench", "tools", "patches", "hybrid"):
        for py in (root / folder).rglob("*.py"):
            rel = str(py.relative_to(root))
            if rel == "recipekit/deployment.py":
                continue
            for m in pattern.finditer(py.read_text()):
                if m.group(0) not in allowed.get(rel, set()):
                    found.append(f"{rel}: {m.group(0)}")
    assert found == []


def test_an_address_the_user_gives_wins_over_the_record(home, tmp_path, run_cli):
    recorded, asked = free_port(), free_port()
    _record(home, CPU, recorded, CPU)
    with LyingServer("honest", port=asked) as s:
        code, out, err = run_cli("bench", CPU, "--quick", "--out", str(tmp_path / "b"), "--set", f"PORT={asked}")
        assert code == 0, err
        assert "/v1/completions" in _served_paths(s) or "/v1/chat/completions" in _served_paths(s)
    assert f"127.0.0.1:{asked}" in (tmp_path / "b" / "bench.json").read_text()
