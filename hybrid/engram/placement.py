"""Place the Engram folder the engine is pointed at (`DSV41_ENGRAM_DIR`): the shards holding the
tables, a reduced `model.safetensors.index.json` mapping exactly the Engram tensors, and `config.json`.

Public readers of that variable expect shard bytes plus an index (research/consumers.md §3:
MiaAI's prepare script hard-links shards 47/48 and writes a reduced index and config.json). Each
shard is a hard link to the bytes the model's index resolves when both folders are on one
filesystem; otherwise it is copied into `.recipekit-partial/` (resumable: an interrupted copy
continues from its length after re-hashing what is there), its sha256 compared with the source's,
fsynced and renamed into place. `engram-placement.json` records every shard's size, sha256 and
how it was placed, so a re-run with everything in place hashes nothing new. Nothing in the model
folder is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Callable

from recipekit import bounded
from recipekit.atomic import atomic_open, fsync_dir
from recipekit.checkpoint.dsv41 import CONFIG_MAX_BYTES
from recipekit.checkpoint.safetensors_io import INDEX_NAME
from recipekit.errors import ExitCode, RecipekitError
from recipekit.hybrid.engram.rules import engram_tensor_names, open_tables, read_json

RECORD_NAME = "engram-placement.json"
RECORD_FORMAT = "recipekit-engram-placement/1"
PARTIAL_DIR = ".recipekit-partial"
COPY_CHUNK = 16 * 1024 * 1024


def _write_json(path: Path, doc: dict) -> None:
    with atomic_open(path, mode=0o644) as f:
        f.write((json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())


def _sha256(path: Path, upto: int | None = None) -> "hashlib._Hash":
    h = hashlib.sha256()
    left = upto
    with open(path, "rb") as f:
        while left is None or left > 0:
            b = f.read(COPY_CHUNK if left is None else min(COPY_CHUNK, left))
            if not b:
                break
            h.update(b)
            if left is not None:
                left -= len(b)
    return h


def _sha256_fd(fd: int, upto: int) -> "hashlib._Hash":
    """sha256 of the first `upto` bytes of an open file (read with pread: the fd, not a name)."""
    h = hashlib.sha256()
    at = 0
    while at < upto:
        b = os.pread(fd, min(COPY_CHUNK, upto - at), at)
        if not b:
            break
        h.update(b)
        at += len(b)
    return h


_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def _partial_problem(st: os.stat_result) -> str | None:
    """Why an entry of the partial folder cannot be appended to (None: a regular file of its own)."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_nlink != 1:
        return f"is a hard link ({st.st_nlink} names for the same bytes)"
    return None


def _unsafe(where: Path, message: str, *, racing: bool = False) -> RecipekitError:
    """`engram-partial-unsafe` for the partial copy at `where`; `racing`: something wrote there during the copy."""
    hint = f"remove {where} and re-run" + (
        "; nothing else may write into the Engram folder during a copy" if racing else ""
    )
    return RecipekitError(code="engram-partial-unsafe", location=str(where), message=message, hint=hint)


def _partial_dir(out: Path, say: Callable[[str], None]) -> int:
    """Open `out/.recipekit-partial` (a real folder of `out`, never a link) and return its fd."""
    part_dir = out / PARTIAL_DIR
    try:
        st = os.lstat(part_dir)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        say(f"{PARTIAL_DIR} {'is a symbolic link' if stat.S_ISLNK(st.st_mode) else 'is not a folder'}: removed")
        os.unlink(part_dir)  # the name only: whatever a link points at is not touched
        st = None
    if st is None:
        os.mkdir(part_dir, 0o755)
    try:
        return os.open(part_dir, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC)
    except OSError as e:  # swapped for a link between the checks above and here
        raise _unsafe(part_dir, f"cannot open the partial-copy folder without following a link: {e.strerror}") from None


