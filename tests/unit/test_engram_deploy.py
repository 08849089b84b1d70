"""The CMP recipe's Engram deployment: the apply plan (no pack step; place + verify), the opt-in engine
settings and their constraints, the other-disk bind mount, the doctor's Engram checks, and rows per
rank under TP4 / PP4 as the engine splits them."""

from __future__ import annotations

import json

import pytest

from recipekit.hybrid.engram import ranks as K

CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"
# the Engram tables (SSD row store) and the unmapped MXFP4 experts of the linked official shards
EXACT = (
    r"^layers\.(1|14)\.engram\.embed\.(weight|scale)$|^layers\.[0-9]+\.ffn\.experts\.[0-9]+\.w[123]\.(weight|scale)$"
)


@pytest.fixture
def home(tmp_path, monkeypatch) -> dict:
    h = str(tmp_path / "home")
    monkeypatch.setenv("RECIPEKIT_HOME", h)
    return {"RECIPEKIT_HOME": h}


@pytest.mark.parametrize("layout", ["tp4", "pp4"])
def test_plan_places_and_verifies_the_engram_shards(run_cli, home, layout):
    code, out, err = run_cli("apply", CMP, "--layout", layout, "--dry-run", env=home)
    assert code == 0, err
    assert "engram pack" not in out and "--ranks" not in out
    h = home["RECIPEKIT_HOME"]
    place = next(line for line in out.splitlines() if "-m recipekit engram place" in line)
    assert (
        f"--from {h}/models/DeepSeek-V4.1-Flash-1017-hybrid --out {h}/models/DeepSeek-V4.1-Flash-1017-engram" in place
    )
    verify = next(line for line in out.splitlines() if "-m recipekit engram verify" in line)
    assert (
        f"verify {h}/models/DeepSeek-V4.1-Flash-1017-engram --model {h}/models/DeepSeek-V4.1-Flash-1017-hybrid"
        in verify
    )
    assert out.index("checkpoint assemble") < out.index("engram place") < out.index("engram verify")


def test_other_disk_adds_the_bind_mount_and_copies_there(run_cli, home, tmp_path):
    disk = str(tmp_path / "nvme2" / "engram")
    code, out, err = run_cli("apply", CMP, "--dry-run", "--set", f"ENGRAM_DISK_DIR={disk}", env=home)
    assert code == 0, err
    assert f"-v {disk}:/models/DeepSeek-V4.1-Flash-1017-engram:ro" in out
    h = home["RECIPEKIT_HOME"]
    place = next(line for line in out.splitlines() if "-m recipekit engram place" in line)
    assert f"--out {h}/models/DeepSeek-V4.1-Flash-1017-engram --disk-dir {disk}" in place
    verify = next(line for line in out.splitlines() if "-m recipekit engram verify" in line)
    assert verify.rstrip().endswith(f"--disk-dir {disk}")
    code, out, err = run_cli("render", CMP, "--artifact", "docker", env=home)
    assert code == 0 and ":/models/DeepSeek-V4.1-Flash-1017-engram:ro" not in out


def test_skip_regex_and_model_dir_are_opt_in_and_constrained(run_cli, home):
    code, out, _ = run_cli("render", CMP, "--artifact", "env", env=home)
    assert code == 0 and "DSV41_SKIP_WEIGHT_RE" not in out and "DSV41_MODEL_DIR" not in out
    code, out, err = run_cli(
        "render",
        CMP,
        "--artifact",
        "env",
        "--set",
        f"DSV41_SKIP_WEIGHT_RE={EXACT}",
        "--set",
        "DSV41_MODEL_DIR=/models/DeepSeek-V4.1-Flash-1017-engram",
        env=home,
    )
    assert code == 0, err
    assert "DSV41_SKIP_WEIGHT_RE" in out and "DSV41_MODEL_DIR=/models/DeepSeek-V4.1-Flash-1017-engram" in out
    code, _, err = run_cli("render", CMP, "--set", "DSV41_SKIP_WEIGHT_RE=engram", env=home)
    assert code == 2 and "error[constraint-engram-skip-exact]" in err
    code, _, err = run_cli(
        "render", CMP, "--set", f"DSV41_SKIP_WEIGHT_RE={EXACT}", "--set", "DSV41_ENGRAM_STORAGE=ram", env=home
    )
    assert code == 2 and "error[constraint-engram-skip-needs-ssd]" in err
    code, _, err = run_cli("render", CMP, "--set", "DSV41_MODEL_DIR=/models/other", env=home)
    assert code == 2 and "error[constraint-engram-model-dir]" in err


def _eff(*sets: str):
    from recipekit.cli.doctor import effective_for

    return effective_for(CMP, None, None, list(sets))


def test_doctor_warns_when_tables_may_load_into_memory(home):
    from recipekit.hybrid.engram.fitness import doctor_checks

    by_id = {c.id: c for c in doctor_checks(_eff())}
    assert by_id["engram-memory"].status == "WARN" and "DSV41_SKIP_WEIGHT_RE is unset" in by_id["engram-memory"].message
    assert by_id["engram-disk-rate"].status == "SKIP" and "recipe engram bench --dir" in by_id["engram-disk-rate"].hint
    by_id = {c.id: c for c in doctor_checks(_eff(f"DSV41_SKIP_WEIGHT_RE={EXACT}"))}
    assert by_id["engram-memory"].status == "OK"


