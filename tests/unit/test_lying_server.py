"""The lying-server fixture lies exactly as MODES says, and its honest mode tells the truth: the judges'
tests are only as good as this server, so each mode is checked here on the wire."""

from __future__ import annotations

import json
import math
import socket
import time

import httpx
import pytest

from tests.lying_server import MODES, LyingServer, next_token, true_logprob

pytestmark = pytest.mark.timeout(60)


def _post(s: LyingServer, path: str, body: dict) -> httpx.Response:
    return httpx.post(s.url + path, json={"model": s.served_name, **body}, timeout=10)


def _events(s: LyingServer, body: dict, path: str = "/v1/completions") -> list:
    r = _post(s, path, {"stream": True, "stream_options": {"include_usage": True}, **body})
    out = []
    for line in r.text.split("\n\n"):
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_honest_completion_and_prompt_logprobs() -> None:
    with LyingServer() as s:
        ids = [104, 105, 33]
        d = _post(s, "/v1/completions", {"prompt": ids, "max_tokens": 5, "prompt_logprobs": 1, "logprobs": 1}).json()
        ch = d["choices"][0]
        want = []
        prev = ids[-1]
        for _ in range(5):
            prev = next_token(prev)
            want.append(prev)
        assert ch["text"] == bytes(want).decode()
        assert d["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
        pl = ch["prompt_logprobs"]
        assert len(pl) == 3 and pl[0] is None
        assert pl[1]["105"]["logprob"] == true_logprob(104, 105)
        assert all(v <= 0 for v in ch["logprobs"]["token_logprobs"])
        assert s.hits == [("POST", "/v1/completions")]


def test_honest_stream_counts_and_tokenize() -> None:
    with LyingServer() as s:
        ev = _events(s, {"prompt": "hi", "max_tokens": 7})
        assert ev[-1] == "[DONE]"
        tokens = [e for e in ev[:-1] if e["choices"]]
        assert len(tokens) == 7 and ev[-2]["usage"]["completion_tokens"] == 7
        text = "".join(e["choices"][0]["text"] for e in tokens)
        assert _post(s, "/tokenize", {"prompt": text}).json()["count"] == 7
        chat = _events(s, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}, "/v1/chat/completions")
        assert sum(1 for e in chat[:-1] if e["choices"] and e["choices"][0]["delta"].get("content")) == 3


def test_merged_stream_carries_four_tokens_an_event() -> None:
    with LyingServer("merged-stream") as s:
        ev = _events(s, {"prompt": "hi", "max_tokens": 10, "logprobs": 1})
        tokens = [e for e in ev[:-1] if e["choices"]]
        assert [len(e["choices"][0]["text"]) for e in tokens] == [4, 4, 2]
        assert [len(e["choices"][0]["logprobs"]["tokens"]) for e in tokens] == [4, 4, 2]
        assert ev[-2]["usage"]["completion_tokens"] == 10 and ev[-1] == "[DONE]"
        plain = _events(s, {"prompt": "hi", "max_tokens": 10})
        assert all(e["choices"][0]["logprobs"] is None for e in plain[:-1] if e["choices"])


@pytest.mark.parametrize(
    "mode,check",
    [
        ("usage-x2", lambda u: u["completion_tokens"] == 8),
        ("usage-nan", lambda u: math.isnan(u["completion_tokens"])),
        ("usage-string", lambda u: u["completion_tokens"] == "4"),
        ("prompt-x100", lambda u: u["prompt_tokens"] == 200 and u["completion_tokens"] == 4),
    ],
)
def test_usage_lies(mode: str, check) -> None:
    with LyingServer(mode) as s:
        assert check(_post(s, "/v1/completions", {"prompt": "hi", "max_tokens": 4}).json()["usage"])
        assert check(_events(s, {"prompt": "hi", "max_tokens": 4})[-2]["usage"])


