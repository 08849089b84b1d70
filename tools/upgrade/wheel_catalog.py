"""A flag/env catalog of one vLLM release, read with `ast` from the Python sources of its published wheel.

Why `ast` and not an import: vLLM's parser module imports the engine (torch custom-op registration,
platform detection, msgspec, ...) at import time; importing it with stubs fails inside torch.library on
a machine without vLLM's dependency set (tried on 0.33.0). The sources say what the parser builds:
- `vllm serve`'s flags are the `add_argument(...)` calls of `engine/arg_utils.py` and of the release's
  cli_args module (`entrypoints/common/cli_args.py` from 0.33.0, `entrypoints/launchers/cli_args.py`
  in 0.32.0: both are tried), with `**X_kwargs["field"]` resolved to the config dataclass field that
  `X_kwargs = get_kwargs(Class)` names, and the frontend loop (`for key, value in kw.items():
  add_argument(f"--{key...}")`) expanded to every field of the frontend class;
- a field typed `bool` gets argparse's BooleanOptionalAction (`--x` and `--no-x`,
  arg_utils.py `_compute_kwargs`), and where `utils/argparse_utils.py` defines `_inverse_prefixes`
  (0.33.0's EnableDisableAction) `--enable-x` pairs with `--disable-x`: `--no-enable-x` leaves the
  parser's visible options and that table is the release's own mapping to its replacement;
- a field typed `Literal[...]` has those choices; a literal default is kept;
- env names are the keys of `environment_variables` in `vllm/envs.py`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Optional

CLI_ARGS_PATHS = ("vllm/entrypoints/common/cli_args.py", "vllm/entrypoints/launchers/cli_args.py")
ARG_UTILS = "vllm/engine/arg_utils.py"
ARGPARSE_UTILS = "vllm/utils/argparse_utils.py"
ENVS = "vllm/envs.py"
CONFIG_PREFIX = "vllm/config/"
# 0.33.0's EnableDisableAction keeps parsing the old --no-enable-x as a hidden alias (its docstring:
# "still accepted for backwards compatibility, but are hidden from help"): a rename, not a breakage yet
RENAME_SOURCE = f"{ARGPARSE_UTILS} _inverse_prefixes (the old name stays a hidden alias)"


def needed_member(name: str) -> bool:
    """Whether a wheel member is one the catalog reads."""
    return name in (ARG_UTILS, ARGPARSE_UTILS, ENVS, *CLI_ARGS_PATHS) or (
        name.startswith(CONFIG_PREFIX) and name.endswith(".py")
    )


@dataclass
class FieldInfo:
    is_bool: bool
    choices: Optional[list[str]]
    default: Any
    line: int


@dataclass
class Catalog:
    version: str
    cli_args_module: str
    flags: dict[str, dict[str, Any]] = field(default_factory=dict)
    env: list[str] = field(default_factory=list)
    # a flag this release no longer shows -> (replacement, source)
    renames: dict[str, tuple[str, str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "cli_args_module": self.cli_args_module,
            "flags": self.flags,
            "env": self.env,
            "renames": {k: list(v) for k, v in sorted(self.renames.items())},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Catalog":
        return cls(
            version=d["version"],
            cli_args_module=d["cli_args_module"],
            flags=d["flags"],
            env=d["env"],
            renames={k: (v[0], v[1]) for k, v in d["renames"].items()},
        )


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def _literal_choices(ann: ast.AST, aliases: dict[str, ast.AST]) -> Optional[list[str]]:
    for n in ast.walk(ann):
        if isinstance(n, ast.Name) and n.id in aliases:
            got = _literal_choices(aliases[n.id], {})
            if got:
                return got
        if isinstance(n, ast.Subscript) and _names_in(n.value) & {"Literal"}:
            elts = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
            vals = [e.value for e in elts if isinstance(e, ast.Constant)]
            if vals and len(vals) == len(elts):
                return sorted(str(v) for v in vals)
    return None


def _classes(sources: dict[str, str]) -> dict[str, tuple[list[str], dict[str, FieldInfo]]]:
    """Class name -> (base names, annotated fields) over the config modules and the cli_args module."""
    out: dict[str, tuple[list[str], dict[str, FieldInfo]]] = {}
    for path, text in sources.items():
        if not (path.startswith(CONFIG_PREFIX) or path in CLI_ARGS_PATHS or path == ARG_UTILS):
            continue
        tree = ast.parse(text, filename=path)
        aliases: dict[str, ast.AST] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                aliases[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                aliases[node.target.id] = node.value
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            fields: dict[str, FieldInfo] = {}
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    ann_names = _names_in(st.annotation)
                    if "ClassVar" in ann_names:
                        continue
                    is_bool = "bool" in ann_names and not (
                        {"str"} <= ann_names and "None" in ast.unparse(st.annotation)
                    )
                    default: Any = None
                    if isinstance(st.value, ast.Constant):
                        default = st.value.value
                    choices = _literal_choices(st.annotation, aliases)
                    optional = any(isinstance(c, ast.Constant) and c.value is None for c in ast.walk(st.annotation))
                    if choices and optional:
                        choices = sorted([*choices, "None"])
                    fields[st.target.id] = FieldInfo(is_bool, choices, default, st.lineno)
            bases = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
            out.setdefault(node.name, (bases, fields))
    return out


def _all_fields(name: str, classes: dict[str, tuple[list[str], dict[str, FieldInfo]]]) -> dict[str, FieldInfo]:
    bases, own = classes.get(name, ([], {}))
    merged: dict[str, FieldInfo] = {}
    for b in bases:
        merged.update(_all_fields(b, classes))
    merged.update(own)
    return merged


def _inverse_prefixes(text: str) -> dict[str, str]:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_inverse_prefixes" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            if isinstance(value, dict):
                return {str(k): str(v) for k, v in value.items()}
    return {}


def _kw(call: ast.Call, name: str) -> Optional[ast.AST]:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _add_flags(
    catalog: Catalog,
    opts: list[str],
    info: Optional[FieldInfo],
    call: ast.Call,
    inverse: dict[str, str],
    where: str,
) -> None:
    action = _kw(call, "action")
    action_text = ast.unparse(action) if action is not None else ""
    nargs = _kw(call, "nargs")
    deprecated = isinstance(_kw(call, "deprecated"), ast.Constant) and getattr(_kw(call, "deprecated"), "value", False)
    boolean = "BooleanOptionalAction" in action_text or (info is not None and info.is_bool and action is None)
    store_flag = action_text.strip("'\"") in ("store_true", "store_false")
    choices = info.choices if info else None
    default = info.default if info else None
    choices_node = _kw(call, "choices")
    if choices_node is not None:
        try:
            choices = sorted(str(c) for c in ast.literal_eval(choices_node))
        except ValueError:
            pass
    default_node = _kw(call, "default")
    if isinstance(default_node, ast.Constant):
        default = default_node.value
    takes_value = not (boolean or store_flag or (isinstance(nargs, ast.Constant) and nargs.value == 0))
    base = {"takes_value": takes_value, "deprecated": bool(deprecated), "choices": choices, "default": default}
    dest = opts[0].lstrip("-").replace("-", "_")
    for opt in opts:
        catalog.flags[opt] = {**base, "dest": dest, "source": where}
    if not boolean:
        return
    for opt in [o for o in opts if o.startswith("--")]:
        negated = "--no-" + opt[2:]
        paired = [inv + opt[len(pre) :] for pre, inv in inverse.items() if opt.startswith(pre)]
        if paired:
            catalog.flags[paired[0]] = {**base, "dest": dest, "source": where}
            catalog.renames[negated] = (paired[0], RENAME_SOURCE)
        else:
            catalog.flags[negated] = {**base, "dest": dest, "source": where}


def _kwargs_bindings(func: ast.AST) -> dict[str, str]:
    """`x_kwargs = get_kwargs(Class)` / `cls` inside a function: variable -> class name."""
    out: dict[str, str] = {}
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "get_kwargs"
            and node.value.args
        ):
            out[node.targets[0].id] = ast.unparse(node.value.args[0])
    return out


def _scan_parser_module(
    path: str,
    text: str,
    catalog: Catalog,
    classes: dict[str, tuple[list[str], dict[str, FieldInfo]]],
    inverse: dict[str, str],
) -> None:
    tree = ast.parse(text, filename=path)
    for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        for func in [n for n in cls.body if isinstance(n, ast.FunctionDef)]:
            _scan_function(path, func, cls.name, catalog, classes, inverse)
    for func in [n for n in tree.body if isinstance(n, ast.FunctionDef)]:
        _scan_function(path, func, "", catalog, classes, inverse)


def _scan_function(
    path: str,
    func: ast.FunctionDef,
    owner: str,
    catalog: Catalog,
    classes: dict[str, tuple[list[str], dict[str, FieldInfo]]],
    inverse: dict[str, str],
) -> None:
    bindings = _kwargs_bindings(func)
    loops = {
        node.target.elts[0].id: node.iter.func.value.id
        for node in ast.walk(func)
        if isinstance(node, ast.For)
        and isinstance(node.target, ast.Tuple)
        and isinstance(node.target.elts[0], ast.Name)
        and isinstance(node.iter, ast.Call)
        and isinstance(node.iter.func, ast.Attribute)
        and node.iter.func.attr == "items"
        and isinstance(node.iter.func.value, ast.Name)
    }
    for call in [n for n in ast.walk(func) if isinstance(n, ast.Call)]:
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            continue
        where = f"{path}:{call.lineno}"
        opts = [str(a.value) for a in call.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")]
        info: Optional[FieldInfo] = None
        # `**x_kwargs["f"]`, also inside a dict display `**{**x_kwargs["f"], "default": None}`
        spreads = [k.value for k in call.keywords if k.arg is None]
        spreads += [v for d in spreads if isinstance(d, ast.Dict) for key, v in zip(d.keys, d.values) if key is None]
        for value in spreads:
            if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
                cls_name = bindings.get(value.value.id, "")
                cls_name = owner if cls_name == "cls" else cls_name
                if isinstance(value.slice, ast.Constant):
                    info = _all_fields(cls_name, classes).get(str(value.slice.value))
        fstrings = [a for a in call.args if isinstance(a, ast.JoinedStr)]
        if fstrings and not opts:
            loop_var = next(iter(_names_in(fstrings[0]) & set(loops)), None)
            if loop_var is None:
                continue
            cls_name = bindings.get(loops[loop_var], "")
            cls_name = owner if cls_name == "cls" else cls_name
            # every subclass of `owner` in the module set runs the same loop (FrontendArgs)
            targets = [cls_name] + [c for c, (bases, _) in classes.items() if cls_name in bases]
            for target in targets:
                for fname, finfo in _all_fields(target, classes).items():
                    _add_flags(catalog, ["--" + fname.replace("_", "-")], finfo, call, inverse, where)
            continue
        if opts:
            _add_flags(catalog, opts, info, call, inverse, where)


def _env_names(text: str) -> list[str]:
    for node in ast.walk(ast.parse(text, filename=ENVS)):
        target = None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target = node.target.id
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
        value = getattr(node, "value", None)
        if target == "environment_variables" and isinstance(value, ast.Dict):
            return sorted(k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
    return []


def build_catalog(version: str, sources: dict[str, str]) -> Catalog:
    """The catalog of `version` from its wheel members (path -> text) that `needed_member` selected."""
    cli_path = next((p for p in CLI_ARGS_PATHS if p in sources), None)
    if cli_path is None or ARG_UTILS not in sources or ENVS not in sources:
        missing = [p for p in (ARG_UTILS, ENVS) if p not in sources] + ([] if cli_path else list(CLI_ARGS_PATHS))
        raise ValueError(f"the wheel lacks {', '.join(missing)}")
    catalog = Catalog(version=version, cli_args_module=cli_path[:-3].replace("/", "."))
    classes = _classes(sources)
    inverse = _inverse_prefixes(sources.get(ARGPARSE_UTILS, ""))
    _scan_parser_module(ARG_UTILS, sources[ARG_UTILS], catalog, classes, inverse)
    _scan_parser_module(cli_path, sources[cli_path], catalog, classes, inverse)
    catalog.env = _env_names(sources[ENVS])
    catalog.flags = dict(sorted(catalog.flags.items()))
    return catalog
