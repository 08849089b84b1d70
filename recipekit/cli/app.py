"""Builds the typer app from the command modules.

Each module in COMMAND_MODULES exposes `register(app)`. Modules import only light things
at top level (typer, stdlib, recipekit.cli.options); library code is imported inside the
command functions, so `recipe --help` stays fast and never imports torch or numpy.
"""
from __future__ import annotations

import importlib

import typer

COMMAND_MODULES: list[str] = [
    # one line per command group module in recipekit/cli/
    "listing",
    "show",
    "lint",
    "render",
    "export",
    "engram",
    "checkpoint_hybrid",
    "site",
    "patches",
    "pins",
    "doctor",
    "fetch",
    "checkpoint",
    "bench",
    "gate",
    "oracle",
    "apply",
]

app = typer.Typer(
    name="recipe",
    help="Turn a declarative recipe into a working, verified LLM deployment.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command("version")
def version() -> None:
    """Print the toolkit version."""
    from recipekit import __version__
    typer.echo(__version__)


for _name in COMMAND_MODULES:
    importlib.import_module(f"recipekit.cli.{_name}").register(app)
