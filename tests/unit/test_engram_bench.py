"""`recipe engram bench` on a small DSV4.1-shaped table: the table passes the engine's rules, every
pass reports a positive rate, the ceilings are rates / 48, fio missing is said, and the measured
rate is cached for the doctor."""

from __future__ import annotations

import json

import pytest

from recipekit.hybrid.engram import bench as B
from recipekit.hybrid.engram.benchtable import make_bench_model
from recipekit.hybrid.engram.rules import locate_tables


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return make_bench_model(tmp_path_factory.mktemp("bench") / "t", size_gib=0.01)


def test_bench_table_follows_the_engine_rules(table):
    tables, problems = locate_tables(table)
    assert problems == [] and sorted(tables) == [1, 14]
    assert all(t.head_dim == 256 and t.scale_cols == 8 for t in tables.values())
    assert sum(t.rows for t in tables.values()) * 264 >= 0.01 * 2**30


def test_bench_passes_and_ceilings(table, tmp_path, monkeypatch):
    monkeypatch.setattr(B.shutil, "which", lambda name: None)  # no fio: the bench still runs
    res = B.run_bench(tmp_path, model=table, seconds=0.2, published_prefill_tps=2416.0, rounds_n=1)
    assert len(res["rounds"]) == 1 and res["rounds"][0]["ratio_qd32"] is None
    assert res["fio"] is None and res["reader_vs_fio_qd32"] is None
    for k in (
        "aligned_qd1_rows_per_s",
        "aligned_qd32_rows_per_s",
        "engine_decode_rows_per_s",
        "engine_prefill_rows_per_s",
    ):
        assert res[k] > 0, k
    assert res["prefill_tps_ceiling"] == pytest.approx(res["engine_prefill_rows_per_s"] / 48)
    assert res["decode_tps_ceiling"] == pytest.approx(res["engine_decode_rows_per_s"] / 48)
    assert res["published"]["prefill_rows_per_s_needed"] == 2416 * 48


def test_bench_cli_says_fio_is_missing_and_caches(table, run_cli, tmp_path, monkeypatch):
    monkeypatch.setattr(B.shutil, "which", lambda name: None)
    env = {"RECIPEKIT_HOME": str(tmp_path / "home")}
    code, out, err = run_cli("engram", "bench", "--model", str(table), "--seconds", "0.2", "--rounds", "1", env=env)
    assert code == 0, err
    assert "fio: not installed" in out and "Engram-bound ceiling: decode" in out and "needs 115,968 rows/s" in out
    cache = next((tmp_path / "home" / "cache" / "engram-bench").glob("disk-*.json"))
    doc = json.loads(cache.read_text())
    assert doc["format"] == "recipekit-engram-disk/1" and doc["engine_prefill_rows_per_s"] > 0
    assert table.is_dir()  # --model is never deleted
