"""The effective config: one recipe's values after every layer, each with where it came from.

Layers, in order (later wins):
  1. recipe      the recipe's settings, env knobs and serve args
  2. layout      the selected layout variant (`layouts.<name>`): settings, env (null unsets), args
  3. .env        KEY=VALUE data (recipekit/envfile.py), never sourced
  4. env         the process environment; a key that is set wins even when empty
  5. --set       KEY=VALUE on the command line

Addressable keys:
  * settings      UPPER_CASE names of `settings:` (HOST, PORT, MODELS_DIR, ...) and the builtin
                  LAYOUT (selects the layout; from --layout, --set, env or .env) and
                  TOOLKIT_HOME / TOOLKIT_MODELS_DIR / TOOLKIT_VENVS_DIR / TOOLKIT_CACHE_DIR
                  (placeholders like <MODELS_DIR> unless host paths are asked for);
  * env knobs     by variable name (`env:` of the recipe). An empty value from the process
                  env, .env or --set unsets the knob (the engine's code default applies);
  * serve args    by flag, through --set only: `--set --max-num-seqs=4` sets a value,
                  `--set --async-scheduling=` adds a bare flag, `--set '!--enforce-eager'`
                  removes a flag;
  * acks          `--set ack.NAME=1` (or .env / recipe `acknowledge:`), read by constraints;
  * extra env     `--set env.NAME=VALUE`, or an unknown KEY in .env (passed to the engine).
Only declared keys are read from the process environment. An unknown .env key that looks
like a known one (did-you-mean) is an error, not a pass-through.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Optional, cast

from recipekit import paths, templates, textsafe
from recipekit.envfile import read_env_file
from recipekit.errors import ErrorList, RecipekitError, did_you_mean
from recipekit.schema import FLAG_RE

if TYPE_CHECKING:  # the schema (pydantic) loads only where a recipe is validated
    from recipekit.catalog import LoadedRecipe
    from recipekit.schema import Recipe

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FLAG_NAME = re.compile(FLAG_RE)

BUILTIN_PLACEHOLDERS = {
    "TOOLKIT_HOME": "<RECIPEKIT_HOME>",
    "TOOLKIT_MODELS_DIR": "<MODELS_DIR>",
    "TOOLKIT_VENVS_DIR": "<VENVS_DIR>",
    "TOOLKIT_CACHE_DIR": "<CACHE_DIR>",
}


@dataclass
class Value:
    value: Any
    source: str
    template: bool = False  # recipe text (may hold ${...}); user values never are


@dataclass
class ArgValue:
    flag: str
    value: Any  # str (display form), a JSON object, or None for a bare flag
    is_json: bool
    source: str
    template: bool = True
    parts: list = field(default_factory=list)  # resolved template parts of a plain value

    def value_parts(self) -> list:
        """The value as template parts (literal text and runtime env references)."""
        if self.value is None:
            return []
        if self.is_json:
            return [json.dumps(self.value)]
        return self.parts or [str(self.value)]


_REQUIRED: Any = object()


@dataclass
class EffectiveConfig:
    recipe: Recipe
    layout: Optional[str]
    settings: dict[str, Value] = field(default_factory=dict)
    env: dict[str, Value] = field(default_factory=dict)  # value None = unset
    args: list[ArgValue] = field(default_factory=list)
    acks: dict[str, Value] = field(default_factory=dict)
    declared_env: set[str] = field(default_factory=set)
    origin: Optional[str] = None
    content_hash: str = ""
    # the declared parallelism of a multi-node layout's node (None: the single-node layout's own)
    parallel: Optional[dict[str, int]] = None

    def declared_parallel(self, name: str) -> int:
        """Declared tensor / pipeline / data parallel size: the multi-node layout's, else the layout's, else 1."""
        if self.parallel is not None:
            return int(self.parallel[name])
        lay = self.recipe.layouts.get(self.layout) if self.layout else None
        return int(getattr(lay, f"{name}_parallel", 1)) if lay is not None else 1

    # ---- lookups: the one way renderers, constraints, steps and tools read a value
    def setting(self, name: str, default: Any = _REQUIRED) -> Any:
        """The setting's resolved value. A name the recipe does not declare gives `default`;
        without one it is an error (a template naming an unknown setting)."""
        v = self.settings.get(name)
        if v is None:
            if default is not _REQUIRED:
                return default
            raise RecipekitError(
                code="unknown-setting",
                message=f"template refers to unknown setting '{name}'",
                hint=did_you_mean(name, self.settings),
            )
        return v.value

    def source_of(self, name: str) -> Optional[str]:
        """Where the setting's value came from ("recipe", "layout:pp4", ".env:3", "env", "--set"); None when undeclared."""
        v = self.settings.get(name)
        return None if v is None else v.source

    def env_value(self, name: str, default: Any = None) -> Any:
        """The env variable's effective value (None when declared but unset); `default` when undeclared."""
        v = self.env.get(name)
        return default if v is None else v.value

    def env_values(self) -> dict[str, Optional[str]]:
        return {k: v.value for k, v in self.env.items()}

    def exported_env(self) -> list[tuple[str, str]]:
        """(name, value) of every env var the launch sets, in recipe order (extras last)."""
        out: list[tuple[str, str]] = []
        for name, v in self.env.items():
            knob = self.recipe.env_knob(name)
            if v.value is None or (knob is not None and not knob.export):
                continue
            out.append((name, v.value))
        return out

    def arg(self, flag: str) -> Optional[ArgValue]:
        return next((a for a in self.args if a.flag == flag), None)

    def flat(self) -> list[dict]:
        """Every value with its source: [{kind, key, value, source}] (for show --effective/export)."""
        rows = []
        for k, v in self.settings.items():
            rows.append({"kind": "setting", "key": k, "value": v.value, "source": v.source})
        for k, v in self.env.items():
            rows.append({"kind": "env", "key": k, "value": v.value, "source": v.source})
        for a in self.args:
            rows.append({"kind": "arg", "key": a.flag, "value": a.value, "source": a.source})
        for k, v in self.acks.items():
            rows.append({"kind": "ack", "key": f"ack.{k}", "value": v.value, "source": v.source})
        return rows

    def to_dict(self) -> dict:
        return {
            "recipe": self.recipe.id,
            "layout": self.layout,
            "content_hash": self.content_hash,
            "values": self.flat(),
        }


