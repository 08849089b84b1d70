"""Byte-level file helpers for the applier: reading a file bounded, sha256 of bytes and files,
removing a file durably.

Every file the applier reads (patch bodies, target sources, state blobs) goes through
`read_file`: a regular file (a FIFO or device in a target is refused, not read forever), capped.
Atomic writes go through recipekit.atomic directly.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from recipekit import atomic as _atomic
from recipekit import bounded

# a patched source file or a patch body; the largest Python sources of an engine are a few MiB
FILE_MAX_BYTES = 64 * 1024 * 1024


def read_file(path: Path, what: str = "file") -> bytes:
    """The bytes of regular file `path` (FileNotFoundError when it is not there; error patch-file-unreadable
    when it is not a regular file or over FILE_MAX_BYTES)."""
    return bounded.read_bytes(path, what, FILE_MAX_BYTES, code="patch-file-unreadable")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str | None:
    """The file's sha256, or None when it does not exist."""
    try:
        return hashlib.sha256(read_file(path)).hexdigest()
    except FileNotFoundError:
        return None


def remove_file(path: Path) -> None:
    """Unlink `path` (gone already is fine) and fsync its folder; an unopenable folder is skipped."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    _atomic.fsync_dir(path.parent, "skip-unopenable")
