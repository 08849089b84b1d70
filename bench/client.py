"""Async streaming client for OpenAI-compatible servers, with per-request timing records.

Token counts are the client's own: one per stream event that carries a generated token (or the
length of the event's `token_ids`, where the server sends them: several tokens per event under
speculative decoding). The server's `usage` (stream_options.include_usage) is a claim, checked:
a non-integer value is refused (`usage_error`), and `check_counts` leaves a request out of every
figure (`excluded`) when its usage differs from the client's count by more than one token.
TTFT = first chunk carrying a generated token − request start (its text may be empty: held-back
partial UTF-8); decode tok/s = (counted tokens − 1) / (t_last − t_first), so the first token
(prefill) is excluded; prefill tok/s = prompt tokens the client sent (ids) / TTFT.

Bounded against any server: a per-request time limit and a limit on the time between bytes
(aiohttp's total and sock_read timeouts), a cap on a stream's bytes and tokens, a linear SSE
parser with a line cap, and a cap on every non-stream answer (`AnswerTooLarge`).
Forced lengths use vLLM's `min_tokens` = `max_tokens` and `ignore_eos`; on HTTP 400 the
request is retried once without those extensions (servers that do not know them).

HTTP is aiohttp (as in `vllm bench serve`): a streamed token arrives alone in its own packet,
and the per-read cost of the client decides how much CPU it takes from a server on the same
host; aiohttp costs well under half of what httpx does per read (measured, see README).
"""

from __future__ import annotations

import asyncio
import json
import math
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

VLLM_EXTENSIONS = ("min_tokens", "ignore_eos", "chat_template_kwargs", "return_token_ids")

# Caps on what one answer may hold. /v1/models of a real server is a few KiB (one entry per
# served model and LoRA); other non-stream answers (a /tokenize of a long prompt, a completion
# with prompt_logprobs for 1,536 tokens) stay well under 64 MiB.
MODELS_MAX_BYTES = 8 << 20
BODY_MAX_BYTES = 64 << 20
# a stream may hold at most this many bytes per requested token, plus a base: a vLLM chunk with
# top-20 logprobs is about 2 KiB, a plain one 150-250 bytes
STREAM_BYTES_PER_TOKEN = 8 << 10
STREAM_BASE_BYTES = 1 << 20
STREAM_MAX_BYTES = 64 << 20  # when the request names no max_tokens, and the most for any
COUNT_TOLERANCE = 1  # tokens a usage figure may differ from the client's count

# The bench's time limits (its --request-timeout, --idle-timeout, --run-timeout): a forced
# 256-token stream at 5 tok/s takes 52 s, a cold 4,096-token prefill a few seconds on the
# targets; 30 s without a byte is a dead or hostile server, not a slow one.
REQUEST_TIMEOUT_S = 120.0
IDLE_TIMEOUT_S = 30.0
RUN_TIMEOUT_S = 3600.0


class AnswerTooLarge(aiohttp.ClientPayloadError):
    """A non-stream answer over its byte cap (read stops at the cap)."""


class UsageInvalid(ValueError):
    """A `usage` field that is not a non-negative integer."""


