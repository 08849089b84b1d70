"""The package's import graph, read from the source (tests/unit/test_import_graph.py and
tools/floors.py use it).

Built from the source with `ast`, not by importing: every `import` and `from ... import`
statement counts, at module level and inside functions alike (a function-level import
hides a cycle, it does not remove it). The top-level folders map into `recipekit.*` as
pyproject.toml's package-dir says; `from pkg import name` counts as an import of
`pkg.name` when that is a module, else of `pkg`; `importlib.import_module("a.b")` with a
literal name counts as `import a.b`.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli has the same API
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]  # the source checkout (tools/ is a top-level folder)


def package_dirs(root: Path) -> dict[str, Path]:
    """pyproject.toml [tool.setuptools] package-dir: dotted package -> folder."""
    conf = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {pkg: root / folder for pkg, folder in conf["package-dir"].items()}


def module_files(root: Path) -> dict[str, Path]:
    """Every module of the package, by dotted name (a package by its __init__.py)."""
    mods: dict[str, Path] = {}
    dirs = package_dirs(root)
    for pkg, folder in dirs.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if any(not (folder.joinpath(*rel.parts[:i]) / "__init__.py").exists() for i in range(1, len(rel.parts))):
                continue  # a folder that is not a package (scripts, data)
            name = ".".join([pkg, *parts])
            # a sub-package that package-dir maps elsewhere is read from its own folder
            owner = max((p for p in dirs if name == p or name.startswith(p + ".")), key=len)
            if owner == pkg:
                mods[name] = path
    return mods


def _resolve(base: str, level: int, module: str | None, is_package: bool) -> str:
    if level == 0:
        return module or ""
    parts = base.split(".")
    keep = len(parts) - level + (1 if is_package else 0)
    return ".".join(parts[:keep] + ([module] if module else []))


def _is_type_checking(node: ast.If) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`."""
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The package modules `name` imports anywhere in its source."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    out: set[str] = set()

    def add(target: str) -> None:
        # the module itself, else the nearest package above it that is ours
        while target and target not in mods:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)

    # imports under `if TYPE_CHECKING:` are read by the type checker only, never at run time
    type_only = {
        id(n)
        for blk in ast.walk(tree)
        if isinstance(blk, ast.If) and _is_type_checking(blk)
        for stmt in blk.body
        for n in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            add(node.args[0].value)  # importlib.import_module("recipekit....") is an import too
        elif isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, node.level, node.module, is_package)
            for a in node.names:
                full = f"{base}.{a.name}"
                add(full if full in mods else base)
    return out


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = module_files(root)
    return {name: imports_of(name, path, mods) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(10000, limit))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)  # other tests rely on the interpreter's default
    return sorted(found)
