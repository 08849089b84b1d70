"""`recipe fit`'s hub inventory: header-only reads. Against the fake hub on loopback (recipekit/rehearse/hub.py, which
honours bounded Range requests as the Hub does), huggingface_hub's `get_safetensors_metadata` reads the index and
the first 100,001 bytes of each shard, never the tensors; the inventory equals the shards' tensor sizes; a second
plan is answered from the cache with no request at all. The figures (bytes fetched against the checkpoint's
size, cold and warm time) are printed."""

from __future__ import annotations

import json
import time

import numpy as np
from safetensors.numpy import save

from recipekit.rehearse.hub import FakeHub, Repo
from recipekit.tools.fit import inventory

COMMIT = "c0ffee" + "0" * 34
REPO_ID = "acme/sharded"


def _repo() -> tuple[Repo, dict[str, int]]:
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for s in range(3):
        name = f"model-{s + 1:05d}-of-00003.safetensors"
        tensors = {
            f"layers.{s}.ffn.experts.{e}.w1.weight": np.full((256, 1024), s + e, dtype=np.uint8) for e in range(8)
        }
        tensors[f"layers.{s}.attn.wq_a.weight"] = np.zeros((512, 512), dtype=np.float32)
        files[name] = save(tensors)
        for t, a in tensors.items():
            weight_map[t] = name
            sizes[t] = a.nbytes
    files["model.safetensors.index.json"] = json.dumps({"metadata": {}, "weight_map": weight_map}).encode()
    files["config.json"] = json.dumps({"model_type": "deepseek_v3", "num_hidden_layers": 3}).encode()
    lfs = {n for n in files if n.endswith(".safetensors")}
    return Repo(COMMIT, files, lfs), sizes


def test_header_only_inventory_then_cache(tmp_path, monkeypatch) -> None:
    repo, sizes = _repo()
    total = sum(len(v) for k, v in repo.files.items() if k.endswith(".safetensors"))
    with FakeHub({REPO_ID: repo}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        import huggingface_hub.constants as hc  # read once at import: an earlier test may have imported it offline

        monkeypatch.setattr(hc, "HF_HUB_OFFLINE", False)
        t0 = time.perf_counter()
        tensors, config, stats = inventory.from_hub(REPO_ID, COMMIT, tmp_path / "cache")
        cold = time.perf_counter() - t0
        fetched = hub.served_bytes
        assert tensors == sizes and config["num_hidden_layers"] == 3
        assert stats["cached"] is False and stats["shards"] == 3
        shard_gets = [r for m, p, r in hub.log if m == "GET" and p.endswith(".safetensors")]
        assert shard_gets and all(r and r.startswith("bytes=") for r in shard_gets)  # never a whole shard
        assert fetched < 3 * 100_001 + 64 * 1024 and fetched < total / 5
        requests = len(hub.log)
        t0 = time.perf_counter()
        again, _, stats2 = inventory.from_hub(REPO_ID, COMMIT, tmp_path / "cache")
        warm = time.perf_counter() - t0
        assert again == sizes and stats2["cached"] is True and len(hub.log) == requests
    print(
        f"\nhub inventory: {fetched:,} B fetched of {total:,} B of shards ({fetched / total:.1%}), "
        f"cold {cold * 1000:.0f} ms, warm {warm * 1000:.1f} ms"
    )
