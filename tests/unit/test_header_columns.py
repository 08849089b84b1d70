"""The column header reader (recipekit/checkpoint/header_columns.py) agrees with the strict JSON parse
on every header it takes, hands back (None) every header it does not fully account for, and is taken
for headers in the writers' own form; parse_header's answers and errors stay the strict parse's."""

from __future__ import annotations

import json
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recipekit.checkpoint import safetensors_io as sio
from recipekit.checkpoint.header_columns import HeaderColumns, read_columns
from recipekit.checkpoint.safetensors_io import DTYPE_SIZES, TensorSpec, _parse_header, build_header, parse_header
from recipekit.errors import RecipekitError


def _strict(raw: bytes, data_len: int):
    """parse_header's answer without the column reader: (tensors, metadata) or (error code, message)."""
    with mock.patch.object(sio, "read_columns", lambda *a: None):
        return _answer(raw, data_len)


def _checking(raw: bytes, data_len: int):
    """The checking parse alone (JSON with the duplicate-key hook, entry by entry)."""
    try:
        return _parse_header(raw.decode("utf-8"), data_len, "<bytes>", fast=False)
    except RecipekitError as e:
        return e.code, e.message


def _answer(raw: bytes, data_len: int):
    try:
        return parse_header(raw, data_len)
    except RecipekitError as e:
        return e.code, e.message


def _columns_of(tensors, metadata) -> HeaderColumns:
    rows = list(tensors.values())
    return HeaderColumns(
        [t.name for t in rows],
        [t.dtype for t in rows],
        [tuple(t.shape) for t in rows],
        [t.begin for t in rows],
        [t.end for t in rows],
        metadata,
    )


def _agrees(raw: bytes, data_len: int) -> HeaderColumns | None:
    """read_columns' answer, checked against the strict parse; parse_header's too."""
    strict = _strict(raw, data_len)
    assert _answer(raw, data_len) == strict
    cols = read_columns(raw, data_len, DTYPE_SIZES)
    if cols is not None:
        checking = _checking(raw, data_len)
        assert isinstance(checking[0], dict), f"the reader took a header the strict parse refuses: {checking}"
        assert cols == _columns_of(*checking) and checking == strict
    return cols


def _header(specs, metadata=None) -> tuple[bytes, int]:
    h = build_header(specs, metadata)
    return h[8:], sum(s.nbytes for s in specs)


PLAIN_NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-:", min_size=1, max_size=40)
SHAPE = st.lists(st.integers(0, 9), max_size=3).map(tuple)
DTYPE = st.sampled_from(sorted(DTYPE_SIZES))


@st.composite
def spec_lists(draw, names=PLAIN_NAME):
    names_ = draw(st.lists(names, min_size=1, max_size=12, unique=True))
    return [TensorSpec(n, draw(DTYPE), draw(SHAPE)) for n in names_]


METADATA = st.one_of(st.none(), st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3))


@settings(max_examples=300, deadline=None)
@given(spec_lists(), st.dictionaries(PLAIN_NAME, PLAIN_NAME, max_size=3))
def test_the_writers_form_is_read_as_columns(specs, metadata):
    raw, n = _header(specs, metadata)
    cols = _agrees(raw, n)
    assert cols is not None  # taken: nothing in it needs the strict parse
    assert cols.names == [s.name for s in specs]
    assert cols.metadata == metadata


def _no_surrogates(s: str) -> bool:
    return not any("\ud800" <= c <= "\udfff" for c in s)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(spec_lists(st.text(min_size=1, max_size=12).filter(_no_surrogates)), METADATA, st.booleans())
def test_names_with_escapes_and_unicode_agree_or_fall_back(specs, metadata, ascii_only):
    # build_header escapes non-ASCII (\\uXXXX); written raw (ensure_ascii=False) the reader may take them
    md = {k: v for k, v in (metadata or {}).items() if _no_surrogates(k + v)} or None
    raw, n = _header(specs, md)
    if not ascii_only:
        obj = json.loads(raw)
        raw = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    cols = _agrees(raw, n)
    escaped = any(c in '"\\' or ord(c) < 0x20 or (ascii_only and ord(c) > 0x7F) for s in specs for c in s.name)
    if escaped:
        assert cols is None  # an escape in a name: the strict parse reads it
    elif not any(c in "{}" for k, v in (md or {}).items() for c in k + v):
        assert cols is not None  # raw Unicode names and escaped metadata are the reader's own


