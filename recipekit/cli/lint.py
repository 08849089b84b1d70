"""`recipe lint`: validate recipes (default: the whole catalog); exit 2 on any problem."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from recipekit.cli.options import FormatOpt
from recipekit.errors import ExitCode
from recipekit.lint import lint_paths
from recipekit.output import Format, Output

PathsArg = Annotated[Optional[list[Path]], typer.Argument(help="Recipe files or folders (default: the catalog).")]


def register(app: typer.Typer) -> None:
    @app.command("lint")
    def lint(paths: PathsArg = None, fmt: FormatOpt = Format.human) -> None:
        """Check schema, references, templates, constraints and engine flag names."""

        files, errors = lint_paths(paths or ())
        out = Output(fmt)
        data = {"files": files, "ok": not errors, "errors": [e.to_dict() for e in errors]}

        def human() -> None:
            for e in errors:
                print(e.one_line(), file=sys.stderr)
            print(f"{len(files)} file(s), {len(errors)} problem(s)")

        out.result(data, human)
        if errors:
            raise typer.Exit(int(ExitCode.INVALID_INPUT))
