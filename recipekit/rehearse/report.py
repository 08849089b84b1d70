"""The rehearsal's result: one row per step of the recipe's plan (and each post-apply command),
real or stand-in (and what stood in), its result and time; printed as a table or JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

REAL = "real"
STANDIN = "stand-in"
NOT_REHEARSABLE = "not rehearsable"

OK = "ok"
VERIFIED = "verified"  # an earlier rehearsal's stamp still verifies (a warm run)
FAILED = "FAIL"
NOT_REACHED = "not reached"
SKIPPED = "SKIP"  # a gate the recipe says means nothing against a stand-in model (its reason is the note)
# a post-apply command (a child `recipe ...`) that ran out of time, or failed without an error[...] line
POST_APPLY_TIMEOUT_CODE = "rehearse-post-apply-timeout"
POST_APPLY_FAILED_CODE = "rehearse-post-apply-failed"


@dataclass
class Row:
    step: str
    kind: str  # REAL | STANDIN | NOT_REHEARSABLE
    standin: str = ""  # what stood in (or why it cannot be rehearsed)
    result: str = NOT_REACHED
    seconds: Optional[float] = None
    error: Optional[str] = None  # error[code] message of a failed step


@dataclass
class Rehearsal:
    recipe: str
    layout: Optional[str]
    node: Optional[int]
    home: str  # the RECIPEKIT_HOME the rehearsal's state lives in
    rows: list[Row] = field(default_factory=list)
    total_s: float = 0.0
    error_code: Optional[str] = None  # the code of the first failure

    @property
    def ok(self) -> bool:
        """Every step passed or was verified; a step marked not rehearsable (it ran, but what it
        acts on is not here) is named in the verdict, never counted as passed."""
        return self.error_code is None and all(r.result in (OK, VERIFIED, NOT_REHEARSABLE, SKIPPED) for r in self.rows)

    def not_rehearsed(self) -> list[str]:
        return [r.step for r in self.rows if r.result in (NOT_REHEARSABLE, SKIPPED)]

    def row(self, step: str) -> Row:
        return next(r for r in self.rows if r.step == step)

    def to_dict(self) -> dict:
        return {"schema_version": 1, **asdict(self), "ok": self.ok}


def table(reh: Rehearsal) -> list[str]:
    """The rows as aligned text lines; what stood in and each error follow as numbered notes."""
    head = ("step", "real/stand-in", "time", "result")
    notes: list[str] = []

    def note(text: str) -> str:
        notes.append(text)
        return f" [{len(notes)}]"

    body = [
        (
            r.step,
            r.kind + (note(r.standin) if r.standin else ""),
            "" if r.seconds is None else f"{r.seconds:.1f} s",
            r.result + (note(r.error) if r.error else ""),
        )
        for r in reh.rows
    ]
    w = [max(len(x[i]) for x in [head, *body]) for i in range(3)]
    lines = [f"{a:<{w[0]}}  {b:<{w[1]}}  {c:>{w[2]}}  {d}".rstrip() for a, b, c, d in [head, *body]]
    lines += [f"[{i}] {t}" for i, t in enumerate(notes, 1)]
    skipped = reh.not_rehearsed()
    verdict = (
        "rehearsal passed" + (f" (not rehearsable here: {', '.join(skipped)})" if skipped else "")
        if reh.ok
        else f"rehearsal FAILED ({reh.error_code or 'a step failed'})"
    )
    lines.append(f"{verdict} in {reh.total_s:.1f} s; state in {reh.home}")
    return lines