def setting_of(cfg: Any, name: str, default: Any = None) -> Any:
    """`cfg.setting(name, default)` for an effective config; `default` for anything else (a bare
    Recipe, whose settings may still hold templates)."""
    return cfg.setting(name, default) if isinstance(cfg, EffectiveConfig) else default


# --------------------------------------------------------------------------- helpers


def _coerce(name: str, raw: Any, typ: str, where: str) -> Any:
    """A user-supplied string -> the setting's type."""
    if not isinstance(raw, str):
        return raw
    try:
        if typ == "int":
            return int(raw) if raw != "" else raw
        if typ == "float":
            return float(raw) if raw != "" else raw
        if typ == "list":
            s = raw.strip()
            if s.startswith("["):
                val = json.loads(s)
                if not isinstance(val, list):
                    raise ValueError("not a list")
                return val
            items = [x.strip() for x in s.split(",") if x.strip()]
            return [int(x) if x.lstrip("-").isdigit() else x for x in items]
        if typ == "bool" and raw.lower() not in ("0", "1", "true", "false", "yes", "no", ""):
            raise ValueError("not a boolean")
    except (ValueError, json.JSONDecodeError, RecursionError):  # RecursionError: nesting thousands deep
        raise RecipekitError(
            code="invalid-setting",
            message=f"{name}={raw!r} is not a valid {typ}",
            location=where,
            hint=f"give {name} as a {typ}",
        ) from None
    return raw


def _builtins(host_paths: bool) -> dict[str, Value]:
    if not host_paths:
        return {k: Value(v, "placeholder") for k, v in BUILTIN_PLACEHOLDERS.items()}

    return {
        "TOOLKIT_HOME": Value(str(paths.home()), "toolkit"),
        "TOOLKIT_MODELS_DIR": Value(str(paths.models_dir()), "toolkit"),
        "TOOLKIT_VENVS_DIR": Value(str(paths.venvs_dir()), "toolkit"),
        "TOOLKIT_CACHE_DIR": Value(str(paths.home() / "cache"), "toolkit"),
    }


