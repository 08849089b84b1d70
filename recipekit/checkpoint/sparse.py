"""Checkpoint layouts as sparse files: real safetensors headers and real file sizes, holes for the
tensor bytes (a few MB of disk for a 510 GB layout). For timing the commands that read headers,
indexes and a few values at full size (`recipe checkpoint bench-full`, recipekit.hybrid.fullsize)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from recipekit.atomic import atomic_write_text
from recipekit.checkpoint import dsv41
from recipekit.checkpoint.safetensors_io import TensorSpec, build_header, write_index


def write_sparse_shard(path: Path, specs: list[TensorSpec], real: dict[str, bytes] | None = None) -> int:
    """A safetensors file with `specs` laid out in order: the real header, holes for the tensor bytes,
    `real[name]` written in place. Returns the file size."""
    head = build_header(specs, {"format": "pt"})
    pos: dict[str, int] = {}
    at = len(head)
    for s in specs:
        pos[s.name] = at
        at += s.nbytes
    with open(path, "wb") as f:
        f.write(head)
        for name, data in (real or {}).items():
            f.seek(pos[name])
            f.write(data)
        f.truncate(at)
    return at


def write_sparse_layout(out: Path, specs: dict[str, dsv41.Spec], config: dict[str, Any]) -> dict[str, int]:
    """`specs` in one sparse shard per group (dsv41's shard order and names), the index and config.json
    into `out` (created). Returns tensors, shards and payload bytes."""
    groups = dsv41.group_order({s.group for s in specs.values()})
    names = dsv41.shard_names(groups)
    members: dict[str, list[TensorSpec]] = {g: [] for g in groups}
    for n, s in specs.items():
        members[s.group].append(TensorSpec(n, s.dtype, s.shape))
    out.mkdir(parents=True)
    weight_map: dict[str, str] = {}
    total = 0
    for g in groups:
        write_sparse_shard(out / names[g], members[g])
        for ts in members[g]:
            weight_map[ts.name] = names[g]
            total += ts.nbytes
    write_index(out, weight_map, total)
    atomic_write_text(out / "config.json", json.dumps(config, indent=2) + "\n", sync_dir="ignore")
    return {"tensors": len(weight_map), "shards": len(groups), "payload": total}
