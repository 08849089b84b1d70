"""One output object for every command: human (rich) or json (stable, machine-readable)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from enum import Enum
from typing import Any, Callable, Mapping, Optional, Sequence

from recipekit.textsafe import shown


class Format(str, Enum):
    human = "human"
    json = "json"


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False, default=_default) + "\n"


def _default(o: Any) -> Any:
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "__dataclass_fields__"):
        return asdict(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    return str(o)


# Whether this process has written a JSON result document to stdout: an error raised after it
# (a command whose result says "failed" and that exits non-zero) is not printed as a second document.
_state = {"json_result_written": False}


def json_result_written() -> bool:
    return _state["json_result_written"]


def reset_json_result() -> None:
    _state["json_result_written"] = False


class Output:
    def __init__(self, fmt: Format | str = Format.human):
        self.format = Format(fmt)

    @property
    def json(self) -> bool:
        return self.format is Format.json

    def result(self, data: Any, human: Callable[[], object] | None = None) -> None:
        """Print `data` as JSON, or call `human()` (default: pretty-print data)."""
        if self.json:
            sys.stdout.write(to_json(data))
            _state["json_result_written"] = True
        elif human is not None:
            human()
        else:
            self.console().print(data)

    def progress(self) -> Callable[[str], None] | None:
        """A dim `… message` line on stderr per progress step; None in json mode (stdout stays clean)."""
        if self.json:
            return None
        c = self.err_console()
        return lambda s: c.print(f"[dim]… {s}[/]")

    @staticmethod
    def console():
        from rich.console import Console  # lazy: rich costs more than `recipe --help` itself

        return Console(highlight=False, soft_wrap=True)

    @staticmethod
    def err_console():
        from rich.console import Console  # lazy: rich costs more than `recipe --help` itself

        return Console(stderr=True, highlight=False, soft_wrap=True)


def cell_text(v: Any) -> str:
    """A table cell as plain text; control characters from recipe text are shown, never emitted."""

    if v is None:
        return ""
    return shown(",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v))


def print_table(
    rows: Sequence[Mapping[str, Any]],
    cols: Sequence[str],
    *,
    max_width: int = 60,
    headers: Optional[Sequence[str]] = None,
    right: Sequence[str] = (),
    stderr: bool = False,
) -> None:
    """Rows as a rich table: one column per key in `cols`, values folded past max_width (ids are
    never cut), `right` columns right-aligned. Cells are plain text, never rich markup. Piped
    output is as wide as the table needs, so a pipe or a log never gets wrapped rows."""
    from rich.console import Console  # lazy: rich costs more than `recipe --help` itself
    from rich.table import Table  # lazy: as above
    from rich.text import Text  # lazy: as above

    cells = [[cell_text(r.get(c)) for c in cols] for r in rows]
    names = list(headers or cols)
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", padding=(0, 2, 0, 0))
    for i, c in enumerate(cols):
        table.add_column(names[i], max_width=max_width, overflow="fold", justify="right" if c in right else "left")
    for row in cells:
        table.add_row(*[Text(x) for x in row])
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        widths = [min(max_width, max([len(names[i])] + [len(row[i]) for row in cells])) for i in range(len(cols))]
        console = Console(stderr=stderr, highlight=False, width=max(80, sum(widths) + 2 * len(cols)))
    console.print(table)