def parse_sets(sets: Iterable[str]) -> list[tuple[str, Optional[str]]]:
    """'KEY=VALUE' items -> (key, value); '!--flag' -> (flag, None) meaning remove."""
    out, errors = parse_set_items(sets)
    if errors:
        raise ErrorList(errors)
    return out


def parse_set_items(sets: Iterable[str]) -> tuple[list[tuple[str, Optional[str]]], list[RecipekitError]]:
    out: list[tuple[str, Optional[str]]] = []
    errors: list[RecipekitError] = []
    for item in sets or ():
        if item.startswith("!"):
            out.append((item[1:], None))
            continue
        if "=" not in item:
            errors.append(
                RecipekitError(
                    code="set-invalid",
                    message=f"--set {item!r} is not KEY=VALUE",
                    location="--set",
                    hint="e.g. --set LAYOUT=pp4 or --set --max-num-seqs=4",
                )
            )
            continue
        k, v = item.split("=", 1)
        out.append((k.strip(), v))
    return out, errors


# --------------------------------------------------------------------------- build


def _env_name_invalid(name: str, where: str) -> RecipekitError:
    return RecipekitError(
        code="env-name-invalid",
        location=where,
        message=f"'{name}' is not an environment variable name",
        hint="letters, digits and _",
    )


def _put_arg(args: list[ArgValue], flag: str, new: Optional[ArgValue]) -> None:
    """Replace the serve argument `flag` in place (append when absent); None removes it."""
    idx = next((i for i, a in enumerate(args) if a.flag == flag), None)
    if new is None:
        if idx is not None:
            args.pop(idx)
    elif idx is None:
        args.append(new)
    else:
        args[idx] = new


# --------------------------------------------------------------------------- the layers as data


@dataclass
class Inputs:
    """What the layers read: the recipe and every override as given."""

    recipe: Recipe
    layout: Optional[str]  # --layout
    dotenv: dict[str, tuple[str, int]]  # KEY -> (value, line) of the .env file
    env_label: str
    environ: Mapping[str, str]
    sets: list[tuple[str, Optional[str]]]  # parsed --set items
    host_paths: bool


@dataclass
class Put:
    """One value a layer gives, with where it came from.

    kind: "setting" | "env" | "arg" | "ack" (a layer that knows what the key is: the recipe and
    its layout), "user" (a KEY=VALUE from .env, the process env or --set, classified by
    `_assign`), or "flag" (a --set serve flag)."""

    kind: str
    key: str
    value: Any
    source: str
    where: str = ""
    template: bool = False
    is_json: bool = False
    overlay: bool = False  # a layout's value: the key must already be declared
    remove: bool = False  # a serve argument taken away
    from_process_env: bool = False


Layer = Callable[[Inputs, "Chosen"], Iterator["Put | RecipekitError"]]


@dataclass
class Chosen:
    """The layout in effect and where that choice came from."""

    name: Optional[str]
    source: str
    spec: Any = None  # schema.Layout or None


# ---- LAYOUT: one ladder, later wins (recipe default, .env, process env, --layout, --set)


def _layout_from_recipe(i: Inputs) -> Optional[tuple[Any, str]]:
    return i.recipe.default_layout, "recipe"


def _layout_from_dotenv(i: Inputs) -> Optional[tuple[Any, str]]:
    if "LAYOUT" not in i.dotenv:
        return None
    value, line = i.dotenv["LAYOUT"]
    return value, f"{i.env_label}:{line}"


def _layout_from_environ(i: Inputs) -> Optional[tuple[Any, str]]:
    return (i.environ["LAYOUT"], "env") if "LAYOUT" in i.environ else None


def _layout_from_option(i: Inputs) -> Optional[tuple[Any, str]]:
    return (i.layout, "--layout") if i.layout else None


def _layout_from_set(i: Inputs) -> Optional[tuple[Any, str]]:
    given = [v for k, v in i.sets if k == "LAYOUT"]
    return (given[-1], "--set") if given else None


