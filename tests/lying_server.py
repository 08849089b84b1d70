"""A lying OpenAI-compatible server for the judges' tests: an aiohttp app on 127.0.0.1 in vLLM's shape
whose `mode` picks one lie (a usage that disagrees with the stream, NaN, a truncated prompt_logprobs list,
an endless stream, a slow-loris trickle, a 400 MB /v1/models, ...). `honest` tells the truth, so every
judge can be shown to pass on it and to refuse each lie.

The honest model is a fixed function the tests can recompute: the tokenizer is one token per UTF-8 byte
(id = byte value); after token `prev` the arg-max is `next_token(prev)` with log-prob -0.05 and any other
token `tok` has `other_logprob(prev, tok)`. Generation is greedy, one token per SSE event, and honours
max_tokens / min_tokens / ignore_eos; `usage` is true. prompt_logprobs has one entry per prompt token (the
first None), each holding the prompt token and the rank-1 token, as vLLM answers.

    with LyingServer("usage-x2") as s:
        ... s.url, s.port, s.served_name, s.hits (list of (method, path) received)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.ports import free_port

MODES: dict[str, str] = {
    "honest": "tells the truth",
    "usage-x2": "usage.completion_tokens is twice the tokens streamed/returned",
    "usage-nan": "every usage count is NaN",
    "usage-string": "usage counts are strings (e.g. '16')",
    "prompt-x100": "usage.prompt_tokens is 100x the real prompt length",
    "empty-choices": "no choices and no text; only usage.completion_tokens 8",
    "truncated-logprobs": "prompt_logprobs holds only its first 2 entries",
    "nan-logprobs": "every log-prob (prompt and sampled) is NaN",
    "positive-logprobs": "every log-prob (prompt and sampled) is +5",
    "logprobs-minus-800": "every log-prob (prompt and sampled) is -800 (finite, <= 0, but exp(800) overflows)",
    "short-forced": "returns 1 token whatever max_tokens/min_tokens ask",
    "endless-stream": "streams token events forever (a non-stream body never ends either)",
    "slow-loris": "sends headers, then one byte every 5 s, on every endpoint",
    "endless-line": "one SSE line (or body) that never ends",
    "huge-models": "/v1/models is a ~400 MB JSON body (sent in chunks)",
    "tokenize-disagree": "/tokenize returns each token twice (counts 2x)",
    "wrong-model": "/v1/models lists another model; requests for ours get vLLM's 404",
    "health-only": "only /health and /v1/models answer; everything else is 404",
    "merged-stream": "truthful, but streams 4 tokens per SSE event (as vLLM does when its API process lags), "
    "with logprobs.tokens listing each token when logprobs is asked and token_ids when return_token_ids is",
    "odd-event": "a stream sends `odd_event` (JSON that is not an OpenAI chunk; default [1, 2]) before its tokens",
}

ARGMAX_LOGPROB = -0.05
HUGE_MODELS_BYTES = 400 * 1024 * 1024
SLOW_LORIS_PERIOD_S = 5.0


def next_token(prev: int) -> int:
    """The honest model's greedy next token after `prev` (always a lowercase ASCII letter)."""
    return 97 + (prev * 7 + 3) % 26


def other_logprob(prev: int, tok: int) -> float:
    """The honest log-prob of a token that is not the arg-max after `prev`."""
    return -3.0 - ((prev * 31 + tok) % 11) / 10


def true_logprob(prev: int, tok: int) -> float:
    return ARGMAX_LOGPROB if tok == next_token(prev) else other_logprob(prev, tok)


def encode(text: str) -> list[int]:
    return list(text.encode())


def decode(ids: list[int]) -> str:
    return bytes(i % 256 for i in ids).decode(errors="replace")


