"""Atomic file writes shared by every module that replaces a file: temp name in the same folder,
fsync, rename, and (where the caller asks) fsync the folder.

A reader sees the old file or the new one, never a half-written one; on any error the temp file
is removed and the target is left as it was. Every module writes through these functions
directly (no per-module wrappers); what differs between callers (how the temp file is named, its
mode bits, whether and how strictly the folder is fsynced) are keyword arguments here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Literal, Optional

# How fsync_dir treats an OSError: "raise" every one; "skip-unopenable" skips a folder that
# cannot be opened but raises a failed fsync; "ignore" is best effort and never raises.
DirErrors = Literal["raise", "skip-unopenable", "ignore"]


def fsync_dir(folder: str | os.PathLike, errors: DirErrors = "raise") -> None:
    """fsync a folder so that a rename into it survives a crash."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        if errors == "raise":
            raise
        return
    try:
        os.fsync(fd)
    except OSError:
        if errors != "ignore":
            raise
    finally:
        os.close(fd)


def pid_temp_name(path: Path) -> Path:
    """`.<name>.tmp-<pid>`: a fixed temp name per process, so leftovers can be found and removed."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextlib.contextmanager
def atomic_open(
    path: str | os.PathLike,
    *,
    fsync: bool = True,
    sync_dir: Optional[DirErrors] = "raise",
    mode: Optional[int] = None,
    keep_mode: bool = False,
    temp: Optional[Path] = None,
    prefix: Optional[str] = None,
    suffix: str = ".tmp",
) -> Iterator[BinaryIO]:
    """Open a temp file for binary writing; on success fsync it and rename it onto `path`.

    The temp file is `temp` when given (opened like open(..., "wb"): mode 0o666 less the umask,
    an old leftover of that name truncated), else a fresh `tempfile.mkstemp` name
    `<prefix>XXXXXXXX<suffix>` (prefix default `.<name>.`; mode 0o600). `mode` chmods the temp
    file before the rename; `keep_mode` gives it the permission bits of the file it replaces
    (0o644 for a new file) unless `mode` is given. `sync_dir` fsyncs `path`'s folder after the rename with those
    error rules (None: not at all). On any exception the temp file is removed and `path` is
    left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None and keep_mode:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    if temp is None:
        fd, tmp = tempfile.mkstemp(
            prefix=f".{path.name}." if prefix is None else prefix, suffix=suffix, dir=path.parent
        )
        f = os.fdopen(fd, "wb")
    else:
        tmp = os.fspath(temp)
        f = open(tmp, "wb")
    try:
        yield f
        f.flush()
        if fsync:
            os.fsync(f.fileno())
        f.close()
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if sync_dir is not None:
        fsync_dir(path.parent, sync_dir)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, **kw: Any) -> None:
    """Replace `path` with `data` atomically; keywords as for atomic_open."""
    with atomic_open(path, **kw) as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike, text: str, **kw: Any) -> None:
    """Replace `path` with `text` (UTF-8) atomically; keywords as for atomic_open."""
    atomic_write_bytes(path, text.encode("utf-8"), **kw)


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


def replace_dir(new: Path, out: Path, sync_dir: Optional[DirErrors] = "raise") -> None:
    """Put the folder `new` (a sibling of `out`) in place of `out`.

    The old `out` is renamed aside to `.<name>.old-<pid>` first and removed only after the
    rename, so at every moment `out` is the old folder, the new one or (between the two
    renames) absent — never a mix. `sync_dir` fsyncs the parent afterwards (None: not at all).
    """
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old)
        os.rename(out, old)
    try:
        os.rename(new, out)
    except BaseException:
        if old is not None:
            os.rename(old, out)
        raise
    if sync_dir is not None:
        fsync_dir(out.parent, sync_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def build_dir(out: Path) -> Iterator[Path]:
    """A fresh `.<name>.tmp-build` sibling of `out` to build a folder in.

    When the block finishes, the build folder replaces `out` (replace_dir); on any exception
    the build folder is removed and `out` is left as it was.
    """
    tmp = out.with_name(f".{out.name}.tmp-build")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        replace_dir(tmp, out, sync_dir=None)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
