"""Tiny EXL3 pack + tiny official (+ BF16 source) -> hybrid assembly from links; `check --checkpoint-format hybrid`;
missing, duplicated, escaping and colliding inputs refused."""

from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pytest

from recipekit.checkpoint import dsv41
from recipekit.checkpoint.safetensors_io import Checkpoint, SafetensorsFile, read_index, write_file, write_index

SEED_RE = r"^model-[0-9]+-of-000(43|39)\.safetensors$"  # the CMP recipe's DSV41_EXPERTS_ONLY_FILES_RE


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41
    from recipekit.hybrid.exl3 import make_tiny_exl3

    base = tmp_path_factory.mktemp("hybrid-src")
    official, pack, bf16 = base / "official", base / "exl3", base / "bf16"
    make_tiny_dsv41(official)
    make_tiny_exl3(official, pack)
    # a BF16 source: embeddings, head and vision in BF16, plus a decoy that must not be taken
    with Checkpoint(official) as c:
        names = [
            n
            for n in c.names()
            if n in ("embed.weight", "head.weight", "image_start", "image_end", "image_newline") or dsv41.is_vision(n)
        ]
        arrays = {n: np.asarray(c.tensor_file(n).read_array(n)) for n in names}
        decoy = np.asarray(c.tensor_file("layers.0.attn.wq_a.weight").read_array("layers.0.attn.wq_a.weight"))
    bf16.mkdir()
    first = {n: a for n, a in arrays.items() if n != "head.weight"}
    second = {"head.weight": arrays["head.weight"]}
    # the decoy sits in a shard of its own: a file holding nothing the hybrid takes is not linked (a linked
    # file holding it would be refused, rule hybrid-one-source: vLLM reads every tensor of a linked file)
    third = {"layers.0.attn.wq_a.weight": np.zeros(decoy.shape, dtype=arrays["head.weight"].dtype)}
    write_file(bf16 / "model-00001-of-00002.safetensors", first, fsync=False)
    write_file(bf16 / "model-00002-of-00002.safetensors", second, fsync=False)
    write_file(bf16 / "model-00003-of-00003.safetensors", third, fsync=False)
    wm = {n: "model-00001-of-00002.safetensors" for n in first}
    wm.update({n: "model-00002-of-00002.safetensors" for n in second})
    wm.update({n: "model-00003-of-00003.safetensors" for n in third})
    write_index(bf16, wm, sum(a.nbytes for d in (first, second, third) for a in d.values()))
    return official, pack, bf16


@pytest.fixture(scope="module")
def assembled(sources, tmp_path_factory):
    from recipekit.hybrid.assemble import assemble

    official, pack, bf16 = sources
    out = tmp_path_factory.mktemp("hybrid-out") / "hybrid"
    rep = assemble(official, pack, out, bf16=bf16)
    return out, rep


