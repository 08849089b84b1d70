"""Write a whole site directory all at once: build into a temp sibling, fsync, then swap it in.

A half-built site is never visible at DIR, and a DIR that holds something other than a site
this toolkit wrote is refused rather than replaced.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from recipekit.atomic import fsync_dir, replace_dir
from recipekit.errors import ExitCode, RecipekitError

MARKER = ".recipekit-site"


class SiteDir:
    """A temp directory next to `out_dir`; `commit()` fsyncs it and renames it into place."""

    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir).absolute()
        _check_replaceable(self.out_dir)
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix=f".{self.out_dir.name}.tmp-", dir=self.out_dir.parent))
        self.root.chmod(0o755)   # mkdtemp makes it 0700; the site is served by other users' web servers
        self.files: list[Path] = []

    def write(self, rel: str, data: bytes | str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            data = data.encode("utf-8")
        with open(path, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        self.files.append(path)
        return path

    def commit(self) -> Path:
        self.write(MARKER, "written by `recipe site`; the whole directory is replaced on rebuild\n")
        for dirpath, _dirs, _files in os.walk(self.root):
            fsync_dir(Path(dirpath))
        replace_dir(self.root, self.out_dir)
        return self.out_dir

    def abort(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "SiteDir":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


def _check_replaceable(out_dir: Path) -> None:
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise RecipekitError(code="site-out-not-dir", message=f"{out_dir} exists and is not a directory",
                             hint="pass --out with a new or existing site directory")
    if (out_dir / MARKER).is_file() or not any(out_dir.iterdir()):
        return
    raise RecipekitError(
        code="site-out-not-empty", location=str(out_dir),
        message="the output directory holds files that `recipe site` did not write; refusing to replace them",
        hint="pick an empty or new directory for --out", exit_code=ExitCode.INVALID_INPUT)

