"""Text from outside shown to a human as what it is: control characters escaped, never emitted.

A recipe title holding ESC [ 2 J, an OSC 8 hyperlink or a bare carriage return would act on the
terminal that prints it; `shown` writes each such character (C0, DEL, C1, and the Unicode line and
bidi controls) as a visible `\\xNN` / `\\uNNNN` escape. `markup` additionally escapes rich markup
so that `[red]` or `[link=...]` in recipe text is printed, not interpreted.
"""

from __future__ import annotations

import re

# C0 (tab and newline included: one value, one line), DEL, C1, line/paragraph separators, bidi controls
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def shown(text: object, keep_newlines: bool = False) -> str:
    """`text` as a string with every control character written as an escape (newlines kept
    as line breaks when `keep_newlines`, for multi-line notes)."""
    if keep_newlines:
        return "\n".join(_CONTROL.sub(_escape, line) for line in str(text).split("\n"))
    return _CONTROL.sub(_escape, str(text))


def markup(text: object) -> str:
    """`shown(text)` with rich markup escaped, for text placed inside a rich markup string."""
    from rich.markup import escape  # lazy: pulls rich

    return escape(shown(text))
