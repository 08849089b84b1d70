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

from recipekit import templates, textsafe
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
    from recipekit import paths

    return {
        "TOOLKIT_HOME": Value(str(paths.home()), "toolkit"),
        "TOOLKIT_MODELS_DIR": Value(str(paths.models_dir()), "toolkit"),
        "TOOLKIT_VENVS_DIR": Value(str(paths.venvs_dir()), "toolkit"),
        "TOOLKIT_CACHE_DIR": Value(str(paths.home() / "cache"), "toolkit"),
    }


def parse_sets(sets: Iterable[str]) -> list[tuple[str, Optional[str]]]:
    """'KEY=VALUE' items -> (key, value); '!--flag' -> (flag, None) meaning remove."""
    out, errors = _parse_sets(sets)
    if errors:
        raise ErrorList(errors)
    return out


def _parse_sets(sets: Iterable[str]) -> tuple[list[tuple[str, Optional[str]]], list[RecipekitError]]:
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


def _overlay(
    layer: dict[str, Value],
    values: Mapping[str, Any],
    src: str,
    is_template: Callable[[Any], bool],
    undeclared: Callable[[str], RecipekitError],
    errors: list[RecipekitError],
) -> None:
    """Put a layout's `values` over names the recipe declares; an undeclared name is an error, not a new entry."""
    for name, v in values.items():
        if name not in layer:
            errors.append(undeclared(name))
            continue
        layer[name] = Value(v, src, template=is_template(v))


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


