"""`recipe engram ...`: Engram row ids (per rank), the placed Engram folder (place, verify), disk bench, warming."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from recipekit import bounded, paths
from recipekit.checkpoint.dsv41 import CONFIG_MAX_BYTES
from recipekit.checkpoint.engram_addressing import EngramAddresser
from recipekit.cli.help import new_group
from recipekit.cli.options import FormatOpt, LayoutOpt, refuse_renamed
from recipekit.errors import ExitCode, RecipekitError
from recipekit.hybrid.engram.bench import run_bench
from recipekit.hybrid.engram.benchtable import builtin_corpus
from recipekit.hybrid.engram.deploy import from_effective
from recipekit.hybrid.engram.fitness import save_measurement
from recipekit.hybrid.engram.placement import place_engram
from recipekit.hybrid.engram.ranks import rank_shares, rows_per_rank
from recipekit.hybrid.engram.rules import check_placement, not_checked, open_tables
from recipekit.hybrid.engram.warm import default_budget, warm
from recipekit.output import Format, Output

engram_app = new_group("Engram n-gram tables on NVMe as the sm_80 engine reads them.")


def _int_list(text: str, what: str) -> list[int]:
    try:
        out = [int(x) for x in text.replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise RecipekitError(
            code="bad-int-list",
            message=f"{what} must be comma-separated integers, got {text!r}",
            hint=f"e.g. {what} 1,2,3",
        ) from None
    big = next((v for v in out if not -(2**63) <= v < 2**63), None)
    if big is not None:
        raise RecipekitError(
            code="bad-int-list",
            message=f"{what}: {str(big)[:40]} is out of range (64-bit integers)",
            hint=f"e.g. {what} 1,2,3",
        )
    return out


def _split_sizes(split: str) -> tuple[int, int]:
    """(TP, PP) of a `--split` value: tpN or ppN."""
    m = re.fullmatch(r"(tp|pp)(\d+)", split or "")
    if not m or int(m.group(2)) < 1:
        raise RecipekitError(code="bad-split", message=f"--split {split!r}", hint="tp4 or pp4 (tpN / ppN)")
    n = int(m.group(2))
    return (n, 1) if m.group(1) == "tp" else (1, n)


def _target(target: str, layout: Optional[str], split: Optional[str], ckpt: Optional[Path]) -> tuple[Path, int, int]:
    """(checkpoint folder with config + tokenizer, TP, PP) of a checkpoint folder (split by
    `--split`) or a recipe (split by its deployment's `--layout`)."""
    p = Path(target)
    if p.is_dir() and (p / "config.json").is_file():
        # a checkpoint folder has no deployment: --layout here is the old spelling of --split
        refuse_renamed(layout, "--layout", "--split", "a recipe's deployment layout")
        tp, pp = _split_sizes(split) if split else (1, 1)
        return ckpt or p, tp, pp
    if split is not None:
        raise RecipekitError(
            code="bad-rows-args",
            location="--split",
            message="--split splits a checkpoint folder's rows; a recipe's split is its deployment's layout",
            hint=f"pass --layout {split} (a layout of the recipe), or a checkpoint folder",
        )
    from recipekit.cli.doctor import effective_for  # lazy: pulls pydantic

    d = from_effective(effective_for(target, layout))
    folder = ckpt or d.model_dir
    if folder is None or not (folder / "config.json").is_file() or not (folder / "tokenizer.json").is_file():
        raise RecipekitError(
            code="engram-checkpoint-missing",
            location=str(folder),
            message="the recipe's model folder has no config.json + tokenizer.json yet",
            hint="run the recipe's prepare step, or pass --ckpt DIR (a checkpoint with the same "
            "Engram config and tokenizer)",
            exit_code=ExitCode.NOT_FOUND,
        )
    return folder, d.tp, d.pp


@engram_app.command("rows")
def rows_cmd(
    target: Annotated[str, typer.Argument(help="A checkpoint folder (config.json + tokenizer.json) or a recipe.")],
    layer: Annotated[
        Optional[int], typer.Option("--layer", help="Only this Engram layer (1 or 14 for the real model).")
    ] = None,
    tokens: Annotated[
        Optional[str], typer.Option("--tokens", help="Token ids of one sequence, comma-separated (it starts fresh).")
    ] = None,
    text: Annotated[
        Optional[str],
        typer.Option(
            "--text", help="Text of one sequence, tokenized with the checkpoint's tokenizer.json (no special tokens)."
        ),
    ] = None,
    layout: LayoutOpt = None,
    split: Annotated[
        Optional[str],
        typer.Option(
            "--split", help="tp4 | pp4: rows per rank of a checkpoint folder split so (a recipe: its --layout)."
        ),
    ] = None,
    ckpt: Annotated[
        Optional[Path],
        typer.Option("--ckpt", help="Checkpoint folder for config + tokenizer (default: the recipe's model folder)."),
    ] = None,
    map_only: Annotated[
        bool, typer.Option("--map-only", help="Print the compressed token ids instead of row ids.")
    ] = False,
    dead: Annotated[
        Optional[str],
        typer.Option(
            "--dead", help="Positions of dead (image) tokens, comma-separated; default: tokens with id 129264, as vLLM."
        ),
    ] = None,
    fmt: FormatOpt = Format.human,
) -> None:
    """Row ids per position (n-gram order major, head minor); for a recipe or with --split, per rank."""
    import numpy as np  # lazy: pulls numpy

    folder, tp, pp = _target(target, layout, split, ckpt)
    if (tokens is None) == (text is None):
        raise RecipekitError(
            code="bad-rows-args",
            message="give exactly one of --tokens and --text",
            hint="e.g. --text 'Hello world' or --tokens 1,2,3",
        )
    if text is not None:
        from tokenizers import Tokenizer  # lazy: pulls tokenizers

        toks = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text, add_special_tokens=False).ids
    else:
        toks = _int_list(tokens or "", "--tokens")
    addr = EngramAddresser.from_checkpoint(folder)
    out = Output(fmt)
    if map_only:
        data = [int(x) for x in addr.compress(toks)]
        out.result(data, human=lambda: typer.echo(" ".join(map(str, data))))
        return
    mask = None
    if dead is not None:
        pos = _int_list(dead, "--dead")
        mask = np.zeros(len(toks), dtype=bool)
        for p in pos:
            if not 0 <= p < len(toks):
                raise RecipekitError(
                    code="bad-dead-position",
                    message=f"--dead position {p} is outside 0..{len(toks) - 1}",
                    hint="positions are 0-based indexes into --tokens",
                )
            mask[p] = True
    per_rank = split is not None or not (Path(target) / "config.json").is_file()
    if not per_rank:
        if layer is None:
            raise RecipekitError(
                code="bad-rows-args",
                message="--layer is needed for a checkpoint without --split",
                hint="e.g. --layer 1, or --split tp4 for rows per rank",
            )
        addr.config.layer_index(layer)
        ids = addr.row_ids(layer, toks, dead=mask).tolist() if toks else []

        def human() -> None:
            for i, (t, r) in enumerate(zip(toks, ids)):
                typer.echo(f"{i}\ttoken {t}\t" + " ".join(map(str, r)))

        out.result(ids, human=human)
        return

    layers = (layer,) if layer is not None else addr.config.layer_ids
    for L in layers:
        addr.config.layer_index(L)
    conf = bounded.read_json(folder / "config.json", "config.json", CONFIG_MAX_BYTES, code="checkpoint-config-invalid")
    if not isinstance(conf, dict):
        raise RecipekitError(
            code="checkpoint-config-invalid",
            location=str(folder / "config.json"),
            message="config.json is not a JSON object",
        )
    n_layers = int((conf.get("text_config") or conf).get("num_hidden_layers") or max(addr.config.layer_ids) + 1)
    shares = rank_shares(tuple(layers), addr.config.n_cols, n_layers, tp, pp)
    ids_by_layer = {
        L: addr.row_ids(L, toks, dead=mask) if toks else np.zeros((0, addr.config.n_cols), np.int64) for L in layers
    }
    rows = rows_per_rank(ids_by_layer, shares)
    doc: dict[str, Any] = {
        "tp": tp,
        "pp": pp,
        "tokens": [int(t) for t in toks],
        "ranks": [
            {"rank": s.rank, "layer": s.layer, "columns": list(s.columns), "rows": rows[s.rank][s.layer]}
            for s in shares
        ],
    }

    def human_ranks() -> None:
        typer.echo(f"{len(toks)} token(s), TP={tp} PP={pp}, {addr.config.n_cols} hash columns per layer")
        for r in doc["ranks"]:
            a, b = r["columns"]
            typer.echo(
                f"rank {r['rank']} layer {r['layer']}: columns {a}..{b - 1 if b > a else '-'} "
                f"({b - a}), {len(r['rows'])} row(s): "
                + " ".join(map(str, r["rows"][:12]))
                + (" ..." if len(r["rows"]) > 12 else "")
            )

    out.result(doc, human=human_ranks)


