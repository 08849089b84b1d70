"""The checkpoint's exact tensor inventory (name -> bytes), from the cheapest source that holds it:
- a local folder: its index and each shard's header (never the tensors);
- a registered checkpoint layout's contract for a config (`expected(config)`: the converted Gaudi layout,
  the original layout) when the files are not here;
- the hub at the pinned revision through huggingface_hub's `get_safetensors_metadata`, which reads the
  first 8 bytes and the header of each shard with HTTP Range requests; the result is cached per
  repo@revision, so a second plan reads nothing.
"""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path
from typing import Any, Optional

from recipekit import bounded
from recipekit.atomic import atomic_write_text
from recipekit.checkpoint.layout import LAYOUT_CHECKERS
from recipekit.checkpoint.safetensors_io import DTYPE_SIZES, SafetensorsFile, read_index
from recipekit.errors import ExitCode, RecipekitError

CACHE_MAX_BYTES = 64 * 1024 * 1024


def from_folder(folder: Path) -> dict[str, int]:
    index = read_index(folder)
    out: dict[str, int] = {}
    for shard in index.shards():
        for name, info in SafetensorsFile(folder / shard).tensors.items():
            out[name] = info.nbytes
    return out


def from_layout(layout: str, config: dict[str, Any]) -> dict[str, int]:
    return dict(_from_layout(layout, json.dumps(config, sort_keys=True)))


@functools.lru_cache(maxsize=4)  # ~100k tensors per full-size contract: listed once per process, not per plan
def _from_layout(layout: str, config_json: str) -> tuple[tuple[str, int], ...]:
    config = json.loads(config_json)
    entry = LAYOUT_CHECKERS.get(layout)
    if entry is None or entry.expected is None:
        raise RecipekitError(
            code="fit-layout-unknown",
            exit_code=ExitCode.INVALID_INPUT,
            message=f"no registered checkpoint layout {layout!r} lists its tensors",
            hint=f"registered: {', '.join(sorted(n for n, e in LAYOUT_CHECKERS.items() if e.expected))}",
        )
    return tuple((n, int(math.prod(s.shape) * DTYPE_SIZES[s.dtype])) for n, s in entry.expected(config).items())


def _cache_path(cache_dir: Path, repo: str, revision: str) -> Path:
    return cache_dir / "fit" / f"{repo.replace('/', '__')}@{revision}.json"


def from_hub(
    repo: str, revision: str, cache_dir: Path, timeout: float = 30.0
) -> tuple[dict[str, int], dict[str, Any], dict[str, Any]]:
    """(inventory, config, stats) of a hub repo at `revision`; stats says what was read and whether the cache answered."""
    path = _cache_path(cache_dir, repo, revision)
    if path.is_file():
        try:
            doc = bounded.read_json(path, "fit inventory cache", CACHE_MAX_BYTES)
            if isinstance(doc, dict) and isinstance(doc.get("tensors"), dict) and isinstance(doc.get("config"), dict):
                return (
                    dict(doc["tensors"]),
                    dict(doc["config"]),
                    {"cached": True, "shards": doc.get("shards", 0)},
                )
        except RecipekitError:
            pass  # a damaged cache entry is read again from the hub
    try:
        from huggingface_hub import HfApi  # lazy: optional dependency, pulls huggingface_hub
        from huggingface_hub.errors import HfHubHTTPError  # lazy: optional dependency, pulls huggingface_hub

        # the endpoint as the environment says now (huggingface_hub reads HF_ENDPOINT once, at import)
        api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)
        meta = api.get_safetensors_metadata(repo, revision=revision, timeout=timeout)
        cfg_path = api.hf_hub_download(repo, "config.json", revision=revision, cache_dir=str(cache_dir / "fit" / "hf"))
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise RecipekitError(
            code="fit-hub-unreachable",
            exit_code=ExitCode.FAILURE,
            message=f"could not read the shard headers of {repo}@{revision}: {type(e).__name__}: {str(e)[:160]}",
            hint="fetch the checkpoint (recipe fetch) and pass --checkpoint DIR, or set HF_ENDPOINT to a reachable hub",
        ) from None
    config = bounded.read_json(cfg_path, "config.json", 16 * 1024 * 1024)
    tensors: dict[str, int] = {}
    for fm in meta.files_metadata.values():
        for name, t in fm.tensors.items():
            tensors[name] = int(math.prod(t.shape) * DTYPE_SIZES[t.dtype])
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"tensors": tensors, "config": config, "shards": len(meta.files_metadata)}))
    return (
        tensors,
        config,
        {"cached": False, "shards": len(meta.files_metadata)},
    )


def config_from_folder(folder: Path) -> Optional[dict[str, Any]]:
    p = folder / "config.json"
    if not p.is_file():
        return None
    cfg = bounded.read_json(p, "config.json", 16 * 1024 * 1024)
    return cfg if isinstance(cfg, dict) else None
