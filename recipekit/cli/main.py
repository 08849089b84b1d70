"""Entry point of the `recipe` console script.

The root help (`recipe`, `recipe --help`, `recipe -h`) is printed by recipekit/cli/root_help.py
without loading typer, click or rich (it answers in about the time Python takes to start); every
other command line goes to recipekit/cli/dispatch.py, which runs the typer app and maps errors
to exit codes.
"""

from __future__ import annotations

import sys

from recipekit.cli.root_help import answer


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv` (default: sys.argv[1:]) and return its exit code; with no
    `argv` (the console script) exit with it."""
    args = sys.argv[1:] if argv is None else list(argv)
    code = answer(args)
    if code is None:
        from recipekit.cli.dispatch import dispatch  # lazy: typer loads only past the root help

        return dispatch(args, in_process=argv is not None)
    if argv is not None:
        return code
    sys.exit(code)


if __name__ == "__main__":
    main()
