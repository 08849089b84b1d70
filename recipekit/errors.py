"""Errors users see: a kebab-case code, where, what, a hint, and a named exit code.

Every user-facing failure raises `RecipekitError` (or `ErrorList` for several at once).
The CLI prints one line per error and exits with `exit_code`; no traceback unless
RECIPEKIT_DEBUG=1. Every code is a row of recipekit/error_codes.py (its exit code, its default
hint, shown when a raise gives none).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from recipekit.error_codes import ExitCode, lookup
from recipekit.textsafe import shown

__all__ = ["ErrorList", "ExitCode", "RecipekitError", "did_you_mean"]


@dataclass
class RecipekitError(Exception):
    code: str
    message: str
    hint: str | None = None
    location: str | None = None  # "file:line", "$.json.path", or "file:line $.path"
    exit_code: ExitCode = ExitCode.INVALID_INPUT
    details: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.hint is None:
            row = lookup(self.code)
            self.hint = row.hint if row is not None and row.hint else None
        Exception.__init__(self, self.one_line())

    def one_line(self) -> str:

        where = f" {shown(self.location)}:" if self.location else ""
        hint = f" (hint: {shown(self.hint)})" if self.hint else ""
        return f"error[{shown(self.code)}]{where} {shown(self.message)}{hint}"

    def __str__(self) -> str:  # dataclass would otherwise print the fields
        return self.one_line()

    def to_dict(self) -> dict:
        return {
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
            "location": self.location,
            "exit_code": int(self.exit_code),
        }


class ErrorList(RecipekitError):
    """Several problems found at once (lint, validation): one line each."""

    def __init__(self, errors: Sequence[RecipekitError]):
        self.errors = list(errors)
        first = self.errors[0] if self.errors else None
        super().__init__(
            code=first.code if first else "no-errors",
            message=f"{len(self.errors)} problem(s)",
            exit_code=max((e.exit_code for e in self.errors), default=ExitCode.INVALID_INPUT),
        )
        self.hint = None  # each error carries its own hint; the list has none

    def lines(self) -> list[str]:
        return [e.one_line() for e in self.errors]

    def one_line(self) -> str:
        return "\n".join(e.one_line() for e in getattr(self, "errors", [])) or "no errors"


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """A 'did you mean' suggestion for an unknown key or value, or None."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None
