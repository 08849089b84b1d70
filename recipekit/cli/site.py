"""`recipe site`: build the static recipe site (pages + JSON API) and preview it on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from recipekit import paths
from recipekit.cli.options import FormatOpt
from recipekit.errors import RecipekitError
from recipekit.output import Format, Output
from recipekit.site.build import build_site
from recipekit.site.serve import SiteServer

OutOpt = Annotated[
    Optional[Path],
    typer.Option("--out", "-o", help="Directory to write the site into (default: $RECIPEKIT_HOME/site)."),
]
ServeOpt = Annotated[bool, typer.Option("--serve", help="Serve the site on 127.0.0.1 after building it.")]
PortOpt = Annotated[int, typer.Option("--port", "-p", min=0, max=65535, help="Port for --serve (0 picks a free one).")]
NoBuildOpt = Annotated[bool, typer.Option("--no-build", help="With --serve: serve DIR as it is, without rebuilding.")]
BaseUrlOpt = Annotated[
    Optional[str],
    typer.Option("--base-url", help="Absolute URL the site will be published at; written into the agent box."),
]


def register(app: typer.Typer) -> None:
    app.command("site")(site)


def site(
    out: OutOpt = None,
    serve: ServeOpt = False,
    port: PortOpt = 8000,
    no_build: NoBuildOpt = False,
    base_url: BaseUrlOpt = None,
    format: FormatOpt = Format.human,
) -> None:
    """Write index.html, one page per recipe and api/v1/ (the export) into DIR; --serve previews it."""

    output = Output(format)
    out_dir = out if out is not None else paths.home() / "site"
    if no_build and not serve:
        raise RecipekitError(
            code="no-build-needs-serve",
            message="--no-build only makes sense with --serve",
            hint="recipe site --serve --no-build --out DIR",
        )
    if not no_build:
        report = build_site(out_dir, base_url=base_url)
        output.result(report.to_dict(), human=lambda: _print_report(output, report))
    if serve:
        server = SiteServer(out_dir, port=port)
        typer.echo(f"serving {out_dir} at {server.base_url} (Ctrl-C stops)", err=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            typer.echo("stopped", err=True)


def _print_report(output: Output, report) -> None:
    con = output.console()
    con.print(
        f"wrote {report.page_count} page(s), {report.plot_count} plot(s) and "
        f"{report.json_count} JSON document(s) to {report.out_dir}"
    )
    for rid in report.recipe_ids:
        con.print(f"  {report.out_dir}/recipes/{rid}/index.html")
