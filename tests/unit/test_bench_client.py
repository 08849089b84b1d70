"""The SSE parser and the streaming client, against recorded bytes and a local fake server."""

from __future__ import annotations

import asyncio
import json

import pytest

from recipekit.bench.client import (
    Client,
    RequestRecord,
    UsageInvalid,
    check_counts,
    make_nonce,
    usage_count,
    with_nonce,
)
from recipekit.bench.sse import DONE, SSEParser, delta_text
from recipekit.bench.sse_server import FakeOpenAIServer


@pytest.fixture
def fake():
    srv = FakeOpenAIServer(reply="alpha beta gamma", token_delay=0.001).start_in_thread()
    yield srv
    srv.stop()


def test_parser_handles_split_chunks_comments_and_done():
    raw = (
        b": ping\n\n"
        b'data: {"choices":[{"delta":{"content":"He"},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"delta":{"content":"llo"},"finish_reason":"length"}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
        b"data: [DONE]\n\n"
    )
    for cut in range(1, len(raw)):  # every split point gives the same events
        p = SSEParser()
        evs = list(p.feed(raw[:cut])) + list(p.feed(raw[cut:]))
        assert evs[-1] is DONE
        texts = [delta_text(e) for e in evs[:-1]]
        assert texts == [("He", None), ("llo", "length"), ("", None)]
        assert evs[2]["usage"]["completion_tokens"] == 2
        assert p.events_seen == 4


def test_delta_text_reads_completions_and_tool_call_fragments():
    assert delta_text({"choices": [{"text": "x", "finish_reason": None}]}) == ("x", None)
    ev = {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}}]}
    assert delta_text(ev) == ('{"a"', None)


def test_nonce_is_unique_and_at_the_head():
    a, b = with_nonce("count"), with_nonce("count")
    assert a != b and a.startswith("[") and a.endswith("] count")
    assert len({make_nonce() for _ in range(1000)}) == 1000


def test_record_figures_follow_the_definitions():
    r = RequestRecord(
        status=200,
        t_start=10.0,
        t_first=10.5,
        t_last=12.5,
        token_events=41,
        completion_tokens=41,
        prompt_tokens=100,
        prompt_tokens_sent=100,
        arrivals=41,
    )
    assert r.ttft == pytest.approx(0.5)
    assert r.decode_tps == pytest.approx(40 / 2.0)  # (n - 1) / (t_last - t_first), n counted by the client
    assert r.prefill_tps == pytest.approx(200.0)  # prompt ids sent / TTFT
    assert RequestRecord(status=200, t_first=1.0, t_last=1.0, token_events=1).decode_tps is None
    held = RequestRecord(status=200, t_first=1.0, t_last=1.001, token_events=40, arrivals=3)
    assert held.burst and held.decode_tps is None  # not 39,000 tok/s
    # the server's usage is never the count: a usage claim of twice the stream is left out
    lied = check_counts(RequestRecord(**{**r.__dict__, "completion_tokens": 82}))
    assert lied.excluded.startswith("usage-disagrees: usage says 82") and lied.decode_tps is None
    assert lied.prefill_tps is None and not lied.trusted and lied.left_out == lied.excluded
    assert check_counts(RequestRecord(**{**r.__dict__, "completion_tokens": 42})).excluded is None  # within one
    assert check_counts(RequestRecord(**{**r.__dict__, "prompt_tokens": 10000})).excluded.startswith(
        "prompt-usage-disagrees: usage says 10000 prompt tokens, the client sent 100"
    )
    assert check_counts(RequestRecord(**{**r.__dict__, "max_tokens": 8})).excluded.startswith("more-than-asked")
    # a prompt sent as text has no client count: no prefill figure from the server's claim
    assert RequestRecord(**{**r.__dict__, "prompt_tokens_sent": None}).prefill_tps is None


@pytest.mark.parametrize(
    "usage, why",
    [
        ({"completion_tokens": "16"}, "usage.completion_tokens is '16' (str), not a token count"),
        ({"completion_tokens": float("nan")}, "usage.completion_tokens is nan (float), not a token count"),
        ({"completion_tokens": float("inf")}, "usage.completion_tokens is inf (float), not a token count"),
        ({"completion_tokens": 16.0}, "usage.completion_tokens is 16.0 (float), not a token count"),
        ({"completion_tokens": True}, "usage.completion_tokens is True (bool), not a token count"),
        ({"completion_tokens": -3}, "usage.completion_tokens is -3, negative"),
        ([16], "usage is list, not an object"),
    ],
)
def test_usage_values_that_are_not_counts_are_refused(usage, why):
    with pytest.raises(UsageInvalid) as e:
        usage_count(usage, "completion_tokens")
    assert str(e.value) == why
    assert usage_count({"completion_tokens": 16}, "completion_tokens") == 16
    assert usage_count({}, "completion_tokens") is None