def effective_config(
    recipe: Recipe | LoadedRecipe,
    layout: Optional[str] = None,
    env_file: Optional[str | Path] = None,
    environ: Optional[Mapping[str, str]] = None,
    sets: Iterable[str] = (),
    host_paths: bool = False,
) -> EffectiveConfig:
    """Merge recipe -> layout -> .env -> process env -> --set into an EffectiveConfig.

    `recipe` is a Recipe or a LoadedRecipe. `environ=None` means os.environ; pass {} for a
    config that ignores the process environment (export does). `env_file=None` reads nothing.
    """
    from recipekit.envfile import read_env_file

    loaded: Optional[LoadedRecipe] = None
    if hasattr(recipe, "recipe") and hasattr(recipe, "origin"):
        loaded = cast("LoadedRecipe", recipe)
        recipe = loaded.recipe
    environ = os.environ if environ is None else environ
    dotenv = read_env_file(env_file) if env_file else {}
    env_label = str(env_file) if env_file else ".env"
    set_items, errors = _parse_sets(sets)

    setting_types = {k: s.type for k, s in recipe.settings.items()}
    knob_names = [k.name for k in recipe.env]
    known_keys = set(recipe.settings) | set(knob_names) | set(BUILTIN_PLACEHOLDERS) | {"LAYOUT"}

    # ---- which layout
    chosen, source = recipe.default_layout, "recipe"
    if "LAYOUT" in dotenv:
        chosen, source = dotenv["LAYOUT"][0], f"{env_label}:{dotenv['LAYOUT'][1]}"
    if "LAYOUT" in environ:
        chosen, source = environ["LAYOUT"], "env"
    if layout:
        chosen, source = layout, "--layout"
    for k, v in set_items:
        if k == "LAYOUT":
            if layout and v != layout:
                errors.append(
                    RecipekitError(
                        code="layout-conflict",
                        location="--set",
                        message=f"--layout {layout} and --set LAYOUT={v} disagree",
                        hint="give one",
                    )
                )
            chosen, source = v, "--set"
    if recipe.layouts:
        if chosen in (None, ""):
            chosen, source = recipe.default_layout, "recipe"
        if chosen not in recipe.layouts:
            raise RecipekitError(
                code="unknown-layout",
                message=f"layout '{chosen}' is not defined by {recipe.id}",
                location=source,
                hint=did_you_mean(str(chosen), [*recipe.layouts, *recipe.multinode])
                or f"layouts: {', '.join(recipe.layouts)}"
                + (f"; multi-node layouts: {', '.join(sorted(recipe.multinode))}" if recipe.multinode else ""),
            )
    elif chosen and source in ("env",) or (chosen and source.startswith(env_label + ":")):
        chosen = None  # a LAYOUT meant for another recipe in the environment: ignored here
    elif chosen:
        raise RecipekitError(
            code="unknown-layout",
            message=f"{recipe.id} has no single-node layouts (got '{chosen}')",
            location=source,
            hint=(f"multi-node layouts: {', '.join(sorted(recipe.multinode))}; " if recipe.multinode else "")
            + "or drop --layout / LAYOUT",
        )
    lay = recipe.layouts.get(chosen) if chosen else None

    eff = EffectiveConfig(
        recipe=recipe,
        layout=chosen if lay else None,
        origin=loaded.origin if loaded else None,
        content_hash=loaded.content_hash if loaded else "",
    )

    # ---- layer 1: recipe
    settings: dict[str, Value] = dict(_builtins(host_paths))
    if recipe.layouts:
        settings["LAYOUT"] = Value(chosen, source)
    for name, s in recipe.settings.items():
        settings[name] = Value(s.value, "recipe", template=isinstance(s.value, str))
    env: dict[str, Value] = {k.name: Value(k.value, "recipe", template=k.value is not None) for k in recipe.env}
    eff.declared_env = set(knob_names)
    args: list[ArgValue] = []
    for sa in recipe.serve.args:
        if sa.json_value is not None:
            args.append(ArgValue(sa.flag, sa.json_value, True, "recipe"))
        else:
            args.append(ArgValue(sa.flag, None if sa.value is None else sa.value, False, "recipe"))
    acks: dict[str, Value] = {k: Value("1", "recipe") for k in recipe.acknowledge}

    # ---- layer 2: layout
    if lay is not None:
        lsrc = f"layout:{chosen}"
        _overlay(
            settings,
            lay.settings,
            lsrc,
            lambda v: isinstance(v, str),
            lambda name: RecipekitError(
                code="unknown-setting",
                location=f"$.layouts.{chosen}.settings.{name}",
                message=f"layout sets undeclared setting '{name}'",
                hint=did_you_mean(name, recipe.settings),
            ),
            errors,
        )
        _overlay(
            env,
            lay.env,
            lsrc,
            lambda v: v is not None,
            lambda name: RecipekitError(
                code="undeclared-env",
                location=f"$.layouts.{chosen}.env.{name}",
                message=f"layout sets env '{name}' that the recipe does not declare",
                hint=did_you_mean(name, knob_names) or "declare it under env:",
            ),
            errors,
        )
        for ov in lay.args:
            ov_value = ov.json_value if ov.json_value is not None else ov.value
            _put_arg(args, ov.flag, None if ov.remove else ArgValue(ov.flag, ov_value, ov.json_value is not None, lsrc))

    def assign(key: str, value: Optional[str], src: str, where: str, from_process_env: bool = False) -> None:
        if key == "LAYOUT":
            return
        if key.startswith("ack."):
            acks[key[4:]] = Value(value, src)
            return
        if key.startswith("env."):
            name = key[4:]
            if not ENV_NAME.match(name):
                errors.append(_env_name_invalid(name, where))
                return
            env[name] = Value(value if value != "" else None, src)
            return
        if key in settings:
            try:
                decl = recipe.settings.get(key)
                typ = setting_types.get(key, "str")
                if value == "" and typ in ("int", "float", "bool") and not (decl and decl.empty_means_unset):
                    raise RecipekitError(
                        code="invalid-setting",
                        location=where,
                        message=f"{key} is empty, not a {typ}",
                        hint=f"give {key} a {typ} value, or leave it out",
                    )
                coerced = None if value == "" and typ in ("int", "float", "bool") else _coerce(key, value, typ, where)
                if decl and decl.choices and coerced is not None and str(coerced) not in decl.choices:
                    raise RecipekitError(
                        code="setting-not-a-choice",
                        location=where,
                        message=f"{key}={textsafe.shown(coerced)!r} is not one of its choices",
                        hint=did_you_mean(str(coerced), decl.choices) or f"choices: {', '.join(decl.choices)}",
                    )
                settings[key] = Value(coerced, src)
            except RecipekitError as e:
                errors.append(e)
            return
        if key in env or key in knob_names:
            env[key] = Value(value if value not in ("", None) else None, src)
            return
        if from_process_env:
            return
        hint = did_you_mean(key, known_keys)
        if src.startswith("--set") or hint:
            errors.append(
                RecipekitError(
                    code="unknown-key",
                    message=f"'{key}' is not a setting or env knob of {recipe.id}",
                    location=where,
                    hint=hint
                    or "use env.NAME=VALUE for an extra environment variable, or --set=--flag=VALUE for a serve argument",
                )
            )
            return
        if not ENV_NAME.match(key):
            errors.append(_env_name_invalid(key, where))
            return
        env[key] = Value(value, src)  # an extra variable from .env, passed through

    # ---- layer 3: .env
    value: Optional[str]
    for key, (value, line) in dotenv.items():
        assign(key, value, f"{env_label}:{line}", f"{env_label}:{line}")
    # ---- layer 4: process env (declared keys only; set-but-empty wins)
    for key in list(settings) + [k for k in env if k in eff.declared_env]:
        if key in environ and not key.startswith("TOOLKIT_"):
            assign(key, environ[key], "env", f"env {key}", from_process_env=True)
    # ---- layer 5: --set
    for key, value in set_items:
        if key.startswith("-") or key.startswith("!-"):
            flag = key
            if not FLAG_NAME.match(flag):  # the same name rule as flags in recipes
                errors.append(
                    RecipekitError(
                        code="set-flag-invalid",
                        location="--set",
                        message=f"{textsafe.shown(flag)!r} is not a serve flag name",
                        hint="flags are --letters-digits-and-dashes, e.g. --max-num-seqs",
                    )
                )
                continue
            new = (
                None
                if value is None
                else ArgValue(flag, value if value != "" else None, False, "--set", template=False)
            )
            _put_arg(args, flag, new)
            continue
        if value is None:
            errors.append(
                RecipekitError(
                    code="set-invalid",
                    location="--set",
                    message=f"'!{key}' removes serve flags only",
                    hint=f"use --set {key}= to unset an env knob",
                )
            )
            continue
        assign(key, value, "--set", f"--set {key}")
    if errors:
        raise ErrorList(errors)

    # ---- resolve templates (settings may refer to settings)
    resolving: list[str] = []

    def lookup(name: str) -> Any:
        v = settings.get(name)
        if v is None:
            raise RecipekitError(
                code="unknown-setting",
                message=f"template refers to unknown setting '{name}'",
                hint=did_you_mean(name, settings),
            )
        if v.template:
            if name in resolving:
                raise RecipekitError(
                    code="setting-cycle", message=f"settings refer to each other: {' -> '.join(resolving + [name])}"
                )
            resolving.append(name)
            text = templates.substitute(v.value, lookup)
            ps = templates.parts(text)
            if any(isinstance(p, templates.EnvRef) for p in ps):
                raise RecipekitError(
                    code="env-ref-in-setting",
                    message=f"setting {name} refers to a runtime env variable",
                    hint="settings are resolved at render time; use ${NAME} of another setting",
                )
            resolving.pop()
            typ = setting_types.get(name, "str")
            plain = "".join(p for p in ps if isinstance(p, str))  # no EnvRef here (raised above)
            settings[name] = Value(
                _coerce(name, plain, typ, f"setting {name}") if typ in ("int", "float") else plain, v.source
            )
        return settings[name].value

    for name in list(settings):
        lookup(name)

    def via(text: Any, source: str) -> str:
        refs = templates.setting_refs(text) if isinstance(text, str) else []
        if isinstance(text, (dict, list)):
            refs = [r for _, s in _walk_strings(text) for r in templates.setting_refs(s)]
        extra = [f"{r}<-{settings[r].source}" for r in dict.fromkeys(refs) if r in settings]
        return f"{source} ({', '.join(extra)})" if extra else source

    for name, ev in list(env.items()):
        if ev.template and ev.value is not None:
            env[name].source = via(ev.value, ev.source)
    for a in args:
        if a.template and a.value is not None:
            a.source = via(a.value, a.source)
    for name, ev in list(env.items()):
        if ev.template and ev.value is not None:
            env[name] = Value(_plain(templates.substitute(ev.value, lookup), f"env {name}"), ev.source, template=True)
    for a in args:
        if not a.template or a.value is None:
            if a.value is not None and not a.is_json:
                a.parts = [str(a.value)]
            continue
        if a.is_json:
            a.value = _subst_json(a.value, lookup)
            continue
        if isinstance(a.value, bool):
            text = "true" if a.value else "false"
        elif isinstance(a.value, str):
            text = templates.substitute(a.value, lookup)
        else:
            text = str(a.value)
        a.parts = templates.parts(text)
        a.value = "".join(p if isinstance(p, str) else "${env:%s}" % p.name for p in a.parts)
    eff.settings, eff.env, eff.args, eff.acks = settings, env, args, acks
    return eff


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
