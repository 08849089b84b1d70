"""Entry point of the `recipe` console script: runs the app and maps errors to exit codes.

Whatever happens below, the user sees one line `error[code] location: message (hint: ...)` and a
documented exit code (recipekit/errors.py ExitCode); RECIPEKIT_DEBUG=1 re-raises for a traceback.
"""
from __future__ import annotations

import os
import sys


def unexpected(e: BaseException):
    """The RecipekitError shown for an exception no module turned into one."""
    from recipekit.errors import ExitCode, RecipekitError
    where = str(e.filename) if isinstance(e, OSError) and e.filename else None
    if isinstance(e, PermissionError) or (isinstance(e, OSError) and e.errno in (1, 13, 30)):
        return RecipekitError(code="permission-denied", exit_code=ExitCode.FAILURE, location=where,
                              message=f"{e.strerror or e}: nothing was half-written",
                              hint="check that the file and its folder are writable (chattr -i, chmod, mount options)")
    if isinstance(e, OSError):
        return RecipekitError(code="os-error", exit_code=ExitCode.FAILURE, location=where,
                              message=f"{e.strerror or e}", hint="check the path and the disk")
    if isinstance(e, (RecursionError, MemoryError)):
        return RecipekitError(code="input-too-complex", exit_code=ExitCode.INVALID_INPUT,
                              message=f"the input is too deeply nested or too large ({type(e).__name__})",
                              hint="check the file given; recipekit's own files are small and shallow")
    return RecipekitError(code="internal-error", exit_code=ExitCode.FAILURE,
                          message=f"{type(e).__name__}: {str(e)[:300]}",
                          hint="this is a bug in recipekit; RECIPEKIT_DEBUG=1 shows the traceback")


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
        _print(e)
        code = int(e.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = int(ExitCode.INTERRUPTED)
    except Exception as e:       # the last line of defence: no traceback for any input
        if debug:
            raise
        err = unexpected(e)
        _print(err)
        code = int(err.exit_code)
    if argv is not None:
        return code
    sys.exit(code)


def _print(e) -> None:
    from recipekit.textsafe import shown
    print(e.one_line(), file=sys.stderr)
    for d in e.details:
        print(f"  {shown(d)}", file=sys.stderr)


if __name__ == "__main__":
    main()
