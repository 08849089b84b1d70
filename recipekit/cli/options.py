"""Shared option and argument types (typer Annotated aliases) used by the command modules."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from recipekit.errors import RecipekitError
from recipekit.output import Format

FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format: human or json.")]
RecipeArg = Annotated[str, typer.Argument(help="Recipe id, path to a recipe YAML/JSON file, URL, or 'auto'.")]
OptRecipeArg = Annotated[Optional[str], typer.Argument(help="Recipe id, path, URL, or 'auto'.")]
LayoutOpt = Annotated[
    Optional[str],
    typer.Option(
        "--layout", "-l", help="A single-node layout variant (e.g. tp4, pp4) or a multi-node layout (e.g. pp2-tp4-mp)."
    ),
]
NodeOpt = Annotated[Optional[int], typer.Option("--node", "-N", help="Node of a multi-node layout (0 = head).")]
# `--layout` means a parallel variant (render/apply/...); a checkpoint's format is `--checkpoint-format`.
# The commands that took `--layout` for the format still accept the word only to refuse it with the new name.
OldLayoutOpt = Annotated[
    Optional[str], typer.Option("--layout", "-l", hidden=True, help="Renamed: --checkpoint-format.")
]


def refuse_renamed(value: object, old: str, new: str, meaning: str) -> None:
    """An option's old spelling, given: error[option-renamed] naming the new one (`meaning` says what the old
    word means now)."""
    if value is not None:
        raise RecipekitError(
            code="option-renamed",
            location=old,
            message=f"{old} now names {meaning}; this option is {new}",
            hint=f"pass {new} {value}",
        )


def refuse_old_layout(value: Optional[str]) -> None:
    """The checkpoint-format option's old spelling: refused, naming the new one."""
    refuse_renamed(value, "--layout", "--checkpoint-format", "a parallel variant (render, apply)")


SetOpt = Annotated[
    Optional[list[str]], typer.Option("--set", help="Override KEY=VALUE (repeatable; wins over everything).")
]
EnvFileOpt = Annotated[
    Optional[Path],
    typer.Option("--env-file", help="A .env file parsed as KEY=VALUE data (default: ./.env if present)."),
]
ModelOpt = Annotated[
    Optional[str], typer.Option("--model", help="Served model name (default: the first of /v1/models).")
]
ApiKeyOpt = Annotated[
    Optional[str], typer.Option("--api-key", envvar="RECIPEKIT_API_KEY", help="Bearer token for the server.")
]