class LyingServer:
    """An OpenAI-compatible server in a background thread that lies as `mode` says (see MODES)."""

    def __init__(
        self, mode: str = "honest", *, served_name: str = "tiny-lie", port: int | None = None, token_delay: float = 0.0
    ):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
        self.mode, self.served_name = mode, served_name
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.hits: list[tuple[str, str]] = []
        self.bodies: list[Any] = []
        self.huge_models_bytes = HUGE_MODELS_BYTES
        self.token_delay = token_delay  # seconds between streamed token events (0: as fast as written)
        self.odd_event: bytes = b"[1, 2]"  # what mode odd-event streams before its token events
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # ---- the lies, applied to honest values ----
    def _usage(self, prompt_n: int, completion_n: int) -> dict[str, Any]:
        u: dict[str, Any] = {"prompt_tokens": prompt_n, "completion_tokens": completion_n}
        if self.mode == "usage-x2":
            u["completion_tokens"] = 2 * completion_n
        elif self.mode == "prompt-x100":
            u["prompt_tokens"] = 100 * prompt_n
        elif self.mode == "empty-choices":
            u["completion_tokens"] = 8
        u["total_tokens"] = u["prompt_tokens"] + u["completion_tokens"]
        if self.mode == "usage-nan":
            u = {k: math.nan for k in u}
        elif self.mode == "usage-string":
            u = {k: str(v) for k, v in u.items()}
        return u

    def _logprob(self, prev: int, tok: int) -> float:
        if self.mode == "nan-logprobs":
            return math.nan
        if self.mode == "positive-logprobs":
            return 5.0
        if self.mode == "logprobs-minus-800":
            return -800.0
        return true_logprob(prev, tok)

    def _generate(self, prompt_ids: list[int], body: dict) -> list[int]:
        n = int(body.get("max_tokens") or 16)
        if self.mode == "short-forced":
            n = min(n, 1)
        out: list[int] = []
        prev = prompt_ids[-1] if prompt_ids else 0
        for _ in range(n):
            prev = next_token(prev)
            out.append(prev)
        return out

    def _prompt_logprobs(self, ids: list[int]) -> list[dict | None]:
        entries: list[dict | None] = [None]
        for prev, tok in zip(ids, ids[1:]):
            top = next_token(prev)
            e = {
                str(tok): {
                    "logprob": self._logprob(prev, tok),
                    "rank": 1 if tok == top else 2,
                    "decoded_token": chr(tok),
                }
            }
            if tok != top:
                e[str(top)] = {"logprob": self._logprob(prev, top), "rank": 1, "decoded_token": chr(top)}
            entries.append(e)
        if self.mode == "truncated-logprobs":
            entries = entries[:2]
        return entries

    def _sampled_logprobs(self, prompt_ids: list[int], out: list[int], as_ids: bool) -> dict:
        tokens, lps, tops = [], [], []
        prev = prompt_ids[-1] if prompt_ids else 0
        for tok in out:
            name = f"token_id:{tok}" if as_ids else chr(tok)
            tokens.append(name)
            lps.append(self._logprob(prev, tok))
            tops.append({name: self._logprob(prev, tok)})
            prev = tok
        return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": list(range(len(out)))}

    # ---- request parsing ----
    @staticmethod
    def _prompt_ids(body: dict) -> list[int]:
        if "messages" in body:
            text = "".join(m.get("content") if isinstance(m.get("content"), str) else "" for m in body["messages"])
            return encode(text)
        p = body.get("prompt", "")
        if isinstance(p, list) and p and isinstance(p[0], list):
            p = p[0]
        return [int(x) for x in p] if isinstance(p, list) else encode(str(p))

    # ---- handlers ----
    @web.middleware
    async def _record(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        self.hits.append((request.method, request.path))
        if self.mode == "health-only" and request.path not in ("/health", "/v1/models"):
            return web.json_response({"detail": "Not Found"}, status=404)
        if self.mode == "slow-loris":
            return await self._trickle(request)
        return await handler(request)

    async def _trickle(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        with contextlib.suppress(ConnectionResetError):
            while True:
                await resp.write(b" ")
                await asyncio.sleep(SLOW_LORIS_PERIOD_S)
        return resp

    async def _endless_body(self, request: web.Request, ctype: str, head: bytes, unit: bytes) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": ctype})
        await resp.prepare(request)
        await resp.write(head)
        chunk = unit * max(1, 65536 // len(unit))
        with contextlib.suppress(ConnectionResetError):  # the client gave up: the point of the lie
            while True:
                await resp.write(chunk)
        return resp

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.StreamResponse:
        name = "other-model" if self.mode == "wrong-model" else self.served_name
        card = {"id": name, "object": "model", "owned_by": "vllm", "root": name, "max_model_len": 4096}
        if self.mode != "huge-models":
            return web.json_response({"object": "list", "data": [card]})
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        await resp.write(b'{"object": "list", "data": [' + json.dumps(card).encode() + b'], "padding": "')
        sent, chunk = 0, b"x" * (1 << 20)
        while sent < self.huge_models_bytes:
            await resp.write(chunk)
            sent += len(chunk)
        await resp.write(b'"}')
        await resp.write_eof()
        return resp

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        ids = self._prompt_ids(body)
        if self.mode == "tokenize-disagree":
            ids = [x for i in ids for x in (i, i)]
        return web.json_response({"count": len(ids), "max_model_len": 4096, "tokens": ids})

    async def detokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"prompt": decode([int(x) for x in body.get("tokens", [])])})

    def _unknown_model(self, body: dict) -> web.Response | None:
        if body.get("model") not in (None, self.served_name) or self.mode == "wrong-model":
            msg = f"The model `{body.get('model')}` does not exist."
            return web.json_response(
                {"object": "error", "message": msg, "type": "NotFoundError", "code": 404}, status=404
            )
        return None

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, chat=True)

    async def _answer(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        refused = self._unknown_model(body)
        if refused is not None:
            return refused
        if self.mode == "endless-line":
            head = b"data: " if body.get("stream") else b'{"choices": [{"text": "'
            ctype = "text/event-stream" if body.get("stream") else "application/json"
            return await self._endless_body(request, ctype, head, b"x")
        ids = self._prompt_ids(body)
        if body.get("stream"):
            return await self._stream(request, body, ids, chat=chat)
        if self.mode == "endless-stream":
            return await self._endless_body(request, "application/json", b'{"choices": [{"text": "', b"ab")
        out = self._generate(ids, body)
        text = decode(out)
        usage = self._usage(len(ids), len(out))
        if self.mode == "empty-choices":
            return web.json_response(
                {"id": "x", "object": "chat.completion" if chat else "text_completion", "choices": [], "usage": usage}
            )
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
            lp = body.get("logprobs")
            choice["logprobs"] = (
                self._sampled_logprobs(ids, out, bool(body.get("return_tokens_as_token_ids"))) if lp else None
            )
            if body.get("prompt_logprobs") is not None:
                choice["prompt_logprobs"] = self._prompt_logprobs(ids)
        obj = "chat.completion" if chat else "text_completion"
        doc = {"id": "cmpl-lie", "object": obj, "model": self.served_name, "choices": [choice], "usage": usage}
        return web.Response(
            text=json.dumps(doc), content_type="application/json"
        )  # json.dumps writes NaN as vLLM would not: that is the lie

    async def _stream(self, request: web.Request, body: dict, ids: list[int], *, chat: bool) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        obj = "chat.completion.chunk" if chat else "text_completion"

        async def event(doc: dict) -> None:
            await resp.write(b"data: " + json.dumps(doc).encode() + b"\n\n")

        def chunk(text: str, fin: str | None) -> dict:
            if chat:
                c: dict[str, Any] = {"index": 0, "delta": {"content": text}, "finish_reason": fin}
            else:
                c = {"index": 0, "text": text, "logprobs": None, "finish_reason": fin}
            return {"id": "cmpl-lie", "object": obj, "model": self.served_name, "choices": [c]}

        if chat and self.mode != "empty-choices":
            await event(
                {
                    "id": "cmpl-lie",
                    "object": obj,
                    "model": self.served_name,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
                }
            )
        if self.mode == "endless-stream":  # a fast liar: ~64 KiB of token events per write, forever
            prev, batch = ids[-1] if ids else 0, bytearray()
            while len(batch) < 65536:
                prev = next_token(prev)
                batch += b"data: " + json.dumps(chunk(chr(prev), None)).encode() + b"\n\n"
            with contextlib.suppress(ConnectionResetError):
                while True:
                    await resp.write(bytes(batch))
            return resp
        out = [] if self.mode == "empty-choices" else self._generate(ids, body)
        if self.mode == "odd-event":
            await resp.write(b"data: " + self.odd_event + b"\n\n")
        if self.mode == "merged-stream":
            for i in range(0, len(out), 4):
                part = out[i : i + 4]
                c = chunk("".join(chr(t) for t in part), "length" if i + 4 >= len(out) else None)
                if not chat and body.get("logprobs") is not None:
                    prev = out[i - 1] if i else (ids[-1] if ids else 0)
                    c["choices"][0]["logprobs"] = self._sampled_logprobs([prev], part, False)
                if body.get("return_token_ids"):  # vLLM names an event's tokens when asked
                    c["choices"][0]["token_ids"] = part
                await event(c)
                if self.token_delay:  # paced as the one-token events are: each event in its own packet
                    await asyncio.sleep(self.token_delay)
        else:
            for i, tok in enumerate(out):
                await event(chunk(chr(tok), "length" if i == len(out) - 1 else None))
                if self.token_delay:  # paced like a real server: each token in its own packet
                    await asyncio.sleep(self.token_delay)
        if (body.get("stream_options") or {}).get("include_usage"):
            await event(
                {
                    "id": "cmpl-lie",
                    "object": obj,
                    "model": self.served_name,
                    "choices": [],
                    "usage": self._usage(len(ids), len(out)),
                }
            )
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    # ---- lifecycle ----
    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._record], client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    def __enter__(self) -> LyingServer:
        started = threading.Event()
        failure: list[BaseException] = []

        async def start() -> None:
            self._runner = web.AppRunner(self._app(), shutdown_timeout=0.5, handler_cancellation=True, access_log=None)
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(start())
            except BaseException as e:  # noqa: BLE001 - handed to the test's thread below
                failure.append(e)
                started.set()
                return
            started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name=f"lying-server-{self.mode}", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("the lying server did not start within 10 s")
        if failure:
            raise failure[0]
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        if self._thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=15)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
