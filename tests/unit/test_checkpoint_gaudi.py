"""Tiny DSV4.1 checkpoint -> layout check -> lossless Gaudi conversion -> independent validator.

Everything runs on real safetensors files in the real encodings (tiny shapes)."""

from __future__ import annotations

import collections
import json
import math
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors

from recipekit.checkpoint import codecs, dsv41, gaudi_port
from recipekit.checkpoint.safetensors_io import INDEX_NAME, SafetensorsFile, read_index
from tests.unit.real_dsv41_config import REAL, REAL_TEXT

SIZES = {"BF16": 2, "F32": 4}


def _nbytes(specs):
    return sum(math.prod(s.shape) * SIZES.get(s.dtype, 1) for s in specs.values())


def test_real_config_contract_matches_published_counts():
    g = dsv41.Geometry.from_config(REAL)
    orig = dsv41.original_tensors(g)
    # research/dsv41-format.md §1.1: 96,085 tensors incl. 263 vision; by dtype (vision is 263 BF16)
    vision = dsv41.vision_tensors(REAL)  # vLLM's names and biases: the published shard 1
    assert (len(vision), _nbytes(vision)) == (263, 970_506_240)
    assert {s.dtype for s in vision.values()} == {"BF16"} and "aligner.norm.weight" not in vision
    assert len(orig) + 263 == 96_085
    assert collections.Counter(s.dtype for s in orig.values()) == {
        "F8_E8M0": 47_589,
        "I8": 47_232,
        "F32": 387,
        "F8_E4M3": 357,
        "BF16": 520 - 263,
    }
    assert len({s.group for s in orig.values()}) + 1 == 48  # + the vision shard
    assert _nbytes(orig) == 509_315_516_760  # + 0.97 GB vision = 510.29 GB
    gaudi = gaudi_port.gaudi_tensors(g)
    # the cookbook: "95 shards, 1,530 tensors", 517.68 GB, re-run check "1,266/1,266"
    assert len(gaudi) + 263 == 1_530
    assert len({s.group for s in gaudi.values()}) + 1 == 95
    assert round((_nbytes(gaudi) + 970_506_240) / 1e9, 2) == 517.68
    dense = [n for n, s in gaudi.items() if dsv41.selected(n, s, ["dense"])]
    one_moe_layer = [n for n, s in gaudi.items() if s.kind == "expert" and n.startswith("layers.5.")]
    assert len(dense) + 263 + len(one_moe_layer) == 1_266
    assert gaudi["layers.0.ffn.experts.w13.weight"].shape == (384, 4608, 2560)
    assert gaudi["layers.0.ffn.experts.w13.scale"].shape == (384, 4608, 160)
    assert gaudi["layers.0.attn.wq_a.weight"].dtype == "BF16" and "layers.0.attn.wq_a.scale" not in gaudi
    assert orig["layers.14.engram.wkv.scale"].shape == (800, 192)
    buckets = gaudi_port.engram_buckets(g)
    assert [b[-1][1] for b in buckets.values()] == [384_006_168, 384_016_682]
    assert all(len(b) == 24 for b in buckets.values())
    from recipekit.backends.gaudi.validate import _bucket_ranges

    assert _bucket_ranges(REAL_TEXT) == buckets  # the validator's own search agrees


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41

    root = tmp_path_factory.mktemp("ckpt")
    make_tiny_dsv41(root / "src", seed=0)
    from recipekit.backends.gaudi.convert import convert_to_gaudi

    rep = convert_to_gaudi(root / "src", root / "dst")
    assert rep.complete
    return root


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and not p.name.startswith(".")}


def test_tiny_is_deterministic_and_seeded(tiny, tmp_path):
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41

    make_tiny_dsv41(tmp_path / "again", seed=0)
    assert _files(tmp_path / "again") == _files(tiny / "src")
    make_tiny_dsv41(tmp_path / "other", seed=1)
    a, b = _files(tiny / "src"), _files(tmp_path / "other")
    assert a["config.json"] == b["config.json"] and a["tokenizer.json"] == b["tokenizer.json"]
    assert a["model-00003-of-00016.safetensors"] != b["model-00003-of-00016.safetensors"]
    r = make_tiny_dsv41(tmp_path / "again", seed=0)
    assert r.skipped  # idempotent


