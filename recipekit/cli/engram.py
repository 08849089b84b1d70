"""`recipe engram ...`: Engram row ids, the NVMe row store (pack, verify) and its benchmark."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from recipekit.cli.options import FormatOpt
from recipekit.errors import RecipekitError
from recipekit.output import Format, Output

engram_app = typer.Typer(help="Engram n-gram tables: row addressing, the NVMe row store, its benchmark.",
                         no_args_is_help=True)

CkptArg = Annotated[Path, typer.Argument(help="Checkpoint folder (config.json + tokenizer.json [+ Engram shards]).")]


def _int_list(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise RecipekitError(code="bad-int-list", message=f"{what} must be comma-separated integers, got {text!r}",
                             hint=f"e.g. {what} 1,2,3") from None


@engram_app.command("rows")
def rows_cmd(
    ckpt: CkptArg,
    layer: Annotated[int, typer.Option("--layer", help="Model layer id of the Engram table (1 or 14 for the real model).")],
    tokens: Annotated[str, typer.Option("--tokens", help="Token ids of one sequence, comma-separated (it starts fresh).")],
    map_only: Annotated[bool, typer.Option("--map-only", help="Print the compressed token ids instead of row ids.")] = False,
    dead: Annotated[Optional[str], typer.Option("--dead", help="Positions of dead (image) tokens, comma-separated; "
                                                          "default: tokens with id 129264, as vLLM.")] = None,
    fmt: FormatOpt = Format.human,
) -> None:
    """Row ids per position (n-gram order major, head minor), or the compressed ids."""
    import numpy as np

    from recipekit.hybrid.engram.addressing import EngramAddresser

    toks = _int_list(tokens, "--tokens")
    addr = EngramAddresser.from_checkpoint(ckpt)
    out = Output(fmt)
    if map_only:
        data = [int(x) for x in addr.compress(toks)]
        out.result(data, human=lambda: typer.echo(" ".join(map(str, data))))
        return
    addr.config.layer_index(layer)
    mask = None
    if dead is not None:
        pos = _int_list(dead, "--dead")
        mask = np.zeros(len(toks), dtype=bool)
        for p in pos:
            if not 0 <= p < len(toks):
                raise RecipekitError(code="bad-dead-position", message=f"--dead position {p} is outside 0..{len(toks) - 1}",
                                     hint="positions are 0-based indexes into --tokens")
            mask[p] = True
    ids = addr.row_ids(layer, toks, dead=mask).tolist() if toks else []

    def human():
        for i, (t, r) in enumerate(zip(toks, ids)):
            typer.echo(f"{i}\ttoken {t}\t" + " ".join(map(str, r)))

    out.result(ids, human=human)


@engram_app.command("pack")
def pack_cmd(
    ckpt: CkptArg,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the row files and engram-store.json.")],
    ranks: Annotated[int, typer.Option("--ranks", help="Number of ranks; each owns whole hash-column buckets.")] = 1,
    layer: Annotated[Optional[list[int]], typer.Option("--layer", help="Only this Engram layer (repeatable).")] = None,
    fmt: FormatOpt = Format.human,
) -> None:
    """Write each rank's buckets into page-aligned row files (resumable; verified files are skipped)."""
    from recipekit.hybrid.engram.store import pack_store

    out = Output(fmt)
    rep = pack_store(ckpt, out_dir, ranks, layers=layer or None)
    out.result(rep, human=lambda: typer.echo(
        f"{out_dir}: {len(rep['written'])} row file(s) written, {len(rep['skipped'])} already verified"))


@engram_app.command("verify")
def verify_cmd(
    store_dir: Annotated[Path, typer.Argument(help="Row-store folder (holds engram-store.json).")],
    quick: Annotated[bool, typer.Option("--quick", help="Check sizes only, not sha256.")] = False,
    fmt: FormatOpt = Format.human,
) -> None:
    """Check every row file against the store manifest (size and sha256)."""
    from recipekit.hybrid.engram.store import verify_store

    problems = verify_store(store_dir, full=not quick)
    if problems:
        raise RecipekitError(code="engram-store-corrupt", location=str(store_dir),
                             message=f"{len(problems)} row file(s) differ from the manifest: " + "; ".join(problems),
                             hint="re-run `recipe engram pack` with the same --out: it rewrites what does not verify")
    Output(fmt).result({"ok": True, "store": str(store_dir)}, human=lambda: typer.echo(f"{store_dir}: OK"))


