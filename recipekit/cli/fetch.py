"""`recipe fetch <recipe> [--dry-run]`: verified, resumable downloads of the checkpoint sources."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Annotated, Iterator, Optional

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from recipekit.cli.doctor import effective_for
from recipekit.cli.options import EnvFileOpt, FormatOpt, LayoutOpt, RecipeArg, SetOpt
from recipekit.output import Format, Output
from recipekit.progress import Ticker
from recipekit.textsafe import markup as m
from recipekit.tools.fetch import fetch as run_fetch


@contextmanager
def _interrupt_line(current: list[str]) -> Iterator[None]:
    """A Ctrl-C prints one line: what was being downloaded, what is kept, that a re-run resumes."""
    try:
        yield
    except KeyboardInterrupt:
        what = f"downloading {current[0]}" if current[0] else "recipe fetch"
        print(
            f"interrupted: {what}; verified files are kept, the partial download stays in .recipekit-partial/; "
            "`recipe fetch` again resumes it",
            file=sys.stderr,
            flush=True,
        )
        raise


def _human(report, console) -> None:

    gib = 1 << 30
    if not report.sources:
        console.print(f"{m(report.recipe)}: nothing to download (no checkpoint source names a hub repo)")
        return
    if report.dry_run:
        for s in report.sources:
            sel = s["selection"]
            what = m(", ".join(sel["files"] + sel["include"]) or "everything")
            if sel["exclude"]:
                what += f" (minus {m(', '.join(sel['exclude']))})"
            hub_bytes = (s["hub"] or {}).get("bytes")
            if s["declared_bytes"] is not None:
                declared = f"{s['declared_bytes'] / gib:.2f} GiB declared"
            elif hub_bytes is not None:
                declared = f"{hub_bytes / gib:.2f} GiB per the hub listing"
            elif s.get("recipe_disk_bytes"):
                declared = (
                    f"no file sizes declared (the whole recipe needs {s['recipe_disk_bytes'] / gib:.1f} GiB of disk)"
                )
            else:
                declared = "size not declared"
            console.print(f"[bold]{m(s['id'])}[/bold] {m(s['repo'])}@{m(s['revision'])} -> {m(s['local_dir'])}")
            console.print(
                f"  selection: {what}; {declared}; {s['verified_bytes'] / gib:.2f} GiB verified locally"
                + (" (complete)" if s["complete"] else "")
            )
            hub = s["hub"]
            if hub and "error" in hub:
                console.print(f"  hub: {m(hub['error'])}")
            elif hub:
                console.print(
                    f"  hub @ {hub['revision'][:12]}: {len(hub['files'])} file(s), {hub['bytes'] / gib:.2f} GiB"
                )
                for f in hub["files"]:
                    console.print(f"    {f['size']:>16,}  {m(f['path'])}")
            else:
                console.print("  hub: not contacted (offline)")
        if report.needed_bytes is not None and report.free_bytes is not None:
            fits = "fits" if report.needed_bytes <= report.free_bytes else "[red]does not fit[/red]"
            console.print(
                f"to download: {report.needed_bytes / gib:.2f} GiB, free: {report.free_bytes / gib:.2f} GiB ({fits})"
            )
        return
    for s in report.sources:
        how = "verified offline (no network)" if s.offline else f"{s.bytes_downloaded / gib:.2f} GiB downloaded"
        console.print(
            f"[green]OK[/green] {m(s.id)} {m(s.repo)}@{m((s.revision or '?')[:12])}: {len(s.files)} file(s), "
            f"{s.bytes_total / gib:.2f} GiB, {how} -> {m(s.local_dir)}"
        )


def register(app: typer.Typer) -> None:
    @app.command("fetch")
    def fetch(
        recipe: RecipeArg,
        dry_run: Annotated[
            bool,
            typer.Option("--dry-run", help="List each source's selection and sizes; download nothing (works offline)."),
        ] = False,
        source: Annotated[
            Optional[list[str]], typer.Option("--source", help="Only this source id (repeatable).")
        ] = None,
        fmt: FormatOpt = Format.human,
        layout: LayoutOpt = None,
        env_file: EnvFileOpt = None,
        set_: SetOpt = None,
        token: Annotated[
            Optional[str],
            typer.Option("--token", envvar="HF_TOKEN", show_envvar=True, help="Hub token for gated/private repos."),
        ] = None,
        max_attempts: Annotated[
            int,
            typer.Option(
                "--max-attempts", min=1, help="Attempts per file (resume after a break, refetch after a bad hash)."
            ),
        ] = 4,
    ) -> None:
        """Download the recipe's checkpoint sources at their pinned revisions, verify every file
        (size + sha256), resume after interrupts; offline when all is verified."""

        eff = effective_for(recipe, layout, env_file, set_)
        out = Output(fmt)
        current = [""]  # the file being downloaded, for the Ctrl-C line
        if not dry_run and not out.json and sys.stderr.isatty():
            bars = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                TimeElapsedColumn(),
                console=out.err_console(),
                transient=True,
            )
            tasks: dict[str, TaskID] = {}

            def progress(path: str, done: int, total: int) -> None:
                current[0] = path
                if path not in tasks:
                    tasks[path] = bars.add_task(path, total=total)
                bars.update(tasks[path], completed=done)

            with _interrupt_line(current), bars:
                report = run_fetch(
                    eff, dry_run=False, only=source or (), token=token, progress=progress, max_attempts=max_attempts
                )
        elif not dry_run and not out.json:  # not a terminal (CI logs): a line every few seconds
            tickers: dict[str, Ticker] = {}

            def lines(path: str, done: int, total: int) -> None:
                current[0] = path
                if path not in tickers:
                    tickers[path] = Ticker(f"fetch {path}", total=total, tty=False)
                t = tickers[path]
                t.update(done=done)
                if done >= total:
                    t.close()

            with _interrupt_line(current):
                report = run_fetch(
                    eff, dry_run=False, only=source or (), token=token, progress=lines, max_attempts=max_attempts
                )
        else:
            report = run_fetch(eff, dry_run=dry_run, only=source or (), token=token, max_attempts=max_attempts)
        out.result(report.to_dict(), human=lambda: _human(report, out.console()))
