"""The record `recipe fetch` keeps of what it verified (`<local_dir>/.recipekit-fetch.json`).

tools/fetch.py writes it; checkpoint readers (the hybrid assembly) read the verified file sizes
and hashes from it. A missing, unreadable or other-schema record reads as empty.
"""

from __future__ import annotations

import json
from pathlib import Path

MANIFEST = ".recipekit-fetch.json"
SCHEMA = 1


def manifest_path(local_dir: str | Path) -> Path:
    return Path(local_dir) / MANIFEST


def load_manifest(local_dir: str | Path) -> dict:
    try:
        data = json.loads(manifest_path(local_dir).read_text())
        if data.get("schema") == SCHEMA and isinstance(data.get("sources"), dict):
            return data
    except (OSError, json.JSONDecodeError):
        pass
    return {"schema": SCHEMA, "sources": {}}