def test_tiny_has_every_family_real_config_fields_and_shard_map(tiny):
    src = tiny / "src"
    cfg = json.loads((src / "config.json").read_text())
    text = cfg["text_config"]
    assert set(text) == set(REAL_TEXT)
    assert set(cfg) == {
        "architectures",
        "model_type",
        "dtype",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "image_token_id",
        "quantization_config",
        "text_config",
        "vision_config",
    }
    assert cfg["quantization_config"] == {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "weight_block_size": [32, 32],
        "scale_fmt": "ue8m0",
        "expert_dtype": "fp4",
    }
    assert len(text["compress_ratios"]) == text["num_hidden_layers"] + text["num_nextn_predict_layers"]
    from recipekit.checkpoint.engram_addressing import compressed_token_map

    _, classes = compressed_token_map(src / "tokenizer.json")
    assert classes == text["engram_compressed_vocab_size"] < text["vocab_size"]
    g = dsv41.Geometry.from_config(cfg)
    buckets = gaudi_port.engram_buckets(g)
    assert [b[-1][1] for b in buckets.values()] == text["engram_num_embeddings"]
    assert all(len(b) == 24 for b in buckets.values())
    idx = read_index(src)
    names = set(idx.weight_map)
    for needle in (
        "layers.2.attn.compressor.wgate.weight",
        "layers.4.attn.compressor.wkv.weight",
        "layers.6.attn.indexer.wq_b.scale",
        "layers.2.attn.indexer.wk.weight",
        "layers.0.hc_attn_fn",
        "layers.0.ffn.gate.bias_vl",
        "layers.0.ffn.shared_experts.w2.scale",
        "layers.7.ffn.experts.7.w3.weight",
        "layers.1.engram.embed.scale",
        "layers.2.engram.wkv.scale",
        "mtp.0.main_proj.weight",
        "mtp.2.markov_head.embed.weight",
        "mtp.2.confidence_head.proj.weight",
        "mtp.1.ffn.experts.3.w2.scale",
        "embed.weight",
        "head.weight",
        "norm.weight",
        "image_newline",
        "vision.patch_embed.proj.bias",
        "vision.blocks.1.attn.wqkv.bias",
        "aligner.w2.bias",
    ):
        assert needle in names, needle
    assert "aligner.norm.weight" not in names and "vision.patch_embed.weight" not in names
    assert "layers.4.attn.compressor.wgate.weight" not in names  # ratio-1 source has no gate
    assert "mtp.0.attn.compressor.wkv.weight" not in names
    by_shard = collections.defaultdict(set)
    for n, rel in idx.weight_map.items():
        by_shard[rel].add(n)
    shards = sorted(by_shard)
    assert all(n.startswith(("vision.", "aligner.")) for n in by_shard[shards[0]])
    assert by_shard[shards[1]] == {"embed.weight", "image_start", "image_end", "image_newline"}
    for L in range(8):
        assert {n.split(".")[1] for n in by_shard[shards[2 + L]]} == {str(L)}
        assert not any(".engram." in n for n in by_shard[shards[2 + L]])
    assert by_shard[shards[10]] == {"head.weight", "norm.weight"}
    for s in range(3):
        assert all(n.startswith(f"mtp.{s}.") for n in by_shard[shards[11 + s]])
    assert all(n.startswith("layers.1.engram.") for n in by_shard[shards[14]])
    # the safetensors library reads every shard, with the same names, dtypes and shapes
    codes = []
    for rel in shards:
        data = dict(safetensors.deserialize((src / rel).read_bytes()))
        with SafetensorsFile(src / rel) as f:
            assert {n: (v["dtype"], tuple(v["shape"])) for n, v in data.items()} == {
                n: (t.dtype, t.shape) for n, t in f.tensors.items()
            }
        codes += [np.frombuffer(bytes(v["data"]), np.uint8) for n, v in data.items() if v["dtype"] == "F8_E8M0"]
    allc = np.concatenate(codes)
    assert np.mean((allc >= 110) & (allc <= 125)) > 0.999
    assert {0, 2, 3, 246, 250, 254} <= set(np.unique(allc).tolist())


