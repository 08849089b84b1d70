"""`recipe checkpoint ...`: tiny DSV4.1 generator, layout check, Gaudi conversion, validator, bench.

`checkpoint_app` is the shared sub-typer: other modules (e.g. checkpoint_hybrid) add their
commands to it; layouts for `check` come from recipekit.checkpoint.layout.LAYOUT_CHECKERS, where
each backend's layouts register when the registry loads the modules its BACKEND.layouts names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from recipekit.backends.registry import checkpoint_tool, load_layouts
from recipekit.checkpoint.layout import check_layout
from recipekit.cli.help import new_group
from recipekit.cli.options import FormatOpt, OldLayoutOpt, refuse_old_layout
from recipekit.errors import ExitCode, RecipekitError
from recipekit.output import Format, Output

checkpoint_app = new_group(
    "Checkpoints in the real DSV4.1 encodings: generate tiny ones, check a layout, convert to "
    "the Gaudi port and validate it, benchmark the conversion; build the CMP hybrid.",
    name="checkpoint",
)

PartOpt = Annotated[
    Optional[list[str]],
    typer.Option("--part", "-p", help="all | dense | moe | engram | layer:N (repeatable or comma-separated)."),
]


def _parts(parts: list[str] | None) -> list[str]:
    out = [p.strip() for item in (parts or ["all"]) for p in item.split(",") if p.strip()]
    return out or ["all"]


@checkpoint_app.command("make-tiny")
def make_tiny(
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (created).")],
    seed: Annotated[int, typer.Option("--seed", help="Generator seed (same seed -> same bytes).")] = 0,
    size: Annotated[str, typer.Option("--size", help="'tiny' (a few MB) or a target size such as 2GiB.")] = "tiny",
    force: Annotated[
        bool, typer.Option("--force", help="Regenerate even if the folder holds this checkpoint.")
    ] = False,
    weights: Annotated[
        str,
        typer.Option(
            "--weights", help="'default' (uniform codes, codec edge cases) or 'conditioned' (init-like magnitudes)."
        ),
    ] = "default",
    fmt: FormatOpt = Format.human,
) -> None:
    """Write a deterministic tiny DeepSeek-V4.1 checkpoint in the real names, dtypes and encodings."""
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41  # lazy: the generator, for this command only

    r = make_tiny_dsv41(out, seed=seed, size=size, force=force, weights=weights)
    data = {
        "path": str(r.path),
        "tensors": r.tensors,
        "shards": r.shards,
        "total_size": r.total_size,
        "skipped": r.skipped,
    }
    Output(fmt).result(
        data,
        human=lambda: typer.echo(
            f"{'up to date' if r.skipped else 'wrote'} {r.path}: {r.tensors} tensors in {r.shards} shards, {r.total_size:,} bytes"
        ),
    )


@checkpoint_app.command("check")
def check(
    folder: Annotated[Path, typer.Argument(help="Checkpoint folder.")],
    checkpoint_format: Annotated[
        str,
        typer.Option("--checkpoint-format", help="Checkpoint format to check against: original, gaudi, hybrid, ..."),
    ] = "original",
    old_layout: OldLayoutOpt = None,
    no_hash: Annotated[
        bool,
        typer.Option(
            "--no-hash",
            help="Hybrid layout: compare the linked sources' sizes only, "
            "not their sha256 (fast; a same-size change goes unseen).",
        ),
    ] = False,
    engram_dir: Annotated[
        Optional[Path],
        typer.Option(
            "--engram-dir",
            help="Hybrid layout: also check the placed Engram "
            "folder (DSV41_ENGRAM_DIR on the host) by the engine's rules.",
        ),
    ] = None,
    fmt: FormatOpt = Format.human,
) -> None:
    """Check that a folder holds exactly the tensors its config implies for a layout."""

    refuse_old_layout(old_layout)
    load_layouts()  # the backends' own formats (gaudi, hybrid, ...) register as their modules load
    rep = check_layout(folder, checkpoint_format, hash_sources=not no_hash)
    if engram_dir is not None:
        from recipekit.hybrid.engram.rules import check_placement  # lazy: only with --engram-dir

        rep.problems.extend(check_placement(engram_dir, folder, hash_bytes=not no_hash)[1])
    data = rep.to_dict()

    def human() -> None:
        typer.echo(rep.summary())
        if rep.sha256_checked is False:
            typer.echo("  (sources compared by sizes only: --no-hash)")
        for p in rep.problems:
            typer.echo(f"  {p}")
        for w in rep.warnings:
            typer.echo(f"  WARN {w}")

    Output(fmt).result(data, human=human)
    if not rep.ok:
        raise typer.Exit(2)


@checkpoint_app.command("convert")
def convert(
    src: Annotated[Path, typer.Option("--src", help="Original checkpoint folder.")],
    dst: Annotated[Path, typer.Option("--dst", help="Output folder (resumable).")],
    target: Annotated[
        Optional[str], typer.Option("--target", help="Target layout (default: the converting backend).")
    ] = None,
    part: PartOpt = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bars on stderr.")] = True,
    fmt: FormatOpt = Format.human,
) -> None:
    """Convert losslessly to the Gaudi port layout (streaming, resumable, sha256 manifest)."""

    try:
        r = checkpoint_tool(target, "convert")(src, dst, _parts(part), progress=progress and fmt is Format.human)
    except KeyboardInterrupt:
        typer.echo(
            f"interrupted: checkpoint convert into {dst}; finished shards are kept with their stamps, the shard "
            "being written stays a temporary file that the next run removes; the same command again resumes",
            err=True,
        )
        raise
    Output(fmt).result(
        r.to_dict(),
        human=lambda: typer.echo(
            f"converted {len(r.shards_written)} shard(s), skipped {len(r.shards_skipped)} already done; "
            f"{r.tensors} tensors in {dst}{'' if r.complete else ' (partial: selected parts only)'}; {r.seconds:.1f} s"
        ),
    )


@checkpoint_app.command("validate")
def validate(
    src: Annotated[Path, typer.Option("--src", help="Original checkpoint folder.")],
    dst: Annotated[Path, typer.Option("--dst", help="Converted checkpoint folder.")],
    part: PartOpt = None,
    fmt: FormatOpt = Format.human,
) -> None:
    """Decode both sides with independent code and compare every tensor; prints VALIDATE_OK."""

    for side, folder in (("--src", src), ("--dst", dst)):  # as check and convert refuse a missing folder
        if not folder.is_dir():
            raise RecipekitError(
                code="checkpoint-not-found",
                location=side,
                message=f"{folder} is not a folder",
                hint="pass the checkpoint folder (it holds config.json and the shards)",
                exit_code=ExitCode.NOT_FOUND,
            )
    r = checkpoint_tool(None, "validate")(src, dst, _parts(part))

    def human() -> None:
        if r.ok:
            typer.echo(f"VALIDATE_OK {r.checked} tensors")
        else:
            typer.echo(f"VALIDATE_FAIL {len(r.mismatches)} mismatch(es) in {r.checked} tensors checked")
            for m in r.mismatches:
                typer.echo(f"  {m}")

    Output(fmt).result(r.to_dict(), human=human)
    if not r.ok:
        raise typer.Exit(1)


@checkpoint_app.command("bench")
def bench(
    size_gib: Annotated[
        float, typer.Option("--size-gib", help="Size of the generated checkpoint (>= 2 for the figure of record).")
    ] = 2.0,
    workdir: Annotated[
        Optional[Path], typer.Option("--dir", help="Scratch folder (default: $RECIPEKIT_HOME/cache).")
    ] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the generated files.")] = False,
    validate_out: Annotated[bool, typer.Option("--validate", help="Also run the validator on the output.")] = False,
    fmt: FormatOpt = Format.human,
) -> None:
    """Conversion throughput vs a plain read+write copy of the same bytes, and peak RSS."""

    r = checkpoint_tool(None, "bench")(
        size_gib,
        workdir=workdir,
        keep=keep,
        validate=validate_out,
        log=None if fmt is Format.json else (lambda m: typer.echo(m, err=True)),
    )
    Output(fmt).result(r, human=lambda: checkpoint_tool(None, "render_bench")(r))


def register(app: typer.Typer) -> None:
    app.add_typer(checkpoint_app, name="checkpoint")
