"""Atomic file writes: write to a temp name in the same folder, fsync, rename, fsync the folder.

A reader never sees a half-written file, and an interrupted write leaves only a temp file
(named `.<name>.tmp-<pid>`) that the next run removes or overwrites.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator, BinaryIO


def temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, fsync: bool = True) -> Iterator[BinaryIO]:
    """Open a temp file for binary writing; on success fsync and rename it onto `path`.

    On any exception the temp file is removed and `path` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    f = open(tmp, "wb")
    try:
        yield f
        f.flush()
        if fsync:
            os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
        if fsync:
            fsync_dir(path.parent)
    except BaseException:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes, fsync: bool = True) -> None:
    with atomic_open(path, fsync=fsync) as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike, text: str, fsync: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), fsync=fsync)


def remove_stale_temps(folder: Path) -> int:
    """Remove `.*.tmp-*` leftovers of interrupted writes in `folder`; returns how many."""
    n = 0
    if not folder.is_dir():
        return 0
    for p in folder.iterdir():
        if p.name.startswith(".") and ".tmp-" in p.name and p.is_file():
            with contextlib.suppress(OSError):
                p.unlink()
                n += 1
    return n
