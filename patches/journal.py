"""The applier's state folder for one pack on one target: lock, stamp, blob store and journal.

Layout (`<root>/.recipekit-patches/<engine>__<profile>/`, or inside `.git/` for a checkout):
  lock          an exclusive file lock held for the whole apply/revert
  blobs/<sha>   content-addressed copies of every file's bytes before the applier changed it
  journal.json  present only while the target is being changed: the files about to change and
                their sha256 before (null = absent), plus the stamp before
  stamp.json    which patches are applied and every touched file's original and current sha256

A run that finds journal.json knows the previous run died mid-way and restores every listed
file from blobs/ before doing anything else, so the target ends fully original.
"""

from __future__ import annotations

import json
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from recipekit import atomic, bounded, confine
from recipekit.errors import ExitCode, RecipekitError
from recipekit.lock import hold
from recipekit.patches.fsio import read_file, remove_file, sha256_bytes, sha256_file

STATE_FOLDER = ".recipekit-patches"
STATE_MAX_BYTES = 16 * 1024 * 1024
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def target_path(root: Path, rel: object, what: str = "patched file", location: Optional[str] = None) -> Path:
    """`root / rel` for a path named by a pack, journal or stamp: a plain relative path whose
    components are no symlinks leading outside the target (exit 4 with the path otherwise)."""
    return confine.confined(root, rel, what, code="patch-path-outside", exit_code=ExitCode.DRIFT, location=location)


def _state_error(path: Path, what: str, why: str) -> RecipekitError:
    return RecipekitError(
        code=f"patch-{what}-corrupt",
        location=str(path),
        exit_code=ExitCode.DRIFT,
        message=f"the {what} {why}",
        hint="restore the target from its package/checkout, then remove the state folder",
    )


def _read_state_json(path: Path, what: str, code: str, message: str, hint: str) -> Any:
    """A state file's JSON (FileNotFoundError when absent); unreadable text is `code`, exit 4 (drift)."""
    try:
        return json.loads(bounded.read_text(path, what, STATE_MAX_BYTES, code=code))
    except (ValueError, RecursionError, UnicodeDecodeError):
        raise RecipekitError(
            code=code, location=str(path), message=message, exit_code=ExitCode.DRIFT, hint=hint
        ) from None


def _sha_or_none(v: object) -> bool:
    return v is None or (isinstance(v, str) and bool(_HEX64.match(v)))


def check_journal(path: Path, journal: object) -> dict:
    """The journal when its shape is the one `begin` writes (files: rel -> sha256|null, links:
    rel -> link text, stamp_before: a stamp or null), else a patch-journal-corrupt error."""
    if not isinstance(journal, dict) or not isinstance(journal.get("files"), dict):
        raise _state_error(path, "journal", "has no 'files' object")
    for rel, sha in journal["files"].items():
        if not _sha_or_none(sha):
            raise _state_error(path, "journal", f"records {ascii(rel)} with {ascii(sha)[:80]}, not a sha256 or null")
    links = journal.get("links", {})
    if not isinstance(links, dict) or not all(isinstance(v, str) for v in links.values()):
        raise _state_error(path, "journal", "has a 'links' entry that is not text")
    if journal.get("stamp_before") is not None:
        check_stamp(path, journal["stamp_before"])
    return journal


def check_stamp(path: Path, stamp: object) -> dict:
    """The stamp when `applied` is a list of names and `files` maps paths to {original, current}
    sha256s (null = absent) and an optional link text, else a patch-stamp-corrupt error."""
    if (
        not isinstance(stamp, dict)
        or not isinstance(stamp.get("files", {}), dict)
        or not isinstance(stamp.get("applied", []), list)
        or not all(isinstance(a, str) for a in stamp.get("applied", []))
    ):
        raise _state_error(path, "stamp", "does not have the shape the applier writes")
    for rel, rec in stamp.get("files", {}).items():
        if (
            not isinstance(rec, dict)
            or not all(_sha_or_none(rec.get(k)) for k in ("original", "current"))
            or not isinstance(rec.get("link", ""), str)
        ):
            raise _state_error(path, "stamp", f"records {ascii(rel)} with {ascii(rec)[:80]}")
    return stamp