LAYOUT_LADDER = [_layout_from_recipe, _layout_from_dotenv, _layout_from_environ, _layout_from_option, _layout_from_set]


def choose_layout(i: Inputs, errors: list[RecipekitError]) -> Chosen:
    """The layout in effect: the last rung of LAYOUT_LADDER that gives one."""
    chosen, source = None, "recipe"
    for rung in LAYOUT_LADDER:
        got = rung(i)
        if got is not None:
            chosen, source = got
    for k, v in i.sets:
        if k == "LAYOUT" and i.layout and v != i.layout:
            errors.append(
                RecipekitError(
                    code="layout-conflict",
                    location="--set",
                    message=f"--layout {i.layout} and --set LAYOUT={v} disagree",
                    hint="give one",
                )
            )
    r = i.recipe
    if r.layouts:
        if chosen in (None, ""):
            chosen, source = r.default_layout, "recipe"
        if chosen not in r.layouts:
            raise RecipekitError(
                code="unknown-layout",
                message=f"layout '{chosen}' is not defined by {r.id}",
                location=source,
                hint=did_you_mean(str(chosen), [*r.layouts, *r.multinode])
                or f"layouts: {', '.join(r.layouts)}"
                + (f"; multi-node layouts: {', '.join(sorted(r.multinode))}" if r.multinode else ""),
            )
        return Chosen(chosen, source, r.layouts[chosen])
    if chosen and (source == "env" or source.startswith(i.env_label + ":")):
        return Chosen(None, source)  # a LAYOUT meant for another recipe in the environment: ignored here
    if chosen:
        raise RecipekitError(
            code="unknown-layout",
            message=f"{r.id} has no single-node layouts (got '{chosen}')",
            location=source,
            hint=(f"multi-node layouts: {', '.join(sorted(r.multinode))}; " if r.multinode else "")
            + "or drop --layout / LAYOUT",
        )
    return Chosen(None, source)


# ---- the layers, in order (later wins)


def recipe_layer(i: Inputs, c: Chosen) -> Iterator[Put | RecipekitError]:
    """1. the toolkit's builtins, LAYOUT, and the recipe's settings, env knobs, serve args, acks."""
    for name, v in _builtins(i.host_paths).items():
        yield Put("setting", name, v.value, v.source)
    if i.recipe.layouts:
        yield Put("setting", "LAYOUT", c.name, c.source)
    for name, s in i.recipe.settings.items():
        yield Put("setting", name, s.value, "recipe", template=isinstance(s.value, str))
    for knob in i.recipe.env:
        yield Put("env", knob.name, knob.value, "recipe", template=knob.value is not None)
    for sa in i.recipe.serve.args:
        json_value = sa.json_value is not None
        yield Put(
            "arg", sa.flag, sa.json_value if json_value else sa.value, "recipe", template=True, is_json=json_value
        )
    for ack in i.recipe.acknowledge:
        yield Put("ack", ack, "1", "recipe")


def layout_layer(i: Inputs, c: Chosen) -> Iterator[Put | RecipekitError]:
    """2. the selected layout variant: settings, env (null unsets) and serve argument changes."""
    if c.spec is None:
        return
    src = f"layout:{c.name}"
    for name, v in c.spec.settings.items():
        where = f"$.layouts.{c.name}.settings.{name}"
        yield Put("setting", name, v, src, where, template=isinstance(v, str), overlay=True)
    for name, v in c.spec.env.items():
        yield Put("env", name, v, src, f"$.layouts.{c.name}.env.{name}", template=v is not None, overlay=True)
    for ov in c.spec.args:
        json_value = ov.json_value is not None
        value = ov.json_value if json_value else ov.value
        yield Put("arg", ov.flag, value, src, template=True, is_json=json_value, remove=ov.remove)


def dotenv_layer(i: Inputs, c: Chosen) -> Iterator[Put | RecipekitError]:
    """3. KEY=VALUE data of the .env file."""
    for key, (value, line) in i.dotenv.items():
        yield Put("user", key, value, f"{i.env_label}:{line}", f"{i.env_label}:{line}")


