"""`recipe list`: the catalog."""

from __future__ import annotations

import typer

from recipekit.catalog import list_recipes
from recipekit.cli.options import FormatOpt
from recipekit.export import index_entry
from recipekit.output import Format, Output, print_table


def register(app: typer.Typer) -> None:
    @app.command("list")
    def list_cmd(fmt: FormatOpt = Format.human) -> None:
        """List the recipes of the catalog."""

        rows = [index_entry(lr) for lr in list_recipes()]
        out = Output(fmt)

        def human() -> None:
            print_table(rows, ["id", "backend", "model", "hardware", "status", "layouts"])

        out.result(rows, human)
