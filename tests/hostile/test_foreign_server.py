"""Class 8: a server on the recipe's port that this deployment did not start. Whatever it answers
(the truth, only /health, a 400 MB model list, one byte every 5 s, an endless stream), `recipe
apply` stops before its first step with `port-taken` (exit 3) naming the process that listens,
sends it no request, and leaves no server record or stamp behind."""

from __future__ import annotations

import os

import pytest

from tests.hostile.conftest import Sandbox, guard, refused
from tests.lying_server import LyingServer

MODES = ["honest", "health-only", "huge-models", "slow-loris", "endless-stream", "wrong-model"]


@pytest.mark.parametrize("mode", MODES)
def test_apply_refuses_a_port_another_server_holds(sandbox: Sandbox, mode: str) -> None:
    with LyingServer(mode, served_name="tiny-deepseek") as s, guard(sandbox, allowed=("home",)):
        res = sandbox.cli("apply", "tiny-deepseek-cpu", "--set", f"PORT={s.port}")
        hits = list(s.hits)
    refused(res, "port-taken", 3)
    assert f"127.0.0.1:{s.port} is taken by another program: pid {os.getpid()} (" in res.err
    assert "PORT=NNNN ./start.sh" in res.err and "--set PORT=NNNN" in res.err
    assert "> doctor" not in res.err  # before the first step
    assert hits == []
    state = sandbox.home / "state" / "tiny-deepseek-cpu"
    assert not (state / "server.json").exists() and not (state / "overrides.json").exists()


def test_the_port_from_the_environment_is_checked_the_same(sandbox: Sandbox, monkeypatch) -> None:
    # ./start.sh passes PORT through the environment
    with LyingServer("honest") as s:
        monkeypatch.setenv("PORT", str(s.port))
        res = sandbox.cli("apply", "tiny-deepseek-cpu")
        hits = list(s.hits)
    refused(res, "port-taken", 3)
    assert f"127.0.0.1:{s.port}" in res.err and hits == []