def test_layout_check_cli(tiny, run_cli, tmp_path):
    code, out, _ = run_cli("checkpoint", "check", str(tiny / "src"), "--checkpoint-format", "original")
    assert code == 0 and out.startswith("LAYOUT_OK original: 852 tensors in 16 shards")
    code, out, _ = run_cli("checkpoint", "check", str(tiny / "dst"), "--checkpoint-format", "gaudi")
    assert code == 0 and out.startswith("LAYOUT_OK gaudi: 438 tensors in 63 shards")
    code, out, _ = run_cli("checkpoint", "check", str(tiny / "src"), "--checkpoint-format", "gaudi")
    assert code == 2 and "this is the original FP8 layout" in out
    # damage a copy: drop a scale, add a stray tensor, wrong shape, wrong total_size
    bad = tmp_path / "bad"
    shutil.copytree(tiny / "src", bad)
    from recipekit.checkpoint.safetensors_io import write_file, write_index

    idx = read_index(bad)
    rel = idx.weight_map["layers.3.attn.wkv.scale"]
    with SafetensorsFile(bad / rel) as f:
        arrays = {n: f.read_array(n) for n in f.tensors}
        dts = {n: t.dtype for n, t in f.tensors.items()}
    del arrays["layers.3.attn.wkv.scale"]
    arrays["layers.3.attn.wkv.sclae"] = np.zeros((2, 2), np.uint8)
    arrays["layers.3.attn.q_norm.weight"] = arrays["layers.3.attn.q_norm.weight"][:32]
    write_file(
        bad / rel, arrays, dtypes={n: d for n, d in dts.items() if n in arrays} | {"layers.3.attn.wkv.sclae": "F8_E8M0"}
    )
    wm = dict(idx.weight_map)
    del wm["layers.3.attn.wkv.scale"]
    wm["layers.3.attn.wkv.sclae"] = rel
    write_index(bad, wm, 12345)
    code, out, _ = run_cli("checkpoint", "check", str(bad), "--checkpoint-format", "original", "--format", "json")
    rep = json.loads(out)
    assert code == 2 and not rep["ok"]
    probs = "\n".join(rep["problems"])
    assert "layers.3.attn.wkv.scale: missing (expected F8_E8M0 [16, 4])" in probs
    assert "layers.3.attn.wkv.sclae: unexpected tensor" in probs and "did you mean 'layers.3.attn.wkv.scale'" in probs
    assert "layers.3.attn.q_norm.weight: BF16 [32]" in probs and "expected BF16 [64]" in probs
    assert "index total_size 12,345 differs" in probs


