"""Entry point of the `recipe` console script: runs the app and maps errors to exit codes."""
from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    from recipekit.errors import ErrorList, ExitCode, RecipekitError
    debug = os.environ.get("RECIPEKIT_DEBUG") == "1"
    try:
        from recipekit.cli.app import app
        app(args=argv, prog_name="recipe", standalone_mode=True)
        return 0
    except SystemExit as e:  # click/typer exit
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if argv is not None:
            return code
        raise
    except ErrorList as e:
        if debug:
            raise
        for line in e.lines():
            print(line, file=sys.stderr)
        code = int(e.exit_code)
    except RecipekitError as e:
        if debug:
            raise
        print(e.one_line(), file=sys.stderr)
        for d in e.details:
            print(f"  {d}", file=sys.stderr)
        code = int(e.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = int(ExitCode.INTERRUPTED)
    if argv is not None:
        return code
    sys.exit(code)


if __name__ == "__main__":
    main()