@settings(max_examples=200, deadline=None)
@given(
    spec_lists(),
    st.sampled_from([(", ", ": "), (",", ": "), (", ", ":")]),
    st.sampled_from([None, 1]),
    st.sampled_from(["", " ", "  \n", "\t"]),
)
def test_odd_spacing_agrees_or_falls_back(specs, separators, indent, tail):
    raw, n = _header(specs)
    raw = (json.dumps(json.loads(raw), separators=separators, indent=indent) + tail).encode()
    assert _agrees(raw, n) is None or (separators == (",", ":") and indent is None)


@settings(max_examples=400, deadline=None)
@given(spec_lists(), st.data())
def test_damaged_headers_get_the_strict_answer(specs, data):
    raw, n = _header(specs, {"format": "pt"})
    text = raw.rstrip(b" ")
    i = data.draw(st.integers(0, len(text) - 1))
    piece = data.draw(st.sampled_from([b"", b"0", b"1", b",", b'"', b"}", b"{", b"\\", b"A", b"\x01", b" "]))
    cut = data.draw(st.integers(0, 2))
    damaged = text[:i] + piece + text[i + cut :]
    data_len = data.draw(st.sampled_from([n, n + 1, max(n - 1, 0)]))
    try:
        damaged.decode("utf-8")
    except UnicodeDecodeError:
        return
    _agrees(damaged, data_len)


@pytest.mark.parametrize(
    "text,data_len",
    [
        # a leading zero: not JSON
        ('{"t":{"dtype":"U8","shape":[01],"data_offsets":[0,1]}}', 1),
        ('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,01]}}', 1),
        # a number past int64 (19 digits): the strict parse reads it
        ('{"t":{"dtype":"U8","shape":[1000000000000000000],"data_offsets":[0,1000000000000000000]}}', 10**18),
        # a name given twice
        (
            '{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}',
            2,
        ),
        # __metadata__ given as a tensor, or twice, or not first
        ('{"__metadata__":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1),
        (
            '{"__metadata__":{"a":"b"},"__metadata__":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
            1,
        ),
        ('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"__metadata__":{"a":"b"}}', 1),
        # metadata whose values hold braces, or that is not strings
        ('{"__metadata__":{"a":"}{"},"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1),
        ('{"__metadata__":{"a":1},"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1),
        ('{"__metadata__":null,"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1),
        # entries out of offset order (valid: the strict parse orders them)
        (
            '{"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
            2,
        ),
        # a gap, an overlap, a size that does not match, trailing bytes, an unknown dtype, an empty name
        ('{"t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', 2),
        (
            '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}',
            2,
        ),
        ('{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,1]}}', 1),
        ('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 2),
        ('{"t":{"dtype":"Q8","shape":[1],"data_offsets":[0,1]}}', 1),
        ('{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1),
        # an extra field, fields in another order, whitespace, no tensors
        ('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}', 1),
        ('{"t":{"shape":[1],"dtype":"U8","data_offsets":[0,1]}}', 1),
        ('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}\n', 1),
        (' {"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1),
        ('{"__metadata__":{"a":"b"}}', 0),
        ("{}", 0),
    ],
)
def test_what_the_reader_does_not_account_for_goes_to_the_strict_parse(text, data_len):
    raw = text.encode()
    assert read_columns(raw, data_len, DTYPE_SIZES) is None
    assert _answer(raw, data_len) == _strict(raw, data_len)


def test_zero_size_tensors_and_offsets_past_4_gib_are_read():
    specs = [
        TensorSpec("big", "BF16", (65536, 40000)),  # 5,242,880,000 bytes: the next offsets pass 2^32
        TensorSpec("empty", "F32", (0, 7)),
        TensorSpec("scalar", "I32", ()),
        TensorSpec("tail", "F8_E4M3", (3, 5)),
    ]
    raw, n = _header(specs, {"format": "pt"})
    cols = _agrees(raw, n)
    assert cols is not None
    assert cols.begins == [0, 5_242_880_000, 5_242_880_000, 5_242_880_004]
    assert cols.ends[-1] == n == 5_242_880_019
    assert cols.shapes[2] == () and cols.dtypes == ["BF16", "F32", "I32", "F8_E4M3"]
