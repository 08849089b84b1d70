"""sha256 manifests of produced tensors/files, and stamps that mark verified work.

A manifest records, for every output tensor, its file, dtype, shape, byte length and
sha256, plus each file's size; `verify_manifest` re-hashes and names what differs.
A stamp is a small JSON file saying "this unit of work finished with these results";
re-runs skip a unit whose stamp matches its inputs and whose outputs are still intact.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipekit import bounded
from recipekit.atomic import atomic_write_text, pid_temp_name
from recipekit.checkpoint.safetensors_io import SafetensorsFile, resolve_member
from recipekit.errors import ExitCode, RecipekitError

MANIFEST_NAME = "recipekit-manifest.json"
MANIFEST_FORMAT = "recipekit-manifest/1"

# a full-size checkpoint lists ~96k tensors with a hash each (~15 MiB); stamps are small
MANIFEST_MAX_BYTES = 256 * 1024 * 1024
STAMP_MAX_BYTES = 16 * 1024 * 1024


def sha256_file(path: str | os.PathLike, chunk: int = 16 * 1024 * 1024) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def sha256_bytes(data) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_json(obj: Any) -> str:
    return sha256_bytes(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode())


@dataclass
class TensorEntry:
    file: str
    dtype: str
    shape: list[int]
    nbytes: int
    sha256: str


@dataclass
class Manifest:
    tensors: dict[str, TensorEntry] = field(default_factory=dict)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # file -> {"size": int}
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The JSON form; `checksum` is the sha256 of the other keys' canonical JSON
        (sorted keys, no spaces), so that a changed byte anywhere in the file is detected."""
        d = {
            "format": MANIFEST_FORMAT,
            "meta": self.meta,
            "files": dict(sorted(self.files.items())),
            "tensors": {k: vars(v) for k, v in sorted(self.tensors.items())},
        }
        d["checksum"] = sha256_json(d)
        return d

    @classmethod
    def from_dict(cls, d: dict, where: str = "manifest") -> "Manifest":
        if not isinstance(d, dict) or d.get("format") != MANIFEST_FORMAT:
            raise RecipekitError(code="manifest-invalid", message=f"not a {MANIFEST_FORMAT} manifest", location=where)
        if "checksum" in d and sha256_json({k: v for k, v in d.items() if k != "checksum"}) != d["checksum"]:
            raise RecipekitError(
                code="manifest-checksum",
                message="manifest checksum does not match its content",
                location=where,
                hint="the manifest was edited or corrupted; re-run the step that wrote it",
            )
        try:
            tensors = {k: TensorEntry(**v) for k, v in d.get("tensors", {}).items()}
        except TypeError as e:
            raise RecipekitError(code="manifest-invalid", message=f"bad tensor entry: {e}", location=where) from None
        return cls(tensors, dict(d.get("files", {})), dict(d.get("meta", {})))

    def write(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        atomic_write_text(
            path, json.dumps(self.to_dict(), indent=1) + "\n", sync_dir="ignore", temp=pid_temp_name(path)
        )
        return path

    @classmethod
    def read(cls, path: str | os.PathLike) -> "Manifest":
        path = Path(path)
        if not path.is_file():
            raise RecipekitError(
                code="manifest-missing", message=f"{path} does not exist", exit_code=ExitCode.NOT_FOUND
            )

        d = bounded.read_json(path, "checkpoint manifest", MANIFEST_MAX_BYTES, code="manifest-invalid")
        return cls.from_dict(d, str(path))


def verify_tensors(folder: str | os.PathLike, manifest: Manifest, names=None) -> list[str]:
    """Re-hash tensors listed in the manifest; return one line per problem (empty = all match)."""

    folder = Path(folder)
    problems: list[str] = []
    by_file: dict[str, list[str]] = {}
    for name, e in manifest.tensors.items():
        if names is None or name in names:
            by_file.setdefault(e.file, []).append(name)
    for rel, tnames in sorted(by_file.items()):
        try:
            f = SafetensorsFile(resolve_member(folder, rel))
        except RecipekitError as err:
            problems.append(f"{rel}: {err.message}")
            continue
        with f:
            for name in tnames:
                e = manifest.tensors[name]
                t = f.tensors.get(name)
                if t is None:
                    problems.append(f"{name}: missing from {rel}")
                elif t.dtype != e.dtype or list(t.shape) != list(e.shape):
                    problems.append(f"{name}: {t.dtype}{list(t.shape)} in {rel}, manifest says {e.dtype}{e.shape}")
                elif f.sha256(name) != e.sha256:
                    problems.append(f"{name}: sha256 differs from the manifest ({rel})")
    return problems


# ----------------------------------------------------------------------------- stamps


def write_stamp(path: str | os.PathLike, data: dict[str, Any], fsync: bool = True) -> Path:
    path = Path(path)
    atomic_write_text(
        path,
        json.dumps(data, indent=1, sort_keys=True) + "\n",
        fsync=fsync,
        sync_dir="ignore" if fsync else None,
        temp=pid_temp_name(path),
    )
    return path


def read_stamp(path: str | os.PathLike) -> dict[str, Any] | None:
    """The stamp's data, or None if it is missing or unreadable (an unreadable stamp = not done)."""

    try:
        d = bounded.read_json(path, "stamp", STAMP_MAX_BYTES, code="stamp-invalid")
    except (OSError, RecipekitError):
        return None
    return d if isinstance(d, dict) else None


def reusable_build(out: Path, stamp_name: str, want: dict[str, Any], force: bool, made_by: str) -> dict | None:
    """For a generator that builds folder `out` whole: the stamp of an earlier build there with
    the same `want` inputs, to reuse unless `force`; else None (build it). A non-empty `out`
    with no stamp was not made by `made_by` and is refused."""
    if not out.exists():
        return None
    stamp = read_stamp(out / stamp_name)
    if stamp and {k: stamp.get(k) for k in want} == want and not force:
        return stamp
    if stamp is None and any(out.iterdir()):
        raise RecipekitError(
            code="output-exists",
            location=str(out),
            message=f"the folder exists, is not empty and was not made by {made_by}",
            hint="choose an empty or new --out folder",
        )
    return None
