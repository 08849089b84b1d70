"""Readiness and smoke against the lying server (tests/lying_server.py): each lie ends in its own
error code and exit code, bounded in time and bytes; the honest server passes and the result
records what was observed.

The lying server runs in a thread of this test process, so a record of this process makes it
"ours" (its socket belongs to the recorded pid); a record of a child process that does not
listen makes the same server foreign."""

from __future__ import annotations

import os
import resource
import time
from types import SimpleNamespace

import pytest

from recipekit.apply.ready import wait_ready
from recipekit.apply.runners import native
from recipekit.apply.server import NativeServer
from recipekit.apply.smoke import ANSWER_MAX_BYTES, smoke
from recipekit.errors import ExitCode, RecipekitError
from tests.lying_server import LyingServer
from tests.ports import free_port

NAME = "tiny-lie"


def _this_process() -> NativeServer:
    pid = os.getpid()
    return NativeServer(
        pid=pid,
        pgid=os.getpgid(0),
        start_time=native.start_time(pid),
        cmdline=native.read_cmdline(pid) or [],
    )


@pytest.fixture
def other_process(tmp_path):
    """A live process we started that listens nowhere: the lying server is not in its tree."""
    rec = native.start(["sleep", "60"], dict(os.environ), tmp_path / "sleep.log")
    yield rec
    native.stop(rec, timeout_s=5)


def _ctx(rec: NativeServer) -> SimpleNamespace:
    lines: list[str] = []
    return SimpleNamespace(server=rec, eff=None, log=lines.append, lines=lines)


def _ready(s: LyingServer, rec: NativeServer, timeout_s: float = 20) -> dict:
    return wait_ready(_ctx(rec), s.url, "/v1/models", timeout_s=timeout_s, served_name=NAME)


def _refused(fn, code: str, exit_code: ExitCode) -> RecipekitError:
    with pytest.raises(RecipekitError) as e:
        fn()
    assert e.value.code == code, e.value.one_line()
    assert e.value.exit_code == exit_code
    assert "\n" not in e.value.one_line() and e.value.hint
    return e.value


# --------------------------------------------------------------------------- readiness


def test_ready_on_our_honest_server_records_what_it_saw():
    rec = _this_process()
    with LyingServer("honest") as s:
        res = _ready(s, rec)
    assert res["observed"]["status"] == "ours" and res["observed"]["owner"] == f"pid {rec.pid}"
    assert res["observed"]["models"] == [NAME]
    assert [x["pid"] for x in res["observed"]["listeners"]] == [rec.pid]
    assert res["server_id"] == f"native:{rec.pid}:{rec.start_time}"
    assert ("GET", "/health") in s.hits and ("GET", "/v1/models") in s.hits


@pytest.mark.parametrize("mode", ["health-only", "honest", "huge-models", "slow-loris"])
def test_a_server_that_is_not_ours_gets_port_taken_and_no_request(other_process, mode):
    with LyingServer(mode) as s:
        e = _refused(lambda: _ready(s, other_process), "port-taken", ExitCode.HOST_CHECK_FAILED)
        hits = list(s.hits)
    assert f"pid {os.getpid()}" in e.message and f"our server (pid {other_process.pid})" in e.message
    assert "PORT=NNNN" in (e.hint or "")
    assert hits == []


def test_health_only_is_ready_when_ours_and_then_fails_smoke():
    # readiness asks /health, the ready path and /v1/models: health-only answers them all. Only
    # the identity check tells a fake from our server (above); smoke then asks for content.
    with LyingServer("health-only") as s:
        res = _ready(s, _this_process())
        assert res["observed"]["models"] == [NAME]
        e = _refused(lambda: smoke(s.url, NAME, tools=False, timeout=10), "smoke-failed", ExitCode.GATE_FAILED)
    assert "HTTP 404" in e.message and e.message.startswith("chat completion")


def test_wrong_model_fails_at_once():
    with LyingServer("wrong-model") as s:
        t0 = time.monotonic()
        e = _refused(lambda: _ready(s, _this_process(), timeout_s=60), "server-wrong-model", ExitCode.FAILURE)
    assert time.monotonic() - t0 < 10
    assert "other-model" in e.message and repr(NAME) in e.message and "SERVED_MODEL_NAME" in (e.hint or "")


def test_huge_models_is_cut_off_at_the_cap():
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, the process's peak so far
    with LyingServer("huge-models") as s:
        t0 = time.monotonic()
        e = _refused(lambda: _ready(s, _this_process(), timeout_s=60), "server-models-invalid", ExitCode.FAILURE)
        dt = time.monotonic() - t0
    grew_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    print(f"huge-models: refused in {dt:.2f} s, peak RSS grew {grew_mib:.1f} MiB (400 MB offered)")
    assert "over 1048576 bytes" in e.message and dt < 10
    assert grew_mib < 64


def test_slow_loris_is_bounded_by_the_request_and_ready_timeouts():
    with LyingServer("slow-loris") as s:
        t0 = time.monotonic()
        e = _refused(lambda: _ready(s, _this_process(), timeout_s=3), "server-not-ready", ExitCode.FAILURE)
        dt = time.monotonic() - t0
    print(f"slow-loris: readiness gave up after {dt:.1f} s (ready timeout 3 s, 5 s per request)")
    assert "no complete answer within 5 s" in e.message
    assert dt < 3 + 5 + 3


