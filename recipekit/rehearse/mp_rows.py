"""An mp layout's rehearsal rows: every node of the layout on this machine, on loopback.

Before node 0's plan runs, each worker node's own rendered serve command (`--node-rank R
--headless --master-addr ... --master-port ...`) starts natively under the stand-in engine
(recipekit/rehearse/standin_engine.py), by apply's native runner and recorded as that node's
deployment (mp_records.py), so the post-apply commands find it as a node its own apply started;
it reports to the head's rendezvous at
`--master-addr:--master-port` and lives as long as the head. Node 0 then runs apply's plan as
any rehearsal does: its stand-in engine waits for the workers (and fails with
`error[rehearse-mp-rendezvous-timeout]` when one never comes) before it serves, so readiness and
smoke go through the head only after the rendezvous.

Rows: `node R launch` (per worker: its argv, what stood in), `rendezvous` (which ranks joined the
head, how many seconds after they started, read from each worker's own log; `rendezvous (after
restart)`: the workers started for a restarted head, from what their newest start logged) and `mp stop` (node
0's deployment stopped, by the post-apply `stop` of the whole layout or here, then every worker
gone, by that `stop` or by itself because its head closed the rendezvous connection; a worker
still alive is killed and the row fails).

Declared settings (`mp_settings`): the head's address and each node's address setting (per_node
`${NAME}` references) made 127.0.0.<rank+1>, the rendezvous port a free loopback port, and the
setting a layout's `*_SOCKET_IFNAME` env names made `lo`. The
workers run natively, not in the recipe's container: the layout gives every node the same
container name and port mapping, which one dockerd cannot hold twice.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from recipekit import bounded
from recipekit.apply.launch import alive
from recipekit.apply.server import ServerRecord
from recipekit.backends.base import argv_of, serve_groups
from recipekit.deployment import Deployment
from recipekit.errors import ExitCode, RecipekitError
from recipekit.multinode.forms import FORMS
from recipekit.multinode.nodes import NodeConfig
from recipekit.rehearse.mp_records import forget, start_worker, wait_ended, worker_state
from recipekit.rehearse.report import FAILED, OK, REAL, STANDIN, Rehearsal, Row
from recipekit.rehearse.standin_engine import ENV_RENDEZVOUS_TIMEOUT
from recipekit.rehearse.standin_launch import StandinContext, Substitution, standin_launch_argv

_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
# a worker waits this long for its head: node 0's fetch, checkpoint steps and engine start come first
WORKER_WAIT_S = 1800
# after node 0's deployment stops, its workers end by themselves within this
WORKER_END_S = 30
START_MARK = "=== recipekit: start "  # the native runner's line before each start (apply/runners/native.py)
_JOINED = re.compile(r"rendezvous: rank (\d+) joined the head at (\S+) after ([0-9.]+) s")


def is_mp(dep: Deployment) -> bool:
    ml = (dep.recipe.multinode or {}).get(dep.multinode or "")
    return ml is not None and ml.backend == "mp"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mp_settings(dep: Deployment, port: Optional[int] = None) -> list[tuple[str, str]]:
    """(`NAME=VALUE`, why) making every node's address loopback and the rendezvous port free."""
    ml = dep.recipe.multinode[dep.multinode or ""]
    out: dict[str, tuple[str, str]] = {}
    for flag, template, _ in FORMS["mp"]:
        m = _REF.match(template or "")
        if m and flag == "--master-addr":
            out[m.group(1)] = ("127.0.0.1", "the head's rendezvous address, on loopback here")
        elif m and flag == "--master-port":
            out[m.group(1)] = (str(port or _free_port()), "a free loopback port for the rendezvous")
    for name, value in (ml.env or {}).items():
        m = _REF.match(str(value or ""))
        # GLOO_/NCCL_SOCKET_IFNAME name the interface between the rigs; torch's gloo refuses a name
        # this machine lacks ("Unable to find address for: <cluster-interface>", measured 2026-12-02)
        if m and name.endswith("_SOCKET_IFNAME") and m.group(1) not in out:
            out[m.group(1)] = ("lo", "the interface between the nodes: every node is on this machine's loopback")
    for rank, pn in enumerate(ml.per_node or []):
        refs: list[object] = [*(pn.settings or {}).values(), *(pn.env or {}).values()]
        for ref in refs:
            m = _REF.match(str(ref or ""))
            if m and m.group(1) not in out:
                out[m.group(1)] = (f"127.0.0.{rank + 1}", f"node {rank}'s address, on loopback here")
    return [(f"{k}={v}", why) for k, (v, why) in out.items()]