def test_convert_output_semantics(tiny):
    src, dst = tiny / "src", tiny / "dst"
    s_idx, d_idx = read_index(src), read_index(dst)

    def arr(folder, idx, name):
        with SafetensorsFile(folder / idx.weight_map[name]) as f:
            return f.read_array(name)

    # experts: gate row j at 2j, up row j at 2j+1, scale rows move with them; w2 stacked
    w13 = arr(dst, d_idx, "layers.3.ffn.experts.w13.weight").view(np.uint8)
    s13 = arr(dst, d_idx, "layers.3.ffn.experts.w13.scale")
    for e in (0, 5):
        assert np.array_equal(w13[e, 0::2], arr(src, s_idx, f"layers.3.ffn.experts.{e}.w1.weight").view(np.uint8))
        assert np.array_equal(w13[e, 1::2], arr(src, s_idx, f"layers.3.ffn.experts.{e}.w3.weight").view(np.uint8))
        assert np.array_equal(s13[e, 0::2], arr(src, s_idx, f"layers.3.ffn.experts.{e}.w1.scale"))
        assert np.array_equal(s13[e, 1::2], arr(src, s_idx, f"layers.3.ffn.experts.{e}.w3.scale"))
    w2 = arr(dst, d_idx, "mtp.1.ffn.experts.w2.weight").view(np.uint8)
    assert np.array_equal(w2[3], arr(src, s_idx, "mtp.1.ffn.experts.3.w2.weight").view(np.uint8))
    # FP8 linears -> exact bf16
    for base in ("layers.0.attn.wq_a", "layers.2.engram.wkv", "mtp.0.main_proj", "layers.6.attn.indexer.wq_b"):
        got = arr(dst, d_idx, base + ".weight")
        assert got.dtype == ml_dtypes.bfloat16 and base + ".scale" not in d_idx.weight_map
        want = codecs.fp8_dequant_f32(arr(src, s_idx, base + ".weight"), arr(src, s_idx, base + ".scale"))
        assert np.array_equal(got.astype(np.float32), want)
    # Engram table -> one tensor pair per bucket, byte for byte, in order
    g = dsv41.Geometry.from_config(json.loads((src / "config.json").read_text()))
    table = arr(src, s_idx, "layers.1.engram.embed.weight").view(np.uint8)
    scale = arr(src, s_idx, "layers.1.engram.embed.scale")
    for b, (r0, r1) in enumerate(gaudi_port.engram_buckets(g)[1]):
        assert np.array_equal(arr(dst, d_idx, f"layers.1.engram.embed.buckets.{b}.weight").view(np.uint8), table[r0:r1])
        assert np.array_equal(arr(dst, d_idx, f"layers.1.engram.embed.buckets.{b}.scale"), scale[r0:r1])
    # copies are byte-identical; config carries the port block; side files copied
    for name in ("embed.weight", "layers.0.hc_ffn_fn", "vision.blocks.1.mlp.w1.weight", "layers.1.engram.q_weight"):
        assert arr(dst, d_idx, name).tobytes() == arr(src, s_idx, name).tobytes()
    cfg = json.loads((dst / "config.json").read_text())
    assert cfg[gaudi_port.GAUDI_LAYOUT_KEY]["format"] == gaudi_port.GAUDI_LAYOUT_FORMAT
    assert (dst / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
    # the safetensors library reads every output shard
    for rel in d_idx.shards():
        dict(safetensors.deserialize((dst / rel).read_bytes()))
    man = json.loads((dst / "recipekit-manifest.json").read_text())["tensors"]
    assert set(man) == set(d_idx.weight_map) and len(man) == 438


def test_validate_ok_cli(tiny, run_cli):
    code, out, _ = run_cli("checkpoint", "validate", "--src", str(tiny / "src"), "--dst", str(tiny / "dst"))
    assert code == 0 and out.strip() == "VALIDATE_OK 438 tensors"


def test_validator_shares_no_code_with_converter_or_codecs():
    code = (
        "import sys\nfrom recipekit.backends.gaudi.validate import validate_gaudi\n"
        "print([m for m in ('recipekit.backends.gaudi.convert', 'recipekit.checkpoint.codecs')\n"
        "       if m in sys.modules])"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr
    text = (Path(__file__).resolve().parents[2] / "backends/gaudi/validate.py").read_text()
    assert "import convert" not in text and "codecs" not in text.split('"""', 2)[2]


def test_validator_decoders_are_ml_dtypes_and_match_the_bit_fields():
    """The validator decodes through ml_dtypes (no table of its own); checked here against the
    formats' bit-field definitions, written out independently for every code."""
    from recipekit.backends.gaudi import validate as v

    text = Path(v.__file__).read_text()
    for dt in ("float8_e4m3fn", "float4_e2m1fn", "float8_e8m0fnu"):
        assert f"ml_dtypes.{dt}" in text
    b = np.arange(256, dtype=np.uint8)
    e, m = (b >> 3) & 0xF, (b & 7).astype(np.float64)
    e4m3 = np.where(b & 0x80, -1.0, 1.0) * np.where(e == 0, m * 2.0**-9, (8 + m) * 2.0 ** (e.astype(np.int64) - 10))
    e4m3[(b & 0x7F) == 0x7F] = np.nan
    got = v._e4m3_f64(b)
    num = ~np.isnan(e4m3)
    assert np.array_equal(got, e4m3, equal_nan=True) and np.array_equal(np.signbit(got[num]), np.signbit(e4m3[num]))
    c = np.arange(16, dtype=np.uint8)
    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6] * 2) * np.where(c & 8, -1.0, 1.0)
    got = v._e2m1_f64(c | 0xF0)  # only the low nibble counts
    assert np.array_equal(got, e2m1) and np.array_equal(np.signbit(got), np.signbit(e2m1))
    scale = v._scale_f64(b)
    assert np.array_equal(scale[:255], 2.0 ** (b[:255].astype(np.int64) - 127)) and np.isnan(scale[255])
    rows = v._fp4_rows_f64(np.array([[0x21, 0xF7] * 8], np.uint8), np.array([[128]], np.uint8))
    assert rows[0, :4].tolist() == [1.0, 2.0, 12.0, -12.0]  # low nibble first, times 2**1


