"""The lifecycle lock: one apply / stop / restart at a time per recipe.

An exclusive flock on state/apply.lock, taken without blocking; the file holds the holder's
pid and command line. flock is released by the kernel when its holder dies (even by SIGKILL),
so a lock file left by a killed run is stale exactly when the flock can be taken: it is then
reported and overwritten. A live holder makes a second run exit with code 7 (busy).
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from recipekit.errors import ExitCode, RecipekitError


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LifecycleLock:
    def __init__(self, path: Path, what: str = "apply", log: Callable[[str], None] = lambda s: None):
        self.path = Path(path)
        self.what = what
        self.log = log
        self.fd: Optional[int] = None
        self.stale: Optional[dict] = None

    def holder(self) -> Optional[dict]:
        try:
            return json.loads(self.path.read_text() or "null")
        except (OSError, ValueError):
            return None

    def acquire(self) -> "LifecycleLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            h = self.holder() or {}
            raise RecipekitError(
                code="lifecycle-busy", exit_code=ExitCode.BUSY, location=str(self.path),
                message=f"another {h.get('what', 'run')} of this recipe is in progress "
                        f"(pid {h.get('pid', '?')}, since {h.get('since', '?')})",
                hint="wait for it to finish, or interrupt it (Ctrl-C); a killed run frees the lock by itself") from None
        self.fd = fd
        old = self.holder()
        if old and old.get("pid") and old.get("pid") != os.getpid():
            # The flock was free, so its writer is gone: a stale lock from a killed run.
            self.stale = old
            alive = pid_alive(int(old["pid"]))
            self.log(f"cleared a stale lock of {old.get('what', 'a run')} pid {old['pid']}"
                     f" ({'pid now reused by another process' if alive else 'no longer running'})")
        info = {"pid": os.getpid(), "what": self.what, "argv": sys.argv,
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        os.fsync(fd)
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "LifecycleLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
