"""`recipe oracle capture`: a server's prompt log-probs into a reference file, against a real local
aiohttp server (127.0.0.1) that answers in vLLM's recorded shape: choices[0].prompt_logprobs =
[None, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...], the prompt token and the rank-1
token per position. Two captures then pair with `recipe oracle paired` (with its standard error);
a dead server, a refused request, a wrong answer and a timeout each give one clear error."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import threading
from pathlib import Path

import pytest
from aiohttp import web

from recipekit.bench.oracle.capture import capture_reference
from recipekit.bench.oracle.reference import prompt_set_sha256
from recipekit.bench.oracle.run import load_reference
from recipekit.cli.main import main
from recipekit.errors import RecipekitError

pytestmark = pytest.mark.timeout(120)
PROMPTS = [[0, 17, 42, 7, 9], [0, 5, 5, 3]]


def true_logprob(prev: int, tok: int, shift: float) -> float:
    """The double's log-prob of `tok` after `prev` (a fixed function: the test knows every value)."""
    return -0.25 - ((prev * 31 + tok) % 11) / 10 - shift


def _entries(ids: list[int], shift: float) -> list[dict | None]:
    out: list[dict | None] = [None]
    for prev, tok in zip(ids, ids[1:]):
        e = {str(tok): {"logprob": true_logprob(prev, tok, shift), "rank": 2, "decoded_token": "x"}}
        e.setdefault("99", {"logprob": -0.01, "rank": 1, "decoded_token": "y"})  # the arg-max, as vLLM adds it
        out.append(e)
    return out


class Server:
    """A vLLM-shaped OpenAI server in a thread; `mode` picks a behaviour, `seen` records the requests."""

    def __init__(self, shift: float = 0.0, mode: str = "ok"):
        self.shift, self.mode, self.seen = shift, mode, []
        self.loop = asyncio.new_event_loop()
        self.port = 0

    async def models(self, req: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    async def completions(self, req: web.Request) -> web.Response:
        body = await req.json()
        self.seen.append(body)
        if self.mode == "refuse":
            return web.json_response({"error": "prompt_logprobs is not supported"}, status=400)
        if self.mode == "slow":
            await asyncio.sleep(5)
        ids = body["prompt"]
        entries = _entries(ids, self.shift)
        if self.mode == "short":
            entries = entries[:-1]
        return web.json_response(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "model": body["model"],
                "choices": [
                    {"index": 0, "text": "y", "logprobs": None, "finish_reason": "length", "prompt_logprobs": entries}
                ],
            }
        )

    async def tokenize(self, req: web.Request) -> web.Response:
        body = await req.json()
        return web.json_response({"tokens": [0] + [ord(c) % 50 for c in body["prompt"]], "count": 0})

    def __enter__(self) -> "Server":
        app = web.Application()
        app.add_routes(
            [
                web.get("/v1/models", self.models),
                web.post("/v1/completions", self.completions),
                web.post("/tokenize", self.tokenize),
            ]
        )
        self.runner = web.AppRunner(app)
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.runner.setup())
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            self.loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert ready.wait(10)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def prompts_file(tmp_path: Path) -> Path:
    p = tmp_path / "prompts.json"
    p.write_text(json.dumps({"prompts": PROMPTS}))
    return p