def process_env_layer(i: Inputs, c: Chosen) -> Iterator[Put | RecipekitError]:
    """4. the process environment: declared keys only; a key that is set wins even when empty."""
    keys = list(BUILTIN_PLACEHOLDERS) + (["LAYOUT"] if i.recipe.layouts else []) + list(i.recipe.settings)
    keys += [k.name for k in i.recipe.env]
    for key in keys:
        if key in i.environ and not key.startswith("TOOLKIT_"):
            yield Put("user", key, i.environ[key], "env", f"env {key}", from_process_env=True)


def set_layer(i: Inputs, c: Chosen) -> Iterator[Put | RecipekitError]:
    """5. --set KEY=VALUE, --set --flag=VALUE, --set '!--flag'."""
    for key, value in i.sets:
        if key.startswith("-") or key.startswith("!-"):
            if not FLAG_NAME.match(key):  # the same name rule as flags in recipes
                yield RecipekitError(
                    code="set-flag-invalid",
                    location="--set",
                    message=f"{textsafe.shown(key)!r} is not a serve flag name",
                    hint="flags are --letters-digits-and-dashes, e.g. --max-num-seqs",
                )
                continue
            yield Put("flag", key, value if value != "" else None, "--set", remove=value is None)
        elif value is None:
            yield RecipekitError(
                code="set-invalid",
                location="--set",
                message=f"'!{key}' removes serve flags only",
                hint=f"use --set {key}= to unset an env knob",
            )
        else:
            yield Put("user", key, value, "--set", f"--set {key}")


LAYERS: list[Layer] = [recipe_layer, layout_layer, dotenv_layer, process_env_layer, set_layer]


# ---- merging the layers' values


@dataclass
class Merged:
    recipe: Recipe
    settings: dict[str, Value] = field(default_factory=dict)
    env: dict[str, Value] = field(default_factory=dict)  # value None = unset
    args: list[ArgValue] = field(default_factory=list)
    acks: dict[str, Value] = field(default_factory=dict)
    errors: list[RecipekitError] = field(default_factory=list)

    def put(self, p: Put) -> None:
        if p.kind in ("setting", "env"):
            self._put_named(p)
        elif p.kind == "arg":
            new = None if p.remove else ArgValue(p.key, p.value, p.is_json, p.source)
            _put_arg(self.args, p.key, new)
        elif p.kind == "flag":
            new = None if p.remove else ArgValue(p.key, p.value, False, p.source, template=False)
            _put_arg(self.args, p.key, new)
        elif p.kind == "ack":
            self.acks[p.key] = Value(p.value, p.source)
        else:
            try:
                _assign(self, p)
            except RecipekitError as e:
                self.errors.append(e)

    def _put_named(self, p: Put) -> None:
        table = self.settings if p.kind == "setting" else self.env
        if p.overlay and p.key not in table:
            self.errors.append(_undeclared(self.recipe, p))
            return
        table[p.key] = Value(p.value, p.source, template=p.template)


def _undeclared(recipe: Recipe, p: Put) -> RecipekitError:
    if p.kind == "setting":
        return RecipekitError(
            code="unknown-setting",
            location=p.where,
            message=f"layout sets undeclared setting '{p.key}'",
            hint=did_you_mean(p.key, recipe.settings),
        )
    return RecipekitError(
        code="undeclared-env",
        location=p.where,
        message=f"layout sets env '{p.key}' that the recipe does not declare",
        hint=did_you_mean(p.key, [k.name for k in recipe.env]) or "declare it under env:",
    )


def _assign(m: Merged, p: Put) -> None:
    """A user KEY=VALUE: an ack, an extra env var, a setting, an env knob, or an error."""
    key, value = p.key, p.value
    if key == "LAYOUT":
        return  # the layout ladder read it
    if key.startswith("ack."):
        m.acks[key[4:]] = Value(value, p.source)
    elif key.startswith("env."):
        if not ENV_NAME.match(key[4:]):
            raise _env_name_invalid(key[4:], p.where)
        m.env[key[4:]] = Value(value if value != "" else None, p.source)
    elif key in m.settings:
        m.settings[key] = Value(_setting_value(m.recipe, key, value, p.where), p.source)
    elif key in m.env or m.recipe.env_knob(key) is not None:
        m.env[key] = Value(value if value not in ("", None) else None, p.source)
    elif not p.from_process_env:
        _extra_env(m, p)


