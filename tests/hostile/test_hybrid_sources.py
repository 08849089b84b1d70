"""Class: hybrid packs the vllm-exl3 plugin would refuse (`recipe checkpoint assemble`, `checkpoint check
--layout hybrid`).

- A tensor name held by two linked files is refused whichever source it comes from, official shards
  included: an official shard that also holds an EXL3 trellis under a routed expert's name (other bytes
  than the pack's) is refused by assembly (rule hybrid-one-source, exit 2, nothing written) and named
  by the check of a folder that holds it.
- The codebook named in the pack's quantization_config must be its markers' (rule
  exl3-codebook-config): refused by assembly, named by the check.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from recipekit.checkpoint.safetensors_io import SafetensorsFile, read_index, write_file
from tests.hostile.conftest import Sandbox, guard, refused

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "exl3_real"
PACK = REAL / "tiny-exl3-mcg-3-2"  # markers: mcg
STRAY = "layers.0.ffn.experts.0.w1.trellis"


@pytest.fixture(scope="module")
def tiny_official(tmp_path_factory) -> Path:
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41

    out = tmp_path_factory.mktemp("hostile-hybrid") / "official"
    make_tiny_dsv41(out, seed=0)
    return out


def _sources(sb: Sandbox, official: Path) -> tuple[Path, Path]:
    o, p = sb.parent / "official", sb.parent / "pack"
    shutil.copytree(official, o)
    shutil.copytree(PACK, p)
    return o, p


def _plant_trellis(official: Path, pack: Path) -> str:
    """Add the pack's trellis name, with other bytes, to the official shard holding layers.0.attn.wq_a."""
    rel = read_index(official).weight_map["layers.0.attn.wq_a.weight"]
    with SafetensorsFile(pack / read_index(pack).weight_map[STRAY]) as f:
        shape = tuple(f.tensors[STRAY].shape)
    with SafetensorsFile(official / rel) as f:
        arrays = {n: np.array(f.read_array(n)) for n in f.tensors}
        dtypes = {n: t.dtype for n, t in f.tensors.items()}
    arrays[STRAY] = np.full(shape, 7, np.int16)
    dtypes[STRAY] = "I16"
    write_file(official / rel, arrays, dtypes=dtypes, fsync=False)
    return rel


def _assemble(sb: Sandbox, official: Path, pack: Path, out: Path):
    return sb.cli("checkpoint", "assemble", "--official", str(official), "--exl3", str(pack), "--out", str(out))


def test_official_shard_holding_a_routed_trellis_is_refused(sandbox: Sandbox, tiny_official: Path):
    official, pack = _sources(sandbox, tiny_official)
    rel = _plant_trellis(official, pack)
    out = sandbox.parent / "hybrid"
    with guard(sandbox):
        res = _assemble(sandbox, official, pack, out)
    refused(res, "assemble-tensor-in-two-sources", 2)
    assert "rule hybrid-one-source" in res.err and STRAY in res.err and f"official {rel}" in res.err
    assert not out.exists()


def test_check_names_a_tensor_held_by_two_linked_files(sandbox: Sandbox, tiny_official: Path):
    official, pack = _sources(sandbox, tiny_official)
    out = sandbox.parent / "hybrid"
    assert _assemble(sandbox, official, pack, out).code == 0
    assert sandbox.cli("checkpoint", "check", str(out), "--checkpoint-format", "hybrid").code == 0
    rel = _plant_trellis(official, pack)
    # the record made to agree with the changed shard (as an assembly that let it through would have)
    rec = json.loads((out / "hybrid-assembly.json").read_text())
    data = (official / rel).read_bytes()
    rec["links"][rel].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (out / "hybrid-assembly.json").write_text(json.dumps(rec))
    with guard(sandbox):
        res = sandbox.cli("checkpoint", "check", str(out), "--checkpoint-format", "hybrid")
    assert res.code == 2, res.out
    line = next(ln for ln in res.out.splitlines() if "rule hybrid-one-source" in ln)
    assert STRAY in line and rel in line


def _pack_codebook(pack: Path, codebook: str) -> None:
    cfg = json.loads((pack / "config.json").read_text())
    cfg["quantization_config"]["codebook"] = codebook
    (pack / "config.json").write_text(json.dumps(cfg))


def test_pack_config_naming_the_other_codebook_is_refused(sandbox: Sandbox, tiny_official: Path):
    official, pack = _sources(sandbox, tiny_official)
    _pack_codebook(pack, "mul1")
    out = sandbox.parent / "hybrid"
    with guard(sandbox):
        res = _assemble(sandbox, official, pack, out)
    refused(res, "assemble-exl3-invalid", 2)
    assert "rule exl3-codebook-config" in res.err and "'mul1'" in res.err and "markers are mcg" in res.err
    assert "exl3.py@00031922" in res.err
    assert not out.exists()


def test_check_names_a_codebook_that_is_not_the_markers(sandbox: Sandbox, tiny_official: Path):
    official, pack = _sources(sandbox, tiny_official)
    out = sandbox.parent / "hybrid"
    assert _assemble(sandbox, official, pack, out).code == 0
    _pack_codebook(pack, "mul1")
    with guard(sandbox):
        res = sandbox.cli("checkpoint", "check", str(out), "--checkpoint-format", "hybrid")
    assert res.code == 2
    line = next(ln for ln in res.out.splitlines() if "rule exl3-codebook-config" in ln)
    assert "the exl3 pack's quantization_config names codebook 'mul1'" in line
