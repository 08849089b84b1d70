"""Server identity on real processes: a port held by another program is refused before anything
slow runs, naming its pid and command line, without a request to it; the socket of a server
we started (or of its child) is ours, one started outside that process tree is not; a docker
container's port bindings decide for a published port."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from recipekit.apply import identity
from recipekit.apply.ready import wait_ready
from recipekit.apply.runners import native
from recipekit.errors import ExitCode, RecipekitError
from tests.ports import free_port

LOCAL = "tiny-deepseek-cpu"


def _wait_listening(port: int, timeout_s: float = 20.0) -> None:
    t0 = time.monotonic()
    while not identity.listeners("127.0.0.1", port):
        assert time.monotonic() - t0 < timeout_s, f"nothing listens on {port}"
        time.sleep(0.05)


def _http_server_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]


@pytest.fixture
def foreign(tmp_path):
    """A python http.server started outside any recorded tree; its request log (stderr) is the hits."""
    port = free_port()
    log = tmp_path / "foreign.log"
    with open(log, "wb") as f:
        p = subprocess.Popen(
            _http_server_argv(port), stdout=subprocess.DEVNULL, stderr=f, cwd=tmp_path, start_new_session=True
        )
    try:
        _wait_listening(port)
        yield p, port, log
    finally:
        p.kill()
        p.wait(10)


@pytest.fixture
def ours(tmp_path):
    """A server started through the native runner as `sh -c 'python -m http.server ...; exit'`:
    the listener is a child of the recorded pid, as vLLM's API process may be."""
    port = free_port()
    argv = ["sh", "-c", " ".join(_http_server_argv(port)) + "; exit 0"]
    rec = native.start(argv, dict(os.environ), tmp_path / "ours.log", cwd=tmp_path)
    try:
        _wait_listening(port)
        yield rec, port
    finally:
        native.stop(rec, timeout_s=5)


def test_check_port_free_names_the_owner_and_sends_nothing(foreign):
    p, port, log = foreign
    with pytest.raises(RecipekitError) as e:
        identity.check_port_free("127.0.0.1", port)
    err = e.value
    assert err.code == "port-taken" and err.exit_code == ExitCode.HOST_CHECK_FAILED
    line = err.one_line()
    assert f"pid {p.pid}" in line and "-m http.server" in line and str(port) in line
    assert "PORT=NNNN ./start.sh" in line and "--set PORT=NNNN" in line
    assert log.read_bytes() == b""  # http.server logs every request: none came
    assert p.poll() is None  # untouched
    # a wildcard bind is refused too (the listener takes its loopback connections)
    with pytest.raises(RecipekitError) as e2:
        identity.check_port_free("0.0.0.0", port)
    assert f"pid {p.pid}" in e2.value.message
    identity.check_port_free("127.0.0.1", free_port())  # a free one passes


def test_a_child_of_our_server_owns_the_socket(ours):
    rec, port = ours
    v = identity.owner_verdict(rec, f"http://127.0.0.1:{port}")
    assert v.status == "ours" and v.owner == f"pid {rec.pid}"
    (lis,) = v.listeners
    assert lis.pid != rec.pid and lis.pid in {c.pid for c in __import__("psutil").Process(rec.pid).children()}
    assert lis.cmdline is not None and "http.server" in " ".join(lis.cmdline)


def test_a_server_outside_our_tree_is_foreign_and_gets_no_request(ours, foreign):
    rec, _ = ours
    p, port, log = foreign
    url = f"http://127.0.0.1:{port}"
    v = identity.verify_server(rec, url, "tiny-deepseek", also=("/health",))
    assert v.status == "foreign" and [x.pid for x in v.listeners] == [p.pid] and v.models == []
    err = v.error(url, "tiny-deepseek")
    assert err.code == "port-taken" and f"pid {p.pid}" in err.message and f"our server (pid {rec.pid})" in err.message
    assert log.read_bytes() == b""
    assert p.poll() is None
    # readiness stops at once on it, with the same error, still without a request
    ctx = SimpleNamespace(server=rec, eff=None, log=lambda s: None)
    t0 = time.monotonic()
    with pytest.raises(RecipekitError) as e:
        wait_ready(ctx, url, "/v1/models", timeout_s=60, served_name="tiny-deepseek")
    assert e.value.code == "port-taken" and f"pid {p.pid}" in e.value.message and time.monotonic() - t0 < 10
    assert log.read_bytes() == b""
    # the log does record requests: one of ours shows up in it
    urllib.request.urlopen(url + "/", timeout=5).read()
    assert b'"GET / HTTP/1.1" 200' in log.read_bytes()