def test_stream_counts_tokens_from_usage_and_forces_length(fake):
    async def go():
        async with Client(fake.base_url) as c:
            return await c.stream(c.chat_body(with_nonce("hi"), 12, forced=True))

    rec = asyncio.run(go())
    assert rec.ok and rec.completion_tokens == 12 and rec.token_events == 12 and rec.arrivals >= 6
    assert rec.finish_reason == "length"
    assert rec.text.split() == ["alpha", "beta", "gamma"] * 4
    # two tokens read in one socket read (a loaded host) share a time: 0 between them
    assert len(rec.itl) == 11 and all(x >= 0 for x in rec.itl) and sum(rec.itl) > 0
    assert rec.t_start < rec.t_first <= rec.t_last <= rec.t_end
    body = fake.requests[-1]
    assert body["min_tokens"] == body["max_tokens"] == 12 and body["ignore_eos"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"][0]["content"].startswith("[")


def test_abort_mid_stream_closes_the_request(fake):
    async def go():
        async with Client(fake.base_url) as c:
            return await c.stream(c.chat_body("x", 200), abort_after_tokens=3)

    rec = asyncio.run(go())
    assert rec.aborted and 3 <= rec.token_events < 200 and rec.completion_tokens is None


def test_http_400_for_vllm_fields_retries_without_them():
    srv = FakeOpenAIServer(reply="a", reject_extensions=True).start_in_thread()
    try:

        async def go():
            async with Client(srv.base_url) as c:
                return await c.stream(c.chat_body("x", 5, chat_template_kwargs={"enable_thinking": False}))

        rec = asyncio.run(go())
    finally:
        srv.stop()
    assert rec.ok and rec.completion_tokens == 5
    assert "min_tokens" in srv.requests[0] and "min_tokens" not in srv.requests[1]
    assert "chat_template_kwargs" not in srv.requests[1]


def test_connection_refused_lands_in_the_record():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()

    async def go():
        async with Client(f"http://127.0.0.1:{port}", model="m") as c:
            return await c.stream(c.chat_body("x", 3))

    rec = asyncio.run(go())
    assert not rec.ok and "Connect" in rec.error


def test_summary_is_json_serialisable(fake):
    async def go():
        async with Client(fake.base_url) as c:
            return await c.stream(c.chat_body("x", 4))

    d = asyncio.run(go()).summary()
    json.dumps(d)
    assert d["completion_tokens"] == 4 and d["decode_tps"] > 0 and "itl_median_s" in d


def test_overhead_measurements_count_every_token():
    from recipekit.bench.overhead import parse_rate_live, parse_rate_recorded, vllm_like_events

    evs = vllm_like_events(3)
    assert json.loads(evs[0][6:])["choices"][0]["delta"]["content"] == "the"
    r = parse_rate_recorded(5000)
    assert r["tokens"] == 5000 and r["tokens_per_s"] > 0
    live = parse_rate_live(500, batch=1, streams=3, token_delay=0.0005)
    assert live["errors"] == [] and live["tokens"] == live["token_events"] == 1500 and live["client_cpu_s"] > 0


def test_a_pooled_connection_closed_by_the_server_is_retried():
    srv = FakeOpenAIServer(reply="ok", close_idle=True).start_in_thread()
    try:

        async def go():
            async with Client(srv.base_url) as c:
                out = []
                for _ in range(3):
                    out.append(await c.post_json("/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 2}))
                    await asyncio.sleep(0.05)  # the server has closed the kept-alive connection by now
                out.append((await c.models())["data"][0]["id"])
                return out

        out = asyncio.run(go())
    finally:
        srv.stop()
    assert [s for s, _ in out[:3]] == [200, 200, 200] and out[3] == "fake-model"


def test_a_models_answer_without_a_model_id_is_a_one_line_error():
    from recipekit.errors import RecipekitError

    srv = FakeOpenAIServer(model="").start_in_thread()
    try:

        async def go():
            async with Client(srv.base_url) as c:
                return await c.resolve_model()

        with pytest.raises(RecipekitError) as e:
            asyncio.run(go())
    finally:
        srv.stop()
    assert e.value.code == "server-models-invalid" and int(e.value.exit_code) == 1
    assert e.value.message.endswith("/v1/models lists no model id")