def _open_partial(dfd: int, name: str, where: Path, say: Callable[[str], None]) -> int:
    """The partial file, opened for appending without following links: a planted link, hard link or
    other non-regular entry is removed (the name only) and the copy restarts from zero."""
    try:
        st = os.lstat(name, dir_fd=dfd)
    except FileNotFoundError:
        st = None
    if st is not None:
        why = _partial_problem(st)
        if why is not None:
            if stat.S_ISDIR(st.st_mode):
                raise _unsafe(where, "the partial copy is a folder")
            say(f"{name}: the partial copy {why}: removed, the copy restarts from zero")
            os.unlink(name, dir_fd=dfd)
    flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | _O_NOFOLLOW | _O_CLOEXEC
    try:
        fd = os.open(name, flags, 0o644, dir_fd=dfd)
    except OSError as e:
        raise _unsafe(where, f"cannot open the partial copy without following a link: {e.strerror}") from None
    why = _partial_problem(os.fstat(fd))
    if why is not None:  # a race: something was planted between the unlink and the open
        os.close(fd)
        raise _unsafe(where, f"the partial copy {why}", racing=True)
    return fd


def _copy_resumable(src: Path, dst: Path, say: Callable[[str], None]) -> str:
    """Copy src to dst through a partial file; returns the sha256 of what was written.

    The partial file lies in `.recipekit-partial/` of dst's folder; it must be a regular file with one
    name (lstat, st_nlink == 1) in that real folder, opened with O_NOFOLLOW, so a planted symlink or
    hard link never makes the copy write to a file outside the folder."""
    dfd = _partial_dir(dst.parent, say)
    part = dst.parent / PARTIAL_DIR / dst.name
    try:
        fd = _open_partial(dfd, dst.name, part, say)
        try:
            size = src.stat().st_size
            have = os.fstat(fd).st_size
            if have > size:
                os.ftruncate(fd, 0)
                have = 0
            h = _sha256_fd(fd, have) if have else hashlib.sha256()
            if have:
                say(f"{dst.name}: resuming the copy at {have:,} of {size:,} bytes")
            with open(src, "rb") as fin:
                fin.seek(have)
                while True:
                    b = fin.read(COPY_CHUNK)
                    if not b:
                        break
                    view = memoryview(b)
                    while view:
                        view = view[os.write(fd, view) :]
                    h.update(b)
            os.fsync(fd)
            st = os.fstat(fd)
            why = _partial_problem(st)
            if why is not None:
                raise _unsafe(part, f"the partial copy {why} (linked during the copy)", racing=True)
        finally:
            os.close(fd)
        if st.st_size != size:
            raise RecipekitError(
                code="engram-copy-short",
                location=str(part),
                message=f"copied {st.st_size:,} of {size:,} bytes (the source changed?)",
                hint="re-run: the copy resumes",
                exit_code=ExitCode.FAILURE,
            )
        return h.hexdigest()
    finally:
        os.close(dfd)


_RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "size": (int,),
    "how": (str,),
    "sha256": (str, type(None)),
    "source_mtime_ns": (int,),
}


def _recorded_shards(path: Path) -> dict[str, dict]:
    """The shards of a previous run's record, checked before anything is trusted or written."""
    if not path.is_file():
        return {}
    old = read_json(path, RECORD_NAME)
    if old.get("format") != RECORD_FORMAT:
        return {}

    def bad(what: str) -> RecipekitError:
        return RecipekitError(
            code="engram-record-invalid",
            location=str(path),
            message=f"{what}; the record of a previous placement is damaged",
            hint=f"remove {path} and re-run `recipe engram place` (copies are hashed again, nothing is lost)",
        )

    shards = old.get("shards")
    if not isinstance(shards, dict):
        raise bad(f"'shards' is {type(shards).__name__}, not an object of shard name -> record")
    for name, rec in shards.items():
        if not isinstance(rec, dict):
            raise bad(f"shards[{name!r}] is {type(rec).__name__}, not an object")
        for key, types in _RECORD_FIELDS.items():
            v = rec.get(key)
            if key in rec and (isinstance(v, bool) or not isinstance(v, types)):
                raise bad(f"shards[{name!r}].{key} is {v!r}")
    return shards


