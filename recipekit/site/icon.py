"""The site's favicon: a small PNG drawn in code (browsers ask for /favicon.ico on every page,
the JSON documents included; a missing one is a console error)."""
from __future__ import annotations

from recipekit import png

SIZE = 32
BG = (11, 92, 173, 255)     # the site's accent colour
FG = (255, 255, 255, 255)


def favicon_png() -> bytes:
    """A 32x32 rounded-off square with a white 'r' stroke; deterministic bytes."""
    rows = []
    for y in range(SIZE):
        row = bytearray()
        for x in range(SIZE):
            corner = min(x, SIZE - 1 - x) + min(y, SIZE - 1 - y) < 3
            stem = 9 <= x <= 13 and 8 <= y <= 25
            arm = 13 <= x <= 22 and 8 <= y <= 12
            px = (0, 0, 0, 0) if corner else (FG if (stem or arm) else BG)
            row += bytes(px)
        rows.append(bytes(row))
    return png.from_rows(rows, SIZE, 4)
