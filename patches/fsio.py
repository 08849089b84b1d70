"""Byte-level file helpers for the applier: sha256 of bytes and files, removing a file durably.

Atomic writes go through recipekit.atomic directly.
"""

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


def remove_file(path: Path) -> None:
    """Unlink `path` (gone already is fine) and fsync its folder; an unopenable folder is skipped."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    _atomic.fsync_dir(path.parent, "skip-unopenable")
