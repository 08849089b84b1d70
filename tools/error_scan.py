"""Every error code the source raises, found by reading it (`ast`), for the registry's test and
README's table of codes (recipekit/error_codes.py is the registry).

A code is raised where the source names it as a string:
- `code="..."` (or `*_code="..."`) in any call: `RecipekitError(...)` and the helpers that build
  one (bounded reads, confine, a module's own `_fail(...)`); both branches of `"a" if c else "b"`;
- a positional argument where the called function, defined in the package, takes `code` there
  (a method of the calling module, called on any receiver, counts too);
- the default of a parameter named `code` or `*_code`;
- a string assigned to a name `code`, `CODE` or `*_CODE`;
- the first item of a tuple a `(code, message, hint)` function returns (its docstring says so);
- an f-string `f"constraint-{id}"`: the family `constraint-*` (each value a `*`).

`python -m recipekit.tools.error_scan [--write README.md]` prints (or writes between README's
markers) the table of codes generated from the registry.
"""

from __future__ import annotations

import argparse
import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from recipekit import atomic
from recipekit.error_codes import CODES
from recipekit.tools.import_graph import ROOT, module_files

KEBAB = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


@dataclass(frozen=True)
class Raised:
    code: str  # a code, or a family "constraint-*" (an f-string's values as `*`)
    where: str  # path:line, relative to the checkout
    exit_code: Optional[str]  # "INVALID_INPUT" ... where a RecipekitError(...) names it; None: not a direct raise
    hint: Optional[str] = None  # a RecipekitError(...)'s literal hint ("" for none, None if computed or not direct)


def _is_code_name(name: Optional[str]) -> bool:
    return bool(name) and (name in ("code", "CODE") or name.endswith("_code") or name.endswith("_CODE"))  # type: ignore[union-attr]


def _strings(node: ast.AST) -> Iterator[str]:
    """The codes an expression can evaluate to, where they are written in it."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.IfExp):
        yield from _strings(node.body)
        yield from _strings(node.orelse)
    elif isinstance(node, ast.JoinedStr) and node.values:
        # f"patch-{what}-corrupt" raises the family "patch-*-corrupt"
        yield "".join(str(v.value) if isinstance(v, ast.Constant) else "*" for v in node.values)


def _func_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _exit_name(call: ast.Call) -> Optional[str]:
    """ExitCode.NAME of a RecipekitError(...) call (INVALID_INPUT when it names none), or "?"."""
    for k in call.keywords:
        if k.arg == "exit_code":
            v = k.value
            if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "ExitCode":
                return v.attr
            return "?"  # computed: not checkable here
    return "INVALID_INPUT"  # RecipekitError's default


def _takes_code(tree: ast.Module) -> dict[str, set[int]]:
    """The module's functions that take a code positionally: name -> indexes (self/cls not counted)."""
    out: dict[str, set[int]] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = [a.arg for a in fn.args.posonlyargs + fn.args.args]
            if args and args[0] in ("self", "cls"):
                args = args[1:]
            idx = {i for i, a in enumerate(args) if _is_code_name(a)}
            if idx:
                out.setdefault(fn.name, set()).update(idx)
    return out


def _callees(name: str, tree: ast.Module, per_module: dict[str, dict[str, set[int]]]) -> dict[str, set[int]]:
    """What a call by bare name `f(...)` or `alias.f(...)` reaches from this module: its own
    functions, the functions it imports by name, and those of the modules it imports."""
    reach: dict[str, set[int]] = dict(per_module.get(name, {}))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                if sub in per_module:  # `from recipekit import bounded`: a module
                    for f, idx in per_module[sub].items():
                        reach[f"{a.asname or a.name}.{f}"] = idx
                elif a.name in per_module.get(node.module, {}):
                    reach[a.asname or a.name] = per_module[node.module][a.name]
        elif isinstance(node, ast.Import):
            for a in node.names:
                for f, idx in per_module.get(a.name, {}).items():
                    reach[f"{a.asname or a.name}.{f}"] = idx
    return reach


def _call_key(call: ast.Call) -> str:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return f"{f.value.id}.{f.attr}"
    return ""


def _hint(call: ast.Call) -> Optional[str]:
    for k in call.keywords:
        if k.arg == "hint":
            v = k.value
            return v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else None
    return ""