def test_doctor_reads_the_cached_disk_rate(home):
    from recipekit.hybrid.engram.deploy import from_effective
    from recipekit.hybrid.engram.fitness import doctor_checks, save_measurement

    d = from_effective(_eff())
    assert d.published_prefill_tps == 2416 and d.rows_per_token == 48
    save_measurement(d.engram_dir, {"engine_prefill_rows_per_s": 60_000.0, "date": "2026-12-01"})
    c = {c.id: c for c in doctor_checks(_eff())}["engram-disk-rate"]
    assert (
        c.status == "WARN"
        and "needs 115,968 uncached row reads/s" in c.message
        and "ceiling here 1,250 tok/s" in c.message
    )
    save_measurement(d.engram_dir, {"engine_prefill_rows_per_s": 120_000.0, "date": "2026-12-01"})
    assert {c.id: c for c in doctor_checks(_eff())}["engram-disk-rate"].status == "OK"
    # pp4 publishes 2,311 tok/s
    assert from_effective(_eff("LAYOUT=pp4")).published_prefill_tps == 2311


# ranks ---------------------------------------------------------------------------------------


def test_columns_per_rank_follow_the_engine():
    assert [K.column_range(24, 4, 1, r) for r in range(4)] == [(0, 6), (6, 12), (12, 18), (18, 24)]
    assert [K.column_range(24, 5, 1, r) for r in range(5)] == [(0, 5), (5, 10), (10, 15), (15, 20), (20, 24)]
    assert K.column_range(24, 4, 2, 1) == (3, 6)  # cdiv(24, TP*DP) = 3
    # PP4 over 43 layers: vLLM's default split 10/11/11/11; layers 1 and 14 on stages 0 and 1
    assert (K.pp_stage_of_layer(1, 43, 4), K.pp_stage_of_layer(14, 43, 4), K.pp_stage_of_layer(42, 43, 4)) == (0, 1, 3)
    pp = K.rank_shares((1, 14), 24, 43, tp=1, pp=4)
    assert [(s.rank, s.layer, s.columns) for s in pp] == [(0, 1, (0, 24)), (1, 14, (0, 24))]
    tp = K.rank_shares((1, 14), 24, 43, tp=4, pp=1)
    assert {s.n_columns for s in tp} == {6} and len(tp) == 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41

    d = tmp_path_factory.mktemp("tiny") / "ckpt"
    make_tiny_dsv41(d)
    return d


def test_rows_per_rank_cli(tiny, run_cli):
    from tokenizers import Tokenizer

    from recipekit.checkpoint.engram_addressing import EngramAddresser

    text = "The quick brown fox jumps over the lazy dog."
    toks = Tokenizer.from_file(str(tiny / "tokenizer.json")).encode(text, add_special_tokens=False).ids
    addr = EngramAddresser.from_checkpoint(tiny)
    code, out, err = run_cli("engram", "rows", str(tiny), "--split", "tp4", "--text", text, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["tp"] == 4 and doc["pp"] == 1 and doc["tokens"] == toks
    for L in addr.config.layer_ids:
        ids = addr.row_ids(L, toks)
        per = [r for r in doc["ranks"] if r["layer"] == L]
        assert [r["rank"] for r in per] == [0, 1, 2, 3]
        ranges = addr.layout.bucket_ranges(L)
        for r in per:
            a, b = r["columns"]
            assert r["rows"] == sorted(set(ids[:, a:b].reshape(-1).tolist()))
            assert all(ranges[a][0] <= x < ranges[b - 1][1] for x in r["rows"])
    code, out, err = run_cli("engram", "rows", str(tiny), "--split", "pp4", "--text", text, "--format", "json")
    doc = json.loads(out)
    assert code == 0 and all(r["columns"] == [0, addr.config.n_cols] for r in doc["ranks"])
    assert len(doc["ranks"]) == len(addr.config.layer_ids)
    code, out, err = run_cli("engram", "rows", str(tiny), "--split", "tp4", "--text", text)
    assert code == 0 and out.startswith(f"{len(toks)} token(s), TP=4 PP=1") and "rank 3 layer" in out


def test_rows_layout_means_a_deployment_layout_only(tiny, run_cli, home):
    """--layout is a recipe's deployment layout; on a checkpoint folder its old meaning (tpN/ppN) is refused
    with the new name, and --split on a recipe is refused with the layout to pass."""
    code, out, err = run_cli("engram", "rows", str(tiny), "--layout", "tp4", "--text", "hi")
    assert code == 2 and out == ""
    assert "error[option-renamed]" in err and "pass --split tp4" in err
    code, _, err = run_cli("engram", "rows", str(tiny), "--split", "tp0", "--text", "hi")
    assert code == 2 and "error[bad-split] --split 'tp0'" in err
    code, _, err = run_cli("engram", "rows", CMP, "--split", "pp4", "--text", "hi", env=home)
    assert code == 2 and "error[bad-rows-args]" in err and "pass --layout pp4" in err


def test_rows_for_a_recipe_needs_its_checkpoint(run_cli, home, tiny):
    code, _, err = run_cli("engram", "rows", CMP, "--layout", "pp4", "--text", "hi", env=home)
    assert code == 6 and "error[engram-checkpoint-missing]" in err
    code, out, err = run_cli(
        "engram", "rows", CMP, "--layout", "pp4", "--text", "hi", "--ckpt", str(tiny), "--format", "json", env=home
    )
    assert code == 0, err
    assert json.loads(out)["pp"] == 4