def usage_count(usage: Any, key: str) -> int | None:
    """usage[key] as a count, None when absent; UsageInvalid for a string, a float, NaN, a bool,
    a negative number: a figure is never computed from such a value."""
    if not isinstance(usage, dict):
        raise UsageInvalid(f"usage is {type(usage).__name__}, not an object")
    v = usage.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        shown = repr(v) if not isinstance(v, float) or math.isfinite(v) else str(v)
        raise UsageInvalid(f"usage.{key} is {shown[:40]} ({type(v).__name__}), not a token count")
    if v < 0:
        raise UsageInvalid(f"usage.{key} is {v}, negative")
    return v


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
    prompt_tokens: int | None = None  # the server's usage claim (checked to be an integer)
    completion_tokens: int | None = None  # the server's usage claim (checked to be an integer)
    usage_error: str | None = None  # a usage value refused (not an integer)
    finish_reason: str | None = None
    max_tokens: int | None = None  # what the request asked for
    prompt_tokens_sent: int | None = None  # the client's count of the prompt (ids it sent)
    events: int = 0
    token_events: int = 0  # the client's count of generated tokens (see the module docstring)
    arrivals: int = 0  # socket reads that carried at least one token
    bytes: int = 0  # bytes of the stream body received
    retokenized_tokens: int | None = None  # the server's /tokenize of the returned text
    excluded: str | None = None  # why this request is left out of every figure ("code: detail")
    aborted: bool = False
    text: str = ""
    itl: list[float] = field(default_factory=list)
    tool_calls: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200

    @property
    def trusted(self) -> bool:
        """Answered, and every count the figures use agrees with what the client observed."""
        return self.ok and self.excluded is None

    @property
    def left_out(self) -> str | None:
        """Why this request gives no figure ("code: detail"), or None."""
        if self.error is not None or self.status != 200:
            return f"request-failed: {self.error or f'HTTP {self.status}'}"
        return self.excluded

    @property
    def ttft(self) -> float | None:
        return None if self.t_first is None else self.t_first - self.t_start

    @property
    def burst(self) -> bool:
        """Tokens reached the client in a few bursts (fewer reads than a quarter of the tokens):
        the server's output was held back, so the decode window is not observable."""
        n = self.token_events
        return n > 4 and self.arrivals * 4 < n

    @property
    def decode_tps(self) -> float | None:
        """From the client's own count, and only for a request whose counts agree."""
        n = self.token_events
        if self.excluded or n < 2 or self.t_first is None or self.t_last is None or self.burst:
            return None
        span = self.t_last - self.t_first
        return (n - 1) / span if span > 0 else None

    @property
    def prefill_tps(self) -> float | None:
        """Prompt tokens the client sent and counted (ids) / TTFT; None when it sent text."""
        t = self.ttft
        n = self.prompt_tokens_sent
        return n / t if n and t and t > 0 and not self.excluded else None

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


def check_counts(rec: RequestRecord, tolerance: int = COUNT_TOLERANCE) -> RequestRecord:
    """Set `rec.excluded` when a count the figures would use is not what the client observed:
    a refused usage value, usage.completion_tokens against the tokens counted on the stream,
    usage.prompt_tokens against the prompt ids sent, more tokens than max_tokens, or a stream
    with no generated token at all."""
    if not rec.ok or rec.excluded:
        return rec
    n = rec.token_events
    if rec.usage_error:
        rec.excluded = f"usage-invalid: {rec.usage_error}"
    elif n == 0:
        rec.excluded = "no-tokens: the stream carried no generated token"
    elif rec.completion_tokens is not None and abs(rec.completion_tokens - n) > tolerance:
        rec.excluded = f"usage-disagrees: usage says {rec.completion_tokens} completion tokens, the stream carried {n}"
    elif (
        rec.prompt_tokens_sent is not None
        and rec.prompt_tokens is not None
        and abs(rec.prompt_tokens - rec.prompt_tokens_sent) > tolerance
    ):
        rec.excluded = (
            f"prompt-usage-disagrees: usage says {rec.prompt_tokens} prompt tokens, "
            f"the client sent {rec.prompt_tokens_sent}"
        )
    elif rec.max_tokens is not None and n > rec.max_tokens + tolerance:
        rec.excluded = f"more-than-asked: the stream carried {n} tokens for max_tokens {rec.max_tokens}"
    return rec


