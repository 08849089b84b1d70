"""`recipe checkpoint make-tiny-exl3 | assemble`: the CMP hybrid checkpoint (EXL3 routed experts +
official FP8 + BF16 embeddings) assembled from links. Registers onto the `checkpoint` group of
recipekit.cli.checkpoint; `recipe checkpoint check DIR --checkpoint-format hybrid` runs recipekit.hybrid.assemble.check_hybrid."""

from __future__ import annotations

import contextlib
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from recipekit.cli.checkpoint import checkpoint_app
from recipekit.cli.options import FormatOpt
from recipekit.output import Format, Output
from recipekit.progress import Ticker


class Codebook(str, Enum):
    """The EXL3 codebook markers (hybrid/exl3.py CODEBOOK_MULT)."""

    mcg = "mcg"
    mul1 = "mul1"


def make_tiny_exl3_cmd(
    like: Annotated[Path, typer.Option("--like", help="The tiny original checkpoint whose routed experts to mirror.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for the EXL3 pack.")],
    seed: Annotated[int, typer.Option("--seed", help="Content seed (same seed -> same bytes).")] = 0,
    codebook: Annotated[Codebook, typer.Option("--codebook", help="Codebook marker.")] = Codebook.mcg,
    force: Annotated[bool, typer.Option("--force", help="Regenerate even if up to date.")] = False,
    fmt: FormatOpt = Format.human,
) -> None:
    """Write an EXL3 pack (trellis int16, suh/svh fp16, codebook marker, per-layer bits) of the routed experts."""
    from recipekit.hybrid.exl3 import make_tiny_exl3  # lazy: loaded by this command, not by every checkpoint one

    r = make_tiny_exl3(like, out, seed=seed, codebook=codebook.value, force=force)
    data = {
        "path": str(r.path),
        "tensors": r.tensors,
        "shards": r.shards,
        "total_size": r.total_size,
        "bits": r.bits,
        "skipped": r.skipped,
    }
    Output(fmt).result(
        data,
        human=lambda: typer.echo(
            f"{'up to date' if r.skipped else 'wrote'} {r.path}: {r.tensors} EXL3 tensors in {r.shards} shards, "
            f"{r.total_size:,} bytes, {r.bits} bits/weight on average"
        ),
    )


def assemble_cmd(
    official: Annotated[Path, typer.Option("--official", help="Official FP8 checkpoint folder.")],
    exl3: Annotated[Path, typer.Option("--exl3", help="EXL3 pack folder (routed experts).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (links + index + config).")],
    bf16: Annotated[
        Optional[Path], typer.Option("--bf16", help="BF16 source for embeddings, LM head and vision.")
    ] = None,
    experts_re: Annotated[
        Optional[str],
        typer.Option("--experts-re", help="Check this DSV41_EXPERTS_ONLY_FILES_RE against the actual files."),
    ] = None,
    no_hash: Annotated[
        bool,
        typer.Option(
            "--no-hash", help="Do not hash sources that have no manifest (faster; check will not compare sha256)."
        ),
    ] = False,
    skip_re: Annotated[
        Optional[str],
        typer.Option(
            "--skip-re",
            help="Check this DSV41_SKIP_WEIGHT_RE: it must match exactly the tensors the linked files "
            "hold but the index does not map.",
        ),
    ] = None,
    fmt: FormatOpt = Format.human,
) -> None:
    """Assemble the hybrid checkpoint from relative symlinks: no tensor byte is written."""
    from recipekit.hybrid.assemble import assemble  # lazy: loaded by this command, not by every checkpoint one

    # a line every few seconds on stderr (reading headers, hashing sources can take minutes); not for --format json
    tick = Ticker("assemble", unit="shards", heartbeat=True) if fmt is Format.human else None
    with tick or contextlib.nullcontext():
        r = assemble(
            official,
            exl3,
            out,
            bf16=bf16,
            experts_re=experts_re,
            hash_sources=not no_hash,
            skip_re=skip_re,
            progress=tick,
        )

    def human() -> None:
        by = ", ".join(f"{k} {v:,}" for k, v in r["tensors_by_source"].items())
        typer.echo(
            f"assembled {r['out']}: {r['tensors']:,} tensors ({by}) in {r['links']} linked shards "
            f"({r['linked_bytes']:,} bytes linked)"
        )
        typer.echo(
            f"bytes written: {r['bytes_written_files']:,} in config/index/record files, "
            f"{r['bytes_written_process']} by the process in all, {r['tensor_bytes_written']} while placing the tensors"
        )
        typer.echo(f"DSV41_EXPERTS_ONLY_FILES_RE='{r['experts_only_files_re']}' ({r['experts_only_files']} files)")
        typer.echo(
            f"unmapped tensors in the linked files: {r['unmapped_tensors']:,}; "
            f"DSV41_SKIP_WEIGHT_RE='{r['skip_weight_re']}' covers exactly them"
        )

    Output(fmt).result(r, human=human)


def register(app: typer.Typer) -> None:
    checkpoint_app.command("make-tiny-exl3")(make_tiny_exl3_cmd)
    checkpoint_app.command("assemble")(assemble_cmd)
