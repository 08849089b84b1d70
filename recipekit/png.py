"""PNG bytes: the one place the toolkit encodes a PNG.

`from_rows` encodes raw 8-bit RGB/RGBA pixel rows (the site's favicon, the smoke gate's test
image); `from_figure` saves a matplotlib figure (the site's and the bench report's charts)
without the metadata (matplotlib's version) that would make equal charts differ in bytes.
"""

from __future__ import annotations

import io
import struct
import zlib
from typing import Any, Sequence

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOUR_TYPE = {3: 2, 4: 6}  # channels -> PNG colour type (truecolour, truecolour + alpha)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def from_rows(rows: Sequence[bytes], width: int, channels: int, level: int = 9) -> bytes:
    """A PNG of `rows` (top to bottom, each `width * channels` bytes of 8-bit samples, no filter
    byte); deterministic for the same pixels."""
    if channels not in _COLOUR_TYPE:
        raise ValueError(f"channels must be 3 (RGB) or 4 (RGBA), not {channels}")
    if any(len(r) != width * channels for r in rows):
        raise ValueError(f"every row must be {width * channels} bytes")
    ihdr = struct.pack(">IIBBBBB", width, len(rows), 8, _COLOUR_TYPE[channels], 0, 0, 0)
    raw = b"".join(b"\x00" + bytes(r) for r in rows)  # filter type 0 (none) per row
    return _SIGNATURE + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw, level)) + _chunk(b"IEND", b"")


def from_figure(fig: Any, dpi: float | None = None, text: dict[str, str] | None = None) -> bytes:
    """A matplotlib figure as PNG bytes, with no Software metadata; `text` adds tEXt chunks."""
    buf = io.BytesIO()
    meta: dict[str, Any] = {"Software": None, **(text or {})}
    fig.savefig(buf, format="png", dpi=dpi if dpi is not None else "figure", metadata=meta)
    return buf.getvalue()


def text_chunks(data: bytes) -> dict[str, str]:
    """The tEXt chunks (keyword -> Latin-1 text) of PNG bytes; an error on bytes that are not a PNG."""
    if not data.startswith(_SIGNATURE):
        raise ValueError("not a PNG (no signature)")
    out: dict[str, str] = {}
    at = len(_SIGNATURE)
    while at + 8 <= len(data):
        (size,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        body = data[at + 8 : at + 8 + size]
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        if kind == b"IEND":
            break
        at += 12 + size
    return out
