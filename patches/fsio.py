"""Byte-level file helpers for the applier: sha256, atomic writes (temp name, fsync, rename)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from recipekit import atomic as _atomic


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str | None:
    """The file's sha256, or None when it does not exist."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except FileNotFoundError:
        return None
    return h.hexdigest()


def fsync_dir(path: Path) -> None:
    """fsync a folder; one that cannot be opened is skipped, a failed fsync raises."""
    _atomic.fsync_dir(path, "skip-unopenable")


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace `path` with `data`: a temp file in the same folder, fsync, rename, fsync the folder.

    Keeps the previous file's permission bits unless `mode` is given.
    """
    path = Path(path)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    _atomic.atomic_write_bytes(path, data, mode=mode, sync_dir="skip-unopenable")


def remove_file(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    fsync_dir(path.parent)