def place_engram(
    model_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    mode: str = "auto",
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Make `out_dir` the Engram folder for the tables the model folder's index resolves.

    mode: "auto" (hard link on the same filesystem, else copy), "link" (fail unless a hard link
    is possible), "copy" (always copy).
    """
    say = progress or (lambda m: None)
    if mode not in ("auto", "link", "copy"):
        raise RecipekitError(code="engram-place-mode", message=f"mode {mode!r}", hint="auto, link or copy")
    model, out = Path(model_dir), Path(out_dir)
    if out.resolve() == model.resolve():
        raise RecipekitError(
            code="engram-place-same-folder",
            location=str(out),
            message="the Engram folder is the model folder",
            hint="use a separate --out folder",
        )
    tables = open_tables(model)

    config_bytes = bounded.read_bytes(
        model / "config.json", "config.json", CONFIG_MAX_BYTES, code="checkpoint-config-invalid"
    )
    out.mkdir(parents=True, exist_ok=True)
    old_shards = _recorded_shards(out / RECORD_NAME)
    shards: dict[str, dict] = {}
    for t in sorted(tables.values(), key=lambda t: t.shard):
        if t.shard in shards:
            continue
        src = t.path.resolve()
        dst = out / t.shard
        st = src.stat()
        prev = old_shards.get(t.shard) or {}
        if dst.exists() and not dst.is_symlink():
            ds = dst.stat()
            if (ds.st_dev, ds.st_ino) == (st.st_dev, st.st_ino):
                shards[t.shard] = {"size": st.st_size, "how": "hardlink", "sha256": prev.get("sha256")}
                say(f"{t.shard}: already hard-linked")
                continue
            if (
                ds.st_size == st.st_size
                and prev.get("sha256")
                and prev.get("how") == "copy"
                and prev.get("source_mtime_ns") == st.st_mtime_ns
            ):
                shards[t.shard] = prev
                say(f"{t.shard}: already copied and verified")
                continue
        if dst.exists() or dst.is_symlink():
            dst.unlink()  # a stale copy or a link: replaced below (the model's bytes are untouched)
        linked = False
        if mode in ("auto", "link") and st.st_dev == out.stat().st_dev:
            try:
                os.link(src, dst)
                linked = True
            except OSError as e:
                if mode == "link":
                    raise RecipekitError(
                        code="engram-link-failed",
                        location=str(dst),
                        message=str(e),
                        hint="use --mode copy, or put the Engram folder on the model's filesystem",
                        exit_code=ExitCode.FAILURE,
                    ) from None
        elif mode == "link":
            raise RecipekitError(
                code="engram-link-failed",
                location=str(dst),
                message=f"{out} is on another filesystem than {src}",
                hint="use --mode auto or copy",
                exit_code=ExitCode.FAILURE,
            )
        if linked:
            shards[t.shard] = {"size": st.st_size, "how": "hardlink", "sha256": None}
            say(f"{t.shard}: hard-linked")
            continue
        say(f"{t.shard}: copying {st.st_size:,} bytes")
        got = _copy_resumable(src, dst, say)
        want = _sha256(src).hexdigest()
        if got != want:
            (out / PARTIAL_DIR / dst.name).unlink()
            raise RecipekitError(
                code="engram-copy-mismatch",
                location=str(dst),
                message=f"the copy's sha256 {got[:16]} differs from the source's {want[:16]}",
                hint="re-run (the copy restarts from zero); check the disk",
                exit_code=ExitCode.FAILURE,
            )
        os.replace(out / PARTIAL_DIR / dst.name, dst)
        fsync_dir(out)
        shards[t.shard] = {"size": st.st_size, "how": "copy", "sha256": got, "source_mtime_ns": st.st_mtime_ns}
    names = engram_tensor_names(sorted(tables))
    weight_map = {n: tables[int(n.split(".")[1])].shard for n in names}
    total = sum(t.rows * (t.head_dim + t.scale_cols) for t in tables.values())
    _write_json(out / INDEX_NAME, {"metadata": {"total_size": total}, "weight_map": weight_map})
    with atomic_open(out / "config.json", mode=0o644) as f:
        f.write(config_bytes)
    record = {
        "format": RECORD_FORMAT,
        "model_dir": str(model.resolve()),
        "shards": shards,
        "tensors": names,
        "total_size": total,
    }
    _write_json(out / RECORD_NAME, record)
    part_dir = out / PARTIAL_DIR
    if part_dir.is_dir() and not any(part_dir.iterdir()):
        part_dir.rmdir()
    return {"out": str(out), "shards": shards, "tensors": len(names), "total_size": total}