FLIP_TARGETS = [
    "layers.0.attn.wq_a.weight",
    "layers.3.ffn.experts.w13.weight",
    "layers.3.ffn.experts.w13.scale",
    "mtp.2.ffn.experts.w2.weight",
    "layers.2.engram.embed.buckets.7.weight",
    "layers.1.engram.embed.buckets.23.scale",
    "embed.weight",
    "vision.norm.weight",
    "layers.5.ffn.gate.bias",
    "mtp.0.main_proj.weight",
]


@pytest.mark.parametrize("name", FLIP_TARGETS)
def test_one_flipped_byte_is_caught_and_named(tiny, tmp_path, name, run_cli):
    dst = tmp_path / "dst"
    shutil.copytree(tiny / "dst", dst)
    rel = read_index(dst).weight_map[name]
    with SafetensorsFile(dst / rel) as f:
        t = f.info(name)
        start = f.data_start + t.begin
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    pos = start + int(rng.integers(0, t.nbytes))
    data = bytearray((dst / rel).read_bytes())
    data[pos] ^= 1 << int(rng.integers(0, 8))
    (dst / rel).write_bytes(data)
    code, out, _ = run_cli("checkpoint", "validate", "--src", str(tiny / "src"), "--dst", str(dst))
    assert code == 1 and "VALIDATE_OK" not in out and out.startswith("VALIDATE_FAIL")
    assert f"  {name}: " in out
    others = [line for line in out.splitlines()[1:] if not line.startswith(f"  {name}:")]
    assert others == []  # only the flipped tensor is named


@pytest.mark.parametrize("where", ["header", "config.json", INDEX_NAME, "recipekit-manifest.json", "tokenizer.json"])
def test_flipped_byte_outside_tensor_data_is_caught(tiny, tmp_path, where):
    from recipekit.backends.gaudi.validate import validate_gaudi

    dst = tmp_path / "dst"
    shutil.copytree(tiny / "dst", dst)
    if where == "header":
        rel = read_index(dst).shards()[3]
        data = bytearray((dst / rel).read_bytes())
        data[40] ^= 0x04
        (dst / rel).write_bytes(data)
        needle = rel
    else:
        data = bytearray((dst / where).read_bytes())
        i = data.index(b":") + 3 if where != "tokenizer.json" else len(data) // 2
        data[i] ^= 0x01
        (dst / where).write_bytes(data)
        needle = where
    r = validate_gaudi(tiny / "src", dst)
    assert not r.ok
    assert any(needle in m for m in r.mismatches), r.mismatches


def _set_byte(folder: Path, name: str, flat_index: int, value: int) -> None:
    rel = read_index(folder).weight_map[name]
    with SafetensorsFile(folder / rel) as f:
        off = f.data_start + f.info(name).begin + flat_index
    with open(folder / rel, "r+b") as fh:
        fh.seek(off)
        fh.write(bytes([value]))


