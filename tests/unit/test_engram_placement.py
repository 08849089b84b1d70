"""The Engram folder the sm_80 engine reads: placement (hard links, verified resumable copies, reduced
index, config.json), the engine's rules with one planted fault per rule, the row reader against the
shard bytes, and `check --checkpoint-format hybrid` on the assembled tiny checkpoint."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from recipekit.checkpoint.engram_addressing import EngramConfig, EngramLayout
from recipekit.checkpoint.safetensors_io import INDEX_NAME, write_file, write_index
from recipekit.errors import RecipekitError
from recipekit.hybrid.engram import placement as P
from recipekit.hybrid.engram import rules as R
from recipekit.hybrid.engram.reader import ShardRowReader

LAYERS = (1, 3)
HEAD = 256  # the engine's fixed row width (rules.ENGINE_ROW_WIDTH)


def _rows(head: int = HEAD) -> list[int]:
    cfg = EngramConfig(LAYERS, (0, 0), 4, 61, 3, head, 2)
    return [sum(p) for p in EngramLayout.build(cfg, check=False).primes]


def make_model(
    d: Path,
    *,
    scale_dtype: str = "F8_E8M0",
    rows_delta: int = 0,
    split_layer3: bool = False,
    scale_cols: int | None = None,
    head: int = HEAD,
    scale_codes: tuple[int, int] = (120, 135),
    weight_codes: tuple[int, int] = (0, 126),
) -> Path:
    """A model folder: a backbone shard, one shard per Engram table, index, config."""
    d.mkdir(parents=True, exist_ok=True)
    rows = _rows(head)
    scale_cols = head // 32 if scale_cols is None else scale_cols
    conf = {
        "text_config": {
            "engram_layer_ids": list(LAYERS),
            "engram_num_embeddings": rows,
            "engram_max_ngram_size": 4,
            "engram_vocab_size": 61,
            "engram_n_heads": 3,
            "engram_head_dim": head,
            "engram_pad_token_id": 2,
            "num_hidden_layers": 4,
        }
    }
    (d / "config.json").write_text(json.dumps(conf))
    rng = np.random.default_rng(3)
    wm: dict[str, str] = {}
    total = 0
    write_file(d / "model-00001-of-00003.safetensors", {"embed.weight": np.ones((4, 4), np.float32)}, fsync=False)
    wm["embed.weight"] = "model-00001-of-00003.safetensors"
    total += 64
    for i, (L, n) in enumerate(zip(LAYERS, rows)):
        n += rows_delta if L == 3 else 0
        w = rng.integers(weight_codes[0], weight_codes[1], (n, head), dtype=np.uint8)
        s = rng.integers(scale_codes[0], scale_codes[1], (n, scale_cols), dtype=np.uint8)
        shard = f"model-0000{i + 2}-of-00003.safetensors"
        names = (R.weight_name(L), R.scale_name(L))
        if split_layer3 and L == 3:
            write_file(d / shard, {names[0]: w}, dtypes={names[0]: "F8_E4M3"}, fsync=False)
            write_file(d / "model-extra.safetensors", {names[1]: s}, dtypes={names[1]: scale_dtype}, fsync=False)
            wm[names[0]], wm[names[1]] = shard, "model-extra.safetensors"
        else:
            write_file(
                d / shard, {names[0]: w, names[1]: s}, dtypes={names[0]: "F8_E4M3", names[1]: scale_dtype}, fsync=False
            )
            wm[names[0]] = wm[names[1]] = shard
        total += w.nbytes + s.nbytes
    write_index(d, wm, total)
    return d


def _rules_of(problems: list[str]) -> set[str]:
    return {p.split(":")[0].removeprefix("rule ") for p in problems}


@pytest.fixture()
def model(tmp_path):
    return make_model(tmp_path / "model")


def test_place_hardlinks_reduced_index_config_and_verify(model, tmp_path):
    out = tmp_path / "engram"
    rep = P.place_engram(model, out)
    assert sorted(rep["shards"]) == ["model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"]
    assert {v["how"] for v in rep["shards"].values()} == {"hardlink"}
    for name in rep["shards"]:
        assert os.stat(out / name).st_ino == os.stat(model / name).st_ino
    idx = json.loads((out / INDEX_NAME).read_text())
    assert sorted(idx["weight_map"]) == sorted(R.engram_tensor_names(LAYERS))
    rows = _rows()
    assert idx["metadata"]["total_size"] == sum(n * (HEAD + HEAD // 32) for n in rows)
    assert (out / "config.json").read_bytes() == (model / "config.json").read_bytes()
    tables, problems = R.check_placement(out, model)
    assert problems == [] and sorted(tables) == list(LAYERS) and tables[3].rows == rows[1]
    # re-run: nothing changes, the model folder is untouched
    before = sorted(p.name for p in model.iterdir())
    assert P.place_engram(model, out)["shards"] == rep["shards"]
    assert sorted(p.name for p in model.iterdir()) == before


def test_copy_is_verified_and_resumes(model, tmp_path, monkeypatch):
    out = tmp_path / "engram"
    out.mkdir()
    shard = "model-00002-of-00003.safetensors"
    src = (model / shard).read_bytes()
    (out / P.PARTIAL_DIR).mkdir()
    (out / P.PARTIAL_DIR / shard).write_bytes(src[:1000])  # an interrupted copy
    msgs: list[str] = []
    rep = P.place_engram(model, out, mode="copy", progress=msgs.append)
    assert any("resuming the copy at 1,000" in m for m in msgs)
    assert rep["shards"][shard]["how"] == "copy" and (out / shard).read_bytes() == src
    assert os.stat(out / shard).st_ino != os.stat(model / shard).st_ino
    assert not (out / P.PARTIAL_DIR).exists()
    assert R.check_placement(out, model)[1] == []
    # a re-run trusts the recorded sha256 of an unchanged copy: no new "copying" line
    msgs.clear()
    P.place_engram(model, out, mode="copy", progress=msgs.append)
    assert not any("copying" in m for m in msgs)
    # a partial file with wrong bytes is caught by the sha256 comparison and removed
    (out / shard).unlink()
    (out / P.PARTIAL_DIR).mkdir()
    (out / P.PARTIAL_DIR / shard).write_bytes(b"\0" * 1000)
    with pytest.raises(RecipekitError) as e:
        P.place_engram(model, out, mode="copy")
    assert e.value.code == "engram-copy-mismatch" and not (out / P.PARTIAL_DIR / shard).exists()
    P.place_engram(model, out, mode="copy")
    assert (out / shard).read_bytes() == src


def test_link_mode_refuses_another_filesystem(model, tmp_path, monkeypatch):
    real_link = os.link

    def no_link(a, b):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    with pytest.raises(RecipekitError) as e:
        P.place_engram(model, tmp_path / "engram", mode="link")
    assert e.value.code == "engram-link-failed"
    monkeypatch.setattr(os, "link", real_link)


# one planted fault per rule, each named -------------------------------------------------------


def _placed(model: Path, tmp_path: Path) -> Path:
    out = tmp_path / "engram"
    P.place_engram(model, out, mode="copy")
    return out


def _edit_index(folder: Path, fn) -> None:
    idx = json.loads((folder / INDEX_NAME).read_text())
    fn(idx)
    (folder / INDEX_NAME).write_text(json.dumps(idx))


def test_rule_index(model):
    _edit_index(model, lambda i: i["weight_map"].pop(R.scale_name(3)))
    assert _rules_of(R.locate_tables(model)[1]) == {"engram-index"}


def test_rule_same_shard(tmp_path):
    m = make_model(tmp_path / "m", split_layer3=True)
    probs = R.locate_tables(m)[1]
    assert _rules_of(probs) == {"engram-same-shard"} and "layer 3" in probs[0]


def test_rule_dtype_shape(tmp_path):
    m = make_model(tmp_path / "m", scale_dtype="U8")
    probs = R.locate_tables(m)[1]
    assert _rules_of(probs) == {"engram-dtype-shape"} and "expected F8_E8M0 [rows, 8]" in probs[0]
    m2 = make_model(tmp_path / "m2", scale_cols=4)
    assert _rules_of(R.locate_tables(m2)[1]) == {"engram-dtype-shape"}


def test_rule_offsets(model):
    shard = model / "model-00003-of-00003.safetensors"
    size = shard.stat().st_size
    with open(shard, "r+b") as f:
        f.truncate(size - 10)
    probs = R.locate_tables(model)[1]
    assert _rules_of(probs) == {"engram-offsets"}


def test_rule_rows(tmp_path):
    m = make_model(tmp_path / "m", rows_delta=-1)
    probs = R.locate_tables(m)[1]
    assert _rules_of(probs) == {"engram-rows"} and "the addressing needs" in probs[0]


def test_rule_location(model, tmp_path):
    out = _placed(model, tmp_path)
    shard = "model-00002-of-00003.safetensors"
    (out / shard).unlink()
    (out / shard).symlink_to(model / shard)
    assert _rules_of(R.check_placement(out, model)[1]) == {"engram-location"}


def test_rule_reduced_index(model, tmp_path):
    out = _placed(model, tmp_path)
    _edit_index(out, lambda i: i["weight_map"].update({"embed.weight": "model-00002-of-00003.safetensors"}))
    probs = R.check_placement(out, model)[1]
    assert _rules_of(probs) == {"engram-reduced-index"} and "extra: embed.weight" in probs[0]


def test_rule_config(model, tmp_path):
    out = _placed(model, tmp_path)
    (out / "config.json").unlink()
    assert _rules_of(R.check_placement(out, model)[1]) == {"engram-config"}


def test_rule_same_bytes(model, tmp_path):
    out = _placed(model, tmp_path)
    shard = out / "model-00003-of-00003.safetensors"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1  # same size, one flipped bit in the last scale row
    shard.write_bytes(bytes(data))
    assert _rules_of(R.check_placement(out, model)[1]) == {"engram-same-bytes"}
    assert R.check_placement(out, model, hash_bytes=False)[1] == []  # --quick compares sizes only
    assert R.not_checked(model, hash_bytes=False) and R.not_checked(None, True) and not R.not_checked(model, True)


def test_rule_engine_geometry(tmp_path):
    m = make_model(tmp_path / "m", head=64)  # the default tiny checkpoint's width
    assert R.locate_tables(m)[1] == []  # consistent with its own config ...
    out = tmp_path / "engram"
    P.place_engram(m, out)
    probs = R.check_placement(out, m)[1]  # ... but the engine reads only 256-wide rows
    assert _rules_of(probs) == {"engram-engine-geometry"}
    assert "engram_head_dim 64" in probs[0] and "[rows, 256] with [rows, 8]" in probs[0]
    assert "engram_ssd.py:127" in R.RULES["engram-engine-geometry"].source


def test_rule_skip_exact(model, tmp_path):
    out = _placed(model, tmp_path)
    exact = r"^layers\.(1|3)\.engram\.embed\.(weight|scale)$"
    assert R.check_placement(out, model, skip_re=exact)[1] == []
    loose = R.check_placement(out, model, skip_re=r"engram|embed")[1]
    assert _rules_of(loose) == {"engram-skip-exact"} and "also skips 1 non-Engram" in loose[0]
    short = R.check_placement(out, model, skip_re=r"^layers\.1\.engram")[1]
    assert _rules_of(short) == {"engram-skip-exact"} and "layers.3.engram.embed.scale" in short[0]


def test_every_rule_has_a_source_and_a_planted_fault():
    tested = {
        "engram-index",
        "engram-same-shard",
        "engram-dtype-shape",
        "engram-offsets",
        "engram-engine-geometry",
        "engram-rows",
        "engram-location",
        "engram-reduced-index",
        "engram-config",
        "engram-same-bytes",
        "engram-skip-exact",
    }
    assert set(R.RULES) == tested
    assert all(r.source and r.text for r in R.RULES.values())


def test_verify_cli_names_the_rule(model, tmp_path, run_cli):
    out = _placed(model, tmp_path)
    code, stdout, _ = run_cli("engram", "verify", str(out), "--model", str(model))
    assert code == 0 and stdout.startswith("ENGRAM_OK")
    (out / "config.json").unlink()
    code, stdout, _ = run_cli("engram", "verify", str(out), "--model", str(model))
    assert code == 2 and "rule engram-config:" in stdout


# the reader reads the engine's layout ----------------------------------------------------------


def test_reader_rows_match_the_tensors(model):
    from recipekit.checkpoint.codecs import ENGRAM_BLOCK, fp8_dequant_f32
    from recipekit.checkpoint.safetensors_io import Checkpoint

    ids = np.array([5, 0, _rows()[1] - 1, 5, 77], dtype=np.int64)
    with Checkpoint(model) as c:
        w = np.asarray(c.tensor_file(R.weight_name(3)).read_array(R.weight_name(3))).view(np.uint8)
        s = np.asarray(c.tensor_file(R.scale_name(3)).read_array(R.scale_name(3))).view(np.uint8)
    for threads, job in ((1, 64), (4, 2)):
        with ShardRowReader(model, threads=threads, job_rows=job) as r:
            gw, gs = r.rows(3, ids)
            assert np.array_equal(gw, w[ids]) and np.array_equal(gs, s[ids])
            # scale codes 120..134 are ordinary: the engine's rule equals 2**(code-127)
            assert np.array_equal(r.dequantized(3, ids), fp8_dequant_f32(w[ids], s[ids], ENGRAM_BLOCK))
            with pytest.raises(RecipekitError) as e:
                r.rows(3, [_rows()[1]])
            assert e.value.code == "engram-row-out-of-range"


def _engine_rule_scale(code: int) -> float:
    """The engine's E8M0 rule as written in rules.ENGINE_E8M0 (data + source), not the bit-cast."""
    e = R.ENGINE_E8M0
    return e.code_0 if code == 0 else e.code_255 if code == 255 else float(np.ldexp(1.0, code - e.bias))


