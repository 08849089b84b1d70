"""Readiness: poll until the server this deployment started listens on its port, answers
/health and the recipe's ready path with 200, and lists the recipe's served model name in
/v1/models, while watching the server; a server that exits (or whose container stops) during
start-up fails the step with its last log lines. A port held by another program fails at once
(`port-taken`, no request sent to it), and so does our server listing another model name
(`server-wrong-model`) or answering /v1/models with something that is not a model list. Every
request is bounded in time and bytes (`http_probe`)."""

from __future__ import annotations

import re
import time
from typing import Any, Optional

from recipekit.apply import http_probe
from recipekit.apply.identity import served_name_of, verify_server
from recipekit.apply.launch import alive
from recipekit.apply.runners.registry import runner_for
from recipekit.errors import ExitCode, RecipekitError
from recipekit.textsafe import shown

LOG_TAIL_LINES = 25
PROBE_TIMEOUT_S = 2.0


def healthy(base: str, ready_path: str = "/v1/models") -> bool:
    """/health and `ready_path` answer 200 (bounded; whoever listens: see identity for whose it is)."""
    return all(
        http_probe.get(base + p, timeout_s=PROBE_TIMEOUT_S, max_bytes=http_probe.DEFAULT_MAX_BYTES).ok
        for p in ("/health", ready_path)
    )


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


_LOG_PREFIX = re.compile(r"^(\([A-Za-z]+ pid=\d+\) )?(INFO|WARNING|DEBUG) \d\d-\d\d [\d:]+ (\[[^\]]*\] )?")


def _log_gist(line: str, width: int = 120) -> str:
    """A server log line without vLLM's process/level/time/source prefix, cut to `width`."""
    line = _LOG_PREFIX.sub("", line)
    return line if len(line) <= width else line[: width - 1] + "…"


READY_NOTE_EVERY_S = 5.0  # a line this often while the server starts: no long silence in a log


def wait_ready(ctx: Any, base: str, ready_path: str, timeout_s: float, served_name: Optional[str] = None) -> dict:
    """Wait for our server at `base`; the result records what was observed (owner, listeners, models)."""
    rec = ctx.server
    if rec is None:
        raise RecipekitError(
            code="no-server",
            exit_code=ExitCode.NOT_FOUND,
            message="no server of this recipe is running",
            hint="run the launch step first",
        )
    name = served_name or served_name_of(ctx.eff)
    t0 = time.monotonic()
    last_note = t0
    while True:
        v = verify_server(rec, base, name, also=("/health", ready_path))
        if v.ok:
            dt = time.monotonic() - t0
            ctx.log(f"  ready after {dt:.1f} s: {base}{ready_path} ({v.owner} listens, serves {name})")
            return {
                "ready_s": round(dt, 1),
                "server_id": runner_for(rec).identity(rec),
                "url": base,
                "observed": v.to_dict(),
            }
        if v.status in ("foreign", "wrong-model", "unreadable"):
            raise v.error(base, name)
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
                message=f"{base}{ready_path} did not answer within {timeout_s} s (last: {v.detail or v.status})",
                hint=f"see the log ({rec.log or 'recipe logs'}); the server was stopped",
            )
        if time.monotonic() - last_note >= READY_NOTE_EVERY_S:
            last_note = time.monotonic()
            doing = [x.strip() for x in this_run(server_log_tail(rec, 5)) if x.strip()]
            ctx.log(
                f"  waiting for {base}{ready_path} to answer ({time.monotonic() - t0:.0f} s elapsed, "
                f"limit {timeout_s:.0f} s; last: {v.detail or v.status})"
                + (f"; server log: {shown(_log_gist(doing[-1]))}" if doing else "")
            )
        time.sleep(1.0)