def test_content_lies() -> None:
    with LyingServer("empty-choices") as s:
        d = _post(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 8}).json()
        assert d["choices"] == [] and d["usage"]["completion_tokens"] == 8
    with LyingServer("truncated-logprobs") as s:
        d = _post(s, "/v1/completions", {"prompt": list(range(40, 60)), "max_tokens": 1, "prompt_logprobs": 0}).json()
        assert len(d["choices"][0]["prompt_logprobs"]) == 2
    for mode, bad in (
        ("nan-logprobs", math.isnan),
        ("positive-logprobs", lambda v: v == 5.0),
        ("logprobs-minus-800", lambda v: v == -800.0),
    ):
        with LyingServer(mode) as s:
            d = _post(
                s, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 2, "prompt_logprobs": 0, "logprobs": 1}
            ).json()
            assert bad(d["choices"][0]["prompt_logprobs"][1]["2"]["logprob"])
            assert all(bad(v) for v in d["choices"][0]["logprobs"]["token_logprobs"])
    with LyingServer("short-forced") as s:
        d = _post(s, "/v1/completions", {"prompt": "x", "max_tokens": 64, "min_tokens": 64, "ignore_eos": True}).json()
        assert len(d["choices"][0]["text"]) == 1
    with LyingServer("tokenize-disagree") as s:
        assert _post(s, "/tokenize", {"prompt": "abc"}).json()["count"] == 6
    with LyingServer("wrong-model") as s:
        assert httpx.get(s.url + "/v1/models").json()["data"][0]["id"] == "other-model"
        assert _post(s, "/v1/completions", {"prompt": "x"}).status_code == 404
    with LyingServer("health-only") as s:
        assert httpx.get(s.url + "/health").status_code == 200
        assert httpx.get(s.url + "/v1/models").status_code == 200
        assert _post(s, "/v1/completions", {"prompt": "x"}).status_code == 404


def _read_raw(s: LyingServer, request: bytes, limit: int, seconds: float) -> tuple[int, float]:
    """Bytes received (up to `limit`) and seconds spent, reading a raw HTTP answer with a deadline."""
    t0, got = time.monotonic(), 0
    with socket.create_connection(("127.0.0.1", s.port), timeout=seconds) as c:
        c.sendall(request)
        try:
            while got < limit and time.monotonic() - t0 < seconds:
                b = c.recv(65536)
                if not b:
                    break
                got += len(b)
        except TimeoutError:
            pass
    return got, time.monotonic() - t0


def _raw_post(path: str, body: dict) -> bytes:
    data = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    return head.encode() + data


def test_unbounded_lies_keep_sending() -> None:
    for mode in ("endless-stream", "endless-line"):
        with LyingServer(mode) as s:
            req = _raw_post("/v1/completions", {"model": s.served_name, "prompt": "x", "max_tokens": 4, "stream": True})
            got, _ = _read_raw(s, req, 8 << 20, 20)
            assert got >= 8 << 20, (mode, got)  # far more than 4 tokens' worth
    with LyingServer("huge-models") as s:
        s.huge_models_bytes = 16 << 20
        got, _ = _read_raw(s, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 64 << 20, 20)
        assert got > 16 << 20
    with LyingServer("slow-loris") as s:
        got, dt = _read_raw(s, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 1 << 20, 2.5)
        assert dt >= 2.0 and got < 400  # headers and a byte, then nothing for seconds


def test_odd_event_streams_its_bytes_before_the_tokens() -> None:
    with LyingServer("odd-event") as s:
        s.odd_event = b'{"choices": {"a": 1}}'
        evs = _events(s, {"prompt": "hi", "max_tokens": 2})
    want = [chr(next_token(ord("i"))), chr(next_token(next_token(ord("i"))))]
    assert evs[0] == {"choices": {"a": 1}} and [e["choices"][0]["text"] for e in evs[1:3]] == want


def test_modes_are_documented_and_unknown_refused() -> None:
    assert "honest" in MODES and len(MODES) == 20
    with pytest.raises(ValueError, match="unknown mode"):
        LyingServer("fibbing")