@engram_app.command("place")
def place_cmd(
    model: Annotated[
        Path,
        typer.Option("--from", help="The model folder whose index resolves the Engram shards (the hybrid checkpoint)."),
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="The Engram folder (DSV41_ENGRAM_DIR on the host).")],
    mode: Annotated[
        str, typer.Option("--mode", help="auto (hard link on the same filesystem, else verified copy) | link | copy.")
    ] = "auto",
    disk_dir: Annotated[
        Optional[Path],
        typer.Option(
            "--disk-dir",
            help="Place the folder here, on another disk; --out is then created empty as the "
            "mountpoint of its bind mount (ENGRAM_DISK_DIR).",
        ),
    ] = None,
    fmt: FormatOpt = Format.human,
) -> None:
    """Place the Engram folder: the shards (hard links or verified resumable copies), a reduced index, config.json."""

    if disk_dir is not None:
        # docker cannot create a mountpoint inside the read-only /models mount: it must exist
        out_dir.mkdir(parents=True, exist_ok=True)
        out_dir = disk_dir
    rep = place_engram(model, out_dir, mode=mode, progress=lambda m: print(f"engram place: {m}", file=sys.stderr))
    Output(fmt).result(
        rep,
        human=lambda: typer.echo(
            f"{out_dir}: {len(rep['shards'])} shard(s) ("
            + ", ".join(f"{k} {v['how']}" for k, v in sorted(rep["shards"].items()))
            + f"), {rep['tensors']} Engram tensors, {rep['total_size']:,} bytes"
        ),
    )


