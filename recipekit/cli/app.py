"""Builds the `recipe` app: the commands are listed here and loaded when they run.

COMMANDS names each top-level command, the module(s) in recipekit/cli/ whose `register(app)`
defines it, and the one-line summary `recipe --help` prints. `recipe --help` therefore
imports typer and this module only; `recipe X ...` imports the modules of X alone (so the
command modules import what they use at module level).
tests/unit/test_cli_text.py checks that each summary is the first paragraph of the
command's own help, so the two cannot drift apart.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Optional

import typer

from recipekit.cli.help import HelpGroup, first_paragraph, new_group

if TYPE_CHECKING:  # the Context class TyperGroup declares (typer vendors click)
    from typer._click import Context

# name -> (modules whose register(app) defines it, summary shown by `recipe --help`)
COMMANDS: dict[str, tuple[tuple[str, ...], str]] = {
    "list": (("listing",), "List the recipes of the catalog."),
    "show": (("show",), "Show a recipe (id, path, URL or 'auto')."),
    "lint": (("lint",), "Check schema, references, templates, constraints and engine flag names."),
    "render": (("render",), "Render an artifact from the effective config (constraints are enforced first)."),
    "export": (("export",), "Write api/v1/recipes.json, api/v1/recipes/<id>.json and the recipe JSON Schema."),
    "site": (
        ("site",),
        "Write index.html, one page per recipe and api/v1/ (the export) into DIR; --serve previews it.",
    ),
    "doctor": (
        ("doctor",),
        "Check this host against a recipe (or only report its facts): accelerators, PCIe, P2P, "
        "RAM, disk, overcommit, docker runtimes, ports. Exit 3 when a check FAILs.",
    ),
    "fetch": (
        ("fetch",),
        "Download the recipe's checkpoint sources at their pinned revisions, verify every file "
        "(size + sha256), resume after interrupts; offline when all is verified.",
    ),
    "bench": (("bench",), "Run the decode protocol against a server; write JSON, Markdown and PNG plots."),
    "gate": (("gate",), "Run the recipe's quality gates against its server (or any server with --url)."),
    "plan": (("apply",), "The ordered steps apply would run, each with the commands it runs and the files it writes."),
    "apply": (
        ("apply",),
        "Apply a recipe: doctor, fetch, prepare checkpoint, install engine, patch, launch, wait ready, smoke.",
    ),
    "status": (
        ("apply",),
        "Is the recipe's server running and healthy? (exit 0 healthy, 1 running but not answering, 6 not running)",
    ),
    "stop": (("apply",), "Stop the server this recipe's apply started (only that one): SIGINT, SIGTERM, then SIGKILL."),
    "logs": (("apply",), "The server's log (last lines; --follow to keep reading)."),
    "restart": (("apply",), "Stop the server, then apply again from the launch step."),
    "engram": (("engram",), "Engram n-gram tables on NVMe as the sm_80 engine reads them."),
    "patches": (("patches",), "Apply, check, revert and describe patch packs; list them; engine flag/env catalogs."),
    "pins": (("pins",), "Pinned upstreams (repo, commit, version, image digest)."),
    "oracle": (
        ("oracle",),
        "The fp32 DeepSeek-V4.1 oracle: reference log-probs for the perplexity gate, paired NLL.",
    ),
    "checkpoint": (
        ("checkpoint", "checkpoint_hybrid"),
        "Checkpoints in the real DSV4.1 encodings: generate tiny ones, check a layout, convert to the "
        "Gaudi port and validate it, benchmark the conversion; build the CMP hybrid.",
    ),
}

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
    "Turn a declarative recipe into a working, verified LLM deployment.",
    name="recipe",
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)


@app.command("version")
def version() -> None:
    """Print the toolkit version."""
    from recipekit import __version__  # lazy: only `recipe version` needs it

    typer.echo(__version__)


@app.callback()
def root() -> None:
    # a callback keeps `recipe` a group: with one registered command typer would make it the app itself
    pass