def rendered_serve(node: NodeConfig) -> list[str]:
    """The node's serve command as the layout renders it."""
    return argv_of([w for g in serve_groups(node.eff) for w in g], node.eff)


def worker_command(node: NodeConfig, standin: StandinContext) -> tuple[list[str], list[Substitution]]:
    """The worker's rendered serve command, run natively by the stand-in engine."""
    words = rendered_serve(node)
    if not (words and Path(words[0]).name == "vllm" and words[1:2] == ["serve"]):
        raise RecipekitError(code="rehearse-launch-invalid", message=f"{node.label}: not a `vllm serve` command")
    cmd, subs = standin_launch_argv(
        words, runner="native", standin=standin, env={ENV_RENDEZVOUS_TIMEOUT: str(WORKER_WAIT_S)}
    )
    runner = str(node.eff.recipe.launch.runner)
    if runner != "native":
        subs.insert(
            0,
            Substitution(
                f"{runner} launch of node {node.role.rank}",
                "its serve command natively",
                "every node of the layout has the same container name and port: one dockerd holds one",
            ),
        )
    return cmd, subs


def joined(log_text: str) -> list[tuple[int, str, float]]:
    """(rank, head address, seconds after the worker started) of each rendezvous a worker log reports."""
    return [(int(m.group(1)), m.group(2), float(m.group(3))) for m in _JOINED.finditer(log_text)]


@dataclass
class Worker:
    node: NodeConfig
    rec: ServerRecord  # the node's deployment record (mp_records.py)
    row: Row
    t0: float = field(default_factory=time.monotonic)

    @property
    def rank(self) -> int:
        return self.node.role.rank

    @property
    def log(self) -> Path:
        return Path(self.rec.log or "")

    def running(self) -> bool:
        return alive(self.rec)


def _log_text(path: Path) -> str:
    """The end of a worker's log (the rendezvous line is among its first; the log stays short)."""
    try:
        return bounded.read_tail(path, "worker log", 1 << 16).decode(errors="replace")
    except (OSError, RecipekitError):
        return ""


def _since_start(log_text: str) -> str:
    """The part of a node's log its newest start wrote (the native runner heads each start with a
    `=== recipekit: start` line; a restarted node appends to the same log)."""
    i = log_text.rfind(START_MARK)
    return log_text[i:] if i >= 0 else log_text


def _tail(path: Path) -> str:
    try:
        lines = bounded.read_tail(path, "worker log", 4096).decode(errors="replace").strip().splitlines()
    except (OSError, RecipekitError):
        return ""
    return " | ".join(lines[-3:])


def _failed(code: str, message: str, hint: str = "") -> RecipekitError:
    return RecipekitError(code=code, exit_code=ExitCode.FAILURE, message=message, hint=hint or None)


def _fail(reh: Rehearsal, row: Row, seconds: float, e: RecipekitError) -> None:
    row.seconds, row.result, row.error = round(seconds, 1), FAILED, f"error[{e.code}] {e.message}"
    reh.error_code = reh.error_code or e.code


