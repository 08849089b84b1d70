"""Incremental parser of an OpenAI-style server-sent-event stream (bytes in, JSON events out).

Kept apart from the HTTP client so its cost can be measured on recorded bytes, and so the
client spends as little time per token as possible: split on newlines, keep only `data:`
lines, decode JSON once per event.

Linear in the bytes fed, whatever the server sends: each byte is searched for a newline once
(the tail of an unfinished line is kept as pieces and joined once, when its newline comes), and
a line longer than `max_line` bytes is refused (`SSELineTooLong`) instead of being held. The
work done is counted in `bytes_scanned` (bytes searched) and `bytes_joined` (bytes copied to
rebuild a line that arrived in pieces), so a test can assert on it rather than on wall time.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

DONE = object()  # the `data: [DONE]` sentinel

# vLLM's stream events are a few KiB at most (top-20 logprobs of several tokens); the largest is
# the first chunk under return_token_ids, which holds the prompt's ids (about 6 bytes a token:
# 1 MiB holds ~170k); one MiB bounds what a never-ending line can take
MAX_LINE_BYTES = 1 << 20


class SSELineTooLong(ValueError):
    """A server sent a line longer than the parser's cap (never-ending or absurd)."""


class SSEParser:
    """Feed raw bytes as they arrive; iterate the decoded events (dicts, or DONE)."""

    __slots__ = ("_tail", "_tail_len", "events_seen", "max_line", "bytes_scanned", "bytes_joined")

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._tail: list[bytes] = []  # pieces of the unfinished last line
        self._tail_len = 0
        self.events_seen = 0
        self.max_line = max_line
        self.bytes_scanned = 0
        self.bytes_joined = 0

    def feed(self, chunk: bytes) -> Iterator[Any]:  # parsed JSON objects, or DONE
        start = 0
        n = len(chunk)
        self.bytes_scanned += n  # find() below moves forward only: every byte is searched once
        if self._tail:
            nl = chunk.find(b"\n")
            if nl < 0:
                self._hold(chunk)
                return
            self._tail.append(chunk[:nl])
            line = b"".join(self._tail)
            self.bytes_joined += len(line)
            self._tail, self._tail_len = [], 0
            if len(line) > self.max_line:
                raise SSELineTooLong(f"an SSE line of {len(line)} bytes, more than the {self.max_line} accepted")
            start = nl + 1
            ev = self._event(line)
            if ev is not None:
                yield ev
        loads = json.loads
        find = chunk.find
        while True:
            nl = find(b"\n", start)
            if nl < 0:
                break
            if chunk.startswith(b"data:", start):
                if nl - start > self.max_line:
                    raise SSELineTooLong(f"an SSE line of {nl - start} bytes, more than the {self.max_line} accepted")
                payload = chunk[start + 5 : nl].strip()
                start = nl + 1
                if not payload:
                    continue
                self.events_seen += 1
                if payload == b"[DONE]":
                    yield DONE
                    continue
                yield loads(payload)
            else:
                start = nl + 1  # blank separator lines, comments (": ping"), event:/id: fields
        if start < n:
            self._hold(chunk[start:] if start else chunk)

    def _hold(self, piece: bytes) -> None:
        self._tail.append(piece)
        self._tail_len += len(piece)
        if self._tail_len > self.max_line:
            held = self._tail_len
            self._tail, self._tail_len = [], 0
            raise SSELineTooLong(
                f"an SSE line of over {held} bytes without an end, more than the {self.max_line} accepted"
            )

    def _event(self, line: bytes) -> Any:
        if not line.startswith(b"data:"):
            return None
        payload = line[5:].strip()
        if not payload:
            return None
        self.events_seen += 1
        if payload == b"[DONE]":
            return DONE
        return json.loads(payload)

    @property
    def held_bytes(self) -> int:
        """Bytes of an unfinished line kept for the next feed (bounded by max_line)."""
        return self._tail_len


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
