"""`recipe rehearse <recipe> [--layout L] [--node N] [--host PROFILE] [--home DIR]`: the recipe's
real plan with declared stand-ins (recipekit/rehearse/driver.py), then the post-apply commands;
a table of every step. Exit 0 when every step passed, else the first failure's exit code."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from recipekit.cli.options import FormatOpt, LayoutOpt, RecipeArg, SetOpt
from recipekit.errors import ExitCode
from recipekit.output import Format, Output
from recipekit.rehearse.driver import rehearse
from recipekit.rehearse.report import table

HostOpt = Annotated[
    Optional[str],
    typer.Option(
        "--host",
        help="Host stand-in profile (default: the recipe's hardware; e.g. cmp170hx-4x-locked-x4 to see the doctor FAIL).",
    ),
]
HomeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--home", help="RECIPEKIT_HOME of the rehearsal (default: a new temp folder; name one to rehearse warm)."
    ),
]


def register(app: typer.Typer) -> None:
    @app.command("rehearse")
    def rehearse_cmd(
        recipe: RecipeArg,
        layout: LayoutOpt = None,
        set_: SetOpt = None,
        node: Annotated[Optional[int], typer.Option("--node", help="Node of a multi-node layout (0 = head).")] = None,
        host: HostOpt = None,
        home: HomeOpt = None,
        no_post_apply: Annotated[
            bool, typer.Option("--no-post-apply", help="Stop after apply's steps (no status/logs/bench/restart/stop).")
        ] = False,
        trust: Annotated[
            bool, typer.Option("--trust", help="Rehearse a recipe from outside the catalog (its commands run here).")
        ] = False,
        fmt: FormatOpt = Format.human,
    ) -> None:
        """Run a recipe's real plan on this machine with declared stand-ins for the hardware, hub and engine; ends with a table of every step: real or stand-in, result, time.

        A rehearsal proves the plan, commands, runner, argv, downloads, checkpoint pipeline and the
        post-apply commands work together; it does not prove the real cards, the real weights or
        the real engine's speed. Its state lives in its own RECIPEKIT_HOME (--home), never yours.
        """
        out = Output(fmt)
        log = (lambda line: print(line, file=sys.stderr)) if out.json else print
        reh = rehearse(
            recipe,
            layout=layout,
            node=node,
            home=home,
            host=host,
            post_apply=not no_post_apply,
            trust=trust,
            sets=tuple(set_ or ()),
            log=log,
        )
        out.result(reh.to_dict(), lambda: print("\n".join(table(reh))))
        if not reh.ok:
            raise typer.Exit(int(_exit_code(reh.error_code)))


def _exit_code(code: Optional[str]) -> int:
    """The exit code the first failure's error code is registered with."""
    from recipekit.error_codes import lookup  # lazy: the registry, only on failure

    row = lookup(code) if code else None
    return int(row.exit_code) if row is not None else int(ExitCode.FAILURE)