class MpNodes:
    """The worker nodes of an mp layout: started before node 0's plan, checked and stopped after."""

    def __init__(
        self,
        nodes: list[NodeConfig],
        standin: StandinContext,
        reh: Rehearsal,
        log: Callable[[str], None],
        settings: list[tuple[str, str]] = (),  # type: ignore[assignment]
    ):
        self.nodes, self.standin, self.reh, self.log = nodes, standin, reh, log
        self.settings = list(settings)
        self.workers: list[Worker] = []

    def start(self, again: bool = False) -> None:
        """Start every worker node as a deployment node of its own (mp_records.py: the native
        runner, the record apply writes for that node). `again`: for a head that restarts: a
        worker ends with its head, so a new one waits for the restarted head's rendezvous."""
        for n in self.nodes[1:]:
            t0 = time.monotonic()
            row = Row(step=f"node {n.role.rank} launch" + (" (for restart)" if again else ""), kind=STANDIN)
            self.reh.rows.append(row)
            cmd, subs = worker_command(n, self.standin)
            rec = start_worker(n, cmd, rendered_serve(n), self.log)
            self.workers.append(Worker(n, rec, row, t0))
            sets = [Substitution(s.split("=", 1)[0], s.split("=", 1)[1], why) for s, why in self.settings]
            row.standin = (
                f"{n.label}'s rendered serve command, started by apply's native runner and recorded as "
                f"that node's deployment ({worker_state(n) / 'server.json'}, log {rec.log}); "
                + "; ".join(dict.fromkeys(s.line() for s in [*sets, *subs]))
            )
            row.seconds, row.result = round(time.monotonic() - t0, 1), OK
            self.log(f"node {n.role.rank}: stand-in worker started ({rec.label}, log {rec.log})")

    def check_rendezvous(self, again: bool = False) -> None:
        """The `rendezvous` row: every worker's log reports it joined the head (node 0's plan ran).
        `again`: the `rendezvous (after restart)` row, of the workers started for the restarted head."""
        row = Row(step="rendezvous" + (" (after restart)" if again else ""), kind=REAL)
        self.reh.rows.append(row)
        if self.reh.error_code is not None and not self.workers:
            return
        latest = list({w.rank: w for w in self.workers}.values())  # a rank's newest worker
        got = {w.rank: joined(_since_start(_log_text(w.log))) for w in latest}
        missing = [w for w in latest if not got[w.rank]]
        row.standin = "the stand-in engine's rendezvous at --master-addr:--master-port: " + (
            "; ".join(
                f"rank {r} joined the head at {j[0][1]} {j[0][2]:.1f} s after it started" for r, j in got.items() if j
            )
            or "no worker joined"
        )
        row.seconds = max((j[0][2] for j in got.values() if j), default=0.0)
        if missing:
            why = "; ".join(
                f"rank {w.rank} ({'exited' if not w.running() else 'still waiting'}: {_tail(w.log)})" for w in missing
            )
            _fail(
                self.reh,
                row,
                row.seconds,
                _failed(
                    "rehearse-mp-rendezvous-timeout",
                    f"worker(s) never joined the head: {why}",
                    "see " + ", ".join(str(w.log) for w in missing),
                ),
            )
            return
        row.result = OK

    def stop(self, head_stop: Optional[Callable[[], str]] = None) -> None:
        """The `mp stop` row: node 0 stopped (by `head_stop` when post-apply did not), then every
        worker ends by itself within WORKER_END_S; one that does not is killed and the row fails."""
        row = Row(step="mp stop", kind=REAL)
        self.reh.rows.append(row)
        t0 = time.monotonic()
        head = head_stop() if head_stop is not None else "stopped by the post-apply `stop`"
        ended, killed = [], []
        for w in self.workers:
            if wait_ended(w.rec, max(1.0, WORKER_END_S - (time.monotonic() - t0))):
                ended.append(f"rank {w.rank} ended")
                forget(w.node, w.rec, self.log)  # its record names a process that is gone
                continue
            was_joined = bool(joined(_log_text(w.log)))
            self._kill(w)
            if was_joined:
                killed.append(w.rank)
            else:  # still waiting for a head: the rendezvous row already failed
                ended.append(f"rank {w.rank} killed (it never joined)")
        row.seconds = round(time.monotonic() - t0, 1)
        row.standin = f"node 0: {head}; workers ended with their head: {', '.join(ended) or 'none'}"
        if killed:
            _fail(
                self.reh,
                row,
                row.seconds,
                _failed(
                    "rehearse-mp-node-failed",
                    f"worker rank(s) {killed} still ran {WORKER_END_S} s after node 0 stopped (killed)",
                    "see " + ", ".join(str(w.log) for w in self.workers if w.rank in killed),
                ),
            )
            return
        row.result = OK

    def kill(self) -> None:
        """Every worker still running ends (the rehearsal failed or was interrupted)."""
        for w in self.workers:
            if w.running():
                self._kill(w)

    def _kill(self, w: Worker) -> None:
        forget(w.node, w.rec, self.log, timeout_s=2.0)
