"""The native runner on real processes (identity by pid + start time + cmdline, group stop with
escalation) and the docker runner's parsing of the rendered `docker run` (no daemon needed)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from recipekit.apply.runners import native


def _start(tmp_path, script: str) -> dict:
    return native.start(["/bin/sh", "-c", script], dict(os.environ), tmp_path / "server.log")


def _wait_members(pgid: int, n: int, timeout: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = native.group_members(pgid)
        if len(m) >= n:
            return m
        time.sleep(0.05)
    return native.group_members(pgid)


def test_start_records_identity_and_stop_ends_the_whole_group(tmp_path):
    rec = _start(tmp_path, "sleep 300 | sleep 300")
    try:
        assert rec["pgid"] == rec["pid"] and os.getpgid(rec["pid"]) == rec["pid"]   # its own group
        assert os.getsid(rec["pid"]) == rec["pid"]                                  # setsid
        assert rec["cmdline"] == ["/bin/sh", "-c", "sleep 300 | sleep 300"]
        members = _wait_members(rec["pgid"], 3)
        assert len(members) == 3
        assert native.is_ours(rec)
        what = native.stop(rec, timeout_s=5)
        assert what == "stopped (SIGINT)"
        assert native.group_members(rec["pgid"]) == []
        assert not native.is_ours(rec)
    finally:
        try:
            os.killpg(rec["pgid"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_process_ignoring_sigint_and_sigterm_gets_sigkill(tmp_path):
    rec = _start(tmp_path, "trap '' INT TERM; sleep 300 & wait; sleep 300")
    try:
        _wait_members(rec["pgid"], 2)
        t0 = time.monotonic()
        assert native.stop(rec, timeout_s=0.6) == "stopped (SIGKILL)"
        assert time.monotonic() - t0 < 8
        assert native.group_members(rec["pgid"]) == []
    finally:
        try:
            os.killpg(rec["pgid"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_record_that_does_not_match_the_process_is_never_signalled(tmp_path):
    rec = _start(tmp_path, "sleep 300")
    try:
        forged = dict(rec, cmdline=["/usr/bin/something-else"])
        assert not native.is_ours(forged)
        assert native.stop(forged, timeout_s=1).startswith("not running (pid reused")
        assert native.is_ours(rec)                      # still alive, untouched
        reused = dict(rec, start_time=rec["start_time"] - 1)   # same pid, another start time
        assert not native.is_ours(reused)
    finally:
        native.stop(rec, timeout_s=2)
    assert not native.is_ours(rec)


def test_log_file_gets_the_output(tmp_path):
    rec = _start(tmp_path, "echo hello-from-server; exec sleep 300")
    try:
        deadline = time.monotonic() + 5
        while "hello-from-server" not in (tmp_path / "server.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        text = (tmp_path / "server.log").read_text()
        assert "=== recipekit: start" in text and "hello-from-server" in text
    finally:
        native.stop(rec, timeout_s=2)


def test_docker_run_argv_parses_into_docker_py_arguments():
    pytest.importorskip("docker")
    from docker.types import DeviceRequest, Ulimit

    from recipekit.apply.runners.docker import parse_run_argv
    from recipekit.backends.registry import get_backend
    from recipekit.catalog import load_recipe
    from recipekit.config import effective_config
    eff = effective_config(load_recipe("deepseek-v4.1-flash-1017-cmp170hx-4x"), layout="pp4", environ={})
    argv = get_backend("cuda_sm80").render(eff, "docker").argv
    image, kw = parse_run_argv(argv)
    assert image == "ds41-cmp170hx:latest"
    assert kw["name"] == "ds41-flash" and kw["detach"] is True and kw["ipc_mode"] == "host"
    assert kw["entrypoint"] == "vllm" and kw["command"][0] == "serve"
    assert "--pipeline-parallel-size" in kw["command"]
    assert kw["cap_add"] == ["SYS_NICE"]
    assert kw["ports"] == {"8000/tcp": ("127.0.0.1", 8000)}
    assert "<MODELS_DIR>:/models:ro" in kw["volumes"]
    assert kw["environment"]["VLLM_PLUGINS"] == "vllm_exl3"
    assert kw["ulimits"] == [Ulimit(name="memlock", soft=-1, hard=-1), Ulimit(name="stack", soft=67108864, hard=67108864)]
    assert isinstance(kw["device_requests"][0], DeviceRequest) and kw["device_requests"][0]["Count"] == -1


def test_docker_run_argv_refuses_unknown_flags():
    pytest.importorskip("docker")
    from recipekit.apply.runners.docker import parse_run_argv
    from recipekit.errors import RecipekitError
    with pytest.raises(RecipekitError) as e:
        parse_run_argv(["docker", "run", "--mystery", "x", "img"])
    assert e.value.code == "docker-arg-unsupported"
    with pytest.raises(RecipekitError) as e:
        parse_run_argv(["docker", "run", "-d", "--name", "x"])
    assert e.value.code == "docker-image-missing"


def test_the_recorded_cmdline_is_the_one_exec_settled_on(tmp_path):
    # A script runs as its interpreter: /proc shows ["/bin/sh", script], and only once exec has
    # placed the new argv (right after Popen returns it often still reads empty).
    script = tmp_path / "engine"
    script.write_text("#!/bin/sh\nsleep 300\n")
    script.chmod(0o755)
    for _ in range(8):
        rec = native.start([str(script)], dict(os.environ), tmp_path / "server.log")
        try:
            assert rec["cmdline"] == ["/bin/sh", str(script)]
            assert native.is_ours(rec)
        finally:
            native.stop(rec, timeout_s=2)