@pytest.mark.parametrize("code", [0, 2, 247, 255])
def test_inexact_scale_code_refused_and_nothing_written(tiny, tmp_path, code, run_cli):
    src = tmp_path / "src"
    shutil.copytree(tiny / "src", src)
    _set_byte(src, "layers.4.attn.wo_b.scale", 1 * 2 + 1, code)  # scale [2, 2]: block [1, 1]
    rc, out, err = run_cli("checkpoint", "convert", "--src", str(src), "--dst", str(tmp_path / "dst"), "--no-progress")
    assert rc == 2
    assert "error[fp8-scale-not-exact]" in err and "layers.4.attn.wo_b.weight" in err and "block [1, 1]" in err
    assert f"scale code {code}" in err
    assert not (tmp_path / "dst").exists()


def test_hostile_source_refused_and_nothing_written(tiny, tmp_path, run_cli):
    src = tmp_path / "src"
    shutil.copytree(tiny / "src", src)
    idx = json.loads((src / INDEX_NAME).read_text())
    idx["weight_map"]["embed.weight"] = "../../etc/passwd"
    (src / INDEX_NAME).write_text(json.dumps(idx))
    rc, _, err = run_cli("checkpoint", "convert", "--src", str(src), "--dst", str(tmp_path / "dst"))
    assert rc == 2 and "error[index-path-escape]" in err and not (tmp_path / "dst").exists()
    shutil.rmtree(src)
    shutil.copytree(tiny / "src", src)
    shard = src / read_index(src).weight_map["layers.5.attn.wkv.weight"]
    shard.write_bytes(shard.read_bytes()[:-100])  # truncated
    rc, _, err = run_cli("checkpoint", "convert", "--src", str(src), "--dst", str(tmp_path / "dst"))
    assert rc == 2 and "safetensors-" in err and shard.name in err and not (tmp_path / "dst").exists()


def test_partial_reconvert_gives_identical_sha256(tiny, tmp_path, run_cli):
    full = json.loads((tiny / "dst" / "recipekit-manifest.json").read_text())["tensors"]
    part = tmp_path / "part"
    rc, _, err = run_cli(
        "checkpoint",
        "convert",
        "--src",
        str(tiny / "src"),
        "--dst",
        str(part),
        "--part",
        "dense,layer:3",
        "--no-progress",
    )
    assert rc == 0, err
    got = json.loads((part / "recipekit-manifest.json").read_text())["tensors"]
    g = dsv41.Geometry.from_config(json.loads((tiny / "src" / "config.json").read_text()))
    spec = gaudi_port.gaudi_tensors(g)
    want = {
        n for n in full if n.startswith(("vision.", "aligner.")) or dsv41.selected(n, spec[n], ["dense", "layer:3"])
    }
    assert set(got) == want and "layers.3.ffn.experts.w13.weight" in got and "layers.4.ffn.experts.w2.weight" not in got
    assert all(got[n]["sha256"] == full[n]["sha256"] for n in got)  # sha256-identical, n/n
    rc, out, _ = run_cli(
        "checkpoint", "validate", "--src", str(tiny / "src"), "--dst", str(part), "--part", "dense,layer:3"
    )
    assert rc == 0 and out.startswith("VALIDATE_OK")
    # adding the rest later never drops what is there: the union ends equal to the full conversion
    rc, _, _ = run_cli(
        "checkpoint", "convert", "--src", str(tiny / "src"), "--dst", str(part), "--part", "moe,engram", "--no-progress"
    )
    assert rc == 0
    assert _files(part) == _files(tiny / "dst")


