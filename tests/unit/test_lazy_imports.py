"""An import inside a function says why it is there: `# lazy: <reason>` on its line (any line of a
multi-line import) or on the line above. Every other import sits at the top of its module, where
readers and the import graph look for it. What counts as a reason is what the deferred import
buys (a heavy library such as numpy, torch or pydantic that a command's start-up should not pay,
an optional dependency); `python -m recipekit.tools.help_speed` measures the start-up.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("recipekit", "backends", "hybrid", "bench", "tools", "patches")
MARK = "# lazy:"


def _has_reason(lines: list[str], node: ast.stmt) -> bool:
    end = node.end_lineno or node.lineno
    stmt = lines[node.lineno - 1 : end]
    above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
    return any(_reason_in(line) for line in stmt) or (above.startswith(MARK) and bool(above[len(MARK) :].strip()))


def _reason_in(line: str) -> bool:
    _, mark, reason = line.partition(MARK)
    return bool(mark) and bool(reason.strip())


def unexplained_imports(source: str, name: str = "<src>") -> list[str]:
    """`name:line: import` of every function-level import with no `# lazy: <reason>`."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found: dict[int, str] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not _has_reason(lines, node):
                found[node.lineno] = f"{name}:{node.lineno}: {lines[node.lineno - 1].strip()}"
    return [found[k] for k in sorted(found)]


def test_every_function_level_import_gives_its_reason():
    bad: list[str] = []
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            bad += unexplained_imports(path.read_text(), str(path.relative_to(REPO)))
    assert bad == [], (
        f"{len(bad)} function-level import(s) without a `{MARK} <reason>` comment: move each to the top "
        "of its module, or say what deferring it buys:\n" + "\n".join(bad)
    )


def test_the_check_sees_unexplained_imports_and_accepts_reasons():
    src = (
        "import os\n"
        "def f():\n"
        "    import json\n"
        "    import numpy as np  # lazy: pulls numpy\n"
        "    # lazy: pulls torch\n"
        "    import torch\n"
        "    from a import (  # lazy: pulls a\n"
        "        b,\n"
        "    )\n"
        "    from c import (\n"
        "        d,\n"
        "    )\n"
        "    import e  # lazy:\n"
        "    def g():\n"
        "        import shlex  # function-level: not the marker\n"
        "    return json, np, torch, b, d, e, g\n"
    )
    assert unexplained_imports(src, "m.py") == [
        "m.py:3: import json",
        "m.py:10: from c import (",
        "m.py:13: import e  # lazy:",
        "m.py:15: import shlex  # function-level: not the marker",
    ]
    assert unexplained_imports("import json\nclass A:\n    x = 1\n") == []
