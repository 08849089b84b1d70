"""Apply a unified diff with `git apply` (no fuzz) to copies of the files in a scratch folder.

The target itself is never handed to git: the files a patch touches are copied to a fresh
folder outside any repository, `git apply --check` then `git apply` run there, and the caller
verifies the results' sha256 before anything reaches the target.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path, PurePosixPath
from typing import Optional

from recipekit.errors import ExitCode, RecipekitError
from recipekit.patches.fsio import read_file


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["GIT_CEILING_DIRECTORIES"] = str(cwd.parent)  # never discover a repository above the scratch
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


def touched_paths(body: bytes) -> list[str]:
    """Paths (after -p1) a diff touches, from `git apply --numstat`."""
    with tempfile.TemporaryDirectory(prefix="recipekit-numstat-") as d:
        pf = Path(d) / "body.patch"
        pf.write_bytes(body)
        work = Path(d) / "tree"
        work.mkdir()
        r = _git(["apply", "--numstat", "-z", str(pf)], work)
        if r.returncode != 0:
            raise RecipekitError(
                code="patch-body-invalid",
                message=f"not a usable diff: {r.stderr.strip()}",
                exit_code=ExitCode.INVALID_INPUT,
            )
        out = []
        for rec in r.stdout.split("\0"):
            if not rec.strip():
                continue
            parts = rec.split("\t")
            if len(parts) >= 3 and parts[2]:
                out.append(parts[2])
        return out


def apply_in_scratch(
    body: bytes, files: dict[str, Optional[bytes]], *, reverse: bool = False, patch_id: str = "?"
) -> dict[str, Optional[bytes]]:
    """Apply `body` to `files` (path -> bytes, None = absent); return the new contents of the same paths.

    Raises `patch-does-not-apply` (exit 4) when git reports any hunk failing: context must
    match exactly; no fuzz is ever used.
    """
    with tempfile.TemporaryDirectory(prefix="recipekit-apply-") as d:
        base = Path(d)
        tree = base / "tree"
        tree.mkdir()
        for rel, data in files.items():
            p = tree / PurePosixPath(rel)
            if data is not None:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
        pf = base / "body.patch"
        pf.write_bytes(body)
        flags = ["-p1", "--whitespace=nowarn"] + (["--reverse"] if reverse else [])
        r = _git(["apply", "--check", *flags, str(pf)], tree)
        if r.returncode == 0:
            r = _git(["apply", *flags, str(pf)], tree)
        if r.returncode != 0:
            raise RecipekitError(
                code="patch-does-not-apply",
                exit_code=ExitCode.DRIFT,
                message=f"{patch_id}: git apply{' --reverse' if reverse else ''} refused: "
                + " ".join(r.stderr.strip().splitlines()[:3]),
                hint="the base differs from the one the patch was made for; nothing was changed",
            )
        out: dict[str, Optional[bytes]] = {}
        for rel in files:
            p = tree / PurePosixPath(rel)
            out[rel] = read_file(p, "patched file") if p.is_file() else None
        return out
