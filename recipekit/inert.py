"""Rules for values that reach a rendered artifact (.env, env file, script, docker argv).

A rendered artifact must yield the literal values however it is used: executed, sourced with
`set -a; . file` by bash, dash or busybox sh, read by recipekit's .env parser, or handed to
`docker --env-file`. So:
- no value carries NUL or another control character (`check_value`, at render time);
- a .env line is unquoted only when every character is inert in a POSIX shell assignment, else
  single-quoted; a value that single quotes cannot carry is double-quoted only when it holds
  nothing a shell expands inside double quotes (`$`, backquote, backslash), else refused
  (`dotenv_line`);
- `docker --env-file` has no quoting at all: each line is NAME=VALUE taken verbatim up to the end
  of the line (recipekit/docker_envfile.py, with its source), so a value is written as is and
  refused when it holds a line break, makes a line longer than docker's scanner reads, or starts
  with whitespace (`docker_env_line`).
"""

from __future__ import annotations

import re
from typing import Optional

from recipekit.docker_envfile import MAX_LINE_BYTES, RULES
from recipekit.errors import RecipekitError

# characters with no meaning to sh in the value of an assignment (no expansion, globbing,
# quoting, tilde, operator or word splitting)
SHELL_INERT = re.compile(r"^[A-Za-z0-9_@%+=:,./\-]+$")
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_DOUBLE_QUOTE_ACTIVE = re.compile(r"[$`\\\"!]")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_value(where: str, value: object) -> str:
    """`value` as text when it holds no control character (NUL, newline, ESC, ...)."""
    text = str(value)
    m = _CONTROL.search(text)
    if m:
        raise RecipekitError(
            code="value-control-char",
            location=where,
            message=f"value holds the control character {ascii(m.group(0))} at offset {m.start()}",
            hint="rendered files and commands carry plain text only; remove it",
        )
    return text


def check_name(where: str, name: str) -> str:
    if not ENV_NAME.match(name):
        raise RecipekitError(
            code="env-name-invalid",
            location=where,
            message=f"{ascii(name)} is not an environment variable name",
            hint="letters, digits and _, not starting with a digit",
        )
    return name


def dotenv_line(name: str, value: str) -> str:
    """NAME=VALUE that recipekit's parser and every POSIX shell read back as the same literal."""
    check_name(name, name)
    check_value(name, value)
    if SHELL_INERT.match(value):
        return f"{name}={value}"
    if "'" not in value:
        return f"{name}='{value}'"
    if not _DOUBLE_QUOTE_ACTIVE.search(value):
        return f'{name}="{value}"'
    raise RecipekitError(
        code="env-value-unrepresentable",
        location=name,
        message='the value holds a single quote and one of $ ` \\ " !',
        hint="such a value cannot be written to a .env file that shells read literally",
    )


def docker_env_line(name: str, value: Optional[str]) -> str:
    """NAME=VALUE for `docker --env-file` (no quoting: the value is taken verbatim).

    docker's reading of the file is data in recipekit/docker_envfile.py (docker CLI 28,
    pkg/kvfile/kvfile.go). `value=None` writes NAME alone: docker passes the host's value then,
    or leaves NAME out when the host has none (the meaning of `-e NAME`)."""
    check_name(name, name)
    if value is None:
        return name
    check_value(name, value)
    if value[:1].isspace():
        # docker keeps it (rule verbatim), but the line then reads like an indented one to a human
        # and to compose-style parsers that trim; refused rather than lost on the next edit
        raise RecipekitError(
            code="env-value-unrepresentable",
            location=name,
            message="the value starts with whitespace",
            hint="pass it with -e instead",
        )
    line = f"{name}={value}"
    try:
        size = len(line.encode("utf-8"))
    except UnicodeEncodeError:
        raise RecipekitError(
            code="env-value-unrepresentable",
            location=name,
            message="the value is not valid UTF-8 text",
            hint=f"docker --env-file reads UTF-8 only ({RULES['utf8'].source})",
        ) from None
    if size > MAX_LINE_BYTES:
        raise RecipekitError(
            code="env-value-unrepresentable",
            location=name,
            message=f"the line is {size} bytes, more than the {MAX_LINE_BYTES} docker --env-file reads",
            hint=f"docker's scanner fails on longer lines ({RULES['max-line'].source}); pass it with -e",
        )
    return line


def check_argv(where: str, argv: list[str]) -> list[str]:
    """Every word of a rendered command free of control characters."""
    for i, w in enumerate(argv):
        check_value(f"{where} argv[{i}]", w)
    return argv