def _setting_value(recipe: Recipe, key: str, value: Any, where: str) -> Any:
    """A user's value of a setting, coerced to its type and checked against its choices."""
    decl = recipe.settings.get(key)
    typ = decl.type if decl is not None else "str"
    empty_number = value == "" and typ in ("int", "float", "bool")
    if empty_number and not (decl and decl.empty_means_unset):
        raise RecipekitError(
            code="invalid-setting",
            location=where,
            message=f"{key} is empty, not a {typ}",
            hint=f"give {key} a {typ} value, or leave it out",
        )
    coerced = None if empty_number else _coerce(key, value, typ, where)
    if decl and decl.choices and coerced is not None and str(coerced) not in decl.choices:
        raise RecipekitError(
            code="setting-not-a-choice",
            location=where,
            message=f"{key}={textsafe.shown(coerced)!r} is not one of its choices",
            hint=did_you_mean(str(coerced), decl.choices) or f"choices: {', '.join(decl.choices)}",
        )
    return coerced


def _extra_env(m: Merged, p: Put) -> None:
    """An unknown key: from .env an extra variable passed to the engine, unless it looks like a
    known key (did-you-mean); from --set an error."""
    r = m.recipe
    known = set(r.settings) | {k.name for k in r.env} | set(BUILTIN_PLACEHOLDERS) | {"LAYOUT"}
    hint = did_you_mean(p.key, known)
    if p.source.startswith("--set") or hint:
        raise RecipekitError(
            code="unknown-key",
            message=f"'{p.key}' is not a setting or env knob of {r.id}",
            location=p.where,
            hint=hint
            or "use env.NAME=VALUE for an extra environment variable, or --set=--flag=VALUE for a serve argument",
        )
    if not ENV_NAME.match(p.key):
        raise _env_name_invalid(p.key, p.where)
    m.env[p.key] = Value(p.value, p.source)


# ---- the effective config


def effective_config(
    recipe: Recipe | LoadedRecipe,
    layout: Optional[str] = None,
    env_file: Optional[str | Path] = None,
    environ: Optional[Mapping[str, str]] = None,
    sets: Iterable[str] = (),
    host_paths: bool = False,
) -> EffectiveConfig:
    """Merge the LAYERS (recipe -> layout -> .env -> process env -> --set) into an EffectiveConfig.

    `recipe` is a Recipe or a LoadedRecipe. `environ=None` means os.environ; pass {} for a
    config that ignores the process environment (export does). `env_file=None` reads nothing.
    """

    loaded: Optional[LoadedRecipe] = None
    if hasattr(recipe, "recipe") and hasattr(recipe, "origin"):
        loaded = cast("LoadedRecipe", recipe)
        recipe = loaded.recipe
    set_items, errors = parse_set_items(sets)
    inputs = Inputs(
        recipe=recipe,
        layout=layout,
        dotenv=read_env_file(env_file) if env_file else {},
        env_label=str(env_file) if env_file else ".env",
        environ=os.environ if environ is None else environ,
        sets=set_items,
        host_paths=host_paths,
    )
    chosen = choose_layout(inputs, errors)
    m = Merged(recipe, errors=errors)
    for layer in LAYERS:
        for p in layer(inputs, chosen):
            if isinstance(p, RecipekitError):
                m.errors.append(p)
            else:
                m.put(p)
    if m.errors:
        raise ErrorList(m.errors)
    _resolve_templates(m)
    return EffectiveConfig(
        recipe=recipe,
        layout=chosen.name if chosen.spec is not None else None,
        settings=m.settings,
        env=m.env,
        args=m.args,
        acks=m.acks,
        declared_env={k.name for k in recipe.env},
        origin=loaded.origin if loaded else None,
        content_hash=loaded.content_hash if loaded else "",
    )


# --------------------------------------------------------------------------- templates


