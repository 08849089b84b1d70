"""Class: wrong-typed or misplaced input to the render, status, checkpoint, Engram and hybrid commands.

Each case ends in one error line with its code and the documented exit code (2 for invalid input,
6 for "not running"), never `error[internal-error]`, and nothing on disk changes:
- `render --out` onto an existing folder or into a missing one;
- a torn `server.json`: `status` says not running (6) and names the damaged record;
- an index whose `weight_map` value is a list: `checkpoint check` and `checkpoint convert`;
- Engram config fields of the wrong type or size (a string of layer ids, 10^9 heads);
- a hybrid or pack `quantization_config` that is a list.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.hostile.conftest import Sandbox, guard, refused
from tests.unit.test_engram_placement import make_model


def test_render_out_onto_an_existing_folder_is_refused(sandbox: Sandbox):
    d = sandbox.work / "outdir"
    d.mkdir()
    (d / "keep.txt").write_bytes(b"prior bytes\n")
    with guard(sandbox):
        res = sandbox.cli("render", "tiny-deepseek-cpu", "--out", d)
    refused(res, "out-is-a-folder", 2)
    assert (d / "keep.txt").read_bytes() == b"prior bytes\n" and sorted(os.listdir(d)) == ["keep.txt"]
    assert "--out" in res.err and "launch.sh" in res.err


def test_render_out_into_a_missing_folder_is_refused(sandbox: Sandbox):
    with guard(sandbox):
        res = sandbox.cli("render", "tiny-deepseek-cpu", "--out", sandbox.work / "nodir" / "launch.sh")
    refused(res, "out-folder-missing", 2)
    assert not (sandbox.work / "nodir").exists()


@pytest.mark.parametrize(
    "text", ['{"runner": "native", "pid": 12', "", "\x00\x01", "[]", '{"runner": "native"}'], ids=str
)
def test_a_torn_server_record_reads_as_not_running(sandbox: Sandbox, text: str):
    state = sandbox.home / "state" / "tiny-deepseek-cpu"
    state.mkdir(parents=True)
    (state / "server.json").write_text(text)
    with guard(sandbox):
        res = sandbox.cli("status", "tiny-deepseek-cpu")
        js = sandbox.cli("status", "tiny-deepseek-cpu", "--format", "json")
    assert res.code == 6 and js.code == 6, res.err
    assert "Traceback" not in res.err + js.err and "internal-error" not in res.err + js.err
    assert f"not running as far as recipekit can tell: the server record {state / 'server.json'} is damaged" in res.out
    doc = json.loads(js.out)
    assert doc["running"] is False and doc["damaged_record"]["path"] == str(state / "server.json")
    assert (state / "server.json").read_text() == text  # left for the user to look at


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory) -> Path:
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41

    out = tmp_path_factory.mktemp("wrong-types") / "tiny"
    make_tiny_dsv41(out, seed=0)
    return out


@pytest.mark.parametrize("value", [["model-00001-of-00016.safetensors"], 5, None, "", {"a": 1}], ids=repr)
def test_an_index_weight_map_value_that_is_not_a_file_name(sandbox: Sandbox, tiny_ckpt: Path, value):
    ck = sandbox.parent / "ck"
    shutil.copytree(tiny_ckpt, ck)
    p = ck / "model.safetensors.index.json"
    idx = json.loads(p.read_text())
    name = sorted(idx["weight_map"])[0]
    idx["weight_map"][name] = value
    p.write_text(json.dumps(idx))
    with guard(sandbox):
        check = sandbox.cli("checkpoint", "check", ck)
        conv = sandbox.cli("checkpoint", "convert", "--src", ck, "--dst", sandbox.parent / "out", "--no-progress")
    for res in (check, conv):
        refused(res, "index-bad-path", 2)
        assert name in res.err and "must be a file name" in res.err
    assert not (sandbox.parent / "out").exists()


ENGRAM_CONFIGS = [
    pytest.param({"engram_layer_ids": "1,3"}, "engram_layer_ids", id="layer-ids-string"),
    pytest.param({"engram_num_embeddings": ["a", "b"]}, "engram_num_embeddings", id="rows-strings"),
    pytest.param({"engram_n_heads": 10**9}, "engram_n_heads", id="heads-huge"),
    pytest.param({"engram_head_dim": "256"}, "engram_head_dim", id="head-dim-string"),
    pytest.param({"engram_max_ngram_size": True}, "engram_max_ngram_size", id="ngram-bool"),
]


@pytest.mark.parametrize("edit,field", ENGRAM_CONFIGS)
def test_engram_config_fields_of_the_wrong_type(sandbox: Sandbox, edit: dict, field: str):
    model = make_model(sandbox.parent / "model")
    conf = json.loads((model / "config.json").read_text())
    conf["text_config"].update(edit)
    (model / "config.json").write_text(json.dumps(conf))
    with guard(sandbox):
        place = sandbox.cli("engram", "place", "--from", model, "--out", sandbox.parent / "engram")
        verify = sandbox.cli("engram", "verify", model)
    for res in (place, verify):
        refused(res, "engram-config-invalid", 2)
        assert field in res.err
    assert not (sandbox.parent / "engram").exists()


def test_engram_index_weight_map_that_is_a_list(sandbox: Sandbox):
    model = make_model(sandbox.parent / "model")
    out = sandbox.parent / "engram"
    assert sandbox.cli("engram", "place", "--from", model, "--out", out).code == 0
    (out / "model.safetensors.index.json").write_text(json.dumps({"weight_map": [1, 2], "metadata": [3]}))
    with guard(sandbox):
        res = sandbox.cli("engram", "verify", out, "--model", model)
    assert res.code == 2 and "internal-error" not in res.err and "Traceback" not in res.err
    assert "rule engram-reduced-index" in res.out and "weight_map must be an object" in res.out


def test_hybrid_quantization_config_that_is_a_list(sandbox: Sandbox, tiny_ckpt: Path):
    pack_src = Path(__file__).resolve().parents[1] / "fixtures" / "exl3_real" / "tiny-exl3-mcg-3-2"
    official, pack, hyb = sandbox.parent / "official", sandbox.parent / "pack", sandbox.parent / "hybrid"
    shutil.copytree(tiny_ckpt, official)
    shutil.copytree(pack_src, pack)
    assert sandbox.cli("checkpoint", "assemble", "--official", official, "--exl3", pack, "--out", hyb).code == 0
    conf = json.loads((hyb / "config.json").read_text())
    conf["quantization_config"] = [1]
    (hyb / "config.json").write_text(json.dumps(conf))
    with guard(sandbox):
        res = sandbox.cli("checkpoint", "check", hyb, "--checkpoint-format", "hybrid", "--no-hash")
    assert res.code == 2 and "internal-error" not in res.err and "Traceback" not in res.err
    assert "config.json: quantization_config is not an object" in res.out
    pconf = json.loads((pack / "config.json").read_text())
    pconf["quantization_config"] = [1]
    (pack / "config.json").write_text(json.dumps(pconf))
    with guard(sandbox):
        res = sandbox.cli(
            "checkpoint", "assemble", "--official", official, "--exl3", pack, "--out", hyb.with_name("h2")
        )
    refused(res, "assemble-not-exl3", 2)


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda r: r.__setitem__("sources", [1]), id="sources-list"),
        pytest.param(lambda r: r["links"].__setitem__(next(iter(r["links"])), "x"), id="link-string"),
        pytest.param(lambda r: r.__setitem__("n_layers", "x"), id="n-layers-string"),
        pytest.param(lambda r: r.__setitem__("skip_weight_re", [1]), id="skip-re-list"),
    ],
)
def test_a_damaged_hybrid_record_is_refused_whole(sandbox: Sandbox, tiny_ckpt: Path, edit):
    pack_src = Path(__file__).resolve().parents[1] / "fixtures" / "exl3_real" / "tiny-exl3-mcg-3-2"
    official, pack, hyb = sandbox.parent / "official", sandbox.parent / "pack", sandbox.parent / "hybrid"
    shutil.copytree(tiny_ckpt, official)
    shutil.copytree(pack_src, pack)
    assert sandbox.cli("checkpoint", "assemble", "--official", official, "--exl3", pack, "--out", hyb).code == 0
    rec = json.loads((hyb / "hybrid-assembly.json").read_text())
    edit(rec)
    (hyb / "hybrid-assembly.json").write_text(json.dumps(rec))
    with guard(sandbox):
        res = sandbox.cli("checkpoint", "check", hyb, "--checkpoint-format", "hybrid", "--no-hash")
    refused(res, "hybrid-record-invalid", 2)
    assert "re-run `recipe checkpoint assemble`" in res.err
