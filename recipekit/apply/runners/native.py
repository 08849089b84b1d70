"""The native runner: the engine as a process in its own venv, in a session of its own.

start() launches argv with setsid (a new process group), stdout+stderr appended to a log file,
and returns a NativeServer record with the pid, its process group, its start time
(/proc/<pid>/stat field 22) and its /proc/<pid>/cmdline. A record is "ours" only while a
process with that pid has that process group, start time and command line (ProcessIdentity),
so a reused pid is never signalled. stop() sends SIGINT to the
process group, then SIGTERM, then SIGKILL, each after a timeout, until no process of the group
is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from recipekit.apply.runners.base import LaunchRequest, tail
from recipekit.apply.server import NativeServer

Log = Callable[[str], None]


def read_cmdline(pid: int) -> Optional[list[str]]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if not raw:
        return None  # a zombie or a kernel thread
    return raw.rstrip(b"\0").decode(errors="replace").split("\0")


def _stat_fields(pid: int) -> Optional[list[str]]:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after its closing parenthesis
    rest = raw[raw.rfind(")") + 2 :].split()
    return rest  # rest[0] is field 3 (state)


@dataclass(frozen=True)
class ProcessIdentity:
    """What /proc says about a live process: enough to tell it from a later one with its pid."""

    pid: int
    pgid: int  # /proc/<pid>/stat field 5
    start_time: int  # field 22: clock ticks after boot
    cmdline: Optional[list[str]]

    @classmethod
    def of(cls, pid: int) -> Optional["ProcessIdentity"]:
        """None when no live (non-zombie) process has this pid."""
        f = _stat_fields(pid)
        if not f or f[0] in ("Z", "X"):
            return None
        return cls(pid=pid, pgid=int(f[2]), start_time=int(f[19]), cmdline=read_cmdline(pid))


def start_time(pid: int) -> Optional[int]:
    f = _stat_fields(pid)
    return int(f[19]) if f else None  # field 22


def process_state(pid: int) -> Optional[str]:
    f = _stat_fields(pid)
    return f[0] if f else None


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is pgid."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        f = _stat_fields(int(d))
        if f and int(f[2]) == pgid and f[0] != "Z":
            out.append(int(d))
    return out


def _reap(pid: int) -> None:
    """Collect our own child's exit status so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def start(argv: list[str], env: dict[str, str], log_path: Path, cwd: Optional[Path] = None) -> NativeServer:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab", buffering=0) as log:
        log.write(
            f"\n=== recipekit: start {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: {' '.join(argv)}\n".encode()
        )
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(cwd) if cwd else None,
            start_new_session=True,
            close_fds=True,
        )
    return NativeServer(
        pid=proc.pid,
        pgid=proc.pid,
        start_time=start_time(proc.pid),
        cmdline=_settled_cmdline(proc.pid) or list(argv),
        argv=list(argv),
        log=str(log_path),
        started_at=time.time(),
    )


def _settled_cmdline(pid: int, timeout_s: float = 5.0) -> Optional[list[str]]:
    """The command line once exec has finished setting it up. Popen returns when the exec
    closed its error pipe, which the kernel does before it places the new argv: for a moment
    /proc/<pid>/cmdline reads empty (and a script's interpreter line is not there yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        cmd = read_cmdline(pid)
        if cmd or time.monotonic() > deadline or process_state(pid) in (None, "Z", "X"):
            return cmd
        time.sleep(0.01)


def mismatch(rec: NativeServer) -> Optional[str]:
    """Why the process at the record's pid is not the one apply started (None: it is).

    All four must hold: pid and pgid are recorded, the pid's process group is the recorded pgid,
    its start time (/proc/<pid>/stat field 22) and its command line are the recorded ones."""
    if rec.pid <= 1 or rec.pgid <= 1:
        return "the record has no valid pid/pgid"
    if rec.start_time is None:
        return "the record has no start time"
    _reap(rec.pid)
    now = ProcessIdentity.of(rec.pid)
    if now is None:
        return "no such process"
    if now.start_time != rec.start_time:
        return f"pid {rec.pid} has another start time (pid reused)"
    if now.pgid != rec.pgid:
        return f"pid {rec.pid} is in process group {now.pgid}, not {rec.pgid}"
    if now.cmdline != rec.cmdline:
        return f"pid {rec.pid} runs another command line"
    return None


def is_ours(rec: NativeServer) -> bool:
    """The process in the record is alive and is the one we started (pid, pgid, start time, cmdline)."""
    return mismatch(rec) is None


def group_alive(rec: NativeServer) -> bool:
    return rec.pgid > 1 and bool(group_members(rec.pgid))


def stop(rec: NativeServer, timeout_s: float = 20.0, log: Log = lambda s: None) -> str:
    """Stop the server of `rec` and every process of its group. Returns what happened.

    The group is signalled only while its leader is the recorded process (see `mismatch`); a
    record that matches no live process, or a live process that is not ours, gets no signal."""
    why = mismatch(rec)
    if why == "no such process":
        left = group_members(rec.pgid) if group_alive(rec) else []
        return "not running" + (
            f" (leader gone; {len(left)} process(es) of group {rec.pgid} left alone)" if left else ""
        )
    if why is not None:
        return f"not running (pid reused by another program; left alone: {why})"
    pgid = rec.pgid
    # Once the leader exits, the group id stays ours while any member is left: the kernel does
    # not hand out an id that a live group still carries, and no process outside our session
    # can join the group.
    for sig, wait in ((signal.SIGINT, timeout_s), (signal.SIGTERM, timeout_s / 2), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        log(f"sent {sig.name} to process group {pgid}")
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(rec.pid)
            if not group_members(pgid):
                return f"stopped ({sig.name})"
            time.sleep(0.2)
    _reap(rec.pid)
    return "stopped" if not group_members(pgid) else "still running after SIGKILL"


class NativeRunner:
    """The Runner for NativeServer records."""

    kind = "native"

    def start(self, req: LaunchRequest) -> NativeServer:
        return start(req.argv, {**os.environ, **req.env}, req.log_path, cwd=req.cwd)

    def identity(self, rec: NativeServer) -> str:
        return f"native:{rec.pid}:{rec.start_time}"

    def alive(self, rec: NativeServer) -> bool:
        return is_ours(rec)

    def stop(self, rec: NativeServer, timeout_s: float, log: Log) -> str:
        return stop(rec, timeout_s=timeout_s, log=log)

    def logs(self, rec: NativeServer, lines: int) -> list[str]:
        return tail(rec.log, lines)

    def live_log(self, rec: NativeServer) -> Optional[Path]:
        return Path(rec.log) if rec.log else None

    def base_url(self, rec: NativeServer) -> Optional[str]:
        return rec.base_url