def test_nothing_listening_yet_is_not_ready(ours):
    rec, _ = ours
    v = identity.owner_verdict(rec, f"http://127.0.0.1:{free_port()}")
    assert v.status == "not-listening" and not v.ok


def test_a_record_of_a_dead_server_owns_nothing(ours):
    rec, port = ours
    native.stop(rec, timeout_s=5)
    v = identity.owner_verdict(rec, f"http://127.0.0.1:{port}")
    assert v.status == "not-listening"


def test_apply_with_another_server_on_the_port_fails_before_any_step(run_cli, tmp_path, foreign):
    p, port, log = foreign
    home = {"RECIPEKIT_HOME": str(tmp_path / "home")}
    t0 = time.monotonic()
    code, out, err = run_cli("apply", LOCAL, "--set", f"PORT={port}", env=home)
    dt = time.monotonic() - t0
    assert code == int(ExitCode.HOST_CHECK_FAILED), err
    assert f"error[port-taken] 127.0.0.1:{port} is taken by another program: pid {p.pid}" in err
    assert "-m http.server" in err and "PORT=NNNN" in err
    assert "> doctor" not in err and "> fetch" not in err and "> install-engine" not in err  # no step ran
    assert dt < 30, dt
    assert log.read_bytes() == b"" and p.poll() is None
    state = Path(home["RECIPEKIT_HOME"]) / "state" / LOCAL
    assert not (state / "server.json").exists()


@pytest.mark.parametrize(
    "ports, host, port, want",
    [
        ({"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18000"}]}, "127.0.0.1", 18000, True),
        ({"8000/tcp": [{"HostIp": "0.0.0.0", "HostPort": "18000"}]}, "127.0.0.1", 18000, True),
        ({"8000/tcp": [{"HostIp": "::", "HostPort": "18000"}]}, "127.0.0.1", 18000, True),
        ({"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18001"}]}, "127.0.0.1", 18000, False),
        ({"8000/tcp": [{"HostIp": "10.1.2.3", "HostPort": "18000"}]}, "127.0.0.1", 18000, False),
        ({"8000/udp": [{"HostIp": "127.0.0.1", "HostPort": "18000"}]}, "127.0.0.1", 18000, False),
        ({"8000/tcp": None}, "127.0.0.1", 18000, False),  # exposed, not published
        ({}, "127.0.0.1", 18000, False),
    ],
)
def test_a_container_publishes_the_port_by_its_inspect_bindings(ports, host, port, want):
    # the shape of `docker inspect` .NetworkSettings.Ports (docker-py: container.attrs)
    assert identity.published({"NetworkSettings": {"Ports": ports}}, host, port) is want


@pytest.mark.parametrize(
    "bind, listen, want",
    [
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.1", "0.0.0.0", True),  # a wildcard listener takes loopback connections
        ("127.0.0.1", "::", True),  # a dual-stack wildcard too
        ("127.0.0.1", "::ffff:127.0.0.1", True),
        ("0.0.0.0", "10.0.0.1", True),  # our wildcard bind would fail
        ("127.0.0.1", "::1", False),
        ("127.0.0.1", "10.0.0.1", False),
    ],
)
def test_which_listeners_take_our_address(bind, listen, want):
    assert identity._conflicts(bind, listen) is want


def test_an_owner_the_kernel_does_not_show_is_said_so():
    err = identity.port_taken("127.0.0.1", 8000, [identity.Listener(addr="127.0.0.1:8000", pid=None)])
    assert err.code == "port-taken"
    assert "a process this user cannot see (socket 127.0.0.1:8000)" in err.message
    assert "a process this user cannot see" in identity.port_taken("127.0.0.1", 8000, []).message
