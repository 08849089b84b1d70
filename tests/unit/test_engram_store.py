"""The Engram row store: packed bytes, lookups vs direct dequantization, cache, prefetch,
corruption caught by the manifest, resumable packing, and a tiny bench run."""
from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from recipekit.errors import RecipekitError
from recipekit.hybrid.engram import store as st
from recipekit.hybrid.engram.addressing import EngramAddresser, EngramConfig, EngramLayout
from recipekit.checkpoint.safetensors_io import write_file, write_index
from tests.unit.test_engram_addressing import make_test_tokenizer


def _real_width_ckpt(d):
    """Engram-only checkpoint with the real row width (256 + 8 scale bytes) and both real layer ids."""
    make_test_tokenizer(d / "tokenizer.json")
    cfg = EngramConfig((1, 14), (0, 0), 4, 67, 8, 256, 2)
    rows = [sum(p) for p in EngramLayout.build(cfg, check=False).primes]
    from recipekit.hybrid.engram.addressing import compressed_token_map
    _, size = compressed_token_map(d / "tokenizer.json")
    conf = {"text_config": {"engram_layer_ids": [1, 14], "engram_num_embeddings": rows, "engram_max_ngram_size": 4,
                            "engram_vocab_size": 67, "engram_n_heads": 8, "engram_head_dim": 256,
                            "engram_pad_token_id": 2, "engram_compressed_vocab_size": size}}
    (d / "config.json").write_text(json.dumps(conf))
    rng = np.random.default_rng(5)
    wm, total = {}, 0
    for i, (lid, n) in enumerate(zip((1, 14), rows)):
        w = rng.integers(0, 254, (n, 256), dtype=np.uint8)
        w[w == 0x7F] = 0
        s = rng.integers(3, 247, (n, 8), dtype=np.uint8)
        shard = f"model-0000{i + 1}-of-00002.safetensors"
        write_file(d / shard, {f"layers.{lid}.engram.embed.weight": w, f"layers.{lid}.engram.embed.scale": s},
                   dtypes={f"layers.{lid}.engram.embed.weight": "F8_E4M3", f"layers.{lid}.engram.embed.scale": "F8_E8M0"},
                   fsync=False)
        wm[f"layers.{lid}.engram.embed.weight"] = wm[f"layers.{lid}.engram.embed.scale"] = shard
        total += w.nbytes + s.nbytes
    write_index(d, wm, total)
    return d


