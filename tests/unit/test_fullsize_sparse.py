"""A reduced full-size layout as sparse files (3 backbone layers, every tensor at its published size):
assemble and the checks handle holes, real sizes and offsets past 4 GiB, which the tiny fixtures never
reach (a layer's shard is ~7 GB, the 3-bit pack shard ~5 GB; its last codebook markers are read with pread at
offsets above 2^32)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from recipekit.checkpoint import dsv41
from recipekit.checkpoint.layout import check_layout
from recipekit.checkpoint.safetensors_io import DTYPE_SIZES, SafetensorsFile, read_index
from recipekit.errors import RecipekitError
from recipekit.hybrid.assemble import assemble, check_hybrid
from recipekit.hybrid.exl3 import CODEBOOK_MULT
from recipekit.hybrid.fullsize import FULL_TEXT, FULL_VISION, make_sparse_exl3, make_sparse_original

pytestmark = pytest.mark.slow

# three backbone layers with the roles of the real ones (SWA, then a ratio-2 KV + index source)
REDUCED = {
    "num_hidden_layers": 3,
    "compress_ratios": [0, 0, 2, 0, 0, 0],
    "kv_source_layer_ids": [2],
    "index_source_layer_ids": [2],
    "candidate_source_layer_id": 2,
    "engram_layer_ids": [1, 2],
    "dspark_target_layer_ids": [0, 1, 2],
}
FOUR_GIB = 1 << 32


@pytest.fixture(scope="module")
def sparse(tmp_path_factory):
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41

    base = tmp_path_factory.mktemp("fullsize")
    make_tiny_dsv41(base / "tiny", seed=0)
    orig = make_sparse_original(base / "tiny", base / "original", REDUCED)
    pack = make_sparse_exl3(base / "original", base / "exl3", markers_first=False)
    return base, orig, pack


def _far_markers(pack: Path) -> list[tuple[str, str, int]]:
    """(file, marker, absolute offset) of the markers past 4 GiB."""
    out = []
    for rel in read_index(pack).shards():
        with SafetensorsFile(pack / rel) as f:
            for n, t in f.tensors.items():
                if n.endswith(".mcg") and f.data_start + t.begin > FOUR_GIB:
                    out.append((rel, n, f.data_start + t.begin))
    return out


def test_the_reduced_layout_has_full_sizes_holes_and_offsets_past_4_gib(sparse):
    base, orig, pack = sparse
    assert (orig["shards"], pack["shards"]) == (11, 3)  # vision, embed, 3 layers, head, 3 mtp, 2 engram
    # each layer: 384 experts x 3 linears x (MXFP4 weight + E8M0 scale) at the published sizes
    per_expert = 3 * (2304 * 5120 // 2 + 2304 * 5120 // 32)
    layer0 = SafetensorsFile(base / "original" / "model-00003-of-00011.safetensors")
    assert layer0.file_size > 384 * per_expert > FOUR_GIB
    far = max(layer0.data_start + t.end for t in layer0.tensors.values())
    assert far == layer0.file_size
    # holes: the 3 pack shards and the 11 official ones together take a few MB of disk
    for folder in ("original", "exl3"):
        for p in (base / folder).glob("*.safetensors"):
            assert p.stat().st_blocks * 512 < 32 * 2**20 < p.stat().st_size
    assert len(_far_markers(base / "exl3")) > 100  # the 3-bit layer 2: its last ~185 experts


def test_check_and_assemble_read_past_4_gib(sparse, tmp_path):
    base, orig, _pack = sparse
    rep = check_layout(base / "original", "original")
    assert rep.ok, rep.problems
    assert (rep.tensors, rep.total_size) == (orig["tensors"], orig["payload"])
    r = assemble(base / "original", base / "exl3", tmp_path / "hybrid", hash_sources=False)
    assert r["tensor_bytes_written"] == 0
    assert r["tensors_by_source"]["exl3"] == 3 * 384 * 3 * 4
    # the index's total is the tensors' real bytes: sizes past 4 GiB summed without loss
    idx = json.loads((tmp_path / "hybrid" / "model.safetensors.index.json").read_text())
    assert idx["metadata"]["total_size"] == r["total_size"] > 10 * FOUR_GIB
    chk = check_hybrid(tmp_path / "hybrid", quick=True)
    assert chk.ok, chk.problems
    assert chk.total_size == r["total_size"]


def test_a_wrong_marker_past_4_gib_is_found_by_both(sparse, tmp_path):
    base, _orig, _pack = sparse
    pack = tmp_path / "exl3"
    make_sparse_exl3(base / "original", pack, markers_first=False)
    r = assemble(base / "original", pack, tmp_path / "hybrid", hash_sources=False)
    assert r["tensor_bytes_written"] == 0
    rel, name, at = _far_markers(pack)[-1]
    fd = os.open(pack / rel, os.O_WRONLY)
    try:
        assert os.pwrite(fd, (7).to_bytes(4, "little"), at) == 4
    finally:
        os.close(fd)
    with pytest.raises(RecipekitError) as e:
        assemble(base / "original", pack, tmp_path / "refused", hash_sources=False)
    assert e.value.code == "assemble-exl3-invalid"
    assert "exl3-marker-value" in e.value.message and name.rsplit(".", 1)[0] in e.value.message
    assert not (tmp_path / "refused").exists()
    chk = check_hybrid(tmp_path / "hybrid", quick=True)
    assert f"{name} holds 0x00000007, expected {CODEBOOK_MULT['mcg']:#010x}" in "\n".join(chk.problems)


def test_the_published_sizes_give_the_published_inventory():
    """The contract at the published sizes: 96,085 tensors, 510,286,023,000 B in 48 shards (the published
    checkpoint's index, DeepSeek-V4.1-Flash model.safetensors.index.json)."""
    cfg = {"text_config": dict(FULL_TEXT, vocab_size=129280), "vision_config": dict(FULL_VISION)}
    specs = dict(dsv41.vision_tensors(cfg))
    specs.update(dsv41.original_tensors(dsv41.Geometry.from_config(cfg)))
    assert len(specs) == 96085
    assert sum(math.prod(s.shape) * DTYPE_SIZES[s.dtype] for s in specs.values()) == 510_286_023_000
    assert len(dsv41.group_order({s.group for s in specs.values()})) == 48
