"""Async streaming client for OpenAI-compatible servers, with per-request timing records.

Token counts come from the server's `usage` (stream_options.include_usage), never from
counting SSE events. TTFT = first chunk carrying a generated token − request start (its text
may be empty: held-back partial UTF-8); decode tok/s =
(completion_tokens − 1) / (t_last − t_first), so the first token (prefill) is excluded.
Forced lengths use vLLM's `min_tokens` = `max_tokens` and `ignore_eos`; on HTTP 400 the
request is retried once without those extensions (servers that do not know them).

HTTP is aiohttp (as in `vllm bench serve`): a streamed token arrives alone in its own packet,
and the per-read cost of the client decides how much CPU it takes from a server on the same
host; aiohttp costs well under half of what httpx does per read (measured, see README).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Awaitable, Callable, Iterable

import aiohttp

from recipekit.bench.sse import DONE, SSEParser, delta_text
from recipekit.errors import ExitCode, RecipekitError

# What a non-streaming call can raise against any server: transport and timeout, a non-200
# answer (RuntimeError), text that is not JSON (ValueError), JSON of the wrong shape
# (KeyError, IndexError, TypeError). A probe that may fail catches these, never Exception.
ANSWER_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError, ValueError, KeyError, IndexError, TypeError)

VLLM_EXTENSIONS = ("min_tokens", "ignore_eos", "chat_template_kwargs")


def make_nonce() -> str:
    """A short unique tag put at the HEAD of a prompt so the prefix cache cannot match it."""
    return secrets.token_hex(6)


def with_nonce(prompt: str, nonce: str | None = None) -> str:
    return f"[{nonce or make_nonce()}] {prompt}"


@dataclass
class RequestRecord:
    """Everything measured about one request; times are time.perf_counter() seconds."""

    tag: str = ""
    stream_index: int = 0
    concurrency: int = 1
    status: int | None = None
    error: str | None = None
    t_start: float = 0.0
    t_first: float | None = None
    t_last: float | None = None
    t_end: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    events: int = 0
    token_events: int = 0
    arrivals: int = 0  # socket reads that carried at least one token
    aborted: bool = False
    text: str = ""
    itl: list[float] = field(default_factory=list)
    tool_calls: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200

    @property
    def ttft(self) -> float | None:
        return None if self.t_first is None else self.t_first - self.t_start

    @property
    def burst(self) -> bool:
        """Tokens reached the client in a few bursts (fewer reads than a quarter of the tokens):
        the server's output was held back, so the decode window is not observable."""
        n = self.completion_tokens or 0
        return n > 4 and self.arrivals * 4 < n

    @property
    def decode_tps(self) -> float | None:
        n = self.completion_tokens
        if n is None or n < 2 or self.t_first is None or self.t_last is None or self.burst:
            return None
        span = self.t_last - self.t_first
        return (n - 1) / span if span > 0 else None

    @property
    def prefill_tps(self) -> float | None:
        t = self.ttft
        return self.prompt_tokens / t if self.prompt_tokens and t else None

    def summary(self, preview: int = 80) -> dict:
        """A JSON-able record with derived figures and a text preview (first/last chars)."""
        d = asdict(self)
        d.pop("itl")
        text = d.pop("text")
        d["text_preview"] = text if len(text) <= 2 * preview else text[:preview] + " … " + text[-preview:]
        d["ttft_s"] = self.ttft
        d["decode_tps"] = self.decode_tps
        d["prefill_tps"] = self.prefill_tps
        if self.itl:
            s = sorted(self.itl)
            d["itl_median_s"] = s[len(s) // 2]
            d["itl_p95_s"] = s[min(len(s) - 1, int(len(s) * 0.95))]
        return d


class Client:
    """One connection pool to one server. Use as `async with Client(url) as c:`."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 600.0,
        max_connections: int = 64,
    ):
        self.base_url = base_url.rstrip("/")
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[:-3]
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=30.0)
        self._limit = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._strip_extensions = False

    @property
    def http(self) -> aiohttp.ClientSession:
        if self._session is None:  # created inside the running event loop, on first use
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                timeout=self._timeout,
                # idle pooled connections are dropped before servers drop them (uvicorn: 5 s),
                # so a request never lands on a connection the server already closed
                connector=aiohttp.TCPConnector(limit=self._limit, keepalive_timeout=2.0),
            )
        return self._session

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _once(self, method: str, path: str, body: dict | None = None) -> tuple[int, str]:
        for attempt in (0, 1):
            try:
                async with self.http.request(method, self.base_url + path, json=body) as r:
                    return r.status, await r.text()
            except aiohttp.ServerDisconnectedError:
                if attempt:  # a pooled connection the server had closed: one retry on a fresh one
                    raise
        raise AssertionError("unreachable")

    async def get_json(self, path: str) -> Any:
        status, text = await self._once("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: HTTP {status}: {text[:200]}")
        return json.loads(text)

    async def get_text(self, path: str) -> tuple[int, str]:
        return await self._once("GET", path)

    async def post_json(self, path: str, body: dict) -> tuple[int, Any]:
        """Non-streaming POST; returns (status, parsed JSON or error text)."""
        status, text = await self._once("POST", path, body)
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    async def models(self) -> dict:
        return await self.get_json("/v1/models")

    async def models_or_fail(self) -> dict:
        """/v1/models, or the one-line `server-unreachable` error every command gives for a dead server."""

        try:
            return await self.models()
        except ANSWER_ERRORS as e:
            raise RecipekitError(
                code="server-unreachable",
                exit_code=ExitCode.FAILURE,
                message=f"{self.base_url}/v1/models: {type(e).__name__}: {e}",
                hint="start the server (recipe apply <recipe>) or pass --url",
            ) from None

    async def resolve_model(self) -> str:
        if not self.model:
            data = await self.models()
            self.model = data["data"][0]["id"]
        return self.model

    async def tokenize(self, text: str | None = None, messages: list | None = None) -> list[int]:
        """Token ids through vLLM's /tokenize endpoint (the server's own tokenizer)."""
        body: dict = {"model": await self.resolve_model(), "add_special_tokens": True}
        if messages is not None:
            body["messages"] = messages
        else:
            body["prompt"] = text
        status, data = await self.post_json("/tokenize", body)
        if status != 200:
            raise RuntimeError(f"/tokenize returned {status}: {str(data)[:200]}")
        return list(data["tokens"])

    async def detokenize(self, ids: list[int]) -> str:
        """Text of token ids through vLLM's /detokenize endpoint."""
        status, data = await self.post_json("/detokenize", {"model": await self.resolve_model(), "tokens": ids})
        if status != 200:
            raise RuntimeError(f"/detokenize returned {status}: {str(data)[:200]}")
        return data["prompt"]

    def chat_body(
        self, prompt: str | list[dict], max_tokens: int, *, forced: bool = True, temperature: float = 0.0, **extra: Any
    ) -> dict:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        body = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": 1.0,
        }
        if forced:
            body.update(min_tokens=max_tokens, ignore_eos=True)
        body.update(extra)
        return body

    async def stream(
        self,
        body: dict,
        *,
        kind: str = "chat",
        tag: str = "",
        stream_index: int = 0,
        concurrency: int = 1,
        abort_after_tokens: int | None = None,
        keep_itl: bool = True,
    ) -> RequestRecord:
        """Send one streaming request and time it. Never raises for server/HTTP errors:
        they land in `record.error` so a wave keeps its other streams."""
        body = dict(body)
        body.setdefault("model", await self.resolve_model())
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        if self._strip_extensions:
            for k in VLLM_EXTENSIONS:
                body.pop(k, None)
        path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
        rec = RequestRecord(tag=tag, stream_index=stream_index, concurrency=concurrency)
        for attempt in (0, 1):
            rec = RequestRecord(tag=tag, stream_index=stream_index, concurrency=concurrency)
            retry = await self._stream_once(path, body, rec, abort_after_tokens, keep_itl)
            if not retry or attempt == 1:
                break
            self._strip_extensions = True
            for k in VLLM_EXTENSIONS:
                body.pop(k, None)
        return rec

    async def _stream_once(
        self, path: str, body: dict, rec: RequestRecord, abort_after_tokens: int | None, keep_itl: bool
    ) -> bool:
        perf = time.perf_counter
        parser = SSEParser()
        parts: list[str] = []
        tool_calls: dict[int, dict] = {}
        rec.t_start = perf()
        try:
            async with self.http.post(self.base_url + path, json=body) as resp:
                rec.status = resp.status
                if resp.status != 200:
                    err = (await resp.read()).decode(errors="replace")[:300]
                    rec.error = f"HTTP {resp.status}: {err}"
                    rec.t_end = perf()
                    return resp.status == 400 and any(k in body for k in VLLM_EXTENSIONS)
                last = None
                async for chunk in resp.content.iter_any():
                    now = perf()
                    seen = rec.token_events
                    for ev in parser.feed(chunk):
                        if ev is DONE:
                            continue
                        if "error" in ev and "choices" not in ev:
                            rec.error = str(ev["error"])[:300]
                            continue
                        usage = ev.get("usage")
                        if usage:
                            rec.prompt_tokens = usage.get("prompt_tokens")
                            rec.completion_tokens = usage.get("completion_tokens")
                        if not ev.get("choices"):
                            continue  # the usage-only tail chunk carries no token
                        text, fin = delta_text(ev)
                        if fin:
                            rec.finish_reason = fin
                        _collect_tool_calls(ev, tool_calls)
                        delta = ev["choices"][0].get("delta")
                        # A chunk with a choice is a generated token even when its text is empty
                        # (the detokenizer holds back partial UTF-8 / special tokens), as in
                        # `vllm bench serve`; only chat's role-only opening chunk is not.
                        if text or not (delta is not None and "role" in delta):
                            if rec.t_first is None:
                                rec.t_first = now
                            elif keep_itl and last is not None:
                                rec.itl.append(now - last)
                            last = now
                            rec.t_last = now
                            rec.token_events += 1
                            parts.append(text)
                    if rec.token_events > seen:
                        rec.arrivals += 1
                    if abort_after_tokens is not None and rec.token_events >= abort_after_tokens:
                        rec.aborted = True
                        resp.close()  # drop the connection mid-stream: the server sees a disconnect
                        break
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:  # transport, timeout, bad JSON
            rec.error = f"{type(e).__name__}: {e}"[:300]
        rec.t_end = perf()
        rec.events = parser.events_seen
        rec.text = "".join(parts)
        rec.tool_calls = [tool_calls[i] for i in sorted(tool_calls)]
        return False


def _collect_tool_calls(ev: dict, acc: dict[int, dict]) -> None:
    choices = ev.get("choices")
    if not choices:
        return
    d = choices[0].get("delta") or {}
    for tc in d.get("tool_calls") or ():
        slot = acc.setdefault(tc.get("index", 0), {"name": "", "arguments": ""})
        fn = tc.get("function") or {}
        slot["name"] += fn.get("name") or ""
        slot["arguments"] += fn.get("arguments") or ""


async def gather_bounded(factories: Iterable[Callable[[], Awaitable[Any]]], limit: int) -> list[Any]:
    """Run coroutine factories with at most `limit` in flight; results in input order."""
    sem = asyncio.Semaphore(max(1, limit))

    async def one(f):
        async with sem:
            return await f()

    return await asyncio.gather(*(one(f) for f in factories))
