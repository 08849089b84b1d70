"""Bounded HTTP requests to a server under test: one total deadline per request (headers and
body together, so a server sending one byte every few seconds is cut off), a cap on the bytes
read (a 400 MB answer is never held whole), and SSE read line by line with the same caps.

Readiness, identity and smoke use these instead of plain client calls: httpx's timeouts bound
each read, not the request, and its `.json()` reads the whole body whatever its size.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Optional

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MAX_BYTES = 4 * 1024 * 1024  # a /v1/models or chat answer of a real server is a few KiB


@dataclass
class Reply:
    """What came back: the status and body read, or why nothing usable came (`error`)."""

    status: int = 0
    body: bytes = b""
    error: Optional[str] = None  # "timed out after 5 s", "answer over 4194304 bytes", "connection refused: ..."
    events: list[Any] = field(default_factory=list)  # SSE: the parsed `data:` payloads, in order
    arrived: list[float] = field(default_factory=list)  # SSE: time.monotonic() when each event's line was read
    done: bool = False  # SSE: the `data: [DONE]` line arrived
    overflow: bool = False  # the answer went past the byte cap (reading stopped there)

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200

    def json(self) -> Any:
        """The body parsed as JSON (raises ValueError). Python's parser takes NaN and Infinity:
        every number a judge uses goes through `finite_int`/`finite_number`."""
        return json.loads(self.body)

    def why(self) -> str:
        return self.error or f"HTTP {self.status}"


def get(url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, max_bytes: int = DEFAULT_MAX_BYTES) -> Reply:
    return _run(_request("GET", url, None, timeout_s, max_bytes, sse=False), timeout_s)


def post_json(
    url: str, body: dict, *, timeout_s: float = DEFAULT_TIMEOUT_S, max_bytes: int = DEFAULT_MAX_BYTES
) -> Reply:
    return _run(_request("POST", url, body, timeout_s, max_bytes, sse=False), timeout_s)


def post_sse(
    url: str, body: dict, *, timeout_s: float = DEFAULT_TIMEOUT_S, max_bytes: int = DEFAULT_MAX_BYTES
) -> Reply:
    """POST and read a `text/event-stream` answer until `data: [DONE]`, the end, the deadline
    or `max_bytes`: each `data:` line is parsed as JSON into `events` (an unparsable one is
    kept as its text)."""
    return _run(_request("POST", url, body, timeout_s, max_bytes, sse=True), timeout_s)


def _run(request: Any, timeout_s: float) -> Reply:
    async def bounded() -> Reply:
        out = Reply()
        try:
            await asyncio.wait_for(request(out), timeout_s)
        except asyncio.TimeoutError:
            out.error = f"no complete answer within {timeout_s:g} s"
        return out

    return asyncio.run(bounded())


def _request(method: str, url: str, body: Optional[dict], timeout_s: float, max_bytes: int, *, sse: bool) -> Any:
    async def go(out: Reply) -> None:
        import aiohttp  # lazy: backends import the apply modules to render and lint

        timeout = aiohttp.ClientTimeout(total=timeout_s)
        try:
            # identity encoding, no decompression: a compressed body could expand past the cap in one chunk
            headers = {"Accept-Encoding": "identity"}
            async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False, headers=headers) as s:
                async with s.request(method, url, json=body, allow_redirects=False) as r:
                    out.status = r.status
                    if sse and r.status == 200:
                        await _read_sse(r, out, max_bytes)
                    else:
                        await _read_body(r, out, max_bytes)
        except (aiohttp.ClientError, OSError, ValueError) as e:  # ValueError: a header or line too long
            out.error = out.error or f"request failed: {type(e).__name__}: {str(e)[:200]}"

    return go


async def _read_body(r: Any, out: Reply, max_bytes: int) -> None:
    chunks: list[bytes] = []
    n = 0
    async for chunk in r.content.iter_chunked(65536):
        n += len(chunk)
        if n > max_bytes:
            out.error, out.overflow = f"answer over {max_bytes} bytes (stopped reading)", True
            return
        chunks.append(chunk)
    out.body = b"".join(chunks)


async def _read_sse(r: Any, out: Reply, max_bytes: int) -> None:
    # chunks are split on newlines as they come: each byte is looked at once however long a line is
    pending: list[bytes] = []
    n = 0
    async for chunk in r.content.iter_any():
        n += len(chunk)
        if n > max_bytes:
            out.error, out.overflow = f"stream over {max_bytes} bytes without its end (stopped reading)", True
            return
        parts = chunk.split(b"\n")
        for i, part in enumerate(parts):
            pending.append(part)
            if i == len(parts) - 1:
                break  # the last part has no newline yet
            line = b"".join(pending).rstrip(b"\r")
            pending = []
            if _sse_line(line, out):
                return
    if pending and _sse_line(b"".join(pending).rstrip(b"\r"), out):
        return


def _sse_line(line: bytes, out: Reply) -> bool:
    """Record one SSE line; True at `data: [DONE]`."""
    if not line.startswith(b"data:"):
        return False
    data = line[5:].strip()
    if data == b"[DONE]":
        out.done = True
        return True
    try:
        out.events.append(json.loads(data))
    except ValueError:
        out.events.append(data.decode(errors="replace"))
    out.arrived.append(time.monotonic())
    return False


def finite_int(v: Any) -> Optional[int]:
    """`v` when it is a JSON integer (not a bool, a string or a float); None otherwise."""
    if isinstance(v, bool) or not isinstance(v, int):
        return None
    return v


def finite_number(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None