@engram_app.command("verify")
def verify_cmd(
    engram_dir: Annotated[Path, typer.Argument(help="The Engram folder (shards + reduced index + config.json).")],
    model: Annotated[
        Optional[Path], typer.Option("--model", help="The served model folder: its index must resolve the same bytes.")
    ] = None,
    skip_re: Annotated[
        Optional[str], typer.Option("--skip-re", help="DSV41_SKIP_WEIGHT_RE: must match exactly the Engram tensors.")
    ] = None,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="Compare copies with the model's shards by size only, not sha256 (a partial check: it says "
            "what it left out).",
        ),
    ] = False,
    disk_dir: Annotated[
        Optional[Path],
        typer.Option("--disk-dir", help="The folder was placed on another disk (ENGRAM_DISK_DIR): verify that one."),
    ] = None,
    fmt: FormatOpt = Format.human,
) -> None:
    """Check the Engram folder by the engine's rules; each failure names its rule (exit 2)."""

    engram_dir = disk_dir or engram_dir

    tables, problems = check_placement(engram_dir, model, skip_re=skip_re, hash_bytes=not quick)
    unchecked = not_checked(model, hash_bytes=not quick)
    data = {
        "ok": not problems,
        "complete": not unchecked,
        "not_checked": unchecked,
        "folder": str(engram_dir),
        "problems": problems,
        "tables": {
            str(L): {"shard": t.shard, "rows": t.rows, "weight_base": t.weight_base, "scale_base": t.scale_base}
            for L, t in sorted(tables.items())
        },
    }

    def human() -> None:
        if problems:
            typer.echo(f"ENGRAM_FAIL {engram_dir}: {len(problems)} problem(s)")
            for p in problems:
                typer.echo(f"  {p}")
        else:
            typer.echo(
                f"ENGRAM_OK {engram_dir}: "
                + ", ".join(f"layer {L} {t.rows:,} rows in {t.shard}" for L, t in sorted(tables.items()))
                + (" (PARTIAL check)" if unchecked else "")
            )
        for u in unchecked:
            typer.echo(f"  NOT CHECKED: {u}")

    Output(fmt).result(data, human=human)
    if problems:
        raise typer.Exit(int(ExitCode.INVALID_INPUT))


