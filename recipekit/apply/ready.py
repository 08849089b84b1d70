"""Readiness: poll /health and the recipe's ready path until both answer 200, while watching
the server; a server that exits (or whose container stops) during start-up fails the step
with its last log lines."""

from __future__ import annotations

import re
import time
from typing import Any

from recipekit.apply.launch import alive
from recipekit.apply.runners.registry import runner_for
from recipekit.errors import ExitCode, RecipekitError

LOG_TAIL_LINES = 25


def _get(url: str, timeout: float = 2.0) -> int:
    import httpx  # lazy: backends import this module to render and lint

    try:
        return httpx.get(url, timeout=timeout).status_code
    except httpx.HTTPError:
        return 0


def healthy(base: str, ready_path: str = "/v1/models") -> bool:
    return _get(base + "/health") == 200 and _get(base + ready_path) == 200


def server_log_tail(rec: Any, n: int = LOG_TAIL_LINES) -> list[str]:
    try:
        return runner_for(rec).logs(rec, n)
    except RecipekitError:
        return []


RUN_MARK = "=== recipekit: start "  # the native runner writes it before each start (runners/native.py)
# The engine's own error lines, most telling first: argparse's usage error, then a raised exception.
CAUSES = (
    re.compile(r"error: (unrecognized arguments|argument |the following arguments)"),
    re.compile(r"^\S*(Error|Exception)\b.*:"),
    re.compile(r"\b(Error|error|Exception)\b"),
)


def this_run(lines: list[str]) -> list[str]:
    """The lines after the last start mark: the log is appended across runs, an earlier run's
    traceback is not this run's cause."""
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(RUN_MARK):
            return lines[i + 1 :]
    return lines


def cause_line(lines: list[str]) -> str:
    """The engine's own error line (the last of the most telling kind), or ''."""
    for pattern in CAUSES:
        hits = [x.strip() for x in lines if pattern.search(x.strip())]
        if hits:
            return hits[-1][:300]
    return ""


def wait_ready(ctx: Any, base: str, ready_path: str, timeout_s: float) -> dict:
    rec = ctx.server
    if rec is None:
        raise RecipekitError(
            code="no-server",
            exit_code=ExitCode.NOT_FOUND,
            message="no server of this recipe is running",
            hint="run the launch step first",
        )
    t0 = time.monotonic()
    last_note = t0
    while True:
        if healthy(base, ready_path):
            dt = time.monotonic() - t0
            ctx.log(f"  ready after {dt:.1f} s: {base}{ready_path}")
            return {"ready_s": round(dt, 1), "server_id": runner_for(rec).identity(rec), "url": base}
        if not alive(rec):
            lines = this_run(server_log_tail(rec))
            cause = cause_line(lines)
            raise RecipekitError(
                code="server-died",
                exit_code=ExitCode.FAILURE,
                message="the server exited during start-up" + (f": {cause}" if cause else ""),
                hint=f"full log: {rec.log or 'recipe logs'}",
                details=[f"last {len(lines)} lines of this run's log:", *("| " + x for x in lines)],
            )
        if time.monotonic() - t0 > timeout_s:
            raise RecipekitError(
                code="server-not-ready",
                exit_code=ExitCode.FAILURE,
                message=f"{base}{ready_path} did not answer within {timeout_s} s",
                hint=f"see the log ({rec.log or 'recipe logs'}); the server was stopped",
            )
        if time.monotonic() - last_note > 15:
            last_note = time.monotonic()
            ctx.log(f"  still starting ({time.monotonic() - t0:.0f} s)...")
        time.sleep(1.0)
