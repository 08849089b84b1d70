"""`recipe export`: the static JSON API (api/v1/...) for agents."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from recipekit.cli.options import FormatOpt
from recipekit.export import export
from recipekit.output import Format, Output

OutDirOpt = Annotated[Path, typer.Option("--out", "-o", help="Folder to write api/v1/ into.")]


def register(app: typer.Typer) -> None:
    @app.command("export")
    def export_cmd(out: OutDirOpt, fmt: FormatOpt = Format.human) -> None:
        """Write api/v1/recipes.json, api/v1/recipes/<id>.json and the recipe JSON Schema."""

        written = export(out)
        o = Output(fmt)
        o.result({"out": out, "files": written}, lambda: print("\n".join(f"{out}/{f}" for f in written)))
