"""Files in a recipe's state folder ($RECIPEKIT_HOME/state/<recipe-id>/) and atomic writes.

stamps/<step>.json   what a finished step was keyed by and what it produced
server.json          the server we started (runner, pid + start time or container id, URL)
server.log           the server's output
apply.lock           the lifecycle lock (flock) with the holder's pid
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from recipekit import atomic, bounded, paths
from recipekit.errors import RecipekitError


def state_path(recipe_id: str) -> Path:
    return paths.state_dir(recipe_id)


def write_json(path: Path, data: Any) -> None:
    """Replace `path` with `data` as JSON; the folder is fsynced so the new file survives a crash."""
    atomic.atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n", sync_dir="raise")


STATE_MAX_BYTES = 4 * 1024 * 1024


def read_json(path: Path) -> Optional[Any]:
    """The parsed file, or None when it is missing or damaged (a damaged file is not trusted).
    The read is bounded (a FIFO, a device or a huge file in its place reads as damaged)."""

    try:
        return bounded.read_json(path, path.name, STATE_MAX_BYTES)
    except (OSError, RecipekitError):
        return None


def remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