def test_reader_dequant_equals_the_engine_on_all_256_scale_codes(tmp_path):
    import ml_dtypes

    assert "engram_ssd.py:146, 219-223" in R.ENGINE_E8M0.source
    assert (R.ENGINE_E8M0.code_0, R.ENGINE_E8M0.code_255) == (0.0, float("inf"))
    m = make_model(tmp_path / "m", scale_codes=(0, 256), weight_codes=(0, 256))
    n = _rows()[1]
    ids = np.arange(n, dtype=np.int64)
    with ShardRowReader(m) as r:
        w, s = r.rows(3, ids)
        got = r.dequantized(3, ids)
    assert set(np.unique(s).tolist()) == set(range(256)) and set(np.unique(w).tolist()) == set(range(256))
    scale = np.array([_engine_rule_scale(c) for c in range(256)], np.float32)[s]
    with np.errstate(over="ignore", invalid="ignore"):
        want = w.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * np.repeat(scale, 32, axis=1)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))  # bit-equal, signed zeros too
    # the two codes where a plain 2**(code-127) differs: 0 gives (signed) zero, 255 gives +-inf (or NaN for 0 x inf)
    blocks = np.repeat(s, 32, axis=1)
    assert np.all(got[(blocks == 0) & ok] == 0.0)
    finite_nonzero = np.isfinite(w.view(ml_dtypes.float8_e4m3fn).astype(np.float32)) & (w % 128 != 0)
    assert np.all(np.isinf(got[(blocks == 255) & finite_nonzero]))