def test_make_tiny_exl3_layout(sources, run_cli, tmp_path):
    official, pack, _ = sources
    cfg = json.loads((pack / "config.json").read_text())
    qc = cfg["quantization_config"]
    assert qc["quant_method"] == "exl3" and qc["codebook"] == "mcg"
    g = dsv41.Geometry.from_config(json.loads((official / "config.json").read_text()))
    idx = read_index(pack)
    official_files = set(read_index(official).shards())
    assert not (set(idx.shards()) & official_files)  # the pack's own shard names
    storage = json.loads((pack / "quantization_config.json").read_text())["tensor_storage"]
    assert len(storage) == g.n_layers * g.n_routed * 3
    with Checkpoint(pack) as c:
        for L in range(g.n_layers):
            bits = qc["layer_bits"][str(L)]
            for e in range(g.n_routed):
                for w, (i, o) in (
                    ("w1", (g.hidden, g.inter)),
                    ("w2", (g.inter, g.hidden)),
                    ("w3", (g.hidden, g.inter)),
                ):
                    m = f"layers.{L}.ffn.experts.{e}.{w}"
                    t = c.info(f"{m}.trellis")
                    assert (t.dtype, t.shape) == ("I16", (i // 16, o // 16, 16 * bits))
                    assert (c.info(f"{m}.suh").dtype, c.info(f"{m}.suh").shape) == ("F16", (i,))
                    assert (c.info(f"{m}.svh").dtype, c.info(f"{m}.svh").shape) == ("F16", (o,))
                    assert storage[m]["bits_per_weight"] == bits
        mcg = c.tensor_file("layers.0.ffn.experts.0.w1.mcg").read_array("layers.0.ffn.experts.0.w1.mcg")
        assert mcg.shape == () and int(mcg) == 0xCBAC1FED - (1 << 32)
    assert sorted(set(qc["layer_bits"].values())) == [2, 3]
    # plain safetensors: the reference library reads it
    from safetensors.numpy import load_file

    d = load_file(str(pack / idx.shards()[0]))
    assert d["layers.0.ffn.experts.0.w1.trellis"].dtype == np.int16
    # manifest matches the files; a re-run is a no-op
    from recipekit.checkpoint.manifest import Manifest, sha256_file

    man = Manifest.read(pack / "recipekit-manifest.json")
    for f, ent in man.files.items():
        assert sha256_file(pack / f) == ent["sha256"] and (pack / f).stat().st_size == ent["size"]
    code, out, err = run_cli(
        "checkpoint", "make-tiny-exl3", "--like", str(official), "--out", str(pack), "--format", "json"
    )
    assert code == 0 and json.loads(out)["skipped"] is True
    code, out, err = run_cli(
        "checkpoint",
        "make-tiny-exl3",
        "--like",
        str(official),
        "--out",
        str(tmp_path / "m"),
        "--codebook",
        "mul1",
        "--format",
        "json",
    )
    assert code == 0, err
    with Checkpoint(tmp_path / "m") as c:
        assert (
            int(c.tensor_file("layers.1.ffn.experts.2.w2.mul1").read_array("layers.1.ffn.experts.2.w2.mul1"))
            == -2082680531
        )


def test_assembly_links_only_and_maps_every_tensor_once(sources, assembled):
    official, pack, bf16 = sources
    out, rep = assembled
    g = dsv41.Geometry.from_config(json.loads((official / "config.json").read_text()))
    # no tensor byte written: only three JSON files are regular files, and the process wrote just their bytes
    regular = sorted(p.name for p in out.iterdir() if not p.is_symlink())
    assert regular == ["config.json", "hybrid-assembly.json", "model.safetensors.index.json"]
    assert rep["tensor_bytes_written"] == 0
    assert rep["bytes_written_files"] == sum((out / n).stat().st_size for n in regular)
    if rep["bytes_written_process"] is not None:
        assert rep["bytes_written_process"] <= rep["bytes_written_files"] + 4096
    assert rep["bytes_written_files"] < rep["total_size"] / 10
    for p in out.glob("*.safetensors"):
        assert p.is_symlink() and not os.path.isabs(os.readlink(p))
    assert (out / "tokenizer.json").is_symlink()
    idx = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    rec = json.loads((out / "hybrid-assembly.json").read_text())
    role_of = {n: rec["links"][f]["role"] for n, f in idx.items()}
    n_exl3 = g.n_layers * g.n_routed * 3 * 4
    assert rep["tensors_by_source"]["exl3"] == n_exl3 == sum(1 for r in role_of.values() if r == "exl3")
    for n, f in idx.items():
        with SafetensorsFile(out / f) as sf:
            assert n in sf.tensors
        if re.match(r"^layers\.\d+\.ffn\.experts\.", n):
            assert role_of[n] == "exl3" and n.rsplit(".", 1)[1] in ("trellis", "suh", "svh", "mcg")
        elif n in ("embed.weight", "head.weight", "image_start", "image_end", "image_newline") or dsv41.is_vision(n):
            assert role_of[n] == "bf16"
        else:
            assert role_of[n] == "official"
    assert not any(n.startswith("layers.") and ".ffn.experts." in n and n.endswith((".weight", ".scale")) for n in idx)
    assert any(n.startswith("mtp.0.ffn.experts.0.w1.weight") for n in idx)  # DSpark experts from source
    assert idx["layers.0.attn.wq_a.weight"] != "model-00003-of-00003.safetensors"  # the BF16 decoy is not taken
    assert "model-00003-of-00003.safetensors" not in rec["links"]
    # the bytes behind a link are the source's bytes
    with Checkpoint(official) as c:
        src = c.tensor_file("layers.3.attn.wkv.weight").read_bytes("layers.3.attn.wkv.weight")
    with SafetensorsFile(out / idx["layers.3.attn.wkv.weight"]) as sf:
        assert sf.read_bytes("layers.3.attn.wkv.weight") == src
    # config: official except quantization_config, merged as the EXL3 plugin expects
    oc = json.loads((official / "config.json").read_text())
    hc = json.loads((out / "config.json").read_text())
    assert {k: v for k, v in hc.items() if k != "quantization_config"} == {
        k: v for k, v in oc.items() if k != "quantization_config"
    }
    qc = hc["quantization_config"]
    assert qc["quant_method"] == "exl3" and qc["mtp_experts"] == "source" and qc["codebook"] == "mcg"
    assert qc["non_routed_quantization"] == {
        "quant_method": "deepseek_v4_fp8",
        "weight_block_size": [32, 32],
        "activation_scheme": "dynamic",
        "scale_fmt": "ue8m0",
    }
    assert qc["layer_bits"] == json.loads((pack / "config.json").read_text())["quantization_config"]["layer_bits"]
    # the experts-only regex: computed from the file names, matches exactly the pack's shards
    rx = re.compile(rep["experts_only_files_re"])
    files = set(idx.values())
    assert {f for f in files if rx.search(f)} == set(read_index(pack).shards())


def test_check_hybrid_passes_and_cli(assembled, run_cli):
    out, _ = assembled
    code, stdout, err = run_cli("checkpoint", "check", str(out), "--checkpoint-format", "hybrid", "--format", "json")
    assert code == 0, stdout + err
    rep = json.loads(stdout)
    assert rep["ok"] is True and rep["layout"] == "hybrid" and rep["problems"] == []


def test_tensor_bytes_written_is_measured_and_sees_a_copy(sources, tmp_path, monkeypatch):
    """The figure comes from the process's write counter: an assembly that copied the shards
    instead of linking them reports their bytes."""
    import shutil

    from recipekit.hybrid import assemble as asm

    if asm._write_counter() is None:
        pytest.skip("no /proc/self/io on this host")
    official, pack, bf16 = sources
    monkeypatch.setattr(asm, "_link", lambda target, link: shutil.copyfile(target, link))
    rep = asm.assemble(official, pack, tmp_path / "copied", bf16=bf16)
    assert rep["tensor_bytes_written"] >= rep["linked_bytes"] > 0


def test_reassembly_is_idempotent(sources, assembled, run_cli):
    official, pack, bf16 = sources
    out, rep = assembled
    before = {p.name: os.readlink(p) for p in out.iterdir() if p.is_symlink()}
    code, stdout, err = _assemble(run_cli, official, pack, str(out), "--bf16", str(bf16), "--format", "json")
    assert code == 0, err
    assert json.loads(stdout)["tensors"] == rep["tensors"]
    assert {p.name: os.readlink(p) for p in out.iterdir() if p.is_symlink()} == before


def _assemble(run_cli, official, exl3, out, *extra: str):
    """`recipe checkpoint assemble --official .. --exl3 .. --out .. [extra]`: (code, stdout, stderr)."""
    return run_cli(
        "checkpoint", "assemble", "--official", str(official), "--exl3", str(exl3), "--out", str(out), *extra
    )


def _copy_pack(pack, dst):
    shutil.copytree(pack, dst)
    return dst


def _rewrite_index(folder, fn):
    ipath = folder / "model.safetensors.index.json"
    doc = json.loads(ipath.read_text())
    fn(doc["weight_map"])
    ipath.write_text(json.dumps(doc))


def test_missing_expert_tensor_refused(sources, tmp_path, run_cli):
    official, pack, _ = sources
    bad = _copy_pack(pack, tmp_path / "pack")
    _rewrite_index(bad, lambda wm: wm.pop("layers.5.ffn.experts.3.w2.trellis"))
    code, out, err = _assemble(run_cli, official, bad, str(tmp_path / "o"))
    assert code == 2 and "error[assemble-missing-tensor]" in err and "layers.5.ffn.experts.3.w2" in err
    assert not (tmp_path / "o").exists()  # nothing written


def test_duplicated_tensor_refused(sources, tmp_path, run_cli):
    official, pack, _ = sources
    bad = _copy_pack(pack, tmp_path / "pack")
    name = "layers.0.ffn.experts.0.w1.trellis"
    with Checkpoint(bad) as c:
        dup = np.asarray(c.tensor_file(name).read_array(name))
    write_file(
        bad / "model-00009-of-00009.safetensors", {name: dup, "extra.decoy": np.zeros(4, np.float32)}, fsync=False
    )
    _rewrite_index(bad, lambda wm: wm.__setitem__("extra.decoy", "model-00009-of-00009.safetensors"))
    code, out, err = _assemble(run_cli, official, bad, str(tmp_path / "o"))
    assert code == 2 and "error[assemble-duplicate-tensor]" in err and name in err


def test_escaping_source_and_links_refused(sources, assembled, tmp_path, run_cli):
    official, pack, bf16 = sources
    # a source index pointing outside its folder
    bad = _copy_pack(pack, tmp_path / "pack")
    shutil.copy(bad / "model-00001-of-00008.safetensors", tmp_path / "outside.safetensors")
    _rewrite_index(
        bad,
        lambda wm: wm.update(
            {k: "../outside.safetensors" for k, v in list(wm.items()) if v == "model-00001-of-00008.safetensors"}
        ),
    )
    code, out, err = _assemble(run_cli, official, bad, str(tmp_path / "o"))
    assert code == 2 and "error[index-path-escape]" in err
    # a link of the assembly replaced by one leaving the declared source roots
    hy = tmp_path / "hy"
    shutil.copytree(assembled[0], hy, symlinks=True)
    for p in hy.iterdir():  # keep relative links valid from the new place
        if p.is_symlink():
            target = (assembled[0] / os.readlink(p)).resolve()
            p.unlink()
            os.symlink(os.path.relpath(target, hy), p)
    rec = json.loads((hy / "hybrid-assembly.json").read_text())
    for ent in {**rec["links"], **rec["aux_links"]}.values():
        ent["target"] = os.path.relpath((assembled[0] / ent["target"]).resolve(), hy)
    (hy / "hybrid-assembly.json").write_text(json.dumps(rec))
    code, out, err = run_cli("checkpoint", "check", str(hy), "--checkpoint-format", "hybrid")
    assert code == 0, out + err
    victim = "model-00002-of-00008.safetensors"
    shutil.copy(hy / victim, tmp_path / victim)
    (hy / victim).unlink()
    os.symlink(os.path.relpath(tmp_path / victim, hy), hy / victim)
    code, out, err = run_cli("checkpoint", "check", str(hy), "--checkpoint-format", "hybrid", "--format", "json")
    rep = json.loads(out)
    assert code == 2 and any(victim in p and "escapes the declared exl3 source root" in p for p in rep["problems"])
    # an absolute link, and a regular file holding tensor bytes, are refused too
    (hy / victim).unlink()
    shutil.copy(tmp_path / victim, hy / victim)
    code, out, err = run_cli("checkpoint", "check", str(hy), "--checkpoint-format", "hybrid", "--format", "json")
    assert code == 2 and any(victim in p and "regular file" in p for p in json.loads(out)["problems"])


def test_check_finds_missing_duplicated_and_changed(sources, assembled, tmp_path, run_cli):
    official, pack, bf16 = sources
    # assemble against copies so the sources can be changed
    o2, p2 = tmp_path / "official", tmp_path / "pack"
    shutil.copytree(official, o2)
    shutil.copytree(pack, p2)
    from recipekit.hybrid.assemble import assemble

    hy = tmp_path / "hy"
    assemble(o2, p2, hy)
    code, out, err = run_cli("checkpoint", "check", str(hy), "--checkpoint-format", "hybrid")
    assert code == 0, out + err
    # a tensor dropped from the index
    ipath = hy / "model.safetensors.index.json"
    good = ipath.read_text()
    doc = json.loads(good)
    doc["weight_map"].pop("layers.2.attn.wkv.scale")
    ipath.write_text(json.dumps(doc))
    code, out, err = run_cli("checkpoint", "check", str(hy), "--checkpoint-format", "hybrid", "--format", "json")
    assert code == 2 and "layers.2.attn.wkv.scale: missing from the index" in json.loads(out)["problems"]
    # a tensor listed twice (duplicate JSON key) is refused outright
    ipath.write_text(good.replace('"weight_map": {', '"weight_map": {\n    "embed.weight": "x.safetensors",', 1))
    code, out, err = run_cli("checkpoint", "check", str(hy), "--checkpoint-format", "hybrid")
    assert code == 2 and "error[hybrid-file-invalid]" in err and "duplicate key 'embed.weight'" in err
    ipath.write_text(good)
    # a link removed
    gone = read_index(p2).shards()[1]
    target = os.readlink(hy / gone)
    (hy / gone).unlink()
    code, out, err = run_cli("checkpoint", "check", str(hy), "--checkpoint-format", "hybrid", "--format", "json")
    assert code == 2 and f"{gone}: declared link is missing from the folder" in json.loads(out)["problems"]
    os.symlink(target, hy / gone)
    # a source shard changed after assembly (same size, one byte flipped)
    shard = read_index(p2).shards()[3]
    data = bytearray((p2 / shard).read_bytes())
    data[-5] ^= 0xFF
    (p2 / shard).write_bytes(bytes(data))
    code, out, err = run_cli("checkpoint", "check", str(hy), "--checkpoint-format", "hybrid", "--format", "json")
    probs = json.loads(out)["problems"]
    assert code == 2 and any(shard in p and "sha256" in p for p in probs)
    # --no-hash compares sizes only: the same-size change goes unseen, a size change does not
    code, out, err = run_cli(
        "checkpoint", "check", str(hy), "--checkpoint-format", "hybrid", "--no-hash", "--format", "json"
    )
    rep = json.loads(out)
    assert code == 0 and rep["problems"] == [] and rep["sha256_checked"] is False, out + err
    code, out, err = run_cli("checkpoint", "check", str(hy), "--checkpoint-format", "hybrid", "--no-hash")
    assert code == 0 and "sizes only" in out, out + err
    with open(p2 / shard, "ab") as f:
        f.write(b"\0")
    code, out, err = run_cli(
        "checkpoint", "check", str(hy), "--checkpoint-format", "hybrid", "--no-hash", "--format", "json"
    )
    assert code == 2 and any(shard in p and "bytes, recorded" in p for p in json.loads(out)["problems"])


def test_experts_regex_and_name_collision(sources, tmp_path, run_cli):
    official, pack, _ = sources
    code, out, err = _assemble(run_cli, official, pack, str(tmp_path / "o"), "--experts-re", SEED_RE)
    assert code == 2 and "error[assemble-experts-re-mismatch]" in err and "of-00008" in err
    code, out, err = _assemble(
        run_cli,
        official,
        pack,
        str(tmp_path / "o"),
        "--experts-re",
        r"^model-[0-9]+-of-00008\.safetensors$",
        "--format",
        "json",
    )
    assert code == 0, err
    from recipekit.hybrid.assemble import experts_only_regex, verify_experts_regex

    files = (
        {f"model-{i:05d}-of-00048.safetensors" for i in range(1, 49)}
        | {f"model-{i:05d}-of-00039.safetensors" for i in range(1, 40)}
        | {f"model-{i:05d}-of-00043.safetensors" for i in range(1, 44)}
    )
    experts = {f for f in files if not f.endswith("00048.safetensors")}
    assert experts_only_regex(files, experts) == SEED_RE  # the recipe's own form
    import yaml

    from tests.conftest import REPO

    doc = yaml.safe_load((REPO / "recipes/deepseek-ai/DeepSeek-V4.1-Flash-1017/cmp170hx-4x.yaml").read_text())

    def find(node):
        if isinstance(node, dict):
            if node.get("name") == "DSV41_EXPERTS_ONLY_FILES_RE":
                return node.get("value")
            node = list(node.values())
        if isinstance(node, list):
            for x in node:
                v = find(x)
                if v is not None:
                    return v
        return None

    assert find(doc) == SEED_RE  # the recipe's data agrees
    assert verify_experts_regex(SEED_RE, files, experts) is None
    assert "also matches" in verify_experts_regex(r"^model-", files, experts)
    # two sources sharing a shard name
    bad = _copy_pack(pack, tmp_path / "pack")
    clash = read_index(official).shards()[2]
    os.rename(bad / "model-00001-of-00008.safetensors", bad / clash)
    _rewrite_index(
        bad, lambda wm: wm.update({k: clash for k, v in list(wm.items()) if v == "model-00001-of-00008.safetensors"})
    )
    code, out, err = _assemble(run_cli, official, bad, str(tmp_path / "o2"))
    assert code == 2 and "error[assemble-name-collision]" in err


def test_source_manifests_from_fetch_records(sources, tmp_path, run_cli):
    """`recipe fetch` records (size + sha256 per file) count as the source's manifest."""
    from recipekit.checkpoint.manifest import sha256_file

    official, pack, _ = sources
    o2 = tmp_path / "official"
    shutil.copytree(official, o2)
    shards = read_index(o2).shards()
    files = {f: {"size": (o2 / f).stat().st_size, "sha256": sha256_file(o2 / f)} for f in shards}
    wrong = shards[4]
    files[wrong]["sha256"] = "0" * 64
    (o2 / ".recipekit-fetch.json").write_text(json.dumps({"schema": 1, "sources": {"official": {"files": files}}}))
    hy = tmp_path / "hy"
    code, out, err = run_cli(
        "checkpoint", "assemble", "--official", str(o2), "--exl3", str(pack), "--out", str(hy), "--no-hash"
    )
    assert code == 0, err
    rec = json.loads((hy / "hybrid-assembly.json").read_text())
    assert rec["links"][shards[5]]["sha256"] == files[shards[5]]["sha256"] and rec["links"][shards[5]]["from_manifest"]
    code, out, err = run_cli("checkpoint", "check", str(hy), "--checkpoint-format", "hybrid", "--format", "json")
    probs = json.loads(out)["problems"]
    assert code == 2 and probs == [f"{wrong}: source sha256 differs from the assembly record"]
    files[wrong]["size"] += 1
    (o2 / ".recipekit-fetch.json").write_text(json.dumps({"schema": 1, "sources": {"official": {"files": files}}}))
    code, out, err = run_cli("checkpoint", "assemble", "--official", str(o2), "--exl3", str(pack), "--out", str(hy))
    assert code == 2 and "error[assemble-source-changed]" in err and wrong in err


def test_assemble_shows_progress_per_shard_with_elapsed(sources, tmp_path, run_cli, monkeypatch):
    """`checkpoint assemble` prints done/total shards with elapsed time on stderr (a line every
    RECIPEKIT_PROGRESS_EVERY_S from a heartbeat) and a closing line when it linked them all."""
    import re

    official, pack, bf16 = sources
    monkeypatch.setenv("RECIPEKIT_PROGRESS_EVERY_S", "0.001")
    code, stdout, err = _assemble(run_cli, official, pack, str(tmp_path / "o"), "--bf16", str(bf16))
    assert code == 0, err
    lines = [x for x in err.splitlines() if x.startswith("assemble: ")]
    links = int(re.search(r"in (\d+) linked shards", stdout).group(1))
    assert lines and lines[-1].startswith(f"assemble: {links}/{links} shards (100%), ") and lines[-1].endswith("; done")
    assert all(re.match(r"assemble: \d+(/\d+)? shards.*, \d+ s elapsed", x) for x in lines), lines
