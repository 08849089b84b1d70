"""Helpers for pack authors: turn a diff and a pristine target into a manifest entry
(the sha256 of every touched file before and after), so nobody types hashes by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from recipekit.patches.fsio import read_file, sha256_bytes
from recipekit.patches.gitapply import apply_in_scratch, touched_paths


def describe_patch(body: bytes, root: Path, patch_id: str = "?") -> list[dict]:
    """[{path, pre_sha256, post_sha256}] for `body` applied (no fuzz) to the files under `root`."""
    paths = touched_paths(body)
    before: dict[str, Optional[bytes]] = {}
    for rel in paths:
        p = Path(root) / rel
        before[rel] = read_file(p, "target file") if p.is_file() else None
    after = apply_in_scratch(body, before, patch_id=patch_id)
    return [
        {
            "path": rel,
            "pre_sha256": sha256_bytes(b) if (b := before[rel]) is not None else None,
            "post_sha256": sha256_bytes(a) if (a := after[rel]) is not None else None,
        }
        for rel in paths
    ]