def _resolve_templates(m: Merged) -> None:
    """Settings may refer to settings; env values and serve args to settings. Sources name the
    settings a value was built from."""
    lookup = _setting_lookup(m)
    for name in list(m.settings):
        lookup(name)

    def via(text: Any, source: str) -> str:
        refs = templates.setting_refs(text) if isinstance(text, str) else []
        if isinstance(text, (dict, list)):
            refs = [r for _, s in _walk_strings(text) for r in templates.setting_refs(s)]
        extra = [f"{r}<-{m.settings[r].source}" for r in dict.fromkeys(refs) if r in m.settings]
        return f"{source} ({', '.join(extra)})" if extra else source

    for name, ev in list(m.env.items()):
        if ev.template and ev.value is not None:
            text = _plain(templates.substitute(ev.value, lookup), f"env {name}")
            m.env[name] = Value(text, via(ev.value, ev.source), template=True)
    for a in m.args:
        if a.template and a.value is not None:
            a.source = via(a.value, a.source)
        _resolve_arg(a, lookup)


def _setting_lookup(m: Merged) -> Callable[[str], Any]:
    """name -> the setting's value, resolving its template (and those it names) on first use."""
    resolving: list[str] = []
    types = {k: s.type for k, s in m.recipe.settings.items()}

    def lookup(name: str) -> Any:
        v = m.settings.get(name)
        if v is None:
            raise RecipekitError(
                code="unknown-setting",
                message=f"template refers to unknown setting '{name}'",
                hint=did_you_mean(name, m.settings),
            )
        if not v.template:
            return v.value
        if name in resolving:
            raise RecipekitError(
                code="setting-cycle", message=f"settings refer to each other: {' -> '.join(resolving + [name])}"
            )
        resolving.append(name)
        ps = templates.parts(templates.substitute(v.value, lookup))
        if any(isinstance(p, templates.EnvRef) for p in ps):
            raise RecipekitError(
                code="env-ref-in-setting",
                message=f"setting {name} refers to a runtime env variable",
                hint="settings are resolved at render time; use ${NAME} of another setting",
            )
        resolving.pop()
        typ = types.get(name, "str")
        plain = "".join(p for p in ps if isinstance(p, str))  # no EnvRef here (raised above)
        value = _coerce(name, plain, typ, f"setting {name}") if typ in ("int", "float") else plain
        m.settings[name] = Value(value, v.source)
        return value

    return lookup


def _resolve_arg(a: ArgValue, lookup: Callable[[str], Any]) -> None:
    """A serve argument's value with its settings substituted, as template parts."""
    if not a.template or a.value is None:
        if a.value is not None and not a.is_json:
            a.parts = [str(a.value)]
        return
    if a.is_json:
        a.value = _subst_json(a.value, lookup)
        return
    if isinstance(a.value, bool):
        text = "true" if a.value else "false"
    elif isinstance(a.value, str):
        text = templates.substitute(a.value, lookup)
    else:
        text = str(a.value)
    a.parts = templates.parts(text)
    a.value = "".join(p if isinstance(p, str) else "${env:%s}" % p.name for p in a.parts)


def _walk_strings(obj: Any) -> Iterator[tuple[None, str]]:
    if isinstance(obj, str):
        yield None, obj
    elif isinstance(obj, list):
        for x in obj:
            yield from _walk_strings(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _walk_strings(x)


def _plain(text: str, what: str) -> str:
    ps = templates.parts(text)
    if any(isinstance(p, templates.EnvRef) for p in ps):
        raise RecipekitError(
            code="env-ref-not-allowed",
            message=f"{what}: runtime env references are allowed only in launch commands",
            hint="use a ${NAME} setting instead",
        )
    return "".join(p for p in ps if isinstance(p, str))  # no EnvRef here (raised above)


def _subst_json(obj: Any, lookup: Callable[[str], Any]) -> Any:
    if isinstance(obj, str):
        v = templates.substitute(obj, lookup, typed=True)
        return _plain(v, "JSON value") if isinstance(v, str) else v
    if isinstance(obj, list):
        return [_subst_json(x, lookup) for x in obj]
    if isinstance(obj, dict):
        return {k: _subst_json(v, lookup) for k, v in obj.items()}
    return obj
