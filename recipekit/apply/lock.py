"""The lifecycle lock: one apply / stop / restart at a time per recipe.

An exclusive flock (recipekit.lock) on state/apply.lock, taken without blocking; the file holds the holder's
pid and command line. flock is released by the kernel when its holder dies (even by SIGKILL),
so a lock file left by a killed run is stale exactly when the flock can be taken: it is then
reported and overwritten. A live holder makes a second run exit with code 7 (busy).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from recipekit import bounded
from recipekit.errors import ExitCode, RecipekitError
from recipekit.lock import hold


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LifecycleLock:
    """The lock on state/apply.lock, held from acquire() to release() (or as a `with` block)."""

    def __init__(self, path: Path, what: str = "apply", log: Callable[[str], None] = lambda s: None):
        self.path = Path(path)
        self.what = what
        self.log = log
        self.stale: Optional[dict] = None
        self._held: Optional[contextlib.ExitStack] = None

    def holder(self) -> Optional[dict]:

        try:  # the holder's record, written by the holder: a few hundred bytes
            return json.loads(bounded.read_text(self.path, "lock record", 1 << 16) or "null")
        except (OSError, ValueError, RecipekitError):
            return None

    def _busy(self) -> RecipekitError:
        h = self.holder() or {}
        return RecipekitError(
            code="lifecycle-busy",
            exit_code=ExitCode.BUSY,
            location=str(self.path),
            message=f"another {h.get('what', 'run')} of this recipe is in progress "
            f"(pid {h.get('pid', '?')}, since {h.get('since', '?')})",
            hint="wait for it to finish, or interrupt it (Ctrl-C); a killed run frees the lock by itself",
        )

    def _claim(self, fd: int) -> None:
        """With the flock just taken: note a previous holder's details (stale), write ours."""
        try:
            old = json.loads(os.pread(fd, 1 << 16, 0) or b"null")
        except ValueError:
            old = None
        if isinstance(old, dict) and old.get("pid") and old.get("pid") != os.getpid():
            # The flock was free, so its writer is gone: a stale lock from a killed run.
            self.stale = old
            alive = pid_alive(int(old["pid"]))
            self.log(
                f"cleared a stale lock of {old.get('what', 'a run')} pid {old['pid']}"
                f" ({'pid now reused by another process' if alive else 'no longer running'})"
            )
        info = {
            "pid": os.getpid(),
            "what": self.what,
            "argv": sys.argv,
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        os.fsync(fd)

    def acquire(self) -> "LifecycleLock":
        stack = contextlib.ExitStack()
        lock = stack.enter_context(hold(self.path, timeout=0, busy=self._busy, on_acquired=self._claim))
        # the holder's details are cleared before the flock is let go
        stack.callback(lambda: os.truncate(lock.lock_file, 0))
        self._held = stack
        return self

    def release(self) -> None:
        if self._held is None:
            return
        held, self._held = self._held, None
        held.close()

    def __enter__(self) -> "LifecycleLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