def test_reader_refuses_a_broken_rule(tmp_path):
    m = make_model(tmp_path / "m", rows_delta=1)
    with pytest.raises(RecipekitError) as e:
        ShardRowReader(m)
    assert e.value.code == "engram-rule-failed" and "rule engram-rows" in e.value.message


# the assembled tiny hybrid checkpoint ------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_hybrid(tmp_path_factory):
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41
    from recipekit.hybrid.assemble import assemble
    from recipekit.hybrid.exl3 import make_tiny_exl3

    d = tmp_path_factory.mktemp("tiny-hybrid")
    make_tiny_dsv41(d / "orig")
    make_tiny_exl3(d / "orig", d / "exl3")
    assemble(d / "orig", d / "exl3", d / "hyb")
    return d


def test_tiny_hybrid_check_and_prepare_end_to_end(tiny_hybrid, tmp_path, run_cli):
    hyb = tiny_hybrid / "hyb"
    code, out, _ = run_cli("checkpoint", "check", str(hyb), "--checkpoint-format", "hybrid")
    assert code == 0 and out.startswith("LAYOUT_OK")
    eng = tmp_path / "engram"
    code, out, err = run_cli("engram", "place", "--from", str(hyb), "--out", str(eng))
    assert code == 0, err
    code, out, _ = run_cli("checkpoint", "check", str(hyb), "--checkpoint-format", "hybrid", "--engram-dir", str(eng))
    # the default tiny's tables are 64 wide: consistent with its config, but not what the engine reads
    assert code == 2 and "rule engram-engine-geometry:" in out
    assert [ln for ln in out.splitlines() if ln.startswith("  rule ")] == [
        next(ln for ln in out.splitlines() if "engram-engine-geometry" in ln)
    ]
    code, out, _ = run_cli("engram", "verify", str(eng), "--model", str(hyb))
    assert code == 2 and "rule engram-engine-geometry:" in out
    (eng / "config.json").unlink()
    code, out, _ = run_cli("checkpoint", "check", str(hyb), "--checkpoint-format", "hybrid", "--engram-dir", str(eng))
    assert code == 2 and "rule engram-config:" in out


