"""Safetensors headers read as columns (names, dtypes, shapes, begin and end offsets) in a few
C-level calls, for headers written the way safetensors itself writes them.

The safetensors writers (the reference `safetensors` serializer, and build_header here) emit one
compact JSON object: an optional `"__metadata__":{...}` first, then `"name":{"dtype":"..","shape":
[..],"data_offsets":[b,e]}` per tensor in offset order, no whitespace, padded with spaces to a
multiple of 8 bytes. One `re.split` over the header bytes takes every such entry apart; the rest is
`map` over columns. The format spec (huggingface/safetensors README, "Format") decides what is valid:
offsets contiguous from 0 to the end of the data section, dtype known, shape product x itemsize =
byte length. Whatever this reader does not fully account for (a byte of the header not covered by an
entry, an escape or control character in a name, a key order or field it does not expect, a number
it does not read exactly, a name given twice, entries out of offset order) makes it answer None, and
the caller parses the header with the strict JSON parse, so results and errors never differ.
"""

from __future__ import annotations

import json
import math
import operator
import re
from typing import Mapping, NamedTuple

# one tensor entry with the comma that precedes it; a name holds no quote, backslash (an escape) or
# control character, which JSON requires to be escaped. The numbers are taken loosely here (the
# simplest pattern is the fastest) and checked after, once per distinct shape and once for all offsets
_ENTRY = re.compile(
    rb',"([^"\\\x00-\x1f]+)":\{"dtype":"([A-Z0-9_]+)","shape":\[([0-9,]*)\],"data_offsets":\[([0-9]+),([0-9]+)\]\}'
)
# JSON integers as the writers emit them: no sign, no leading zero; at most 18 digits, so that every
# value read fits int64 (longer numbers go to the strict parse)
_INT = rb"(?:0|[1-9][0-9]{0,17})"
_INT_LIST = re.compile(rb"(?:" + _INT + rb"(?:," + _INT + rb")*)?")
_METADATA = re.compile(rb'\{"__metadata__":(\{[^{}]*\})')
_METADATA_KEY = b'"__metadata__"'


class HeaderColumns(NamedTuple):
    """One header's tensors in offset order, one list per field (index i is tensor i)."""

    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    begins: list[int]
    ends: list[int]
    metadata: dict[str, str]


def _metadata(raw: bytes) -> tuple[dict[str, str], int] | None:
    """(metadata, where the entries start) for a header that begins with `{` and optionally the
    metadata object; None if the start is not that."""
    if not raw.startswith(b'{"__metadata__":'):
        return ({}, 1) if raw.startswith(b'{"') else None
    m = _METADATA.match(raw)
    if m is None or raw[m.end() : m.end() + 2] != b',"':
        return None
    pairs: list[tuple[str, object]] = []
    try:
        json.loads(m.group(1), object_pairs_hook=pairs.extend)
    except ValueError:
        return None
    md: dict[str, str] = {}
    for k, v in pairs:  # a handful: strings only, no key twice
        if type(v) is not str or k in md:
            return None
        md[k] = v
    return md, m.end() + 1


def read_columns(raw: bytes, data_len: int, dtype_sizes: Mapping[str, int]) -> HeaderColumns | None:
    """The header's columns when it is a valid header in the writers' form, else None (then the
    strict parse decides). `raw` is the JSON header (UTF-8, already checked by the caller);
    `data_len` the data section's length; `dtype_sizes` the known dtypes' item sizes."""
    head = _metadata(raw)
    if head is None:
        return None
    metadata, start = head
    body_end = len(raw.rstrip(b" "))
    if raw[body_end - 2 : body_end] != b"}}":
        return None
    # each entry is matched with the comma before it: the first one's is the byte before it
    body = b"," + raw[start : body_end - 1]
    # split at every entry: the five fields of each, with the bytes between entries (and before the
    # first, after the last) at every sixth place; all of them empty means the entries tile the body
    parts = _ENTRY.split(body)
    if len(parts) < 7 or any(parts[0::6]):
        return None
    names_b, dtypes_b, shapes_b, begins_b, ends_b = (parts[i::6] for i in range(1, 6))
    del parts
    n = len(names_b)
    # contiguous in the order written: from 0, each where the previous ends (compared as the
    # digits themselves: the pattern admits one spelling per number), the last at the end
    if begins_b[0] != b"0" or begins_b[1:] != ends_b[:-1]:
        return None
    if not all(map(_INT_LIST.fullmatch, set(shapes_b))) or not _INT_LIST.fullmatch(b",".join(ends_b)):
        return None
    ends = list(map(int, ends_b))
    if ends[-1] != data_len:
        return None
    begins = [0, *ends[:-1]]
    # one string per dtype, the table's own
    dtype_of = {d: d.decode() for d in set(dtypes_b)}
    if not set(dtype_of.values()) <= dtype_sizes.keys():
        return None
    canonical = {d: d for d in dtype_sizes}
    dtypes = list(map(canonical.__getitem__, map(dtype_of.__getitem__, dtypes_b)))
    # one tuple per distinct shape text (a header has few), shared by its tensors
    shape_of = {s: tuple(map(int, s.split(b","))) if s else () for s in set(shapes_b)}
    numel = {s: math.prod(t) for s, t in shape_of.items()}
    sizes = list(map(operator.mul, map(numel.__getitem__, shapes_b), map(dtype_sizes.__getitem__, dtypes)))
    if sizes != list(map(operator.sub, ends, begins)):
        return None
    names = list(map(bytes.decode, names_b))
    if len(set(names)) != n or _METADATA_KEY[1:-1].decode() in names:
        return None
    shapes = list(map(shape_of.__getitem__, shapes_b))
    return HeaderColumns(names, dtypes, shapes, begins, ends, metadata)
