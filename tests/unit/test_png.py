"""recipekit.png: the one PNG encoder (raw pixel rows, matplotlib figures)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest

from recipekit import png


@pytest.mark.parametrize("channels", [3, 4])
def test_rows_decode_to_the_same_pixels(channels):
    from PIL import Image  # matplotlib's own image dependency: an independent decoder

    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, size=(5, 7, channels), dtype=np.uint8)
    data = png.from_rows([row.tobytes() for row in pixels], 7, channels)
    assert data == png.from_rows([row.tobytes() for row in pixels], 7, channels)
    img = Image.open(io.BytesIO(data))
    assert img.size == (7, 5) and img.mode == ("RGB" if channels == 3 else "RGBA")
    assert np.array_equal(np.asarray(img), pixels)


def test_bad_rows_are_refused():
    with pytest.raises(ValueError, match="channels"):
        png.from_rows([b"\x00"], 1, 1)
    with pytest.raises(ValueError, match="6 bytes"):
        png.from_rows([b"\x00" * 6, b"\x00" * 5], 2, 3)


def test_figure_png_is_deterministic_and_has_no_software_metadata():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    def draw() -> bytes:
        fig = Figure(figsize=(2, 1), dpi=50)
        FigureCanvasAgg(fig)
        fig.add_subplot(1, 1, 1).bar([0, 1], [3, 4])
        return png.from_figure(fig)

    a = draw()
    assert a == draw() and a.startswith(b"\x89PNG\r\n\x1a\n") and b"Software" not in a and b"matplotlib" not in a


def test_no_other_module_encodes_a_png():
    root = Path(png.__file__).resolve().parent.parent
    found = []
    for folder in ("recipekit", "backends", "bench", "tools", "hybrid", "patches"):
        for py in (root / folder).rglob("*.py"):
            if py == Path(png.__file__).resolve():
                continue
            text = py.read_text()
            if re.search(r"\\x89PNG|\.savefig\(|b\"IDAT\"", text):
                found.append(str(py.relative_to(root)))
    assert found == []