@pytest.fixture(scope="module", params=["real-width", "tiny-dsv41"])
def ckpt(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(f"engram-{request.param}")
    if request.param == "real-width":
        return _real_width_ckpt(d)
    from recipekit.tools.tiny_dsv41 import make_tiny_dsv41
    make_tiny_dsv41(d / "ckpt")
    return d / "ckpt"


def _source(ckpt, lid):
    from recipekit.checkpoint.safetensors_io import Checkpoint
    with Checkpoint(ckpt) as c:
        w = c.tensor_file(f"layers.{lid}.engram.embed.weight").read_array(f"layers.{lid}.engram.embed.weight")
        s = c.tensor_file(f"layers.{lid}.engram.embed.scale").read_array(f"layers.{lid}.engram.embed.scale")
    return np.asarray(w).view(np.uint8), np.asarray(s)


def _dequant_direct(w, s):
    """Independent of the store and codecs: ml_dtypes e4m3 -> float32, times 2^(e-127) per 32 columns."""
    vals = w.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    scale = np.exp2(s.astype(np.float64) - 127).astype(np.float32)
    return vals * np.repeat(scale, 32, axis=1)


@pytest.fixture(scope="module")
def packed(ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp("store")
    rep = st.pack_store(ckpt, out, ranks=4)
    return ckpt, out, rep


def test_packed_rows_are_byte_identical(packed):
    ckpt, out, rep = packed
    doc = st.read_manifest(out)
    cfg = EngramConfig.from_checkpoint(ckpt)
    g = st.geometry_of(doc)
    assert g.head_dim == cfg.head_dim and doc["row_bytes"] == cfg.head_dim + cfg.head_dim // 32
    assert doc["rows_per_page"] == 4096 // doc["row_bytes"]
    assert sorted(rep["written"]) == sorted(st.row_file_name(l, r, 4) for l in cfg.layer_ids for r in range(4))
    for lid in cfg.layer_ids:
        w, s = _source(ckpt, lid)
        covered = 0
        for r in range(4):
            ent = doc["files"][st.row_file_name(lid, r, 4)]
            raw = np.fromfile(out / ent["name"], dtype=np.uint8)
            assert raw.size == ent["size"] and raw.size % 4096 == 0
            pages = raw.reshape(-1, 4096)
            rec = pages[:, : g.rows_per_page * g.row_bytes].reshape(-1, g.row_bytes)
            n = ent["row_end"] - ent["row_start"]
            assert ent["row_start"] == covered
            a, b = ent["row_start"], ent["row_end"]
            assert np.array_equal(rec[:n, : g.head_dim], w[a:b]) and np.array_equal(rec[:n, g.head_dim:], s[a:b])
            assert not rec[n:].any() and not pages[:, g.rows_per_page * g.row_bytes:].any()   # padding is zero
            # bucket ranges: the file covers whole hash columns
            cols = ent["cols"]
            lay = doc["layers"][cfg.layer_index(lid)]
            assert a == lay["buckets"][cols[0]][0] and b == lay["buckets"][cols[1] - 1][1]
            covered = b
        assert covered == w.shape[0]


def test_lookup_equals_direct_dequantization(packed):
    ckpt, out, _ = packed
    addr = EngramAddresser.from_checkpoint(ckpt)
    rng = np.random.default_rng(1)
    for lid in addr.config.layer_ids:
        w, s = _source(ckpt, lid)
        direct = _dequant_direct(w, s)
        toks = rng.integers(3, len(addr.token_map), 40)
        ids = addr.row_ids(lid, toks)                                  # [40, n_cols] for a batch of positions
        with st.RowStore(out, lid, threads=4) as store:
            got = store.lookup(ids)
            assert got.shape == ids.shape + (w.shape[1],)
            assert np.array_equal(got, direct[ids])
            # consecutive rows across page boundaries (coalesced preadv path), with duplicates
            per = store.g.rows_per_page
            run = np.concatenate([np.arange(per - 3, 3 * per + 2), [per, per, 0]])
            assert np.array_equal(store.lookup(run), direct[run])
            # the second time the pages are known to be cached: served through the mapping, same values
            mapped_before = store.rows_mapped
            assert np.array_equal(store.lookup(ids), direct[ids])
            assert store.rows_mapped > mapped_before
        with st.RowStore(out, lid, threads=1, resident_hint=False, cache_rows=50) as store:
            for _ in range(2):
                assert np.array_equal(store.lookup(ids[:5]), direct[ids[:5]])
            assert store.cache.hits > 0 and len(store.cache) <= 50 and store.rows_mapped == 0
        with st.RowStore(out, lid, threads=2) as store:
            pf = st.Prefetcher(store)
            pf.start(ids[7:9])
            assert np.array_equal(pf.result(), direct[ids[7:9]])
            pf.close()


def test_rank_local_store_refuses_other_ranks_rows(packed):
    ckpt, out, _ = packed
    lid = EngramConfig.from_checkpoint(ckpt).layer_ids[0]
    doc = st.read_manifest(out)
    r1 = doc["files"][st.row_file_name(lid, 1, 4)]
    with st.RowStore(out, lid, ranks=[1]) as store:
        assert store.read_records([r1["row_start"], r1["row_end"] - 1]).shape[0] == 2
        with pytest.raises(RecipekitError) as e:
            store.read_records([r1["row_start"] - 1])
        assert e.value.code == "engram-row-not-local"


def test_resume_skips_verified_files_and_rewrites_corrupt_ones(packed, tmp_path, run_cli):
    ckpt, out, _ = packed
    import shutil
    copy = tmp_path / "store"
    shutil.copytree(out, copy)
    lid = EngramConfig.from_checkpoint(ckpt).layer_ids[1]
    name = st.row_file_name(lid, 2, 4)
    good = (copy / name).read_bytes()
    # flip one byte: caught by the manifest's sha256
    data = bytearray(good)
    data[len(data) // 3] ^= 0x5A
    (copy / name).write_bytes(bytes(data))
    probs = st.verify_store(copy)
    assert probs == [f"{name}: sha256 differs from the manifest"]
    code, outp, err = run_cli("engram", "verify", str(copy))
    assert code == 2 and "error[engram-store-corrupt]" in err and name in err
    # resume: only the corrupt file is rewritten, byte-identical to the original
    (copy / ".stale.tmp-1").write_bytes(b"x")
    rep = st.pack_store(ckpt, copy, ranks=4)
    assert rep["written"] == [name] and len(rep["skipped"]) == rep["files"] - 1
    assert (copy / name).read_bytes() == good and not (copy / ".stale.tmp-1").exists()
    code, outp, err = run_cli("engram", "verify", str(copy), "--format", "json")
    assert code == 0 and json.loads(outp)["ok"] is True
    # truncated / missing files are refused on open
    (copy / name).write_bytes(good[:-4096])
    with pytest.raises(RecipekitError) as e:
        st.RowStore(copy, lid)
    assert e.value.code == "engram-store-corrupt"
    (copy / name).unlink()
    assert st.verify_store(copy, full=False) == [f"{name}: missing"]
    # a store for another rank count in the same folder is refused
    with pytest.raises(RecipekitError) as e:
        st.pack_store(ckpt, copy, ranks=2)
    assert e.value.code == "engram-store-mismatch"


def test_pack_cli_and_bad_ranks(ckpt, tmp_path, run_cli):
    code, out, err = run_cli("engram", "pack", str(ckpt), "--out", str(tmp_path / "s"), "--ranks", "7")
    assert code == 2 and "error[engram-ranks-invalid]" in err
    lid = EngramConfig.from_checkpoint(ckpt).layer_ids[0]
    code, out, err = run_cli("engram", "pack", str(ckpt), "--out", str(tmp_path / "s"), "--ranks", "3",
                             "--layer", str(lid), "--format", "json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["written"] == [st.row_file_name(lid, r, 3) for r in range(3)]
    code, out, err = run_cli("engram", "verify", str(tmp_path / "nope"))
    assert code == 6 and "error[engram-store-missing]" in err


def test_bench_runs_on_a_tiny_table(tmp_path, run_cli):
    d = tmp_path / "bench"
    code, out, err = run_cli("engram", "bench", "--size-gib", "0.004", "--rows", "3000", "--steps", "6",
                             "--streams", "2", "--threads", "4", "--dir", str(d), "--format", "json")
    assert code == 0, err
    res = json.loads(out)
    for k in ("store_rows_per_s", "preadv_rows_per_s", "warm_rows_per_s", "prefetch_hidden_fraction",
              "store_mb_per_s", "preadv_mb_per_s", "warm_mb_per_s"):
        assert k in res and isinstance(res[k], (int, float))
    assert res["store_rows_per_s"] > 0 and res["warm_rows_per_s"] > 0 and res["table_bytes"] >= 0.004 * 2**30
    assert res["decode"]["steps"] == 6 and set(res["goals"]) == {
        "store_ge_0.8x_preadv", "warm_ge_1M_rows_per_s", "warm_ge_1M_rows_per_cpu_s", "prefetch_hides_ge_90pct"}
    assert res["warm_rows_per_cpu_s"] >= res["warm_rows_per_s"] * 0.9
    assert not d.exists()          # deleted unless --keep
