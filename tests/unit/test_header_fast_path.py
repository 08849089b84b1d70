"""parse_header's fast path (C JSON parse, column checks, a ':' count for duplicate keys) gives the
checking parse's result on valid headers and its exact error on invalid ones; the hybrid index text
made with the C string encoder is json.dumps(indent=2)'s, byte for byte."""

from __future__ import annotations

import json

import pytest

from recipekit.checkpoint.safetensors_io import TensorSpec, _parse_header, build_header, parse_header
from recipekit.errors import RecipekitError
from recipekit.hybrid.assemble import index_text


def _raw(specs, metadata=None) -> tuple[bytes, int]:
    h = build_header(specs, metadata)
    return h[8:], sum(s.nbytes for s in specs)


def _error(raw: bytes, data_len: int) -> tuple[str, str]:
    with pytest.raises(RecipekitError) as e:
        parse_header(raw, data_len)
    return e.value.code, e.value.message


def test_valid_headers_parse_as_the_checking_parse_does():
    specs = [
        TensorSpec("a:b.weight", "F16", (3, 5)),
        TensorSpec("z", "I32", ()),
        TensorSpec("empty", "BF16", (0, 4)),
        TensorSpec("c", "U8", (7,)),
    ]
    raw, n = _raw(specs, {"format": "pt", "k:1": "v:2:3"})
    fast = parse_header(raw, n)
    slow = _parse_header(raw.decode(), n, "<bytes>", fast=False)
    assert fast == slow
    assert list(fast[0]) == list(slow[0]) == ["a:b.weight", "z", "empty", "c"]
    assert fast[0]["z"].begin == 30 and fast[0]["z"].nbytes == 4


@pytest.mark.parametrize(
    "text",
    [
        # a tensor given twice (the second would win)
        '{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
        # a key given twice inside an entry
        '{"t":{"dtype":"I8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
        # an escape that spells ':' beside a duplicate: the count cannot prove anything, the checking parse runs
        '{"a\\u003ab":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a\\u003ab":{"dtype":"U8","shape":[1],'
        '"data_offsets":[0,1]}}',
        # a duplicate metadata key
        '{"__metadata__":{"x":"1","x":"2"},"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
    ],
)
def test_a_key_given_twice_is_refused_by_name(text):
    code, msg = _error(text.encode(), 1)
    assert code == "safetensors-header-invalid"
    assert "duplicate key" in msg


@pytest.mark.parametrize(
    "text,code,words",
    [
        ('{"t":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}}', "safetensors-bad-dtype", "unknown dtype 'Q9'"),
        ('{"t":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}}', "safetensors-bad-shape", "shape [1.0]"),
        ('{"t":{"dtype":"U8","shape":[2],"data_offsets":[0,1]}}', "safetensors-size-mismatch", "span 1"),
        ('{"t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', "safetensors-gap", "unindexed bytes 0..1"),
        ('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', "safetensors-trailing-bytes", "1 unindexed"),
    ],
)
def test_invalid_headers_get_the_checking_parse_s_error(text, code, words):
    data_len = 2
    got = _error(text.encode(), data_len)
    with pytest.raises(RecipekitError) as slow:
        _parse_header(text, data_len, "<bytes>", fast=False)
    assert got == (slow.value.code, slow.value.message)
    assert got[0] == code and words in got[1]


def test_offsets_past_4_gib_parse_exactly():
    big = (1 << 32) + 12
    specs = [TensorSpec("a", "U8", (big,)), TensorSpec("b", "I32", (1,))]
    raw, n = _raw(specs)
    tensors, _ = parse_header(raw, n)
    assert (tensors["b"].begin, tensors["b"].end) == (big, big + 4)


@pytest.mark.parametrize(
    "wm", [{}, {"b": "x", "a": 'y\u00e9"\\', "c\n": "z", "layers.0.w": "model-00001-of-00002.safetensors"}]
)
def test_index_text_is_json_dumps_indent_2(wm):
    md = {"total_size": 5, "format": "hybrid-exl3-fp8"}
    want = json.dumps({"metadata": md, "weight_map": dict(sorted(wm.items()))}, indent=2) + "\n"
    assert index_text(md, wm) == want
