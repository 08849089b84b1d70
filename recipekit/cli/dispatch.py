"""Runs the typer app for a command line and maps errors to exit codes (called by
recipekit/cli/main.py for every command line but the root help).

Every failure is one line `error[code] location: message (hint: ...)` on stderr with the
error's documented exit code (recipekit/errors.py ExitCode), whatever happens below: an
exception no module turned into an error is mapped by `unexpected` (RECIPEKIT_DEBUG=1 re-raises
for a traceback). With `--format json` (or `-f json`) anywhere on the command line the same
error is also written to stdout as `{"error": {"code", "message", "hint", "location"}}`, so
a JSON consumer never has to parse stderr; usage errors found by the parser included. A
command that already wrote its JSON result (which says what failed) writes no second document.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import typer

from recipekit import interrupt
from recipekit.cli.app import app
from recipekit.errors import ErrorList, ExitCode, RecipekitError, did_you_mean
from recipekit.output import json_result_written, reset_json_result
from recipekit.textsafe import shown


def wants_json(args: list[str]) -> bool:
    """True when the command line asks for JSON output (before any `--` end of options)."""
    for i, a in enumerate(args):
        if a == "--":
            return False
        if a in ("--format", "-f") and i + 1 < len(args):
            if args[i + 1] == "json":
                return True
        elif a in ("--format=json", "-fjson"):
            return True
    return False


def error_json(e: Any) -> str:
    """The JSON object an error is printed as (ErrorList: the first error plus all of them)."""
    first = e.errors[0] if isinstance(e, ErrorList) and e.errors else e
    doc: dict[str, Any] = {
        "error": {"code": first.code, "message": first.message, "hint": first.hint, "location": first.location}
    }
    if isinstance(e, ErrorList):
        doc["errors"] = [
            {"code": x.code, "message": x.message, "hint": x.hint, "location": x.location} for x in e.errors
        ]
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def unexpected(e: BaseException) -> RecipekitError:
    """The RecipekitError shown for an exception no module turned into one."""
    where = str(e.filename) if isinstance(e, OSError) and e.filename else None
    if isinstance(e, PermissionError) or (isinstance(e, OSError) and e.errno in (1, 13, 30)):
        return RecipekitError(
            code="permission-denied",
            exit_code=ExitCode.FAILURE,
            location=where,
            message=f"{e.strerror or e}: nothing was half-written",
            hint="check that the file and its folder are writable (chattr -i, chmod, mount options)",
        )
    if isinstance(e, OSError):
        return RecipekitError(
            code="os-error",
            exit_code=ExitCode.FAILURE,
            location=where,
            message=f"{e.strerror or e}",
            hint="check the path and the disk",
        )
    if isinstance(e, (RecursionError, MemoryError)):
        return RecipekitError(
            code="input-too-complex",
            exit_code=ExitCode.INVALID_INPUT,
            message=f"the input is too deeply nested or too large ({type(e).__name__})",
            hint="check the file given; recipekit's own files are small and shallow",
        )
    return RecipekitError(
        code="internal-error",
        exit_code=ExitCode.FAILURE,
        message=f"{type(e).__name__}: {str(e)[:300]}",
        hint="this is a bug in recipekit; RECIPEKIT_DEBUG=1 shows the traceback",
    )


def _run(args: list[str], as_json: bool) -> int:
    if not as_json:
        app(args=args, prog_name="recipe", standalone_mode=True)
        return 0
    # Not standalone: the parser hands its usage errors to us instead of printing them.
    try:
        rv = app(args=args, prog_name="recipe", standalone_mode=False)
    except typer.Abort:
        raise KeyboardInterrupt from None
    except typer.TyperException as e:  # the parser's UsageError, BadParameter, NoSuchOption, ...
        ctx = getattr(e, "ctx", None)
        raise RecipekitError(
            code="usage",
            message=e.format_message(),
            exit_code=ExitCode(getattr(e, "exit_code", ExitCode.INVALID_INPUT)),
            location=ctx.command_path if ctx is not None else None,
            hint=f"see `{ctx.command_path if ctx is not None else 'recipe'} --help`",
        ) from None
    return rv if isinstance(rv, int) else 0


def _check_command_names(args: list[str]) -> None:
    """An unknown (sub)command gets one error line with did-you-mean instead of click's three-line
    `No such command` (the leading words only: past the first option the parser decides)."""

    cmd: Any = typer.main.get_command(app)
    path = ["recipe"]
    for word in args:
        if word.startswith("-") or not hasattr(cmd, "list_commands"):  # typer vendors click: duck-typed
            return
        ctx = cmd.context_class(cmd, info_name=path[-1])
        sub = cmd.get_command(ctx, word)
        if sub is None:
            names = sorted(cmd.list_commands(ctx))
            raise RecipekitError(
                code="unknown-command",
                message=f"`{' '.join(path)}` has no command '{word}'",
                hint=did_you_mean(word, names) or f"commands: {', '.join(names)} (`{' '.join(path)} --help`)",
            )
        cmd, path = sub, [*path, word]


def dispatch(args: list[str], in_process: bool) -> int:
    """Run `args` and return the exit code when `in_process`, else exit with it (the console script)."""
    reset_json_result()
    if not in_process:
        interrupt.install()
    debug = os.environ.get("RECIPEKIT_DEBUG") == "1"
    as_json = wants_json(args)
    try:
        if os.environ.get("RECIPEKIT_REHEARSAL"):  # a rehearsal's child command (`restart`): its stand-in engine
            from recipekit.rehearse.engine import resume_from_env  # lazy: only inside a rehearsal

            resume_from_env()
        _check_command_names(args)
        code = _run(args, as_json)
    except SystemExit as e:  # click/typer exit
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if in_process:
            return code
        raise
    except ErrorList as e:
        if debug:
            raise
        for line in e.lines():
            print(line, file=sys.stderr)
        if as_json and not json_result_written():
            sys.stdout.write(error_json(e))
        code = int(e.exit_code)
    except RecipekitError as e:
        if debug:
            raise
        _print(e)
        if as_json and not json_result_written():
            sys.stdout.write(error_json(e))
        code = int(e.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = int(ExitCode.INTERRUPTED)
    except Exception as e:  # the last line of defence: no traceback for any input
        if debug:
            raise
        if interrupt.received():  # a Ctrl-C that a library turned into another error (numpy's import)
            print("interrupted", file=sys.stderr)
            code = int(ExitCode.INTERRUPTED)
        else:
            err = unexpected(e)
            _print(err)
            if as_json and not json_result_written():
                sys.stdout.write(error_json(err))
            code = int(err.exit_code)
    if in_process:
        return code
    sys.exit(code)


def _print(e: RecipekitError) -> None:
    print(e.one_line(), file=sys.stderr)
    for d in e.details:
        print(f"  {shown(d)}", file=sys.stderr)
