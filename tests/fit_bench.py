"""How long `recipe fit` takes from a cold cache (header-only reads from the hub) and warm, and how many bytes it
fetches against the checkpoint's size, on the local hub stand-in (recipekit/rehearse/hub.py) serving a checkpoint with
DeepSeek-V4.1-Flash's real tensor list (96,085 tensors, 510 GB: the original layout contract for the real
config) in 5 GB shards whose headers are real and whose bodies are never materialised (a whole-shard GET would
show in the bytes served). The planner is the CMP recipe's, run in this process as `recipe fit` runs it.

    .venv/bin/python -m tests.fit_bench [--runs N] [--shard-gb 5] [--format json]

Cold runs empty the cache first; the median of N runs of each is printed, with the ratio cold / warm.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

from recipekit.rehearse.hub import FakeHub, Repo

CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"
HUB_REPO, HUB_REV = "deepseek-ai/DeepSeek-V4.1-Flash-1017", "1bae0e10"


class VirtualShard:
    """A safetensors file of `size` bytes: its real header, then zeros that are only made when a range asks."""

    def __init__(self, header: bytes, size: int):
        self.head, self.size = header, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, sl: slice) -> bytes:
        start, stop, _ = sl.indices(self.size)
        if stop - start > 64 * 1024 * 1024:
            raise RuntimeError(f"a reader asked for {stop - start:,} bytes of a shard: not a header-only read")
        known = self.head[start:stop]
        return known + bytes(max(0, stop - start - len(known)))


class VirtualRepo(Repo):
    def entry(self, path: str) -> dict:
        data = self.files[path]
        if path not in self.lfs:
            return super().entry(path)
        oid = hashlib.sha256(data.head).hexdigest()  # type: ignore[union-attr]  # an id, not the body's hash
        return {
            "type": "file",
            "oid": oid[:40],
            "size": len(data),
            "path": path,
            "lfs": {"oid": oid, "size": len(data)},
        }


def build_repo(shard_bytes: int) -> tuple[VirtualRepo, int, int]:
    """(repo, checkpoint bytes, tensors) with DeepSeek-V4.1-Flash's tensors in shards of about `shard_bytes`."""
    from recipekit.backends import registry
    from recipekit.checkpoint.layout import LAYOUT_CHECKERS
    from recipekit.checkpoint.safetensors_io import DTYPE_SIZES
    from tests.unit.real_dsv41_config import REAL

    registry.load_layouts()
    expected = LAYOUT_CHECKERS["original"].expected(REAL)  # type: ignore[misc]
    shards: list[dict[str, tuple[str, tuple[int, ...], int]]] = [{}]
    used = 0
    for name, spec in expected.items():
        n = math.prod(spec.shape) * DTYPE_SIZES[spec.dtype]
        if used and used + n > shard_bytes:
            shards.append({})
            used = 0
        shards[-1][name] = (spec.dtype, tuple(spec.shape), n)
        used += n
    files: dict = {}
    weight_map: dict[str, str] = {}
    total = 0
    for i, group in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        header, off = {}, 0
        for name, (dtype, shape, n) in group.items():
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
            weight_map[name] = fname
            off += n
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        head = struct.pack("<Q", len(raw)) + raw
        files[fname] = VirtualShard(head, len(head) + off)
        total += len(head) + off
    files["model.safetensors.index.json"] = json.dumps({"metadata": {}, "weight_map": weight_map}).encode()
    files["config.json"] = json.dumps(REAL).encode()
    lfs = {n for n in files if n.endswith(".safetensors")}
    return VirtualRepo(HUB_REV, files, lfs), total, len(expected)


def run(runs: int, shard_gb: float) -> dict:
    from recipekit.catalog import load_recipe
    from recipekit.cli.fit import fit_for
    from recipekit.config import effective_config

    repo, total, n_tensors = build_repo(int(shard_gb * 1e9))
    shards = sum(1 for n in repo.files if n.endswith(".safetensors"))
    eff = effective_config(load_recipe(CMP), layout="tp4", environ={}, sets=())
    with tempfile.TemporaryDirectory() as tmp, FakeHub({HUB_REPO: repo}) as hub:
        os.environ.update(HF_ENDPOINT=hub.url, HF_HOME=str(Path(tmp) / "hf"), RECIPEKIT_HOME=str(Path(tmp) / "home"))
        os.environ.pop("HF_HUB_OFFLINE", None)
        import huggingface_hub.constants as hc

        hc.HF_HUB_OFFLINE = False
        from recipekit import paths

        cold, warm, fetched, requests = [], [], [], []
        for _ in range(runs):
            cache = paths.cache_dir() / "fit"
            if cache.exists():
                import shutil

                shutil.rmtree(cache)
            before, log0 = hub.served_bytes, len(hub.log)
            t0 = time.perf_counter()
            r = fit_for(eff)
            cold.append(time.perf_counter() - t0)
            fetched.append(hub.served_bytes - before)
            requests.append(len(hub.log) - log0)
            assert "hub headers" in r.notes[0] and "shards read" in r.notes[0], r.notes[0]
            log1 = len(hub.log)
            t0 = time.perf_counter()
            w = fit_for(eff)
            warm.append(time.perf_counter() - t0)
            assert len(hub.log) == log1 and "(cached)" in w.notes[0], "a warm plan reached the hub"
            assert w.to_dict() == {**r.to_dict(), "notes": w.notes}
    cold_s, warm_s = statistics.median(cold), statistics.median(warm)
    return {
        "checkpoint_bytes": total,
        "shards": shards,
        "tensors": n_tensors,
        "bytes_fetched_cold": statistics.median(fetched),
        "fetched_fraction": statistics.median(fetched) / total,
        "requests_cold": statistics.median(requests),
        "cold_s": round(cold_s, 3),
        "warm_s": round(warm_s, 3),
        "cold_over_warm": round(cold_s / warm_s, 1),
        "runs": runs,
        "weights_per_card_gib": round(r.weights_per_rank_bytes / 1024**3, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--shard-gb", type=float, default=5.0)
    ap.add_argument("--format", choices=["human", "json"], default="human")
    a = ap.parse_args(argv)
    res = run(a.runs, a.shard_gb)
    if a.format == "json":
        print(json.dumps(res, indent=2))
        return 0
    print(
        f"recipe fit {CMP} on the hub stand-in: {res['tensors']:,} tensors in {res['shards']} shards, "
        f"{res['checkpoint_bytes'] / 1e9:,.1f} GB\n"
        f"  cold (header-only reads): {res['cold_s'] * 1000:,.0f} ms, {res['bytes_fetched_cold']:,.0f} B fetched "
        f"({res['fetched_fraction'] * 100:.5f} % of the checkpoint) in {res['requests_cold']:.0f} requests\n"
        f"  warm (cached inventory):  {res['warm_s'] * 1000:,.0f} ms  (cold / warm = {res['cold_over_warm']}x)\n"
        f"  median of {res['runs']} runs each; planned weights per card {res['weights_per_card_gib']} GiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
