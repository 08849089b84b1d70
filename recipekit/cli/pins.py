"""`recipe pins verify <recipe>`: check what is installed against the recipe's pinned upstreams."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from recipekit.apply.auto import load_recipe
from recipekit.cli.help import new_group
from recipekit.cli.options import FormatOpt, RecipeArg
from recipekit.output import Format, Output
from recipekit.patches.pins import raise_for_mismatch
from recipekit.patches.pinsource import verify_recipe_pins


def register(app: typer.Typer) -> None:
    grp = new_group("Pinned upstreams (repo, commit, version, image digest).")
    app.add_typer(grp, name="pins")

    @grp.command("verify")
    def verify_cmd(
        recipe: RecipeArg,
        venv: Annotated[
            Optional[list[Path]],
            typer.Option("--venv", help="Engine venv to read pip metadata from (default: the recipe's engine venv)."),
        ] = None,
        site_packages: Annotated[
            Optional[list[Path]], typer.Option("--site-packages", help="A site-packages folder (repeatable).")
        ] = None,
        checkout: Annotated[
            Optional[list[str]], typer.Option("--checkout", help="NAME=DIR: a git checkout of pin NAME (repeatable).")
        ] = None,
        docker: Annotated[
            bool, typer.Option("--docker", help="Also check image digests with the local docker daemon.")
        ] = False,
        only: Annotated[Optional[list[str]], typer.Option("--only", help="Check only these pins (repeatable).")] = None,
        allow_missing: Annotated[
            bool, typer.Option("--allow-missing", help="Exit 0 when a pin has nothing installed to compare with.")
        ] = False,
        format: FormatOpt = Format.human,
    ) -> None:
        """Compare installed versions/commits/digests with the recipe's pins: exit 4 on a mismatch, 6 when nothing is installed."""
        loaded = load_recipe(recipe)
        checks, where = verify_recipe_pins(
            loaded.recipe,
            venvs=venv or (),
            site_packages=site_packages or (),
            checkouts=checkout or (),
            use_docker=docker,
            only=only or (),
        )
        data = {
            "recipe": loaded.id,
            "looked_in": [str(p) for p in where.site_packages],
            "checkouts": {k: str(v) for k, v in where.checkouts.items()},
            "checks": [c.to_dict() for c in checks],
        }

        def human():
            typer.echo(f"pins of {loaded.id}")
            for c in checks:
                typer.echo("  " + c.line())

        Output(format).result(data, human=human)
        raise_for_mismatch(checks, allow_missing=allow_missing)