@engram_app.command("bench")
def bench_cmd(
    size_gib: Annotated[float, typer.Option("--size-gib", help="Size of the generated table.")] = 4.0,
    folder: Annotated[Optional[Path], typer.Option("--dir", help="Where to write the table (default: $RECIPEKIT_HOME/cache/engram-bench).")] = None,
    threads: Annotated[int, typer.Option("--threads", help="I/O threads (queue depth) of the store and of raw preadv.")] = 16,
    rows: Annotated[int, typer.Option("--rows", help="Rows requested per cold/warm measurement.")] = 200_000,
    batch_tokens: Annotated[int, typer.Option("--batch-tokens", help="Token positions per lookup (x 24 rows).")] = 64,
    streams: Annotated[int, typer.Option("--streams", help="Sequences in the simulated decode loop.")] = 8,
    steps: Annotated[int, typer.Option("--steps", help="Steps of the simulated decode loop.")] = 150,
    compute_ms: Annotated[Optional[float], typer.Option("--compute-ms", help="Compute time per decode step (default: 2x the measured read time).")] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the generated table for the next run.")] = False,
    fmt: FormatOpt = Format.human,
) -> None:
    """Store vs raw preadv vs page cache on a generated table, and a decode loop with/without prefetch."""
    import sys

    from recipekit import paths
    from recipekit.hybrid.engram.bench import cleanup, run_bench

    if size_gib <= 0 or rows <= 0 or threads <= 0 or steps <= 0 or streams <= 0 or batch_tokens <= 0:
        raise RecipekitError(code="bad-bench-args", message="sizes, counts and threads must be positive",
                             hint="e.g. --size-gib 4 --threads 16")
    folder = folder or paths.cache_dir() / "engram-bench"
    out = Output(fmt)
    try:
        res = run_bench(folder, size_gib=size_gib, threads=threads, rows=rows, batch_tokens=batch_tokens,
                        decode_streams=streams, decode_steps=steps, compute_ms=compute_ms,
                        progress=lambda m: print(f"engram bench: {m}", file=sys.stderr))
    finally:
        if not keep:
            cleanup(folder)

    def human():
        d = res["decode"]
        typer.echo(f"table {res['table_gib']} GiB, {res['table_rows']:,} rows, {res['requested_rows']:,} rows per pass, {res['threads']} threads")
        typer.echo(f"cold store      {res['store_rows_per_s']:>12,.0f} rows/s {res['store_mb_per_s']:>8,.1f} MB/s")
        typer.echo(f"cold raw preadv {res['preadv_rows_per_s']:>12,.0f} rows/s {res['preadv_mb_per_s']:>8,.1f} MB/s  (store/raw {res['store_vs_preadv']:.2f})")
        typer.echo(f"warm store      {res['warm_rows_per_s']:>12,.0f} rows/s {res['warm_mb_per_s']:>8,.1f} MB/s  (1 thread; "
                   f"{res['warm_rows_per_cpu_s']:,.0f} rows per CPU-second at a {res['warm_cpu_share']:.0%} core share)")
        typer.echo(f"warm raw preadv {res['warm_preadv_rows_per_s']:>12,.0f} rows/s; warm lookup+dequant {res['warm_lookup_rows_per_s']:,.0f} rows/s")
        typer.echo(f"decode loop: {d['streams']} streams x {d['rows_per_step']} rows/step, compute {d['compute_ms_per_step']} ms/step, "
                   f"lost to reads {d['lost_ms_per_step_sync']} ms/step sync vs {d['lost_ms_per_step_prefetch']} ms/step with prefetch "
                   f"(hidden {d['prefetch_hidden_fraction']:.1%})")
        typer.echo("goals: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in res["goals"].items()))

    out.result(res, human=human)


def register(app: typer.Typer) -> None:
    app.add_typer(engram_app, name="engram")
