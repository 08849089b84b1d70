"""Atomic file writes for the checkpoint tools, on the shared recipekit.atomic.

Here the temp file is named `.<name>.tmp-<pid>` (remove_stale_temps finds interrupted writes'
leftovers by that name) with the usual mode bits, and the folder fsync is best effort;
`fsync=False` skips both fsyncs (the caller syncs later, off the critical path).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, ContextManager

from recipekit import atomic as _atomic
from recipekit.atomic import pid_temp_name as temp_name, remove_stale_temps  # noqa: F401  (re-exported)


def fsync_dir(folder: Path) -> None:
    _atomic.fsync_dir(folder, "ignore")


def atomic_open(path: str | os.PathLike, fsync: bool = True) -> ContextManager[BinaryIO]:
    """Open a temp file for binary writing; on success fsync and rename it onto `path`.

    On any exception the temp file is removed and `path` is left as it was.
    """
    path = Path(path)
    return _atomic.atomic_open(path, fsync=fsync, sync_dir="ignore" if fsync else None, temp=temp_name(path))


def atomic_write_bytes(path: str | os.PathLike, data: bytes, fsync: bool = True) -> None:
    with atomic_open(path, fsync=fsync) as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike, text: str, fsync: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), fsync=fsync)