def test_capture_records_values_server_and_prompt_hash(prompts_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    with Server() as s:
        assert (
            main(
                [
                    "oracle",
                    "capture",
                    "--base-url",
                    s.url,
                    "--model",
                    "tiny",
                    "--prompts",
                    str(prompts_file),
                    "--out",
                    str(out),
                    "-f",
                    "json",
                ]
            )
            == 0
        )
        sent = s.seen
    assert [b["prompt"] for b in sent] == PROMPTS
    assert all(b["prompt_logprobs"] == 1 and b["max_tokens"] == 1 and b["model"] == "tiny" for b in sent)
    doc = load_reference(out)  # the gate's and `paired`'s reader accepts it
    assert doc["server"] == {"base_url": s.url, "model": "tiny"}
    assert doc["prompt_set"]["sha256"] == prompt_set_sha256(PROMPTS) and doc["tokenizer"]["kind"] == "given token ids"
    want = [[true_logprob(p, t, 0.0) for p, t in zip(q, q[1:])] for q in PROMPTS]
    assert [r["logprobs"] for r in doc["results"]] == want
    assert [r["argmax"] for r in doc["results"]] == [[99] * 4, [99] * 3]
    flat = [x for w in want for x in w]
    assert doc["scored_tokens"] == 7 and doc["nll_mean"] == pytest.approx(-sum(flat) / 7, rel=1e-12)


def test_two_captures_pair_with_standard_error(prompts_file: Path, tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    with Server() as s:
        assert main(["oracle", "capture", "--url", s.url, "--prompts", str(prompts_file), "--out", str(a)]) == 0
    with Server(shift=0.01) as s:
        assert main(["oracle", "capture", "--url", s.url, "--prompts", str(prompts_file), "--out", str(b)]) == 0
    capsys.readouterr()
    assert main(["oracle", "paired", str(a), str(b), "-f", "json"]) == 0
    p = json.loads(capsys.readouterr().out)
    # b is a everywhere minus 0.01 nats: mean NLL difference +0.01, no spread, so se 0 and sigma infinite
    assert p["tokens"] == 7 and p["mean_diff"] == pytest.approx(0.01, rel=1e-9)
    assert p["rel_ppl_change_pct"] == pytest.approx(100 * math.expm1(0.01), rel=1e-9)
    assert p["se"] == pytest.approx(0.0, abs=1e-12)


def test_capture_from_text_uses_the_servers_tokenizer(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text("abcdefgh")
    with Server() as s:
        doc = capture_reference(s.url, None, None, text.read_text(), 5, str(text))
    assert doc["results"][0]["ids"] == [0, 47, 48, 49, 0] and doc["tokenizer"]["kind"].startswith("server /tokenize")
    assert doc["prompt_set"]["tokens"] == 5 and len(doc["results"][0]["logprobs"]) == 4


def _dead_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]  # closed again: nothing listens there


def test_dead_server_is_one_clear_error_and_writes_nothing(prompts_file: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "x.json"
    rc = main(
        [
            "oracle",
            "capture",
            "--url",
            f"http://127.0.0.1:{_dead_port()}",
            "--prompts",
            str(prompts_file),
            "--out",
            str(out),
            "--timeout",
            "5",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and not out.exists()
    assert err[-1].startswith("error[server-unreachable]") and "(hint: " in err[-1]


@pytest.mark.parametrize(
    "mode,code",
    [
        ("refuse", "prompt-logprobs-unsupported"),
        ("short", "oracle-capture-bad-response"),
        ("slow", "oracle-capture-timeout"),
    ],
)
def test_bad_servers_give_clear_errors(mode: str, code: str, tmp_path: Path) -> None:
    with Server(mode=mode) as s:
        with pytest.raises(RecipekitError) as e:
            capture_reference(s.url, PROMPTS, timeout=1.0)
    assert e.value.code == code and int(e.value.exit_code) == 1


def test_unknown_model_is_refused(tmp_path: Path) -> None:
    with Server() as s:
        with pytest.raises(RecipekitError) as e:
            capture_reference(s.url, PROMPTS, model="other")
    assert e.value.code == "oracle-capture-unknown-model" and "tiny" in e.value.message


def test_capture_iterates_prompts_in_order() -> None:
    with Server() as s:
        doc = capture_reference(s.url, PROMPTS[::-1])
    assert [r["ids"] for r in doc["results"]] == PROMPTS[::-1]


def test_cli_refuses_a_zero_timeout(prompts_file: Path, tmp_path: Path, capsys) -> None:
    rc = main(
        [
            "oracle",
            "capture",
            "--url",
            "http://127.0.0.1:9",
            "--prompts",
            str(prompts_file),
            "--out",
            str(tmp_path / "x.json"),
            "--timeout",
            "0",
        ]
    )
    assert rc == 2 and "error[oracle-bad-option]" in capsys.readouterr().err