def scan(root: Path = ROOT) -> list[Raised]:
    mods = module_files(root)
    trees = {name: ast.parse(path.read_text(), str(path)) for name, path in mods.items()}
    per_module = {name: _takes_code(tree) for name, tree in trees.items()}
    out: list[Raised] = []
    for mod, tree in sorted(trees.items()):
        rel = mods[mod].relative_to(root).as_posix()
        takes_code = _callees(mod, tree, per_module)
        for node in ast.walk(tree):
            at = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Call):
                name = _func_name(node)
                direct = name == "RecipekitError"
                for k in node.keywords:
                    if _is_code_name(k.arg):
                        for s in _strings(k.value):
                            if direct and k.arg == "code":
                                out.append(Raised(s, at, _exit_name(node), _hint(node)))
                            else:
                                out.append(Raised(s, at, "NOT_FOUND" if k.arg == "missing_code" else None))
                key = _call_key(node)
                # `self.e("code", ...)` / `c.e("code", ...)`: a method of this module that takes a code
                idx = takes_code.get(key) or (per_module[mod].get(key.split(".", 1)[1], set()) if "." in key else set())
                for i in idx:
                    if i < len(node.args):
                        out += [Raised(s, at, None) for s in _strings(node.args[i])]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                pos = a.posonlyargs + a.args
                for arg, default in zip(pos[len(pos) - len(a.defaults) :], a.defaults):
                    if _is_code_name(arg.arg):
                        out += [Raised(s, at, None) for s in _strings(default)]
                for arg, kwd in zip(a.kwonlyargs, a.kw_defaults):
                    if kwd is not None and _is_code_name(arg.arg):
                        out += [Raised(s, at, None) for s in _strings(kwd)]
                doc = ast.get_docstring(node) or ""
                if "(code, message, hint)" in doc:
                    for r in ast.walk(node):
                        if isinstance(r, ast.Return) and isinstance(r.value, ast.Tuple) and r.value.elts:
                            out += [Raised(s, f"{rel}:{r.lineno}", None) for s in _strings(r.value.elts[0])]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if node.value is not None and any(isinstance(t, ast.Name) and _is_code_name(t.id) for t in targets):
                    # a name like CODE may hold other text (a Python snippet): only a kebab word is a code
                    out += [Raised(s, at, None) for s in _strings(node.value) if KEBAB.fullmatch(s.rstrip("-*"))]
    return out


def problems(raised: list[Raised], codes: dict) -> list[str]:
    """What the registry (`codes`: code -> Code(exit_code, hint)) and the raises disagree on, each
    line saying what to change where."""
    out = []
    for r in raised:
        row = codes.get(r.code)
        if not (KEBAB.fullmatch(r.code) or "*" in r.code):
            out.append(f"{r.where}: code {r.code!r} is not kebab-case (a-z, 0-9, single dashes)")
        elif row is None:
            ec = r.exit_code if r.exit_code not in (None, "?") else "INVALID_INPUT"
            out.append(
                f"{r.where}: code {r.code!r} is not registered: add the line "
                f'`    "{r.code}": Code({ec}, ""),` to CODES in recipekit/error_codes.py (sorted by code)'
            )
        elif r.exit_code not in (None, "?") and row.exit_code.name != r.exit_code:
            out.append(
                f"{r.where}: code {r.code!r} is raised with ExitCode.{r.exit_code}, but recipekit/error_codes.py "
                f"says {row.exit_code.name}: make them one (or give the new meaning its own code)"
            )
    seen = {r.code for r in raised}
    for code in sorted(set(codes) - seen):
        out.append(f"recipekit/error_codes.py: code {code!r} is raised nowhere: remove its line from CODES")
    return out


# --------------------------------------------------------------------------- README's table

BEGIN = "<!-- error-codes: generated by `python -m recipekit.tools.error_scan --write README.md` -->"
END = "<!-- error-codes: end -->"


def table() -> str:

    lines = ["| code | exit | default hint |", "|---|---|---|"]
    for code, c in sorted(CODES.items()):
        hint = (c.hint or "").replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{code}` | {int(c.exit_code)} {c.exit_code.name.lower().replace('_', ' ')} | {hint} |")
    return "\n".join(lines)


def readme_block() -> str:
    return f"{BEGIN}\n{table()}\n{END}"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m recipekit.tools.error_scan", description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, help="replace the block between the markers in this file (README.md)")
    args = ap.parse_args(argv)
    if not args.write:
        print(readme_block())
        return 0
    text = args.write.read_text()
    if BEGIN not in text or END not in text:
        print(f"{args.write}: no error-codes markers")
        return 1
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]

    atomic.atomic_write_text(args.write, head + readme_block() + tail, keep_mode=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
