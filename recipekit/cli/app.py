"""Builds the `recipe` app from recipekit/cli/root_help.py's COMMANDS table: each command's
module is loaded when it runs.

`recipe X ...` imports the modules of X alone (so the command modules import what they use at
module level); the root help itself (`recipe`, `recipe --help`) is printed by root_help without
loading this module or typer.

tests/unit/test_cli_text.py checks that each summary is the first paragraph of the
command's own help, so the two cannot drift apart.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Optional

import typer

from recipekit.cli.help import HelpGroup, first_paragraph, new_group
from recipekit.cli.root_help import COMMANDS, OWN_COMMANDS, ROOT_HELP

if TYPE_CHECKING:  # the Context class TyperGroup declares (typer vendors click)
    from typer._click import Context

_loaded: dict[tuple[str, ...], Any] = {}  # modules -> the click group their register() filled


def load_group(modules: tuple[str, ...]) -> Any:
    """The click group holding the commands that `modules` register (imported once)."""
    if modules not in _loaded:
        sub = typer.Typer(rich_markup_mode=None)  # as new_group: typer passes it down to sub-groups
        for name in modules:
            importlib.import_module(f"recipekit.cli.{name}").register(sub)
        from typer.main import get_group  # lazy: the typer -> click conversion, needed once a command runs

        _loaded[modules] = get_group(sub)
    return _loaded[modules]


class LazyGroup(HelpGroup):
    """The root group: COMMANDS are listed from the table and imported on first use."""

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in COMMANDS if n not in self.commands)]

    def get_command(self, ctx: Context, cmd_name: str) -> Optional[Any]:
        if cmd_name in self.commands or cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        return load_group(COMMANDS[cmd_name][0]).commands.get(cmd_name)

    def format_commands(self, ctx: Context, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in COMMANDS and name not in self.commands:
                rows.append((name, COMMANDS[name][1]))
            else:
                cmd = super().get_command(ctx, name)
                if cmd is not None and not cmd.hidden:
                    rows.append((name, first_paragraph(cmd.help or "")))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = new_group(
    ROOT_HELP,
    name="recipe",
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)


@app.command("version", help=OWN_COMMANDS["version"])
def version() -> None:
    from recipekit import __version__  # lazy: only `recipe version` needs it

    typer.echo(__version__)


@app.callback()
def root() -> None:
    # a callback keeps `recipe` a group: with one registered command typer would make it the app itself
    pass
