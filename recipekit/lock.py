"""Inter-process file locks: every lock the toolkit takes (lifecycle, patch applier, engine
venv install, probe cache) is filelock's flock-based FileLock, taken through `hold`.

flock is released by the kernel when its holder dies (even by SIGKILL), so a lock file left by a
killed run never blocks the next one. The lock file stays in place on release, except where its
holder removes it on purpose (the patch applier's state folder); a waiter that then wins the
flock on the removed file retries on the path's new file instead of counting it as the lock.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

from filelock import FileLock, Timeout


def _inode(path: Path) -> Optional[tuple[int, int]]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


@contextlib.contextmanager
def hold(
    path: str | os.PathLike,
    *,
    timeout: float = -1,
    busy: Optional[Callable[[], Exception]] = None,
    on_acquired: Optional[Callable[[int], None]] = None,
) -> Iterator[FileLock]:
    """Hold an exclusive flock on `path` (its folder is created) for the block.

    `timeout` seconds to wait (0: one attempt, negative: forever); when it runs out, `busy()` is
    raised (filelock's Timeout when None). `on_acquired(fd)` runs with the lock file's descriptor
    each time the lock is taken, to read or write the holder's details in it. No soft (marker
    file) fallback: a filesystem without flock is an error, not a weaker lock.
    """
    path = Path(path)
    lock = FileLock(str(path), mode=0o644, fallback_to_soft=False, on_acquired=on_acquired)
    deadline = time.monotonic() + timeout if timeout >= 0 else None
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        before = _inode(path)
        left = -1.0 if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            lock.acquire(timeout=left)
            break
        except FileNotFoundError:  # the folder was removed between mkdir and open
            continue
        except Timeout:
            if before is None or _inode(path) != before:
                continue  # the file tried was removed by its holder: try the new one
            if busy is None:
                raise
            raise busy() from None
    try:
        yield lock
    finally:
        lock.release()
