"""Class 2: `recipe stop` / `restart` signal a process group only when the recorded pid, pgid,
start time and command line all match; otherwise they refuse (or find nothing) and signal nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from recipekit.apply.runners import native
from tests.hostile.conftest import Sandbox, guard, refused

RID = "tiny-deepseek-cpu"


@pytest.fixture
def stranger():
    """A process that is not ours: its own group, a known command line."""
    p = subprocess.Popen(["sleep", "300"], start_new_session=True)
    deadline = time.monotonic() + 5
    while native.read_cmdline(p.pid) != ["sleep", "300"] and time.monotonic() < deadline:
        time.sleep(0.01)
    yield p
    p.kill()
    p.wait(timeout=5)


def _record(sb: Sandbox, rec: dict) -> None:
    from recipekit.paths import state_dir

    d = state_dir(RID)
    d.mkdir(parents=True, exist_ok=True)
    if not isinstance(rec, dict):  # a NativeServer record as the runner returns it
        rec = rec.model_dump(mode="json")
    (d / "server.json").write_text(json.dumps({"runner": "native", "log": str(d / "server.log"), **rec}))


def _true_record(p) -> dict:
    return {
        "pid": p.pid,
        "pgid": os.getpgid(p.pid),
        "start_time": native.start_time(p.pid),
        "cmdline": native.read_cmdline(p.pid),
    }


@pytest.mark.parametrize(
    "forge",
    [
        {"start_time": -1},  # pid reused: another start time
        {"cmdline": ["vllm", "serve"]},  # another program
        {"pgid": 1},  # someone else's group
    ],
)
def test_stop_refuses_a_record_that_does_not_match(sandbox: Sandbox, stranger, forge):
    rec = {**_true_record(stranger), **forge}
    if forge.get("pgid") == 1:
        rec["pgid"] = os.getpgid(os.getpid())  # a live group that is not the process's
    _record(sandbox, rec)
    with guard(sandbox, allowed=("home/state",)):
        res = sandbox.cli("stop", RID)
    refused(res, "server-not-ours", 1)
    assert stranger.poll() is None  # alive: no signal reached it
    assert native.process_state(stranger.pid) not in (None, "Z", "X")


def test_dead_leader_with_a_strangers_group_is_not_signalled(sandbox: Sandbox, stranger):
    gone = subprocess.Popen(["true"])
    gone.wait()
    _record(sandbox, {"pid": gone.pid, "pgid": os.getpgid(stranger.pid), "start_time": 1, "cmdline": ["true"]})
    res = sandbox.cli("stop", RID)
    assert res.code == 0 and "Traceback" not in res.err
    assert "left alone" in res.out or "not running" in res.out
    assert stranger.poll() is None


def test_restart_refuses_too(sandbox: Sandbox, stranger):
    _record(sandbox, {**_true_record(stranger), "start_time": 7})
    res = sandbox.cli("restart", RID)
    refused(res, "server-not-ours", 1)
    assert stranger.poll() is None


@pytest.mark.parametrize("bad", [{"pid": "1"}, {"pgid": [1]}, {"cmdline": "sleep 300"}, {"started_at": "now"}])
def test_server_record_with_a_wrong_shape_is_refused(sandbox: Sandbox, bad):
    _record(sandbox, {"pid": 123456, "pgid": 123456, "start_time": 1, "cmdline": ["x"], **bad})
    with guard(sandbox):
        res = sandbox.cli("status", RID)
    refused(sandbox.cli("stop", RID), "server-record-invalid", 2)
    assert res.code == 6 and "not running" in res.out and "server.json is damaged" in res.out  # status only reports


def test_our_own_server_is_still_stopped(sandbox: Sandbox, tmp_path):
    rec = native.start(["/bin/sh", "-c", "sleep 300"], dict(os.environ), tmp_path / "server.log")
    try:
        _record(sandbox, rec)
        res = sandbox.cli("stop", RID)
        assert res.code == 0 and "stopped" in res.out, res
        assert native.group_members(rec.pgid) == []
    finally:
        try:
            os.killpg(rec.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
