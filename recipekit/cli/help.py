"""How the `recipe` groups print their help: plain click formatting (rewrapped to the terminal,
so a docstring's own line breaks never cut a sentence) with each subcommand's whole first
paragraph, not a summary cut at a fixed width. Used by every group through `new_group`."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:  # the Context class TyperGroup declares (typer vendors click)
    from typer._click import Context

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 120}


def first_paragraph(text: str) -> str:
    """The first paragraph of a help text as one line (click's \\b and \\f markers dropped)."""
    para = inspect.cleandoc(text or "").split("\f")[0].split("\n\n")[0]
    return " ".join(line.strip() for line in para.splitlines() if line.strip() != "\b")


class HelpGroup(TyperGroup):
    def format_commands(self, ctx: Context, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, first_paragraph(cmd.help or cmd.short_help or "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def new_group(help: str, **kw: Any) -> typer.Typer:
    """A command group that prints its help as HelpGroup does (no rich panels: they keep the
    docstrings' hard line breaks, and loading them costs more than the rest of `--help`)."""
    kw.setdefault("cls", HelpGroup)
    return typer.Typer(
        help=help, no_args_is_help=True, rich_markup_mode=None, context_settings=CONTEXT, add_completion=False, **kw
    )
