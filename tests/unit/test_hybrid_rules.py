"""The hybrid checkpoint held to what vllm-exl3 / exllamav3 accept (recipekit.hybrid.exl3_rules), on the
REAL EXL3 packs made by exllamav3 1.6.5 (tests/fixtures/exl3_real): assembly and `check --checkpoint-format hybrid`
pass on them, and every hostile variant is refused with a one-line error naming its rule, nothing written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from recipekit.checkpoint.safetensors_io import SafetensorsFile, read_index, write_file
from recipekit.errors import RecipekitError
from recipekit.hybrid.assemble import assemble, check_hybrid, merged_qc_problems
from recipekit.hybrid.exl3_rules import CODEBOOK_MULTIPLIER, RULES, pad128

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "exl3_real"
PACK_A, PACK_B = REAL / "tiny-exl3-mcg-3-2", REAL / "tiny-exl3-mul1-4"


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41

    out = tmp_path_factory.mktemp("rules-official") / "official"
    make_tiny_dsv41(out, seed=0)
    return out


def _copy_pack(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit(pack: Path, edit) -> None:
    """Rewrite every shard of `pack`: edit(arrays, dtypes) changes them in place; the index follows."""
    idx = read_index(pack)
    wm = {}
    for rel in idx.shards():
        with SafetensorsFile(pack / rel) as f:
            arrays = {n: np.array(f.read_array(n)) for n in f.tensors}
            dtypes = {n: t.dtype for n, t in f.tensors.items()}
        edit(arrays, dtypes, rel)
        write_file(pack / rel, arrays, dtypes={n: dtypes[n] for n in arrays}, metadata={"format": "pt"}, fsync=False)
        wm.update({n: rel for n in arrays})
    total = 0
    for rel in set(wm.values()):
        with SafetensorsFile(pack / rel) as f:
            total += sum(t.nbytes for t in f.tensors.values())
    (pack / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": wm})
    )


def _qc_edit(pack: Path, fn) -> None:
    cfg = json.loads((pack / "config.json").read_text())
    fn(cfg)
    (pack / "config.json").write_text(json.dumps(cfg))


def _refused(official, pack, out, code, rule):
    with pytest.raises(RecipekitError) as ei:
        assemble(official, pack, out)
    e = ei.value
    assert e.code == code and f"rule {rule} (" in e.message and RULES[rule].source in e.message, e.message
    assert "\n" not in e.message
    assert not out.exists()  # nothing written
    return e


@pytest.mark.parametrize(
    "pack,codebook,bits,layer_bits",
    [
        (PACK_A, "mcg", 3, {"0": 3, "1": 3, "2": 3, "3": 2, "4": 2, "5": 3, "6": 3, "7": 3}),
        (PACK_B, "mul1", 4, {str(L): 4 for L in range(8)}),
    ],
)
def test_real_pack_assembles_and_checks(official, tmp_path, run_cli, pack, codebook, bits, layer_bits):
    made = json.loads((pack / "MADE_BY.json").read_text())
    assert made["exllamav3"] == "1.6.5" and made["function"].endswith("quantize_exl3")
    out = tmp_path / "hybrid"
    rep = assemble(official, pack, out)
    assert rep["codebook"] == codebook and rep["layer_bits"] == layer_bits
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    assert qc["bits"] == bits and isinstance(qc["bits"], int)  # the plugin's int(bits), not 2.75
    assert qc["layer_bits"] == layer_bits and qc["codebook"] == codebook
    pack_qc = json.loads((pack / "config.json").read_text())["quantization_config"]
    for key in ("version", "head_bits", "out_scales", "original_quantization_config"):
        assert qc[key] == pack_qc[key]  # the pack's own keys carried over
    assert merged_qc_problems(qc) == []
    code, text, _ = run_cli("checkpoint", "check", str(out), "--checkpoint-format", "hybrid")
    assert code == 0 and text.startswith("LAYOUT_OK hybrid"), text


def test_seed_band_at_2_bpw_comes_out_as_layer_bits(official, tmp_path):
    rep = assemble(official, PACK_A, tmp_path / "h")
    qc = json.loads((tmp_path / "h" / "config.json").read_text())["quantization_config"]
    assert [L for L, b in qc["layer_bits"].items() if b == 2] == ["3", "4"] and qc["bits"] == 3
    assert rep["layer_bits"]["3"] == 2


def test_3inst_pack_refused(official, tmp_path):
    pack = _copy_pack(PACK_A, tmp_path / "p")
    _edit(pack, lambda a, d, rel: [a.pop(n) for n in list(a) if n.endswith(".mcg")])
    _refused(official, pack, tmp_path / "out", "assemble-exl3-invalid", "exl3-codebook")


def test_marker_with_the_other_codebooks_value_refused(official, tmp_path):
    pack = _copy_pack(PACK_A, tmp_path / "p")

    def swap(a, d, rel):
        n = "layers.0.ffn.experts.0.w1.mcg"
        if n in a:
            a[n] = np.array(np.uint32(CODEBOOK_MULTIPLIER["mul1"]).view(np.int32))

    _edit(pack, swap)
    e = _refused(official, pack, tmp_path / "out", "assemble-exl3-invalid", "exl3-marker-value")
    assert "0x83dcd12d" in e.message and "0xcbac1fed" in e.message


@pytest.mark.parametrize("shape,ok", [((1,), True), ((2,), False), ((1, 1), False)])
def test_marker_shapes_assemble_and_check_agree(official, tmp_path, shape, ok):
    pack = _copy_pack(PACK_A, tmp_path / "p")

    def reshape(a, d, rel):
        for n in list(a):
            if n.endswith(".mcg"):
                a[n] = np.full(shape, a[n].reshape(-1)[0], dtype=np.int32)

    _edit(pack, reshape)
    out = tmp_path / "out"
    if not ok:
        _refused(official, pack, out, "assemble-exl3-invalid", "exl3-marker-shape")
        return
    assemble(official, pack, out)
    rep = check_hybrid(out)
    assert rep.ok, rep.problems


def test_check_refuses_a_marker_shape_or_value_it_would_not_assemble(official, tmp_path):
    out = tmp_path / "h"
    pack = _copy_pack(PACK_A, tmp_path / "p")
    assemble(official, pack, out)

    # the source changes after assembly: a [2] marker and a wrong value
    def damage(a, d, rel):
        if "layers.0.ffn.experts.0.w1.mcg" in a:
            a["layers.0.ffn.experts.0.w1.mcg"] = np.array([1, 2], dtype=np.int32)
        if "layers.5.ffn.experts.1.w2.mcg" in a:
            a["layers.5.ffn.experts.1.w2.mcg"] = np.array(7, dtype=np.int32)

    _edit(pack, damage)
    # an assembler that did not check: its record agrees with the damaged files
    from recipekit.checkpoint.manifest import sha256_file

    rec = json.loads((out / "hybrid-assembly.json").read_text())
    for name, ent in rec["links"].items():
        if ent["role"] == "exl3":
            ent["size"], ent["sha256"] = (pack / name).stat().st_size, sha256_file(pack / name)
    (out / "hybrid-assembly.json").write_text(json.dumps(rec))
    probs = "\n".join(check_hybrid(out).problems)
    assert "rule exl3-marker-shape" in probs and "layers.0.ffn.experts.0.w1.mcg" in probs
    assert "rule exl3-marker-value" in probs and "layers.5.ffn.experts.1.w2.mcg holds 0x00000007" in probs


@pytest.mark.parametrize(
    "edit,rule",
    [
        (lambda q: q.pop("bits"), "exl3-bits"),
        (lambda q: q.update(bits=None), "exl3-bits"),
        (lambda q: q.update(bits=7), "exl3-bits"),
        (lambda q: q.update(bits=1.5), "exl3-bits"),
        (lambda q: q.update(layer_bits={"3": 3}), "exl3-layer-bits"),  # the trellis of layer 3 is 2 bits
    ],
)
def test_pack_bits_refused(official, tmp_path, edit, rule):
    pack = _copy_pack(PACK_A, tmp_path / "p")
    _qc_edit(pack, lambda c: edit(c["quantization_config"]))
    _refused(official, pack, tmp_path / "out", "assemble-exl3-bits", rule)


def test_trellis_width_outside_2_to_6_refused(official, tmp_path):
    pack = _copy_pack(PACK_A, tmp_path / "p")

    def widen(a, d, rel):
        for n in list(a):
            if n.startswith("layers.6.") and n.endswith(".trellis"):
                t = a[n]
                a[n] = np.zeros(t.shape[:2] + (16 * 7,), dtype=np.int16)

    _edit(pack, widen)
    e = _refused(official, pack, tmp_path / "out", "assemble-exl3-bits", "exl3-layer-bits")
    assert "layer 6 trellis width is 7 bits" in e.message


@pytest.mark.parametrize(
    "bad",
    [
        {"bits": 2.75},
        {"bits": None},
        {"bits": 7},
        {"codebook": "3inst"},
        {"layer_bits": {"0": 1}},
        {"layer_bits": {"x": 3}},
        {"layer_bits": {}},
    ],
)
def test_check_merged_quantization_config_as_the_plugin_parses_it(bad):
    qc = {"bits": 3, "codebook": "mcg", "layer_bits": {"0": 3}} | bad
    found = merged_qc_problems(qc)
    assert len(found) == 1 and found[0].startswith("rule exl3-"), found


def test_tensor_in_both_sources_refused(official, tmp_path):
    pack = _copy_pack(PACK_A, tmp_path / "p")
    with SafetensorsFile(official / read_index(official).weight_map["layers.0.attn.wq_a.weight"]) as f:
        stray = np.array(f.read_array("layers.0.attn.wq_a.weight"))

    def add(a, d, rel):
        if rel.startswith("model-00001"):
            a["layers.0.attn.wq_a.weight"] = stray
            d["layers.0.attn.wq_a.weight"] = "F8_E4M3"

    _edit(pack, add)
    e = _refused(official, pack, tmp_path / "out", "assemble-tensor-in-two-sources", "hybrid-one-source")
    assert "layers.0.attn.wq_a.weight" in e.message


@pytest.mark.parametrize("key,value", [("n_routed_experts", 16), ("hidden_size", 256), ("moe_intermediate_size", 256)])
def test_pack_geometry_differs_refused(official, tmp_path, key, value):
    pack = _copy_pack(PACK_A, tmp_path / "p")
    _qc_edit(pack, lambda c: c["text_config"].update({key: value}))
    e = _refused(official, pack, tmp_path / "out", "assemble-exl3-geometry", "exl3-pack-geometry")
    assert key in e.message


def test_trellis_not_padded_to_128_refused(official, tmp_path):
    assert (pad128(96), pad128(128), pad128(2304), pad128(5120)) == (128, 128, 2304, 5120)
    pack = _copy_pack(PACK_A, tmp_path / "p")

    def unpad(a, d, rel):  # [in/16, out/16] of a 112-wide linear: not padded to 128
        n = "layers.0.ffn.experts.0.w1.trellis"
        if n in a:
            a[n] = a[n][:7]

    _edit(pack, unpad)
    e = _refused(official, pack, tmp_path / "out", "assemble-exl3-invalid", "exl3-pad-128")
    assert "[7, 8, 48]" in e.message


def test_aux_symlink_leading_outside_the_source_refused(official, tmp_path):
    off = tmp_path / "official"
    shutil.copytree(official, off, symlinks=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    (off / "tokenizer_config.json").unlink()
    os.symlink(secret, off / "tokenizer_config.json")
    with pytest.raises(RecipekitError) as ei:  # the one confinement rule (recipekit/confine.py)
        assemble(off, PACK_A, tmp_path / "out")
    assert ei.value.code == "side-file-outside" and "tokenizer_config.json" in ei.value.message
    assert not (tmp_path / "out").exists()
    # a link that stays inside the source is fine
    (off / "tokenizer_config.json").unlink()
    (off / "chat_template.jinja").write_text("{{ x }}")
    os.symlink("chat_template.jinja", off / "tokenizer_config.json")
    assemble(off, PACK_A, tmp_path / "ok")


def test_unmapped_tensors_and_the_skip_rule(official, tmp_path, run_cli):
    from recipekit.hybrid.unmapped import verify_skip_regex

    out = tmp_path / "h"
    rep = assemble(official, PACK_A, out)
    # the official layer shards still hold the backbone's MXFP4 routed experts: 8 layers x 8 experts x 3 x 2
    assert rep["unmapped_tensors"] == 8 * 8 * 3 * 2
    skip = rep["skip_weight_re"]
    assert skip == r"^layers\.(0|1|2|3|4|5|6|7)\.ffn\.experts\.[0-9]+\.w[123]\.(weight|scale)$"
    rec = json.loads((out / "hybrid-assembly.json").read_text())
    assert rec["skip_weight_re"] == skip and rec["skip_setting"] == "DSV41_SKIP_WEIGHT_RE"
    # default (the seed's launch block has no skip rule): check passes and WARNs naming the setting
    code, text, _ = run_cli("checkpoint", "check", str(out), "--checkpoint-format", "hybrid")
    assert code == 0 and "WARN 384 tensor(s) in the linked files are not in the index" in text
    assert f"DSV41_SKIP_WEIGHT_RE={skip!r}" in text
    # the effective setting: covered exactly -> no warning; too narrow / too wide -> problem
    rep2 = check_hybrid(out, quick=True, skip_re=skip)
    assert rep2.ok and rep2.warnings == []
    narrow = check_hybrid(out, quick=True, skip_re=r"^layers\.0\.ffn\.experts\.")
    assert not narrow.ok and any("leaves 336 unmapped tensor(s) to the loader" in p for p in narrow.problems)
    wide = check_hybrid(out, quick=True, skip_re=r"\.ffn\.experts\.")
    # the EXL3 experts (768) and the DSpark stages' own experts (72) are mapped: skipping them is refused
    assert not wide.ok and any("also skips 840 mapped tensor(s)" in p for p in wide.problems)
    # assembly refuses a DSV41_SKIP_WEIGHT_RE that does not match exactly, writing nothing
    with pytest.raises(RecipekitError) as ei:
        assemble(official, PACK_A, tmp_path / "h2", skip_re=r"^layers\.[0-3]\.ffn\.experts\.")
    assert ei.value.code == "assemble-skip-re-mismatch" and not (tmp_path / "h2").exists()
    assemble(official, PACK_A, tmp_path / "h3", skip_re=skip)
    both = {"layers.0.ffn.experts.0.w1.weight", "layers.0.ffn.experts.0.w1.trellis"}
    assert verify_skip_regex(skip, both, {"layers.0.ffn.experts.0.w1.weight"}) is None
    assert "also skips" in verify_skip_regex(".", both, {"layers.0.ffn.experts.0.w1.weight"})
    # a record whose skip rule was tampered with is caught
    rec["skip_weight_re"] = r"^$"
    (out / "hybrid-assembly.json").write_text(json.dumps(rec))
    assert any("skip_weight_re '^$' leaves 384" in p for p in check_hybrid(out, quick=True).problems)


def test_check_verifies_the_packs_per_tensor_sha256_and_the_recorded_hashes(official, tmp_path):
    import struct

    from recipekit.hybrid.exl3 import make_tiny_exl3

    pack = tmp_path / "gen-pack"
    make_tiny_exl3(official, pack)  # writes a recipekit manifest with per-tensor sha256
    out = tmp_path / "h"
    rep = assemble(official, pack, out)
    rec = json.loads((out / "hybrid-assembly.json").read_text())
    from recipekit.checkpoint.manifest import sha256_file

    for name, ent in rec["links"].items():  # what assembly records is what the file hashes to
        assert ent["sha256"] == sha256_file(out / name), name
    assert check_hybrid(out).ok
    # flip one byte inside one trellis (same size): the pack's per-tensor sha256 names the tensor
    rel = read_index(pack).weight_map["layers.2.ffn.experts.1.w3.trellis"]
    with SafetensorsFile(pack / rel) as f:
        t = f.tensors["layers.2.ffn.experts.1.w3.trellis"]
    raw = bytearray((pack / rel).read_bytes())
    at = 8 + struct.unpack("<Q", raw[:8])[0] + t.begin + 5
    raw[at] ^= 0xFF
    (pack / rel).write_bytes(bytes(raw))
    probs = check_hybrid(out).problems
    want = "exl3 pack manifest: layers.2.ffn.experts.1.w3.trellis: sha256 differs"
    assert any(p.startswith(want) for p in probs), probs
    assert any(p == f"{rel}: source sha256 differs from the assembly record" for p in probs), probs
    assert rep["tensors"] > 0


def _models_dir(official: Path, base: Path) -> Path:
    """MODELS_DIR holding the official copy, the real EXL3 pack and the assembly side by side."""
    base.mkdir()
    shutil.copytree(official, base / "official", symlinks=True)
    shutil.copytree(PACK_A, base / "exl3")
    assemble(base / "official", base / "exl3", base / "hybrid")
    return base


def test_assembly_is_relocatable_when_the_folders_move_together(official, tmp_path, run_cli):
    base = _models_dir(official, tmp_path / "models")
    rec = json.loads((base / "hybrid" / "hybrid-assembly.json").read_text())
    assert {r: s["root"] for r, s in rec["sources"].items()} == {"official": "../official", "exl3": "../exl3"}
    moved = tmp_path / "elsewhere" / "models"
    moved.parent.mkdir()
    base.rename(moved)
    code, text, _ = run_cli("checkpoint", "check", str(moved / "hybrid"), "--checkpoint-format", "hybrid")
    assert code == 0 and text.startswith("LAYOUT_OK hybrid"), text
    # moving only the assembly breaks it, and check says so
    (tmp_path / "alone").mkdir()
    (moved / "hybrid").rename(tmp_path / "alone" / "hybrid")
    code, text, _ = run_cli("checkpoint", "check", str(tmp_path / "alone" / "hybrid"), "--checkpoint-format", "hybrid")
    assert code == 2 and "does not exist" in text


def test_assembly_checks_through_a_real_bind_mount(official, tmp_path):
    import subprocess
    import sys

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    base = _models_dir(official, tmp_path / "models")
    mnt = tmp_path / "mnt" / "models"  # as `docker run -v ${MODELS_DIR}:/models`
    mnt.mkdir(parents=True)
    script = (
        f"mount --bind {base} {mnt} && {sys.executable} -m recipekit checkpoint check "
        f"{mnt / 'hybrid'} --checkpoint-format hybrid --format json"
    )
    r = subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "RECIPEKIT_HOME": str(tmp_path / "home")},
    )
    if r.returncode != 0 and "mount" in r.stderr and "permission" in r.stderr.lower():
        pytest.skip(f"mount namespaces are not allowed here: {r.stderr.strip()}")
    rep = json.loads(r.stdout)
    assert r.returncode == 0 and rep["ok"], (r.stdout, r.stderr)
    assert rep["folder"] == str(mnt / "hybrid")
    assert not any(mnt.iterdir())  # the mount lived only in that namespace
