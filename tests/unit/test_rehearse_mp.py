"""An mp layout rehearsed on one machine: the CMP recipe's pp2-tp4-mp worker started natively
under the stand-in engine, the head's rendezvous, and the rows (recipekit/rehearse/mp_rows.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from recipekit.apply.auto import load_recipe
from recipekit.apply.launch import load_server
from recipekit.apply.server import NativeServer
from recipekit.backends.base import argv_of, serve_groups
from recipekit.deployment import resolve
from recipekit.error_codes import CODES
from recipekit.multinode.nodes import node_config
from recipekit.multinode.render import checked_nodes
from recipekit.rehearse import mp_records, mp_rows
from recipekit.rehearse import standin_engine as se
from recipekit.rehearse.report import FAILED, OK, Rehearsal
from recipekit.rehearse.standin_launch import StandinContext
from tests.ports import free_port
from tests.rehearse_steps import APPLY_STEPS

CMP = "recipes/deepseek-ai/DeepSeek-V4.1-Flash-1017/cmp170hx-4x.yaml"
LAYOUT = "pp2-tp4-mp"
CATALOG = "vllm-cmp170hx/1.2.0"


@pytest.fixture(scope="module")
def loaded():
    return load_recipe(CMP)


def _nodes(loaded, port: int):
    dep = resolve(loaded, LAYOUT, None, node_config=node_config)
    sets = mp_rows.mp_settings(dep, port)
    return checked_nodes(loaded, LAYOUT, sets=[s for s, _ in sets], host_paths=True), sets


def test_mp_settings_put_every_node_on_loopback_and_the_rendezvous_on_the_given_port(loaded):
    dep = resolve(loaded, LAYOUT, None, node_config=node_config)
    assert mp_rows.is_mp(dep)
    got = dict(s.split("=", 1) for s, _ in mp_rows.mp_settings(dep, 41234))
    assert got == {
        "HEAD_ADDRESS": "127.0.0.1",
        "MASTER_PORT": "41234",
        "NET_IFNAME": "lo",
        "NODE1_ADDRESS": "127.0.0.2",
    }
    assert not mp_rows.is_mp(resolve(loaded, "2x-tp4-replicas", None, node_config=node_config))


def test_the_worker_runs_its_own_rendered_serve_command_under_the_standin(loaded, tmp_path):
    nodes, _ = _nodes(loaded, 41235)
    cmd, subs = mp_rows.worker_command(nodes[1], StandinContext(catalog=CATALOG, engine_venv=tmp_path))
    assert cmd[1:3] == ["-m", "recipekit.rehearse.standin_engine"]
    assert f"{se.ENV_RENDEZVOUS_TIMEOUT}={mp_rows.WORKER_WAIT_S}" in cmd
    words = [w for w in cmd[cmd.index("recipekit.rehearse.standin_engine") + 1 :] if not w.startswith(se.PREFIX)]
    rendered = argv_of([w for g in serve_groups(nodes[1].eff) for w in g], nodes[1].eff)
    assert words == rendered  # the node's argv, unchanged
    tail = " ".join(words)
    assert "--nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port 41235 --headless" in tail
    assert subs[0].what == "docker launch of node 1" and "same container name" in subs[0].why


def test_a_head_whose_worker_never_comes_fails_with_a_registered_code(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    port = free_port()
    env = {se.ENV_CATALOG: CATALOG, se.ENV_VENV: str(tmp_path), se.ENV_DRY_RUN: "1", se.ENV_RENDEZVOUS_TIMEOUT: "1"}
    flags = ["--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port", str(port)]
    rc = se.main(["serve", str(model), *flags], env)
    err = capsys.readouterr().err
    assert rc == 1 == int(CODES["rehearse-mp-rendezvous-timeout"].exit_code)
    line = next(ln for ln in err.splitlines() if ln.startswith("error["))
    assert line.startswith("error[rehearse-mp-rendezvous-timeout] the mp head's rendezvous failed: workers [1]")
    assert f"127.0.0.1:{port}" in line and "[standin-engine] exec" not in err  # it never served


def _mp(loaded, tmp_path: Path, port: int, monkeypatch):
    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path / "home"))  # the worker's record lives in the home
    nodes, sets = _nodes(loaded, port)
    reh = Rehearsal(recipe="cmp", layout=LAYOUT, node=0, home=str(tmp_path))
    ctx = StandinContext(catalog=CATALOG, engine_venv=tmp_path / "venv")
    return mp_rows.MpNodes(nodes, ctx, reh, lambda s: None, sets), nodes, reh


def test_the_worker_joins_the_head_and_ends_with_it(loaded, tmp_path, capsys, monkeypatch):
    port = free_port()
    mp, nodes, reh = _mp(loaded, tmp_path, port, monkeypatch)
    mp.start()
    try:
        assert [r.step for r in reh.rows] == ["node 1 launch"] and reh.rows[0].result == OK
        assert "HEAD_ADDRESS -> 127.0.0.1" in reh.rows[0].standin
        model = tmp_path / "model"
        model.mkdir()
        (model / "config.json").write_text("{}")
        head = argv_of([w for g in serve_groups(nodes[0].eff) for w in g], nodes[0].eff)
        head[2] = str(model)  # the head's model folder on this machine
        env = {
            se.ENV_CATALOG: CATALOG,
            se.ENV_VENV: str(tmp_path),
            se.ENV_DRY_RUN: "1",
            se.ENV_RENDEZVOUS_TIMEOUT: "60",
        }
        assert se.main(head, env) == 0  # waited for rank 1, then (dry run) closed the rendezvous
        assert "rendezvous: worker rank 1 of 2 reported" in capsys.readouterr().err
        assert mp_records.wait_ended(mp.workers[0].rec, 30)  # the worker ends with its head
        mp.check_rendezvous()
        mp.stop(lambda: "stopped")
    finally:
        mp.kill()
    rdv, stop = reh.rows[1], reh.rows[2]
    assert (rdv.step, rdv.result) == ("rendezvous", OK), rdv.error
    assert rdv.standin.startswith(
        f"the stand-in engine's rendezvous at --master-addr:--master-port: rank 1 joined the head at 127.0.0.1:{port} "
    )
    assert (stop.step, stop.result) == ("mp stop", OK) and "rank 1 ended" in stop.standin
    assert reh.error_code is None
    assert load_server(mp_records.worker_state(nodes[1])) is None  # the ended worker's record is gone


def test_a_worker_that_never_joins_fails_the_rendezvous_row_and_is_killed(loaded, tmp_path, monkeypatch):
    monkeypatch.setattr(mp_rows, "WORKER_END_S", 2)
    mp, _, reh = _mp(loaded, tmp_path, free_port(), monkeypatch)
    mp.start()
    try:
        mp.check_rendezvous()  # no head ever ran
        mp.stop(lambda: "stopped")
    finally:
        mp.kill()
    rdv, stop = reh.rows[1], reh.rows[2]
    assert rdv.result == FAILED and rdv.error.startswith("error[rehearse-mp-rendezvous-timeout] worker(s) never joined")
    assert reh.error_code == "rehearse-mp-rendezvous-timeout"
    assert stop.result == OK and "rank 1 killed (it never joined)" in stop.standin
    assert not mp.workers[0].running() and load_server(mp_records.worker_state(mp.nodes[1])) is None


def test_joined_reads_the_workers_own_line():
    text = (
        "x\n[standin-engine] rendezvous: rank 1 joined the head at 127.0.0.1:5 after 12.5 s; waiting while it serves\n"
    )
    assert mp_rows.joined(text) == [(1, "127.0.0.1:5", 12.5)]
    assert mp_rows.joined("rendezvous: no head at 127.0.0.1:5 in 3 s") == []


def test_a_restarted_head_finds_the_workers_started_for_its_restart(loaded, tmp_path, capsys, monkeypatch):
    port = free_port()
    mp, nodes, reh = _mp(loaded, tmp_path, port, monkeypatch)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    head = argv_of([w for g in serve_groups(nodes[0].eff) for w in g], nodes[0].eff)
    head[2] = str(model)
    env = {se.ENV_CATALOG: CATALOG, se.ENV_VENV: str(tmp_path), se.ENV_DRY_RUN: "1", se.ENV_RENDEZVOUS_TIMEOUT: "60"}
    try:
        mp.start()
        assert se.main(head, env) == 0
        assert mp_records.wait_ended(mp.workers[0].rec, 30)  # the first head's worker ended with it
        mp.start(again=True)  # what the driver's restart runs after stopping the layout
        mp.check_rendezvous(again=True)  # before the restarted head: the first join is not this one's
        assert reh.rows[-1].result == FAILED and "rank 1 (still waiting" in reh.rows[-1].error
        reh.error_code = None
        assert se.main(head, env) == 0  # the restarted head's rendezvous: the new worker reports
        assert mp_records.wait_ended(mp.workers[1].rec, 30)  # it logged its join, then ended with its head
        mp.check_rendezvous(again=True)
        mp.stop(lambda: "stopped")
    finally:
        mp.kill()
    assert [r.step for r in reh.rows] == [
        "node 1 launch",
        "node 1 launch (for restart)",
        "rendezvous (after restart)",
        "rendezvous (after restart)",
        "mp stop",
    ]
    assert reh.rows[3].result == OK and "rank 1 joined the head" in reh.rows[3].standin
    assert capsys.readouterr().err.count("rendezvous: worker rank 1 of 2 reported") == 2
    assert not any(w.running() for w in mp.workers)
    assert reh.rows[4].result == OK and "rank 1 ended, rank 1 ended" in reh.rows[4].standin
    assert mp.workers[0].log == mp.workers[1].log == mp_records.worker_state(nodes[1]) / "server.log"
    assert mp.workers[0].rec.pid != mp.workers[1].rec.pid


def test_the_worker_is_recorded_as_its_nodes_deployment_so_status_and_stop_find_it(loaded, tmp_path, monkeypatch):
    """The worker's record is the one `apply --layout L --node 1` writes: `status --layout` sees
    node 1 running (not "not started on this host"), `stop --layout` stops it and forgets it."""
    from recipekit.multinode.apply import layout_status, stop_layout

    mp, nodes, reh = _mp(loaded, tmp_path, free_port(), monkeypatch)
    try:
        mp.start()
        state = tmp_path / "home" / "state" / f"{nodes[1].eff.recipe.id}.{LAYOUT}.node1"
        assert mp_records.worker_state(nodes[1]) == state
        rec = load_server(state)
        assert isinstance(rec, NativeServer) and rec == mp.workers[0].rec
        assert rec.recipe == nodes[1].eff.recipe.id and rec.base_url is None and rec.port == 8000
        assert rec.log == str(state / "server.log") and rec.cmdline[1:3] == ["-m", "recipekit.rehearse.standin_engine"]
        assert "--node-rank" in rec.cmdline and rec.cmdline[rec.cmdline.index("--node-rank") + 1] == "1"
        time.sleep(1)  # the engine's command line is the recorded one (no `env` wrapper that execs)
        assert mp.workers[0].running()
        row = layout_status(nodes[1].eff.recipe.id, LAYOUT)["nodes"][1]
        assert (row["recorded"], row["running"], row["pid"], row["url"]) == (True, True, rec.pid, None)
        out = stop_layout(nodes[1].eff.recipe.id, 1, log=lambda s: None, timeout_s=5, layout=LAYOUT)
        assert out["nodes"][1].startswith("stopped")
        assert not mp.workers[0].running() and load_server(state) is None
    finally:
        mp.kill()
    assert reh.rows[0].result == OK and str(state / "server.json") in reh.rows[0].standin


@pytest.mark.slow
def test_node_1s_own_steps_run_first_in_its_own_folder_with_node_0s_standins(tmp_path, monkeypatch):
    """Node 1's doctor runs the doctor's checks on the same host stand-in as node 0's, in node 1's
    state folder; without a dockerd it FAILs there, as node 0's does, and nothing after it runs."""
    from recipekit.rehearse.driver import rehearse
    from recipekit.rehearse.report import NOT_REACHED, STANDIN

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-dockerd.sock")
    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path / "users-home"))
    home = tmp_path / "reh"
    reh = rehearse(CMP, layout=LAYOUT, home=home, sets=(f"PORT={free_port()}",), log=lambda s: None, trust=True)
    steps = [r.step for r in reh.rows]
    assert steps[:4] == ["preflight", "node 1 doctor", "node 1 fetch", "node 1 prepare-checkpoint"]
    assert steps[4:12] == APPLY_STEPS[1:]  # the head's own steps after the worker's
    assert "logs --node 1" in steps and steps.index("logs --node 1") == steps.index("logs") + 1
    d = reh.row("node 1 doctor")
    assert d.kind == STANDIN and "cmp170hx-4x" in d.standin
    assert d.result == FAILED and d.error.startswith("error[host-check-failed]") and "docker" in d.error
    assert reh.error_code == "host-check-failed"
    fetch = reh.row("node 1 fetch")
    assert fetch.result == NOT_REACHED and f"{home}/nodes/node1/models" in fetch.standin
    assert all(r.result == NOT_REACHED for r in reh.rows[4:12])
    rid = "deepseek-v4.1-flash-1017-cmp170hx-4x"
    assert (home / "state" / f"{rid}.{LAYOUT}.node1").is_dir()
    assert not (home / "state" / f"{rid}.{LAYOUT}.node0").exists()  # node 0's plan never ran
    assert not (tmp_path / "users-home").exists()


def test_the_post_apply_rows_of_an_mp_layout_find_every_node(loaded):
    """Each worker's own log, and the whole layout's restart as `restart-of-a-node`'s hint says;
    a single-node deployment keeps `recipe restart`."""
    from recipekit.rehearse.driver import POST_APPLY, _post_apply_commands

    dep = resolve(loaded, LAYOUT, None, node_config=node_config)
    got = dict(_post_apply_commands(dep, (1,), trust=True))
    assert list(got) == ["status", "logs", "logs --node 1", "bench --quick", "gates", "restart", "stop"]
    assert got["logs --node 1"] == [("logs", "--node", "1", "--lines", "20")]
    assert got["restart"] == [("stop",), ("apply", "--node", "0", "--from", "launch", "--trust")]
    assert got["stop"] == [("stop",)]
    single = _post_apply_commands(resolve(loaded, None, None), (), trust=False)
    assert single == [(name, [argv]) for name, argv in POST_APPLY]