def test_a_server_that_dies_is_reported_not_waited_for(tmp_path):
    rec = native.start(["sh", "-c", "echo engine: no checkpoint; exit 3"], dict(os.environ), tmp_path / "d.log")
    e = _refused(
        lambda: wait_ready(_ctx(rec), f"http://127.0.0.1:{free_port()}", "/v1/models", 30, NAME),
        "server-died",
        ExitCode.FAILURE,
    )
    # no engine error line to lift into the message: this run's log lines follow it, as lines
    assert e.message == "the server exited during start-up" and "| engine: no checkpoint" in e.details


def test_our_dead_server_with_another_on_its_port_is_port_taken(tmp_path):
    rec = native.start(["sh", "-c", "exit 3"], dict(os.environ), tmp_path / "d.log")
    deadline = time.monotonic() + 10
    while native.is_ours(rec) and time.monotonic() < deadline:
        time.sleep(0.05)
    with LyingServer("honest") as s:
        e = _refused(
            lambda: wait_ready(_ctx(rec), s.url, "/v1/models", 30, NAME), "port-taken", ExitCode.HOST_CHECK_FAILED
        )
    assert s.hits == [] and "does not hold it" in e.message


# --------------------------------------------------------------------------- smoke


def test_smoke_passes_the_honest_server_and_counts_what_it_got():
    with LyingServer("honest") as s:
        res = smoke(s.url, NAME, tools=False, timeout=10)
    assert res["observations"] == {"asked": 2, "got": 2}
    assert res["chat"]["completion_tokens"] == 16 and len(res["chat"]["content"]) == 16
    assert res["stream"]["stream_tokens"] == 16 and res["stream"]["completion_tokens"] == 16
    assert len(res["stream"]["text"]) == 16


def test_smoke_counts_tokens_merged_into_one_event():
    # vLLM sends the tokens generated since its last event together; logprobs.tokens counts them
    with LyingServer("merged-stream") as s:
        res = smoke(s.url, NAME, tools=False, timeout=10)
        (body,) = [b for b in s.bodies if b.get("stream")]
    assert body["logprobs"] == 1
    assert res["stream"]["events"] == 4 + 1 and res["stream"]["stream_tokens"] == 16  # 4 token events + usage
    assert res["stream"]["completion_tokens"] == 16


SMOKE_LIES = [
    ("empty-choices", "smoke-empty", "chat completion: no choices"),
    ("usage-x2", "smoke-usage-mismatch", "says 32 (asked 1..16)"),
    ("usage-nan", "smoke-usage-invalid", "usage.completion_tokens is NaN, not a count"),
    ("usage-string", "smoke-usage-invalid", 'usage.completion_tokens is "16", not a count'),
    ("endless-stream", "smoke-unbounded", "answer over 1048576 bytes"),
    ("endless-line", "smoke-unbounded", "answer over 1048576 bytes"),
    ("wrong-model", "smoke-failed", "HTTP 404"),
]


@pytest.mark.parametrize("mode, code, words", SMOKE_LIES, ids=[m for m, _, _ in SMOKE_LIES])
def test_smoke_refuses_each_lie(mode, code, words):
    with LyingServer(mode) as s:
        t0 = time.monotonic()
        e = _refused(lambda: smoke(s.url, NAME, tools=False, timeout=10), code, ExitCode.GATE_FAILED)
        dt = time.monotonic() - t0
    assert words in e.message, e.message
    assert dt < 10


def test_the_stream_check_counts_events_against_usage():
    # the chat check fails first on usage-x2; the stream's own check is shown on the stream alone
    from recipekit.apply import smoke as sm

    with LyingServer("usage-x2") as s:
        e = _refused(lambda: sm._stream(s.url, NAME, 10), "smoke-usage-mismatch", ExitCode.GATE_FAILED)
    assert "16 tokens streamed but usage.completion_tokens says 32" in e.message
    with LyingServer("empty-choices") as s:
        e = _refused(lambda: sm._stream(s.url, NAME, 10), "smoke-empty", ExitCode.GATE_FAILED)
    assert "no text" in e.message
    with LyingServer("endless-stream") as s:
        t0 = time.monotonic()
        e = _refused(lambda: sm._stream(s.url, NAME, 30), "smoke-unbounded", ExitCode.GATE_FAILED)
        dt = time.monotonic() - t0
    print(f"endless-stream: smoke stream cut after {ANSWER_MAX_BYTES} bytes in {dt:.2f} s")
    assert f"stream over {ANSWER_MAX_BYTES} bytes" in e.message and dt < 10


def test_smoke_gives_up_on_slow_loris_within_its_timeout():
    with LyingServer("slow-loris") as s:
        t0 = time.monotonic()
        e = _refused(lambda: smoke(s.url, NAME, tools=False, timeout=3), "smoke-unbounded", ExitCode.GATE_FAILED)
        dt = time.monotonic() - t0
    assert "no complete answer within 3 s" in e.message and dt < 6
