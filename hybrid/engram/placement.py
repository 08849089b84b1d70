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


def _copy_resumable(src: Path, dst: Path, say: Callable[[str], None]) -> str:
    """Copy src to dst through a partial file; returns the sha256 of what was written."""
    part_dir = dst.parent / PARTIAL_DIR
    part_dir.mkdir(exist_ok=True)
    part = part_dir / dst.name
    size = src.stat().st_size
    have = part.stat().st_size if part.exists() else 0
    if have > size:
        part.unlink()
        have = 0
    h = _sha256(part, have) if have else hashlib.sha256()
    if have:
        say(f"{dst.name}: resuming the copy at {have:,} of {size:,} bytes")
    with open(src, "rb") as fin, open(part, "ab") as fout:
        fin.seek(have)
        while True:
            b = fin.read(COPY_CHUNK)
            if not b:
                break
            fout.write(b)
            h.update(b)
        fout.flush()
        os.fsync(fout.fileno())
    if part.stat().st_size != size:
        raise RecipekitError(
            code="engram-copy-short",
            location=str(part),
            message=f"copied {part.stat().st_size:,} of {size:,} bytes (the source changed?)",
            hint="re-run: the copy resumes",
            exit_code=ExitCode.FAILURE,
        )
    return h.hexdigest()


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
    old = read_json(out / RECORD_NAME, RECORD_NAME) if (out / RECORD_NAME).is_file() else {}
    old_shards = old.get("shards") if old.get("format") == RECORD_FORMAT else {}
    shards: dict[str, dict] = {}
    for t in sorted(tables.values(), key=lambda t: t.shard):
        if t.shard in shards:
            continue
        src = t.path.resolve()
        dst = out / t.shard
        st = src.stat()
        prev = (old_shards or {}).get(t.shard) or {}
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