def test_killed_conversion_resumes_byte_identical(tmp_path):
    from recipekit.backends.gaudi.convert import convert_to_gaudi
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41

    src, dst, ref = tmp_path / "src", tmp_path / "dst", tmp_path / "ref"
    make_tiny_dsv41(src, seed=3)
    cmd = [
        sys.executable,
        "-m",
        "recipekit.cli.main",
        "checkpoint",
        "convert",
        "--src",
        str(src),
        "--dst",
        str(dst),
        "--no-progress",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stamps = dst / ".recipekit-convert"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if stamps.is_dir() and len(list(stamps.glob("*.json"))) >= 2:
            break
        time.sleep(0.001)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done_before = len(list(stamps.glob("*.json")))
    assert 2 <= done_before < 60
    assert not (dst / "recipekit-manifest.json").exists()
    rep = convert_to_gaudi(src, dst)
    assert len(rep.shards_skipped) >= 2 and rep.shards_written and rep.complete
    assert not [p for p in dst.iterdir() if ".tmp-" in p.name]
    convert_to_gaudi(src, ref)
    assert _files(dst) == _files(ref)


def test_bench_json_keys_small(run_cli, tmp_path):
    code, out, err = run_cli("checkpoint", "bench", "--size-gib", "0.02", "--dir", str(tmp_path), "--format", "json")
    assert code == 0, err
    r = json.loads(out)
    for k in ("ratio_vs_copy", "convert_bytes_per_s", "copy_bytes_per_s", "peak_rss_bytes", "largest_tensor_bytes"):
        assert isinstance(r[k], (int, float)) and r[k] > 0, k
    assert r["src_bytes"] >= 0.02 * 2**30
    assert abs(r["ratio_vs_copy"] - r["convert_bytes_per_s"] / r["copy_bytes_per_s"]) < 0.01
    assert 10 * 2**20 < r["peak_rss_bytes"] < 4 * 2**30
    assert r["rss_goal_bytes"] == 3 * r["largest_tensor_bytes"] + 512 * 2**20
    assert list(tmp_path.iterdir()) == []  # scratch removed


def test_cli_errors_are_one_line(run_cli, tiny, tmp_path):
    rc, _, err = run_cli("checkpoint", "convert", "--src", str(tmp_path / "nope"), "--dst", str(tmp_path / "d"))
    assert rc == 6 and err.startswith("error[checkpoint-not-found]")
    rc, _, err = run_cli("checkpoint", "convert", "--src", str(tiny / "src"), "--dst", str(tiny / "src"))
    assert rc == 2 and "error[convert-same-folder]" in err
    rc, _, err = run_cli(
        "checkpoint", "convert", "--src", str(tiny / "src"), "--dst", str(tmp_path / "d"), "--part", "layer:99"
    )
    assert rc == 2 and "error[part-empty]" in err and not (tmp_path / "d").exists()
    rc, _, err = run_cli(
        "checkpoint", "convert", "--src", str(tiny / "src"), "--dst", str(tmp_path / "d"), "--part", "experts"
    )
    assert rc == 2 and "error[bad-part]" in err
    rc, _, err = run_cli("checkpoint", "check", str(tiny / "src"), "--checkpoint-format", "gaudy")
    assert rc == 2 and "error[unknown-layout]" in err and "did you mean 'gaudi'" in err
    rc, _, err = run_cli("checkpoint", "make-tiny", "--out", str(tmp_path / "x"), "--size", "lots")
    assert rc == 2 and "error[bad-size]" in err


def test_port_quantization_config_is_data_and_checked(tiny, tmp_path):
    from recipekit.backends.gaudi import port_quant
    from recipekit.backends.gaudi.validate import validate_gaudi

    data = json.loads(
        (Path(__file__).resolve().parents[2] / "backends/gaudi/data/port_quantization_config.json").read_text()
    )
    assert (
        data["_source"]
        and json.loads((tiny / "dst" / "config.json").read_text())["quantization_config"]
        == data["quantization_config"]
        == port_quant.quantization_config()
    )
    dst = tmp_path / "dst"
    shutil.copytree(tiny / "dst", dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"]["group_size"] = 16
    (dst / "config.json").write_text(json.dumps(cfg))
    r = validate_gaudi(tiny / "src", dst)
    assert not r.ok and any("quantization_config is not the port's" in m for m in r.mismatches), r.mismatches