@engram_app.command("bench")
def bench_cmd(
    folder: Annotated[
        Optional[Path],
        typer.Option(
            "--dir",
            help="Folder on the disk to measure; the DSV4.1-shaped table is written there (default: "
            "$RECIPEKIT_HOME/cache/engram-bench/table).",
        ),
    ] = None,
    model: Annotated[
        Optional[Path],
        typer.Option("--model", help="Measure an existing Engram or model folder instead of generating a table."),
    ] = None,
    size_gib: Annotated[float, typer.Option("--size-gib", help="Size of the generated table (both layers).")] = 4.0,
    seconds: Annotated[float, typer.Option("--seconds", help="Duration of each pass.")] = 4.0,
    recipe: Annotated[
        Optional[str], typer.Option("--recipe", help="Compare with this recipe's published figures.")
    ] = "deepseek-v4.1-flash-1017-cmp170hx-4x",
    keep: Annotated[bool, typer.Option("--keep", help="Keep the generated table for the next run.")] = False,
    rounds: Annotated[int, typer.Option("--rounds", help="Alternating fio/aligned rounds (best of each kept).")] = 2,
    fmt: FormatOpt = Format.human,
) -> None:
    """fio anchor, the engine's access pattern and one aligned read per row, on one file, in one run."""

    if size_gib <= 0 or seconds <= 0:
        raise RecipekitError(
            code="bad-bench-args",
            message="--size-gib and --seconds must be positive",
            hint="e.g. --size-gib 4 --seconds 4",
        )
    folder = folder or paths.cache_dir() / "engram-bench" / "table"
    prefill = decode = None
    if recipe:
        from recipekit.cli.doctor import effective_for  # lazy: pulls pydantic

        d = from_effective(effective_for(recipe))
        prefill, decode = d.published_prefill_tps, d.published_decode_tps
    generated = model is None and not (folder / "bench-table.json").is_file()
    try:
        res = run_bench(
            folder,
            model=model,
            size_gib=size_gib,
            seconds=seconds,
            published_prefill_tps=prefill,
            published_decode_tps=decode,
            rounds_n=rounds,
            progress=lambda m: print(f"engram bench: {m}", file=sys.stderr),
        )
    finally:
        if model is None and not keep:
            shutil.rmtree(folder, ignore_errors=True)
    res["generated"] = generated
    res["cache"] = str(save_measurement(model or folder, res))

    def human() -> None:
        typer.echo(
            f"file {res['file']} ({res['file_bytes'] / 2**30:.2f} GiB, {res['table_rows']:,} rows), "
            f"{seconds:g} s per pass, page cache dropped before each"
        )
        f = res["fio"]
        if f is None:
            typer.echo("fio: not installed - no anchor (apt-get install fio); the reader's ratio to fio is unknown")
        elif "iops" not in f["qd32"] or "iops" not in f["qd1"]:
            typer.echo(f"fio: failed ({f})")
        else:
            typer.echo(
                f"fio 4k randread O_DIRECT libaio  QD1 {f['qd1']['iops']:>10,.0f} IOPS   "
                f"QD32 {f['qd32']['iops']:>10,.0f} IOPS"
            )
        for i, r in enumerate(res["rounds"]):
            if r["ratio_qd32"] is not None:
                typer.echo(
                    f"  round {i + 1}: fio QD32 {r['fio_qd32_iops']:,.0f} IOPS, aligned QD32 "
                    f"{r['aligned_qd32_rows_per_s']:,.0f} rows/s ({r['ratio_qd32']:.2f}x)"
                )
        r32 = res["reader_vs_fio_qd32"]
        typer.echo(
            f"aligned read/row O_DIRECT        QD1 {res['aligned_qd1_rows_per_s']:>10,.0f} rows/s QD32 "
            f"{res['aligned_qd32_rows_per_s']:>10,.0f} rows/s" + (f"  ({r32:.2f}x fio QD32)" if r32 else "")
        )
        typer.echo(
            "engine pattern (2 preads/row)    decode (48-row inline) "
            f"{res['engine_decode_rows_per_s']:>10,.0f} rows/s   "
            f"prefill (2048x48, 64-row jobs, 16 threads) {res['engine_prefill_rows_per_s']:>10,.0f} rows/s"
        )
        p = res["published"]
        pd = f" vs published {p['decode_tps']:,.1f} tok/s per stream" if p["decode_tps"] else ""
        pp = (
            f" vs published {p['prefill_tps_cold']:,.0f} tok/s cold "
            f"(needs {p['prefill_rows_per_s_needed']:,.0f} rows/s uncached)"
            if p["prefill_tps_cold"]
            else ""
        )
        typer.echo(
            f"Engram-bound ceiling: decode {res['decode_tps_ceiling']:,.0f} tok/s{pd}; "
            f"prefill {res['prefill_tps_ceiling']:,.0f} tok/s{pp}"
        )
        typer.echo(f"cached for `recipe doctor`: {res['cache']}")

    Output(fmt).result(res, human=human)


