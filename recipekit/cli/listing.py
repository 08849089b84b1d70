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

        recipes = list_recipes()
        rows = [index_entry(lr) for lr in recipes]
        out = Output(fmt)

        def human() -> None:
            shown = []
            for row, lr in zip(rows, recipes):
                r = lr.recipe
                # the name the API answers to (what a client sends), then the checkpoint it serves
                model = f"{r.model.served_name} ({r.model.hf_id})" if r.model.served_name else r.model.hf_id
                layouts = list(r.layouts) + [f"{n} (multi-node)" for n in sorted(r.multinode)]
                shown.append({**row, "model": model, "layouts": layouts})
            print_table(shown, ["id", "backend", "model", "hardware", "status", "layouts"])

        out.result(rows, human)
