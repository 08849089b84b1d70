"""Is this host fit to serve Engram from disk? The doctor's Engram checks and the per-disk cache of
`recipe engram bench` results they read.

- `engram-memory`: WARN when the effective config may load the ~189 GiB of tables into memory
  (storage not `ssd`, or `DSV41_SKIP_WEIGHT_RE` unset so the weight loader still reads them).
- `engram-disk-rate`: the rate `recipe engram bench --dir` measured on the disk that holds the
  Engram folder (cached per device under `$RECIPEKIT_HOME/cache/engram-bench/`), against the rows
  per second the recipe's published cold-prefill figure needs (48 row reads per token uncached).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from recipekit import bounded, paths
from recipekit.atomic import atomic_open
from recipekit.errors import RecipekitError
from recipekit.hybrid.engram.deploy import from_effective

CACHE_FORMAT = "recipekit-engram-disk/1"


def device_key(path: str | os.PathLike) -> str:
    """`<major>-<minor>` of the filesystem holding `path` (or its nearest existing parent)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    dev = p.stat().st_dev
    return f"{os.major(dev)}-{os.minor(dev)}"


def cache_path(path: str | os.PathLike) -> Path:
    return paths.cache_dir() / "engram-bench" / f"disk-{device_key(path)}.json"


def save_measurement(path: str | os.PathLike, result: dict) -> Path:
    out = cache_path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": CACHE_FORMAT, "device": device_key(path), "dir": str(Path(path).absolute()), **result}
    with atomic_open(out, mode=0o644) as f:
        f.write((json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    return out


def load_measurement(path: str | os.PathLike) -> Optional[dict]:
    try:  # a cache: anything that is not what we wrote is a miss (measured again)
        doc = bounded.read_json(cache_path(path), "disk measurement cache", 1 << 20, code="engram-cache-invalid")
    except (OSError, RecipekitError):
        return None
    return doc if isinstance(doc, dict) and doc.get("format") == CACHE_FORMAT else None


OK, WARN, SKIP = "OK", "WARN", "SKIP"


@dataclass(frozen=True)
class Check:
    """One doctor check (the doctor wraps it into its own Check: same fields)."""

    id: str
    status: str
    message: str
    hint: Optional[str] = None


def doctor_checks(effective: Any) -> list[Check]:
    """The Engram checks of a recipe that serves Engram from disk (none for other recipes)."""

    if not hasattr(effective, "settings"):
        return []
    d = from_effective(effective)
    if d.engram_dir is None or d.container_engram_dir is None:
        return []
    out: list[Check] = []
    why = d.tables_may_load_into_memory()
    if why:
        out.append(
            Check(
                "engram-memory",
                WARN,
                f"the Engram tables (~189 GiB) may be loaded into memory: {why}",
                r"set DSV41_SKIP_WEIGHT_RE=^layers\.(1|14)\.engram\.embed\.(weight|scale)$ with "
                "DSV41_ENGRAM_STORAGE=ssd",
            )
        )
    else:
        out.append(Check("engram-memory", OK, "SSD mode, the weight loader skips the Engram tensors"))
    need = d.published_prefill_tps * d.rows_per_token if d.published_prefill_tps else None
    m = load_measurement(d.engram_dir)
    if m is None:
        where = d.engram_dir if d.engram_dir.exists() else d.engram_dir.parent
        out.append(
            Check(
                "engram-disk-rate",
                SKIP,
                f"no measured Engram read rate for the disk of {d.engram_dir}",
                f"run `recipe engram bench --dir {where}`",
            )
        )
        return out
    rate = float(m.get("engine_prefill_rows_per_s") or 0.0)
    shown = f"{rate:,.0f} rows/s measured {m.get('date', '')} on {m.get('dir')}"
    if need is None:
        out.append(Check("engram-disk-rate", OK, f"{shown} (the recipe publishes no cold-prefill figure)"))
    elif rate < need:
        out.append(
            Check(
                "engram-disk-rate",
                WARN,
                f"{shown}: cold prefill at the published {d.published_prefill_tps:,.0f} tok/s needs "
                f"{need:,.0f} uncached row reads/s (ceiling here {rate / d.rows_per_token:,.0f} tok/s)",
                "a faster NVMe, more page cache for Engram rows (`recipe engram warm`), or expect slower cold prefill",
            )
        )
    else:
        out.append(Check("engram-disk-rate", OK, f"{shown}, >= the {need:,.0f} rows/s the published prefill needs"))
    return out