def _corpus(arg: str, held_out: bool = False) -> str:
    if arg == "builtin":
        return builtin_corpus()[1 if held_out else 0]
    p = Path(arg)
    if not p.is_file():
        raise RecipekitError(
            code="engram-corpus-missing",
            location=arg,
            message="no such corpus file",
            hint="a UTF-8 text file (paragraphs separated by blank lines) or 'builtin'",
            exit_code=ExitCode.NOT_FOUND,
        )

    data = bounded.read_bytes(p, "corpus file", 1 << 30, code="engram-corpus-unreadable")  # 1 GiB of text
    return data.decode("utf-8", errors="replace")


@engram_app.command("warm")
def warm_cmd(
    target: Annotated[
        str, typer.Argument(help="A recipe (its Engram folder + model tokenizer) or a model folder with the tables.")
    ],
    corpus: Annotated[
        str, typer.Option("--corpus", help="Calibration text file, or 'builtin' (CPython's pydoc topics, 4/5 of them).")
    ] = "builtin",
    budget_gib: Annotated[
        Optional[float],
        typer.Option("--budget-gib", help="RAM for warmed pages (default: host RAM minus what the recipe needs)."),
    ] = None,
    held_out: Annotated[
        Optional[str],
        typer.Option(
            "--measure",
            help="Held-out text file or 'builtin' (the other 1/5): measure the page-cache hit rate "
            "without and with warming.",
        ),
    ] = None,
    layout: LayoutOpt = None,
    fmt: FormatOpt = Format.human,
) -> None:
    """Pre-load the page-cache pages of the hottest Engram rows a corpus touches, within a RAM budget."""

    p = Path(target)
    if p.is_dir():
        tables_dir = tok_dir = p
        budget_from = None
    else:
        from recipekit.cli.doctor import effective_for  # lazy: pulls pydantic

        eff = effective_for(target, layout)
        d = from_effective(eff)
        if d.model_dir is None or d.engram_dir is None:
            raise RecipekitError(
                code="engram-not-declared",
                location=target,
                message="the recipe has no Engram folder",
                hint="warming applies to recipes that serve Engram from disk",
            )
        tables_dir, tok_dir, budget_from = d.engram_dir, d.model_dir, eff
    if budget_gib is not None:
        budget, how = int(budget_gib * 2**30), "--budget-gib"
    elif budget_from is not None:
        from recipekit.tools.doctor.collect import meminfo  # lazy: pulls pydantic
        from recipekit.tools.doctor.requirements import requirements_from  # lazy: pulls pydantic

        budget, how = default_budget(meminfo()[0], requirements_from(budget_from).host_ram_bytes)
    else:
        raise RecipekitError(
            code="engram-budget-missing",
            message="no recipe to derive the RAM budget from",
            hint="pass --budget-gib for a folder",
        )
    if budget <= 0:
        raise RecipekitError(
            code="engram-budget-empty", message=f"no RAM left for warming ({how})", hint="pass --budget-gib"
        )
    tables = open_tables(tables_dir)
    addr = EngramAddresser.from_checkpoint(tok_dir)
    res = warm(
        tables,
        addr,
        tok_dir / "tokenizer.json",
        _corpus(corpus),
        budget,
        held_out=_corpus(held_out, held_out=True) if held_out else None,
        progress=lambda m: print(f"engram warm: {m}", file=sys.stderr),
    )
    res["budget_from"] = how
    res["table_bytes"] = sum(t.rows * (t.head_dim + t.scale_cols) for t in tables.values())

    def human() -> None:
        pl = res["plan"]
        typer.echo(
            f"budget {budget / 2**20:,.0f} MiB ({how}; {budget / res['table_bytes']:.1%} of the "
            f"{res['table_bytes'] / 2**30:.2f} GiB tables); calibration {res['calibration_tokens']:,} tokens, "
            f"{pl['distinct_rows']:,} distinct rows, {pl['hot_rows']:,} hottest warmed in {pl['pages']:,} pages "
            f"({res['warmed_bytes'] / 2**20:,.0f} MiB read in {res['warm_seconds']:.1f} s)"
        )
        if "resident_bytes_after_warm" in res:
            typer.echo(
                f"page cache after warming: ~{res['resident_bytes_after_warm'] / 2**20:,.0f} MiB of the tables "
                "(sampled)"
            )
        for key, label in (("without_warming", "without warming"), ("with_warming", "with warming")):
            m = res.get(key)
            if m:
                typer.echo(
                    f"held-out {m['tokens']:,} tokens, {label:<16} page-cache hit rate {m['hit_rate']:6.1%}  "
                    f"disk reads/token {m['disk_reads_per_token']:6.2f}"
                )

    Output(fmt).result(res, human=human)


def register(app: typer.Typer) -> None:
    app.add_typer(engram_app, name="engram")