def default_state_dir(root: Path, engine: str, profile: str) -> Path:
    key = f"{engine}__{profile}".replace("/", "_")
    if (root / ".git").is_dir():
        return root / ".git" / "recipekit-patches" / key
    return root / STATE_FOLDER / key


class StateDir:
    def __init__(self, path: Path, root: Path):
        self.path = Path(path)
        self.root = Path(root)

    # ------------------------------------------------------------ files
    @property
    def stamp_path(self) -> Path:
        return self.path / "stamp.json"

    @property
    def journal_path(self) -> Path:
        return self.path / "journal.json"

    def blob(self, sha: str) -> Path:
        if not _HEX64.match(sha):
            raise _state_error(self.path, "blob", f"name {ascii(sha)[:80]} is not a sha256")
        return self.path / "blobs" / sha

    def target(self, rel: object, what: str = "patched file") -> Path:
        return target_path(self.root, rel, what)

    def check_link(self, path: Path, text: str) -> None:
        """A recorded link text may only point inside the target."""
        real_root = Path(os.path.realpath(self.root))
        if not confine.within(real_root, Path(os.path.realpath(path.parent / text))):
            raise RecipekitError(
                code="patch-path-outside",
                exit_code=ExitCode.DRIFT,
                location=str(path),
                message=f"recorded link {path} -> {ascii(text)[:120]} leads outside {self.root}",
                hint="nothing was changed; restore the target from its package/checkout",
            )

    def read_stamp(self) -> Optional[dict]:
        try:
            stamp = _read_state_json(
                self.stamp_path,
                "stamp",
                "patch-stamp-corrupt",
                "the stamp is not valid JSON",
                "remove it and run `recipe patches check` to see the real state",
            )
        except FileNotFoundError:
            return None
        return check_stamp(self.stamp_path, stamp)

    def write_stamp(self, stamp: Optional[dict]) -> None:
        if stamp is None:
            remove_file(self.stamp_path)
        else:
            atomic.atomic_write_text(
                self.stamp_path,
                json.dumps(stamp, indent=2, sort_keys=True) + "\n",
                keep_mode=True,
                sync_dir="skip-unopenable",
            )

    def has_journal(self) -> bool:
        return os.path.lexists(self.journal_path)

    def store_blob(self, data: bytes) -> str:
        sha = sha256_bytes(data)
        p = self.blob(sha)
        if sha256_file(p) != sha:
            atomic.atomic_write_bytes(p, data, mode=0o644, sync_dir="skip-unopenable")
        return sha

    def read_blob(self, sha: str) -> Optional[bytes]:
        p = self.blob(sha)
        try:
            data = read_file(p, "state blob")
        except FileNotFoundError:
            return None
        return data if sha256_bytes(data) == sha else None

    # ------------------------------------------------------------ lock
    @property
    def lock_path(self) -> Path:
        return self.path / "lock"

    @contextmanager
    def locked(self, timeout: float = 0) -> Iterator["StateDir"]:
        """Hold an exclusive flock on `<state>/lock` (recipekit.lock, filelock's FileLock).

        A run that leaves nothing to keep (no stamp, no journal) removes the lock file and the
        empty state folders before it lets go of the lock, so a failed or reverted apply leaves the
        target as it found it. The lock stays sound: a waiter that then wins the flock on the
        removed file retries on a fresh file (recipekit.lock.hold).
        """

        def busy() -> RecipekitError:
            return RecipekitError(
                code="patch-busy",
                exit_code=ExitCode.BUSY,
                location=str(self.path),
                message="another apply/revert holds the lock on this target",
                hint="wait for it to finish",
            )

        with hold(self.lock_path, timeout=timeout, busy=busy):
            try:
                yield self
            finally:
                self._remove_if_unused()

    def _remove_if_unused(self) -> None:
        """With the lock held: drop the state folder when it records nothing (no stamp, no journal)."""
        if self.stamp_path.exists() or self.journal_path.exists():
            return
        blobs = self.path / "blobs"  # backups no stamp or journal refers to
        if blobs.is_dir():
            for b in blobs.iterdir():
                if b.is_file() and not b.is_symlink():
                    b.unlink()
            _rmdir_if_empty(blobs)
        remove_file(self.lock_path)
        if _rmdir_if_empty(self.path) and self.path.parent.name in (STATE_FOLDER, "recipekit-patches"):
            _rmdir_if_empty(self.path.parent)

    # ------------------------------------------------------------ transaction
    def begin(self, paths: Iterable[str]) -> dict:
        """Back up every file about to change (fsynced), then write the journal (atomically)."""
        files: dict[str, Optional[str]] = {}
        links: dict[str, str] = {}
        for rel in paths:
            target = self.target(rel)
            if target.is_symlink():  # inside the target (checked): restored as the link itself
                links[rel] = os.readlink(target)
            try:
                data = read_file(target, "target file")
            except FileNotFoundError:
                files[rel] = None
                continue
            files[rel] = self.store_blob(data)
        if (self.path / "blobs").is_dir():
            atomic.fsync_dir(self.path / "blobs", "skip-unopenable")
        journal = {
            "files": files,
            "links": links,
            "stamp_before": self.read_stamp(),
            "started": time.time(),
            "pid": os.getpid(),
        }
        atomic.atomic_write_text(
            self.journal_path, json.dumps(journal, indent=2), keep_mode=True, sync_dir="skip-unopenable"
        )
        return journal

    def commit(self) -> None:
        remove_file(self.journal_path)

    def recover(self) -> list[str]:
        """Undo an interrupted change: restore every journaled file, then the stamp. Returns paths restored."""
        if not self.has_journal():
            return []
        # the journal is written atomically, so a torn one means a foreign edit
        journal = _read_state_json(
            self.journal_path,
            "journal",
            "patch-journal-corrupt",
            "the journal of an interrupted apply is unreadable",
            "restore the target from its package/checkout, then delete the journal",
        )
        check_journal(self.journal_path, journal)
        # every path first: a hostile entry refuses the recovery before any file is touched
        targets = {rel: self.target(rel, "journaled file") for rel in journal["files"]}
        links = journal.get("links", {})
        restored = []
        for rel, sha in journal["files"].items():
            target = targets[rel]
            if rel in links:
                self.check_link(target, links[rel])
                if not (target.is_symlink() and os.readlink(target) == links[rel]):
                    restore_link(target, links[rel])
                    restored.append(rel)
                continue
            if sha is None:
                if target.exists():
                    remove_file(target)
                    restored.append(rel)
                continue
            if sha256_file(target) == sha:
                continue
            data = self.read_blob(sha)
            if data is None:
                raise RecipekitError(
                    code="patch-backup-missing",
                    location=str(self.blob(sha)),
                    message=f"backup of {rel} ({sha}) is missing or damaged",
                    exit_code=ExitCode.FAILURE,
                    hint="restore the target from its package/checkout",
                )
            atomic.atomic_write_bytes(target, data, keep_mode=True, sync_dir="skip-unopenable")
            restored.append(rel)
        self.write_stamp(journal.get("stamp_before"))
        self.commit()
        return restored


def restore_link(path: Path, text: str) -> None:
    """Put the symlink `path -> text` back (a temp link renamed over whatever is there)."""
    tmp = path.with_name(f".{path.name}.tmp-link-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(text, tmp)
    os.replace(tmp, path)
    atomic.fsync_dir(path.parent, "skip-unopenable")


def _rmdir_if_empty(path: Path) -> bool:
    try:
        os.rmdir(path)
        return True
    except OSError:  # not empty (another run's lock, a foreign file) or gone
        return False
