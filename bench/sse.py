"""Incremental parser of an OpenAI-style server-sent-event stream (bytes in, JSON events out).

Kept apart from the HTTP client so its cost can be measured on recorded bytes, and so the
client spends as little time per token as possible: split on newlines, keep only `data:`
lines, decode JSON once per event.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

DONE = object()  # the `data: [DONE]` sentinel


class SSEParser:
    """Feed raw bytes as they arrive; iterate the decoded events (dicts, or DONE)."""

    __slots__ = ("_buf", "events_seen")

    def __init__(self) -> None:
        self._buf = b""
        self.events_seen = 0

    def feed(self, chunk: bytes) -> Iterator[Any]:  # parsed JSON objects, or DONE
        buf = self._buf + chunk if self._buf else chunk
        start = 0
        loads = json.loads
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            line = buf[start:nl]
            start = nl + 1
            if not line.startswith(b"data:"):
                continue  # blank separator lines, comments (": ping"), event:/id: fields
            payload = line[5:].strip()
            if not payload:
                continue
            self.events_seen += 1
            if payload == b"[DONE]":
                yield DONE
                continue
            yield loads(payload)
        self._buf = buf[start:]


def delta_text(event: dict) -> tuple[str, str | None]:
    """(text delta, finish_reason) of a chat or completions chunk; ('', None) for usage-only."""
    choices = event.get("choices")
    if not choices:
        return "", None
    c = choices[0]
    d = c.get("delta")
    if d is not None:
        text = d.get("content") or d.get("reasoning_content") or d.get("reasoning") or ""
        if not text and d.get("tool_calls"):
            # a tool-call argument fragment is a generated token too
            tc = d["tool_calls"][0].get("function") or {}
            text = (tc.get("arguments") or "") + (tc.get("name") or "")
    else:
        text = c.get("text") or ""
    return text, c.get("finish_reason")