def test_tiny_hybrid_check_names_an_engram_rule(tiny_hybrid, tmp_path, run_cli):
    hyb = tmp_path / "hyb"
    shutil.copytree(tiny_hybrid / "hyb", hyb, symlinks=True)
    for p in hyb.iterdir():  # relative links: re-point them at the original sources
        if p.is_symlink():
            t = os.readlink(p)
            p.unlink()
            p.symlink_to(os.path.relpath((tiny_hybrid / "hyb" / t).resolve(), hyb))
    idx = json.loads((hyb / INDEX_NAME).read_text())
    conf = json.loads((hyb / "config.json").read_text())
    L = conf["text_config"]["engram_layer_ids"][0]
    other = next(v for k, v in idx["weight_map"].items() if "engram.embed" not in k)
    idx["weight_map"][R.scale_name(L)] = other
    (hyb / INDEX_NAME).write_text(json.dumps(idx))
    code, out, _ = run_cli("checkpoint", "check", str(hyb), "--checkpoint-format", "hybrid", "--no-hash")
    assert code == 2 and "rule engram-same-shard:" in out


def test_model_folder_json_is_read_through_the_bounded_reader(tmp_path):
    with pytest.raises(RecipekitError) as e:
        R.read_json(tmp_path / INDEX_NAME, INDEX_NAME)
    assert e.value.code == "engram-file-missing" and e.value.exit_code == 6
    (tmp_path / INDEX_NAME).mkdir()
    with pytest.raises(RecipekitError) as e:
        R.read_json(tmp_path / INDEX_NAME, INDEX_NAME)
    assert e.value.code == "engram-file-invalid" and "is a directory" in e.value.message
    (tmp_path / "config.json").write_text("[" * 100_000)
    with pytest.raises(RecipekitError) as e:
        R.read_json(tmp_path / "config.json", "config.json")
    assert e.value.code == "engram-file-invalid" and "nests too deeply" in e.value.message
    (tmp_path / "config.json").write_text("[]")
    with pytest.raises(RecipekitError) as e:
        R.read_json(tmp_path / "config.json", "config.json")
    assert e.value.code == "engram-file-invalid" and "not a JSON object" in e.value.message
    (tmp_path / "config.json").write_text('{"a": 1}')
    assert R.read_json(tmp_path / "config.json", "config.json") == {"a": 1}
