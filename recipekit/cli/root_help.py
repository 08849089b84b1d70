"""The root `recipe` command table and its help page, in plain Python (no typer, click or rich).

COMMANDS names each top-level command, the module(s) in recipekit/cli/ whose `register(app)`
defines it, and the one-line summary the root help prints; recipekit/cli/app.py builds the
typer app from the same table. `recipe`, `recipe --help` and `recipe -h` are answered here by
`answer` without importing typer: the page is laid out as click lays out the root group's help
(wrapped to the terminal width, at most 120 columns), and tests/unit/test_root_help.py fails if
it differs from typer's own page.
"""

from __future__ import annotations

import os
import sys
import textwrap

ROOT_HELP = "Turn a declarative recipe into a working, verified LLM deployment."
HELP_OPTIONS = ("-h", "--help")  # the root context's help_option_names (recipekit/cli/help.py CONTEXT)
HELP_OPTION_TEXT = "Show this message and exit."
MAX_WIDTH = 120  # CONTEXT's max_content_width

# the commands app.py defines itself (listed first, as the group lists its own commands first)
OWN_COMMANDS: dict[str, str] = {"version": "Print the toolkit version."}

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
    "fit": (
        ("fit",),
        "Will it fit? Memory per card and the KV pool in vLLM's own terms (exit 5 when it does not fit).",
    ),
    "bench": (("bench",), "Run the decode protocol against a server; write JSON, Markdown and PNG plots."),
    "gate": (("gate",), "Run the recipe's quality gates against its server (or any server with --url)."),
    "plan": (("apply",), "The ordered steps apply would run, each with the commands it runs and the files it writes."),
    "apply": (
        ("apply",),
        "Apply a recipe: doctor, fetch, prepare checkpoint, install engine, patch, launch, wait ready, smoke.",
    ),
    "rehearse": (
        ("rehearse",),
        "Run a recipe's real plan on this machine with declared stand-ins for the hardware, hub and engine; "
        "ends with a table of every step: real or stand-in, result, time.",
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
    "upgrade": (("upgrade",), "What a new vLLM release breaks in a recipe, and the proposed variant."),
    "oracle": (
        ("oracle",),
        "The fp32 DeepSeek-V4.1 oracle: reference log-probs for the perplexity gate, paired NLL.",
    ),
    "kernels": (
        ("kernels",),
        "The sm_80 kernels for DSV4.1's formats: parity against the oracle's math, sm_80 validity, roofline bench.",
    ),
    "checkpoint": (
        ("checkpoint", "checkpoint_hybrid", "checkpoint_fullbench"),
        "Checkpoints in the real DSV4.1 encodings: generate tiny ones, check a layout, convert to the "
        "Gaudi port and validate it, benchmark the conversion; build the CMP hybrid.",
    ),
}


def terminal_columns() -> int:
    """The terminal width as shutil.get_terminal_size() gives it (COLUMNS, else stdout's
    terminal, else 80), without importing shutil."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        out = sys.__stdout__
        try:
            columns = os.get_terminal_size(out.fileno()).columns if out is not None else 0
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns


def _fill(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    wrapper = textwrap.TextWrapper(width, initial_indent=first, subsequent_indent=rest, replace_whitespace=False)
    return wrapper.wrap(text.expandtabs())


def _definitions(rows: list[tuple[str, str]], width: int, indent: int = 2) -> list[str]:
    """A two-column list: names padded to the longest (at most 30), texts wrapped beside them."""
    first_col = min(max(len(name) for name, _ in rows), 30) + 2
    text_width = max(width - first_col - 2, 10)
    lines = []
    for name, text in rows:
        wrapped = _fill(text, text_width) or [""]
        if len(name) <= first_col - 2:
            lines.append(f"{' ' * indent}{name}{' ' * (first_col - len(name))}{wrapped[0]}")
        else:
            lines += [f"{' ' * indent}{name}", f"{' ' * (first_col + indent)}{wrapped[0]}"]
        lines += [f"{' ' * (first_col + indent)}{line}" for line in wrapped[1:]]
    return lines


def render(columns: int | None = None) -> str:
    """The root help page for a terminal `columns` wide (default: this terminal), ending in a newline."""
    width = max(min(terminal_columns() if columns is None else columns, MAX_WIDTH) - 2, 50)
    prefix = "Usage: recipe "
    lines = _fill("[OPTIONS] COMMAND [ARGS]...", width, prefix, " " * len(prefix))
    lines.append("")
    for para in ROOT_HELP.split("\n\n"):
        lines += _fill(" ".join(para.split()), width, "  ", "  ")
    lines += ["", "Options:", *_definitions([(", ".join(HELP_OPTIONS), HELP_OPTION_TEXT)], width)]
    rows = [*OWN_COMMANDS.items(), *((name, summary) for name, (_, summary) in COMMANDS.items())]
    lines += ["", "Commands:", *_definitions(rows, width)]
    return "\n".join(lines) + "\n"


def answer(args: list[str]) -> int | None:
    """Print the root help when `args` ask only for it and return the exit code typer gives
    (0 for --help/-h on stdout; 2 with no arguments, on stderr); None for any other command line."""
    if len(args) == 1 and args[0] in HELP_OPTIONS:
        stream, code = sys.stdout, 0
    elif not args:
        stream, code = sys.stderr, 2
    else:
        return None
    if stream is not None:  # None: the stream was closed (`recipe --help >&-`); typer prints nothing then
        stream.write(render())
        stream.flush()
    return code