class Client:
    """One connection pool to one server. Use as `async with Client(url) as c:`.

    `timeout`: the most one request may take, start to last byte (aiohttp's total timeout);
    `idle_timeout`: the most time between two reads of an answer (sock_read), None for none."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 600.0,
        max_connections: int = 64,
        idle_timeout: float | None = None,
        max_stream_bytes: int = STREAM_MAX_BYTES,
    ):
        self.base_url = base_url.rstrip("/")
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[:-3]
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=min(30.0, timeout), sock_read=idle_timeout)
        self._limit = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._strip_extensions = False
        self.max_stream_bytes = max_stream_bytes
        self.tokenize_error: str | None = None  # why /tokenize gave no count (None: it answered)

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

    async def _once(
        self, method: str, path: str, body: dict | None = None, limit: int = BODY_MAX_BYTES
    ) -> tuple[int, str]:
        for attempt in (0, 1):
            try:
                async with self.http.request(method, self.base_url + path, json=body) as r:
                    return r.status, (await _read_capped(r, limit, f"{method} {path}")).decode(errors="replace")
            except aiohttp.ServerDisconnectedError:
                if attempt:  # a pooled connection the server had closed: one retry on a fresh one
                    raise
        raise AssertionError("unreachable")

    async def get_json(self, path: str, limit: int = BODY_MAX_BYTES) -> Any:
        status, text = await self._once("GET", path, limit=limit)
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
        return await self.get_json("/v1/models", limit=MODELS_MAX_BYTES)

    async def models_or_fail(self) -> dict:
        """/v1/models, or the one-line `server-unreachable` error every command gives for a dead server."""
        try:
            return await self.models()
        except asyncio.TimeoutError:  # aiohttp's ServerTimeoutError is one too
            t = self._timeout
            idle = f" or {t.sock_read:g} s without a byte" if t.sock_read else ""
            raise RecipekitError(
                code="server-unreachable",
                exit_code=ExitCode.FAILURE,
                message=f"{self.base_url}/v1/models: TimeoutError: no complete answer within {t.total:g} s{idle}",
                hint="start the server (recipe apply <recipe>) or pass --url; a slow server: raise --request-timeout",
            ) from None
        except AnswerTooLarge as e:
            raise RecipekitError(
                code="server-answer-too-large",
                exit_code=ExitCode.FAILURE,
                message=f"{self.base_url}/v1/models: {e}",
                hint="this is not an OpenAI-compatible server's /v1/models; check --url",
            ) from None
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
            try:
                name = data["data"][0]["id"]
            except (KeyError, IndexError, TypeError):
                name = None
            if not isinstance(name, str) or not name:
                raise RecipekitError(
                    code="server-models-invalid",
                    exit_code=ExitCode.FAILURE,
                    message=f"{self.base_url}/v1/models lists no model id",
                    hint="not an OpenAI-compatible server, or none loaded; check --url, or pass --model",
                )
            self.model = name
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

    async def count_tokens(self, text: str) -> int | None:
        """How many tokens the server's /tokenize makes of `text` (no special tokens added);
        None, with `tokenize_error` saying why, where the server has no usable /tokenize."""
        if self.tokenize_error is not None:
            return None
        body = {"model": await self.resolve_model(), "prompt": text, "add_special_tokens": False}
        try:
            status, data = await self.post_json("/tokenize", body)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            self.tokenize_error = f"{type(e).__name__}: {e}"[:200]
            return None
        tokens = data.get("tokens") if status == 200 and isinstance(data, dict) else None
        if not isinstance(tokens, list):
            self.tokenize_error = f"HTTP {status}" if status != 200 else "the answer holds no token list"
            return None
        return len(tokens)

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
            rec = _new_record(body, tag, stream_index, concurrency)
            retry = await self._stream_once(path, body, rec, abort_after_tokens, keep_itl)
            if not retry or attempt == 1:
                break
            self._strip_extensions = True
            for k in VLLM_EXTENSIONS:
                body.pop(k, None)
        return rec

    def _stream_cap(self, body: dict) -> int:
        mt = body.get("max_tokens")
        if isinstance(mt, int) and not isinstance(mt, bool) and mt >= 0:
            return min(self.max_stream_bytes, STREAM_BASE_BYTES + STREAM_BYTES_PER_TOKEN * mt)
        return self.max_stream_bytes

    async def _stream_once(
        self, path: str, body: dict, rec: RequestRecord, abort_after_tokens: int | None, keep_itl: bool
    ) -> bool:
        perf = time.perf_counter
        parser = SSEParser()
        parts: list[str] = []
        tool_calls: dict[int, dict] = {}
        cap = self._stream_cap(body)
        # a stream may not carry more tokens than asked (+1): an endless one stops here
        token_cap = rec.max_tokens + COUNT_TOLERANCE + 1 if rec.max_tokens is not None else None
        rec.t_start = perf()
        try:
            async with self.http.post(self.base_url + path, json=body) as resp:
                rec.status = resp.status
                if resp.status != 200:
                    err = (await _read_capped(resp, 1 << 16, path, truncate=True)).decode(errors="replace")[:300]
                    rec.error = f"HTTP {resp.status}: {err}"
                    rec.t_end = perf()
                    return resp.status == 400 and any(k in body for k in VLLM_EXTENSIONS)
                last = None
                async for chunk in resp.content.iter_any():
                    now = perf()
                    rec.bytes += len(chunk)
                    if rec.bytes > cap:
                        rec.error = (
                            f"stream-too-large: over {cap} bytes, the cap of a stream for max_tokens {rec.max_tokens}"
                        )
                        resp.close()
                        break
                    seen = rec.token_events
                    for ev in parser.feed(chunk):
                        if ev is DONE:
                            continue
                        # an event that is not an object, or holds odd types, raises below
                        # (AttributeError, TypeError, KeyError, IndexError): malformed-event
                        if "error" in ev and "choices" not in ev:
                            rec.error = str(ev["error"])[:300]
                            continue
                        usage = ev.get("usage")
                        if usage:
                            try:
                                rec.prompt_tokens = usage_count(usage, "prompt_tokens")
                                rec.completion_tokens = usage_count(usage, "completion_tokens")
                            except UsageInvalid as e:
                                rec.usage_error = str(e)
                                rec.prompt_tokens = rec.completion_tokens = None
                        choices = ev.get("choices")
                        if not choices:
                            continue  # the usage-only tail chunk carries no token
                        text, fin = delta_text(ev)
                        if not isinstance(text, str):
                            raise _Malformed(f"a stream event's text is {type(text).__name__}, not a string")
                        if fin:
                            rec.finish_reason = str(fin)[:40]
                        _collect_tool_calls(ev, tool_calls)
                        choice = choices[0]
                        delta = choice.get("delta")
                        # A chunk with a choice is a generated token even when its text is empty
                        # (the detokenizer holds back partial UTF-8 / special tokens), as in
                        # `vllm bench serve`; only chat's role-only opening chunk is not.
                        if text or not (isinstance(delta, dict) and "role" in delta):
                            if rec.t_first is None:
                                rec.t_first = now
                            elif keep_itl and last is not None:
                                rec.itl.append(now - last)
                            last = now
                            rec.t_last = now
                            ids = choice.get("token_ids")
                            # several tokens in one event (speculative decoding, or sent together) where the server
                            # names them: a count taken from ids only when they are ids
                            if ids is not None and not _token_ids(ids):
                                raise _Malformed("a stream event's token_ids are not a list of token ids")
                            rec.token_events += len(ids) if ids else 1
                            parts.append(text)
                    if rec.token_events > seen:
                        rec.arrivals += 1
                    if token_cap is not None and rec.token_events > token_cap:
                        rec.error = f"more-than-asked: over {token_cap} tokens streamed for max_tokens {rec.max_tokens}"
                        resp.close()
                        break
                    if abort_after_tokens is not None and rec.token_events >= abort_after_tokens:
                        rec.aborted = True
                        resp.close()  # drop the connection mid-stream: the server sees a disconnect
                        break
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:  # transport, timeout, bad JSON, caps
            rec.error = f"{type(e).__name__}: {e}"[:300]
        except (
            _Malformed,
            AttributeError,
            TypeError,
            KeyError,
            IndexError,
            RecursionError,
        ) as e:  # a well-formed but odd event
            rec.error = f"malformed-event: {e}"[:300]
        rec.t_end = perf()
        rec.events = parser.events_seen
        rec.text = "".join(parts)
        rec.tool_calls = [tool_calls[i] for i in sorted(tool_calls)]
        return False


class _Malformed(Exception):
    pass


def _token_ids(ids: object) -> bool:
    """A JSON list of token ids: non-negative integers (never a bool, a float or a string)."""
    return isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)


def _new_record(body: dict, tag: str, stream_index: int, concurrency: int) -> RequestRecord:
    rec = RequestRecord(tag=tag, stream_index=stream_index, concurrency=concurrency)
    mt = body.get("max_tokens")
    if isinstance(mt, int) and not isinstance(mt, bool):
        rec.max_tokens = mt
    prompt = body.get("prompt")
    if isinstance(prompt, list) and all(isinstance(x, int) for x in prompt):
        rec.prompt_tokens_sent = len(prompt)  # ids: the client knows the prompt's length exactly
    return rec


async def _read_capped(resp: aiohttp.ClientResponse, limit: int, what: str, truncate: bool = False) -> bytes:
    """The body of `resp`, at most `limit` bytes: AnswerTooLarge past it (or the first `limit`
    bytes with truncate=True); never more than one read beyond the cap is held."""
    if not truncate and resp.content_length is not None and resp.content_length > limit:
        raise AnswerTooLarge(f"{what}: the answer is {resp.content_length} bytes, more than the {limit} accepted")
    buf = bytearray()
    async for piece in resp.content.iter_chunked(1 << 16):
        buf += piece
        if len(buf) > limit:
            if truncate:
                return bytes(buf[:limit])
            raise AnswerTooLarge(f"{what}: the answer holds more than the {limit} bytes accepted")
    return bytes(buf)


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
