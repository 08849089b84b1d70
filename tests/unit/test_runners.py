"""The native runner on real processes (identity by pid + start time + cmdline, group stop with
escalation) and the docker runner's parsing of the rendered `docker run` (no daemon needed)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Iterator

import pytest

from recipekit.apply.runners import native
from recipekit.apply.server import NativeServer


def _start(tmp_path, script: str) -> NativeServer:
    return native.start(["/bin/sh", "-c", script], dict(os.environ), tmp_path / "server.log")


@contextlib.contextmanager
def _running(tmp_path, script: str) -> Iterator[NativeServer]:
    """A started `sh -c script`; when the block ends its whole group is gone, whatever the test did."""
    rec = _start(tmp_path, script)
    try:
        yield rec
    finally:
        native.stop(rec, timeout_s=2)
        try:
            os.killpg(rec.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _wait_members(pgid: int, n: int, timeout: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = native.group_members(pgid)
        if len(m) >= n:
            return m
        time.sleep(0.05)
    return native.group_members(pgid)


def test_start_records_identity_and_stop_ends_the_whole_group(tmp_path):
    with _running(tmp_path, "sleep 300 | sleep 300") as rec:
        assert rec.pgid == rec.pid and os.getpgid(rec.pid) == rec.pid  # its own group
        assert os.getsid(rec.pid) == rec.pid  # setsid
        assert rec.cmdline == ["/bin/sh", "-c", "sleep 300 | sleep 300"]
        members = _wait_members(rec.pgid, 3)
        assert len(members) == 3
        assert native.is_ours(rec)
        what = native.stop(rec, timeout_s=5)
        assert what == "stopped (SIGINT)"
        assert native.group_members(rec.pgid) == []
        assert not native.is_ours(rec)


def test_a_process_ignoring_sigint_and_sigterm_gets_sigkill(tmp_path):
    with _running(tmp_path, "trap '' INT TERM; sleep 300 & wait; sleep 300") as rec:
        _wait_members(rec.pgid, 2)
        t0 = time.monotonic()
        assert native.stop(rec, timeout_s=0.6) == "stopped (SIGKILL)"
        assert time.monotonic() - t0 < 8
        assert native.group_members(rec.pgid) == []


def test_a_record_that_does_not_match_the_process_is_never_signalled(tmp_path):
    with _running(tmp_path, "sleep 300") as rec:
        forged = rec.model_copy(update={"cmdline": ["/usr/bin/something-else"]})
        assert not native.is_ours(forged)
        assert native.stop(forged, timeout_s=1).startswith("not running (pid reused")
        assert native.is_ours(rec)  # still alive, untouched
        reused = rec.model_copy(update={"start_time": rec.start_time - 1})  # same pid, another start time
        assert not native.is_ours(reused)
    assert not native.is_ours(rec)


def test_log_file_gets_the_output(tmp_path):
    with _running(tmp_path, "echo hello-from-server; exec sleep 300"):
        deadline = time.monotonic() + 5
        while "hello-from-server" not in (tmp_path / "server.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        text = (tmp_path / "server.log").read_text()
        assert "=== recipekit: start" in text and "hello-from-server" in text


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
    assert kw["ulimits"] == [
        Ulimit(name="memlock", soft=-1, hard=-1),
        Ulimit(name="stack", soft=67108864, hard=67108864),
    ]
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
    assert e.value.code == "docker-run-no-image"


def test_the_recorded_cmdline_is_the_one_exec_settled_on(tmp_path):
    # A script runs as its interpreter: /proc shows ["/bin/sh", script], and only once exec has
    # placed the new argv (right after Popen returns it often still reads empty).
    script = tmp_path / "engine"
    script.write_text("#!/bin/sh\nsleep 300\n")
    script.chmod(0o755)
    for _ in range(8):
        rec = native.start([str(script)], dict(os.environ), tmp_path / "server.log")
        try:
            assert rec.cmdline == ["/bin/sh", str(script)]
            assert native.is_ours(rec)
        finally:
            native.stop(rec, timeout_s=2)


def test_a_record_with_another_process_group_is_not_ours(tmp_path):
    with _running(tmp_path, "sleep 300") as rec:
        assert not native.is_ours(rec.model_copy(update={"pgid": rec.pgid + 1}))
        assert native.is_ours(rec)
        ident = native.ProcessIdentity.of(rec.pid)
        assert ident is not None and (ident.pid, ident.pgid, ident.start_time) == (rec.pid, rec.pgid, rec.start_time)
        assert ident.cmdline == rec.cmdline
    assert native.ProcessIdentity.of(rec.pid) is None


def test_both_runners_answer_the_one_interface():
    from recipekit.apply.runners.base import Runner
    from recipekit.apply.runners.registry import RUNNERS, get_runner, runner_for
    from recipekit.apply.server import DockerServer
    from recipekit.errors import RecipekitError

    assert sorted(RUNNERS) == ["docker", "native"]
    methods = [m for m in vars(Runner) if not m.startswith("_")]
    assert set(methods) >= {"start", "identity", "alive", "stop", "logs", "live_log", "base_url"}
    for r in RUNNERS.values():
        assert all(callable(getattr(r, m)) for m in methods if m != "kind"), r
    nat = NativeServer(pid=4242, pgid=4242, start_time=17, cmdline=["vllm"], base_url="http://127.0.0.1:1")
    dock = DockerServer(container_id="c0ffee" * 8, base_url="http://127.0.0.1:2")
    assert runner_for(nat).identity(nat) == "native:4242:17"
    assert runner_for(dock).identity(dock) == "docker:" + "c0ffee" * 8
    assert (
        runner_for(nat).base_url(nat) == "http://127.0.0.1:1"
        and runner_for(dock).base_url(dock) == "http://127.0.0.1:2"
    )
    assert (nat.label, dock.label) == ("pid 4242", "container c0ffeec0ffee")
    with pytest.raises(RecipekitError) as e:
        get_runner("podman")
    assert e.value.code == "unknown-runner" and "docker, native" in e.value.hint


def test_server_record_round_trips_and_a_wrong_shape_is_refused(tmp_path):
    import json

    from recipekit.apply import server
    from recipekit.errors import ExitCode, RecipekitError

    path = tmp_path / "server.json"
    assert server.load(path) is None  # none recorded
    rec = NativeServer(pid=7, pgid=7, start_time=3, cmdline=["a", "b"], port=8000, launch_key="sha256:x")
    server.save(path, rec)
    assert server.load(path) == rec and json.loads(path.read_text())["runner"] == "native"
    bad = {
        "not json": "{",
        "unknown runner": json.dumps({"runner": "podman", "pid": 1}),
        "missing identity": json.dumps({"runner": "native", "pid": 7, "cmdline": ["a"]}),
        "wrong type": json.dumps({"runner": "docker", "container_id": 12}),
        "unknown key": json.dumps({"runner": "docker", "container_id": "c", "pid": 3}),
        "not an object": json.dumps(["native", 7]),
    }
    for why, text in bad.items():
        path.write_text(text)
        with pytest.raises(RecipekitError) as e:
            server.load(path)
        assert e.value.code == "server-record-invalid" and e.value.location == str(path), why
        assert e.value.exit_code == ExitCode.INVALID_INPUT and "delete the file" in e.value.hint, why
        assert path.read_text() == text, why  # nothing is rewritten or removed
    path.write_text(bad["missing identity"])
    with pytest.raises(RecipekitError) as e:
        server.load(path)
    assert "pgid" in e.value.message


def test_relative_volume_sources_become_absolute_as_the_docker_cli_makes_them(tmp_path, monkeypatch):
    from recipekit.apply.runners.docker import parse_run_argv

    monkeypatch.chdir(tmp_path)
    argv = [
        "docker",
        "run",
        "-v",
        "./cache:/root/.cache",
        "-v",
        "../up:/up:ro",
        "-v",
        "named:/data",
        "-v",
        ".:/w",
        "img",
    ]
    _, kw = parse_run_argv(argv)
    assert kw["volumes"] == [
        f"{tmp_path}/cache:/root/.cache",
        f"{tmp_path.parent}/up:/up:ro",
        "named:/data",
        f"{tmp_path}:/w",
    ]


def test_options_docker_py_refuses_together_get_a_coded_error():
    import docker

    from recipekit.apply.runners.docker import start
    from recipekit.errors import RecipekitError

    class _Containers:
        def get(self, name):
            raise docker.errors.NotFound("no")

        def run(self, image, **kw):  # what docker-py raises before any request for host networking with -p
            raise docker.errors.InvalidArgument('"host" network_mode is incompatible with port_bindings')

    class _Cli:
        containers = _Containers()

    argv = ["docker", "run", "-d", "--name", "x", "--network=host", "-p", "127.0.0.1:8000:8000", "img"]
    with pytest.raises(RecipekitError) as e:
        start(_Cli(), argv, "r")
    assert e.value.code == "docker-arg-invalid" and "incompatible with port_bindings" in str(e.value)
