"""`recipe bench` against the lying server, one mode at a time: the verdict, the exit code, and which
requests were left out of the figures (and why) are asserted; nothing is believed that was not checked.

Each case runs the real CLI (`--quick`, one prompt type, one cold-prefill run) in the hostile sandbox.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.hostile.conftest import Sandbox, guard, refused
from tests.lying_server import LyingServer

pytestmark = pytest.mark.timeout(120)

# --quick with one prompt type: 2 runs at 1 stream + 1 wave of 2 streams = 4 decode requests, + prefill
DECODE_REQUESTS = 4
PACE = 0.002  # s between token events: each token in its own read, as from a real server (no burst flag)


def _bench(sb: Sandbox, url: str, *extra: str, prefill_runs: int = 1):
    return sb.cli(
        "bench",
        "--url",
        url,
        "--quick",
        "--prompts",
        "prose",
        "--prefill-runs",
        str(prefill_runs),
        "--out",
        "out",
        "--format",
        "json",
        "--request-timeout",
        "10",
        "--idle-timeout",
        "5",
        *extra,
    )


def _report(sb: Sandbox) -> tuple[dict, str]:
    return json.loads((sb.work / "out" / "bench.json").read_text()), (sb.work / "out" / "bench.md").read_text()


def _no_figure_text(md: str) -> None:
    assert "nan" not in md.lower() and "inf " not in md.lower()


def test_honest_server_gives_every_figure_and_leaves_nothing_out(sandbox: Sandbox) -> None:
    with LyingServer("honest", token_delay=PACE) as s, guard(sandbox, allowed=("work/out",)):
        res = _bench(sandbox, s.url)
    assert res.code == 0, res.err
    doc, md = _report(sandbox)
    assert doc["left_out"] == {"requests": DECODE_REQUESTS + 1, "left_out": 0, "reasons": {}, "first": {}}
    for c in doc["decode"]:
        assert c["figure"] is not None and c["figure"] > 0 and c["streams_left_out"] == 0
        for w in c["waves"]:
            assert w["completion_tokens"] == [32] * c["streams"]  # counted on the stream, = usage
    assert doc["prefill"]["median_prefill_tps"] > 0 and doc["prefill"]["prompt_tokens"] == [512]
    # the honest /tokenize gives back the streamed count of every reply
    assert doc["retokenized"] == {"checked": DECODE_REQUESTS, "disagree": 0, "unavailable": None}
    assert "Left out" not in md and "Re-tokenized" not in md
    _no_figure_text(md)


@pytest.mark.parametrize(
    "mode, reason",
    [
        ("usage-x2", "usage-disagrees: usage says 64 completion tokens, the stream carried 32"),
        ("usage-nan", "usage-invalid: usage.prompt_tokens is nan (float), not a token count"),
        ("usage-string", "usage-invalid: usage.prompt_tokens is '"),
        ("empty-choices", "no-tokens: the stream carried no generated token"),
    ],
)
def test_usage_lies_leave_every_decode_request_out_and_the_run_fails(sandbox: Sandbox, mode: str, reason: str) -> None:
    with LyingServer(mode) as s, guard(sandbox):
        res = _bench(sandbox, s.url, prefill_runs=0)
    refused(res, "bench-untrusted", 1)
    line = res.err.strip().splitlines()[-1]
    code = reason.split(":", 1)[0]
    assert f"all {DECODE_REQUESTS} measured requests were left out ({DECODE_REQUESTS} {code})" in line, line
    assert f"first: {reason}" in line, line
    assert not (sandbox.work / "out").exists()  # no report holding figures from a lie


def test_usage_x2_with_a_prefill_run_keeps_only_the_checked_prefill_figure(sandbox: Sandbox) -> None:
    # a 1-token prefill request: usage says 2, the stream carried 1: within one token, so it counts
    with LyingServer("usage-x2", token_delay=PACE) as s:
        res = _bench(sandbox, s.url)
    assert res.code == 0, res.err
    doc, md = _report(sandbox)
    assert doc["left_out"]["left_out"] == DECODE_REQUESTS and doc["left_out"]["reasons"] == {
        "usage-disagrees": DECODE_REQUESTS
    }
    assert all(c["figure"] is None for c in doc["decode"])
    assert doc["prefill"]["median_prefill_tps"] > 0
    assert f"**Left out:** {DECODE_REQUESTS} of {DECODE_REQUESTS + 1} measured request(s)" in md
    assert "| 1 | — |" in md
    _no_figure_text(md)


def test_prompt_x100_leaves_the_prefill_out_and_keeps_decode(sandbox: Sandbox) -> None:
    with LyingServer("prompt-x100", token_delay=PACE) as s:
        res = _bench(sandbox, s.url)
    assert res.code == 0, res.err
    doc, md = _report(sandbox)
    assert doc["left_out"]["reasons"] == {"prompt-usage-disagrees": 1}
    assert doc["left_out"]["first"]["prompt-usage-disagrees"] == (
        "prompt-usage-disagrees: usage says 51200 prompt tokens, the client sent 512"
    )
    assert doc["prefill"]["median_prefill_tps"] is None and doc["prefill"]["runs_ok"] == 0
    assert all(c["figure"] > 0 for c in doc["decode"])
    assert "## Cold prefill" in md and "| 512 | 1 | — |" in md
    _no_figure_text(md)


def test_tokenize_disagreeing_is_reported_not_believed(sandbox: Sandbox) -> None:
    with LyingServer("tokenize-disagree", token_delay=PACE) as s:
        res = _bench(sandbox, s.url)
    assert res.code == 0, res.err
    doc, md = _report(sandbox)
    assert doc["retokenized"] == {"checked": DECODE_REQUESTS, "disagree": DECODE_REQUESTS, "unavailable": None}
    assert doc["left_out"]["left_out"] == 0  # the stream and usage agree; /tokenize is the odd one out
    assert f"**Re-tokenized:** the server's /tokenize of {DECODE_REQUESTS} of {DECODE_REQUESTS} reply" in md


@pytest.mark.parametrize(
    "mode, reason",
    [
        ("endless-stream", "more-than-asked: over 34 tokens streamed for max_tokens 32"),
        ("endless-line", "SSELineTooLong: an SSE line of over"),
        ("health-only", "HTTP 404"),
    ],
)
def test_streams_that_never_end_or_never_answer_fail_the_run_in_bounded_time(
    sandbox: Sandbox, mode: str, reason: str
) -> None:
    with LyingServer(mode) as s, guard(sandbox):
        t0 = time.monotonic()
        res = _bench(sandbox, s.url, prefill_runs=0)
        took = time.monotonic() - t0
    refused(res, "bench-untrusted", 1)
    line = res.err.strip().splitlines()[-1]
    assert f"all {DECODE_REQUESTS} measured requests were left out ({DECODE_REQUESTS} request-failed)" in line
    assert reason in line, line
    assert took < 30, took  # each request stops at its cap, not at a timeout


def test_slow_loris_gives_up_at_the_request_limit(sandbox: Sandbox) -> None:
    with LyingServer("slow-loris") as s:
        t0 = time.monotonic()
        res = sandbox.cli("bench", "--url", s.url, "--quick", "--out", "out", "--request-timeout", "2")
        took = time.monotonic() - t0
    refused(res, "server-unreachable", 1)
    assert "/v1/models: TimeoutError: no complete answer within 2 s or 30 s without a byte" in res.err
    assert 1.9 < took < 6, took  # the trickle (a byte every 5 s) never resets the per-request limit


def test_slow_loris_between_bytes_limit(sandbox: Sandbox) -> None:
    with LyingServer("slow-loris") as s:
        t0 = time.monotonic()
        res = sandbox.cli(
            "bench", "--url", s.url, "--quick", "--out", "out", "--request-timeout", "60", "--idle-timeout", "1"
        )
        took = time.monotonic() - t0
    refused(res, "server-unreachable", 1)
    assert took < 5, took  # 5 s between bytes > the 1 s idle limit


def test_huge_models_answer_is_cut_at_its_cap(sandbox: Sandbox) -> None:
    with LyingServer("huge-models") as s:
        res = sandbox.cli("bench", "--url", s.url, "--quick", "--out", "out")
    refused(res, "server-answer-too-large", 1)
    assert "holds more than the 8388608 bytes accepted" in res.err


def test_wrong_model_requests_all_fail(sandbox: Sandbox) -> None:
    with LyingServer("wrong-model") as s:
        res = _bench(sandbox, s.url, prefill_runs=0)
    refused(res, "bench-untrusted", 1)
    assert "HTTP 404" in res.err


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_timeouts_must_be_positive_and_finite(sandbox: Sandbox, value: str) -> None:
    res = sandbox.cli("bench", "--url", "http://127.0.0.1:9", "--request-timeout", value)
    refused(res, "bad-timeout", 2)


def test_the_whole_run_is_bounded(sandbox: Sandbox) -> None:
    with LyingServer("honest", token_delay=0.05) as s, guard(sandbox):  # 32 tokens take 1.6 s per request
        t0 = time.monotonic()
        res = _bench(sandbox, s.url, "--run-timeout", "1")
        took = time.monotonic() - t0
    refused(res, "bench-timeout", 1)
    assert "the run took longer than --run-timeout 1 s; no report written" in res.err
    assert took < 5, took
    assert not (sandbox.work / "out").exists()


def test_help_states_the_limits_and_their_defaults(sandbox: Sandbox) -> None:
    res = sandbox.cli("bench", "--help")
    text = " ".join(res.out.split())
    for opt, default in (("--request-timeout", "120.0"), ("--idle-timeout", "30.0"), ("--run-timeout", "3600.0")):
        assert opt in text and f"[default: {default}]" in text.split(opt, 1)[1][:200], opt


@pytest.mark.parametrize(
    "odd, why",
    [
        (b"[1, 2]", "malformed-event: 'list' object has no attribute 'get'"),
        (b"5", "malformed-event: argument of type 'int' is not"),
        (b'{"choices": {"a": 1}}', "malformed-event: 0"),
        (b'{"choices": ["x"]}', "malformed-event: 'str' object has no attribute 'get'"),
        (b'{"choices": [{"text": 7}]}', "malformed-event: a stream event's text is int, not a string"),
        (b'{"choices": [{"delta": {"content": ["a"]}}]}', "malformed-event: a stream event's text is list"),
        (b'{"choices": [{"text": "a", "token_ids": ["x", "y"]}]}', "malformed-event: a stream event's token_ids"),
        (b'{"choices": [{"text": "a", "token_ids": [1, -2]}]}', "malformed-event: a stream event's token_ids"),
        (b'{"choices": [{"text": "a", "token_ids": 3}]}', "malformed-event: a stream event's token_ids"),
        (b"[" * 100_000 + b"]" * 100_000, "malformed-event: maximum recursion depth"),
        (b'{"x": 1' + b"0" * 5000 + b"}", "ValueError: Exceeds the limit (4300 digits)"),
        (b"{not json", "JSONDecodeError: Expecting property name"),
    ],
)
def test_an_event_that_is_not_a_chunk_fails_the_request_not_the_client(odd: bytes, why: str) -> None:
    import asyncio

    from recipekit.bench.client import Client

    async def go(url: str):
        async with Client(url, timeout=10, idle_timeout=5) as c:
            return await c.stream(c.chat_body("hi", 4))

    with LyingServer("odd-event") as s:
        s.odd_event = odd
        rec = asyncio.run(go(s.url))
    assert not rec.ok and rec.error.startswith(why), rec.error
    assert rec.left_out == f"request-failed: {rec.error}"
