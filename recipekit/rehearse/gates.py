"""The recipe's gates after a rehearsal's launch: each gate's `rehearsal` entry (recipe data) says
whether it means anything against the stand-in model and with which thresholds. The applicable
ones run as `recipe gate` would for a user (a child command finding the deployment without
--url); the others become SKIP rows with the recipe's reason. One row per gate."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from recipekit.bounded import read_json
from recipekit.deployment import Deployment
from recipekit.rehearse.report import (
    FAILED,
    NOT_REHEARSABLE,
    OK,
    POST_APPLY_FAILED_CODE,
    POST_APPLY_TIMEOUT_CODE,
    SKIPPED,
    STANDIN,
    Rehearsal,
    Row,
)
from recipekit.textsafe import shown

NO_ENTRY = "the recipe does not say whether this gate means anything against a stand-in model (gates[].rehearsal)"
GATES_DIR = "rehearsal-gates"
REQUEST_TIMEOUT_S = 120  # one request of a gate against the tiny stand-in


@dataclass(frozen=True)
class GatePlan:
    gate: str
    applies: bool
    reason: str
    thresholds: dict  # the rehearsal's thresholds over the recipe's (passed as -t GATE.KEY=VALUE)


def plan(dep: Deployment) -> list[GatePlan]:
    """One entry per recipe gate, in the recipe's order."""
    out = []
    for g in dep.recipe.gates:
        r = g.rehearsal
        if r is None:
            out.append(GatePlan(g.id, False, NO_ENTRY, {}))
        else:
            out.append(GatePlan(g.id, r.applies, r.reason.strip(), dict(r.thresholds)))
    return out


def gate_argv(where: list[str], plans: list[GatePlan], out_dir: Path) -> list[str]:
    """`recipe gate` for the applicable gates, with the rehearsal's thresholds."""
    run = [p for p in plans if p.applies]
    argv = [sys.executable, "-m", "recipekit", "gate", *where, "--only", ",".join(p.gate for p in run)]
    for p in run:
        for k, v in p.thresholds.items():
            argv += ["-t", f"{p.gate}.{k}={json.dumps(v)}"]
    return argv + ["--timeout", str(REQUEST_TIMEOUT_S), "--out", str(out_dir), "--format", "json"]


def _standin_note(p: GatePlan) -> str:
    th = ", ".join(f"{k}={v}" for k, v in p.thresholds.items())
    return f"against the stand-in model{f' with {th}' if th else ''}: {p.reason}"


def rehearse_gates(
    where: list[str], dep: Deployment, reh: Rehearsal, timeout_s: float, log: Callable[[str], None]
) -> None:
    """Append a row per gate: the applicable ones run in one child `recipe gate`, the rest SKIP."""
    plans = plan(dep)
    rows = {}
    for p in plans:
        row = Row(step=f"gate {p.gate}", kind=STANDIN if p.applies else NOT_REHEARSABLE)
        row.standin = _standin_note(p) if p.applies else p.reason
        if not p.applies:
            row.result = SKIPPED
        rows[p.gate] = row
        reh.rows.append(row)
    run = [p for p in plans if p.applies]
    if not run or reh.error_code is not None:
        return
    out_dir = Path(reh.home) / GATES_DIR
    (out_dir / "gates.json").unlink(missing_ok=True)  # a warm rehearsal's earlier result is not this one's
    t0 = time.monotonic()
    try:
        r = subprocess.run(
            gate_argv(where, run, out_dir),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            cwd=reh.home,
        )
        rc, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired:
        rc, err = 124, f"error[{POST_APPLY_TIMEOUT_CODE}] gate took over {timeout_s:.0f} s"
    for line in err.splitlines()[-20:]:
        log(f"  gate: {shown(line)}")
    doc = _document(out_dir)
    results = {g["id"]: g for g in (doc or {}).get("gates", [])}
    last = next((ln for ln in reversed(err.splitlines()) if ln.startswith("error[")), f"exit {rc}")
    for p in run:
        row, g = rows[p.gate], results.get(p.gate)
        if g is None:  # the child never judged it (could not start, find the server, or timed out)
            row.result, row.error = FAILED, last
            row.seconds = round(time.monotonic() - t0, 1)
            continue
        row.seconds = round(float(g.get("seconds") or 0.0), 1)
        row.result = OK if g["status"] == "PASS" else FAILED
        if g["status"] != "PASS":
            row.error = f"{g['status']}: {g.get('summary', '')}"
    if any(rows[p.gate].result != OK for p in run):
        reh.error_code = "gate-failed" if doc is not None else (_code(last) or POST_APPLY_FAILED_CODE)


def _document(out_dir: Path) -> Optional[dict]:
    path = out_dir / "gates.json"
    return read_json(path, "gate results", 16 << 20) if path.is_file() else None


def _code(line: str) -> Optional[str]:
    return line[6 : line.index("]")] if line.startswith("error[") and "]" in line else None
