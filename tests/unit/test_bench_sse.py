"""The SSE parser: the same events whatever the chunking, linear work (counted, not timed), a line cap."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recipekit.bench.sse import DONE, SSELineTooLong, SSEParser

_texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_events = st.lists(
    st.fixed_dictionaries({"choices": st.lists(st.fixed_dictionaries({"text": _texts}), max_size=1)}),
    min_size=0,
    max_size=12,
)


def _stream(events: list[dict], crlf: bool, comments: bool) -> bytes:
    nl = b"\r\n" if crlf else b"\n"
    out = b""
    for i, ev in enumerate(events):
        if comments and i % 3 == 0:
            out += b": ping" + nl + nl
        out += b"data: " + json.dumps(ev).encode() + nl + nl
    return out + b"data: [DONE]" + nl + nl


def _parse(chunks: list[bytes]) -> list:
    p = SSEParser()
    out: list = []
    for c in chunks:
        out += ["DONE" if e is DONE else e for e in p.feed(c)]
    assert p.held_bytes == 0
    return out


@settings(max_examples=200, deadline=None)
@given(
    events=_events,
    crlf=st.booleans(),
    comments=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=20),
)
def test_any_split_of_a_valid_stream_parses_identically(events, crlf, comments, cuts):
    raw = _stream(events, crlf, comments)
    points = sorted({c % (len(raw) + 1) for c in cuts})
    chunks = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)])]
    assert b"".join(chunks) == raw
    assert _parse(chunks) == _parse([raw]) == [*events, "DONE"]


def test_a_never_ending_line_is_scanned_once_and_cut_at_the_cap():
    cap = 1 << 20
    p = SSEParser(max_line=cap)
    piece = b"x" * 4096
    fed = 0
    with pytest.raises(SSELineTooLong) as e:
        fed += 6
        list(p.feed(b"data: "))
        for _ in range(10 * cap // len(piece)):  # up to 10 MiB of one line
            fed += len(piece)
            list(p.feed(piece))
            assert p.held_bytes <= cap
    assert "more than the 1048576 accepted" in str(e.value)
    # linear: each byte fed was searched once, none was copied to rebuild the line; it stopped at the cap
    assert p.bytes_scanned == fed and p.bytes_joined == 0
    assert cap < fed <= cap + 2 * len(piece)
    assert p.held_bytes == 0  # what it held is dropped, not kept


def test_a_long_line_in_pieces_is_joined_once():
    ev = {"choices": [{"text": "y" * 300_000}]}
    raw = b"data: " + json.dumps(ev).encode() + b"\n\n"
    p = SSEParser()
    got = []
    for i in range(0, len(raw), 1000):
        got += list(p.feed(raw[i : i + 1000]))
    assert got == [ev]
    assert p.bytes_scanned == len(raw) and p.bytes_joined == len(raw) - 2  # the line, joined once, no newline


def test_a_whole_line_over_the_cap_in_one_chunk_is_refused():
    with pytest.raises(SSELineTooLong):
        list(SSEParser(max_line=100).feed(b"data: " + b"z" * 200 + b"\n\n"))
    assert list(SSEParser(max_line=100).feed(b"data: " + b"1" * 50 + b"\n\n")) == [int("1" * 50)]
