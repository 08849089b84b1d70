"""The checkpoint commands' whole-column paths (hybrid/fastplan.py, read_json_unique, the skip rule's
one-call scan, the original check's column comparison) give byte for byte what the per-tensor paths
give, on valid input and on input they must hand back to the per-tensor path."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from recipekit.checkpoint import safetensors_io as sio
from recipekit.errors import RecipekitError
from recipekit.hybrid import assemble as asm
from recipekit.hybrid import fastplan, unmapped
from recipekit.hybrid.exl3 import routed_module

OUTPUTS = ("config.json", "model.safetensors.index.json", "hybrid-assembly.json")


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41
    from recipekit.hybrid.exl3 import make_tiny_exl3

    base = tmp_path_factory.mktemp("columns")
    make_tiny_dsv41(base / "official")
    make_tiny_exl3(base / "official", base / "exl3")
    return base / "official", base / "exl3"


def _per_tensor_only(monkeypatch) -> None:
    """Every whole-column shortcut answers "cannot prove it": the per-tensor paths run."""
    monkeypatch.setattr(fastplan, "split_routed", lambda *a, **k: None)
    monkeypatch.setattr(fastplan, "plan_pack", lambda *a, **k: None)
    monkeypatch.setattr(fastplan, "coverage", lambda *a, **k: None)
    monkeypatch.setattr(fastplan, "markers_hold", lambda *a, **k: False)
    monkeypatch.setattr(sio, "_loads_unique_fast", lambda text: None)


def _outputs(folder):
    return {n: (folder / n).read_bytes() for n in OUTPUTS}


def test_the_column_plan_is_taken_for_a_regular_pack(sources):
    official, pack = sources
    o, e = asm.load_source("official", official), asm.load_source("exl3", pack)
    g = asm.dsv41.Geometry.from_config(asm.dsv41.load_config(official))
    split = fastplan.split_routed(list(o.weight_map), g.n_layers)
    assert split is not None
    rest, modules = split
    by_name = {n: routed_module(n, g.n_layers) for n in o.weight_map}
    assert rest == [n for n, rm in by_name.items() if rm is None]
    assert list(modules) == list(dict.fromkeys(rm[0] for rm in by_name.values() if rm))
    plan = fastplan.plan_pack(sorted(modules), e.weight_map, e.headers, e.root, e.data_start, g.hidden, g.inter)
    assert plan is not None and plan.codebook == "mcg"
    assert plan.count == len(plan.names()) == 4 * len(modules) == len(e.weight_map)


def test_assemble_and_check_are_byte_identical_to_the_per_tensor_paths(sources, tmp_path, monkeypatch):
    official, pack = sources
    fast = asm.assemble(official, pack, tmp_path / "fast", hash_sources=False)
    fast_rep = asm.check_hybrid(tmp_path / "fast", quick=True)
    with monkeypatch.context() as m:
        _per_tensor_only(m)
        slow = asm.assemble(official, pack, tmp_path / "slow", hash_sources=False)
        slow_rep = asm.check_hybrid(tmp_path / "slow", quick=True)
    assert fast_rep.ok and slow_rep.ok, (fast_rep.problems, slow_rep.problems)
    for n in ("out",):
        fast.pop(n), slow.pop(n)
    assert fast == slow
    assert _outputs(tmp_path / "fast") == _outputs(tmp_path / "slow")  # same depth: even the link targets
    a, b = fast_rep.to_dict(), slow_rep.to_dict()
    assert a.pop("folder") != b.pop("folder") and a == b


def test_a_wrong_marker_and_shape_are_reported_alike(sources, tmp_path, monkeypatch):
    official, pack = sources
    bad = tmp_path / "exl3"
    shutil.copytree(pack, bad)
    # one expert's marker value and one trellis dtype changed in place (same sizes)
    name = "layers.1.ffn.experts.0.w2.mcg"
    rel = sio.read_index(bad).weight_map[name]
    with sio.SafetensorsFile(bad / rel) as f:
        t, start = f.tensors[name], f.data_start
    with open(bad / rel, "r+b") as fh:
        fh.seek(start + t.begin)
        fh.write((0x12345678).to_bytes(4, "little"))
    with pytest.raises(RecipekitError) as fast:
        asm.assemble(official, bad, tmp_path / "fast", hash_sources=False)
    with monkeypatch.context() as m:
        _per_tensor_only(m)
        with pytest.raises(RecipekitError) as slow:
            asm.assemble(official, bad, tmp_path / "slow", hash_sources=False)
    assert fast.value.code == slow.value.code == "assemble-exl3-invalid"
    assert fast.value.message == slow.value.message and "0x12345678" in fast.value.message
    # the check of an assembly whose pack changed afterwards: the same findings
    good = tmp_path / "exl3-good"
    shutil.copytree(pack, good)
    asm.assemble(official, good, tmp_path / "hyb", hash_sources=False)
    shutil.copyfile(bad / rel, good / rel)
    fast_rep = asm.check_hybrid(tmp_path / "hyb", quick=True)
    with monkeypatch.context() as m:
        _per_tensor_only(m)
        slow_rep = asm.check_hybrid(tmp_path / "hyb", quick=True)
    assert fast_rep.problems == slow_rep.problems
    assert any("0x12345678" in p for p in fast_rep.problems)


@pytest.mark.parametrize(
    "text",
    [
        '{"metadata": {"total_size": 4}, "weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}',
        '{"metadata": {"k": {"n": 1, "n": 2}}, "weight_map": {"a": "x.safetensors"}}',
        '{"metadata": {"total_size": 4}, "weight_map": {"a:b": "x.safetensors"}, "weight_map": {}}',
    ],
)
def test_a_key_given_twice_is_refused_as_before(tmp_path, text):
    (tmp_path / sio.INDEX_NAME).write_text(text)
    with pytest.raises(RecipekitError) as e:
        sio.read_index(tmp_path)
    assert e.value.code == "index-invalid" and "duplicate key" in e.value.message


def test_unique_keys_are_parsed_by_the_c_parser_alone(tmp_path):
    doc = {"metadata": {"total_size": 4, "note": "a:b", "n": [{"x": "1:2"}]}, "weight_map": {"l:0": "s:1"}}
    text = json.dumps(doc, indent=2)
    assert sio._loads_unique_fast(text) == doc
    assert sio._loads_unique_fast(text.replace("a:b", "a\\u003ab")) is None  # an escape: the checking parse
    (tmp_path / sio.INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": {"a": "../x.safetensors"}}))
    with pytest.raises(RecipekitError) as e:
        sio.read_index(tmp_path)
    assert e.value.code == "index-path-escape" and "$.weight_map['a']" in (e.value.location or "")


NAMES = {
    "layers.1.ffn.experts.2.w1.weight",
    "layers.10.ffn.experts.0.w3.scale",
    "layers.3.ffn.experts.\u0663.w1.weight",  # an Arabic-Indic digit: \d takes it, [0-9] does not
    "layers.\u0661.ffn.experts.0.w1.weight",
    "layers.2.ffn.experts.0.w2.trellis",
    "embed.weight",
    "layers.1.ffn.experts.2.w1.weight.extra",
}


@pytest.mark.parametrize("n_layers", [0, 2, 3, 40])
def test_split_routed_is_routed_module_name_by_name(n_layers):
    names = sorted(NAMES) + [
        "layers.0.ffn.experts.1.w2.",
        "layers.2.ffn.experts.1.w2.x",
        "",
        "mtp.0.ffn.experts.0.w1.weight",
    ]
    rm = {n: routed_module(n, n_layers) for n in names}
    want_rest = [n for n in names if rm[n] is None]
    want_modules = list(dict.fromkeys(r[0] for r in rm.values() if r))
    for rest_only in (False, True):
        rest, modules = fastplan.split_routed(names, n_layers, rest_only)
        assert rest == want_rest
        assert list(modules) == ([] if rest_only else want_modules)
    assert fastplan.split_routed(names + ["a\nb"], n_layers) is None


def _reference(regex, all_names, unmapped):
    """verify_skip_regex's answer by re.search name by name."""
    matched = {n for n in all_names if re.search(regex, n)}
    return unmapped <= matched and matched == unmapped


@pytest.mark.parametrize("layers", [[1], [1, 10], [3], [0, 2, 3]])
def test_the_skip_rule_scan_matches_re_search(layers):
    rx = unmapped.skip_candidate(layers)
    want = {n for n in NAMES if re.search(rx, n)}
    assert unmapped._candidate_count(rx, NAMES) == len(want)
    more = NAMES | {"layers.1.ffn.experts.2.w1.scale\n"}  # a newline: the per-name path
    assert unmapped._candidate_count(rx, more) is None
    odd = unmapped.skip_candidate([1]).replace("(1)", "(01)")  # not skip_candidate's text: per name
    assert unmapped._candidate_count(odd, NAMES) is None
    for names in (NAMES, more):
        for un in (want, want | {"embed.weight"}, set(list(want)[:1]), set()):
            un = un & names
            assert (unmapped.verify_skip_regex(rx, names, un) is None) == _reference(rx, names, un)


def test_skip_regex_layers_as_before():
    un = {"layers.1.ffn.experts.2.w1.weight", "layers.10.ffn.experts.0.w3.scale"}
    assert unmapped.skip_regex(un, NAMES) == r"^layers\.(1|10)\.ffn\.experts\.[0-9]+\.w[123]\.(weight|scale)$"
    odd = {"layers.3.ffn.experts.\u0663.w1.weight"}  # \d takes it, the candidate's [0-9] does not: alternation
    assert unmapped.skip_regex(odd, NAMES) == "^(" + re.escape(next(iter(odd))) + ")$"


def test_skip_regex_with_the_mapped_names_decides_as_the_full_scan():
    """assemble hands skip_regex the indexed names (the linked files hold exactly those and the unmapped
    ones): the same rule as the scan over every name, and the set of every name is not built for it."""
    layers = (1, 10)
    un = {n for n in NAMES if re.search(unmapped.skip_candidate(layers), n)}
    mapped = NAMES - un
    built = []

    def every() -> set[str]:
        built.append(1)
        return NAMES

    assert unmapped.skip_regex(un, every, mapped) == unmapped.skip_regex(un, NAMES) == unmapped.skip_candidate(layers)
    assert built == []
    # a mapped name of the same layer that the layers' rule would also skip: no shortcut, the scan over
    # every name decides, and it falls back to the names one by one
    extra = "layers.10.ffn.experts.5.w1.weight"
    names2 = NAMES | {extra}
    got = unmapped.skip_regex(un, lambda: built.append(1) or names2, mapped | {extra})
    assert got == unmapped.skip_regex(un, names2) == "^(" + "|".join(re.escape(n) for n in sorted(un)) + ")$"
    assert built == [1]


def test_the_fetch_record_name_is_fetch_records_own():
    from recipekit.checkpoint.fetch_record import MANIFEST

    assert asm.FETCH_RECORD_NAME == MANIFEST


def test_an_index_value_that_is_not_a_file_name_is_one_clear_error(sources, tmp_path):
    official, pack = sources
    asm.assemble(official, pack, tmp_path / "hyb", hash_sources=False)
    path = tmp_path / "hyb" / sio.INDEX_NAME
    doc = json.loads(path.read_text())
    first = next(iter(doc["weight_map"]))
    doc["weight_map"][first] = ["x"]
    path.write_text(json.dumps(doc))
    with pytest.raises(RecipekitError) as e:
        asm.check_hybrid(tmp_path / "hyb", quick=True)
    assert e.value.code == "hybrid-file-invalid"
    assert e.value.message == f"the index maps {first} to list ['x'], not a file name"


def _retype(folder, name: str, dtype: str) -> str:
    """Rewrite the header of the shard holding `name` so that it says `dtype` (same byte size)."""
    rel = sio.read_index(folder).weight_map[name]
    path = folder / rel
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    header[name]["dtype"] = dtype
    text = json.dumps(header, separators=(",", ":")).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n :])
    return rel


def test_the_original_check_names_a_wrong_dtype_as_before(sources, tmp_path):
    from recipekit.checkpoint.layout import check_layout

    official, _pack = sources
    folder = tmp_path / "o"
    shutil.copytree(official, folder)
    assert check_layout(folder, "original").ok
    dense, vision = "layers.0.attn_norm.weight", "vision.norm.weight"
    rel_d = _retype(folder, dense, "F16")
    rel_v = _retype(folder, vision, "F16")
    rep = check_layout(folder, "original")
    shape_d = list(sio.SafetensorsFile(folder / rel_d).tensors[dense].shape)
    shape_v = list(sio.SafetensorsFile(folder / rel_v).tensors[vision].shape)
    assert f"{dense}: F16 {shape_d} in {rel_d}, expected BF16 {shape_d}" in rep.problems
    assert f"{vision}: F16 {shape_v} in {rel_v}, expected BF16 {shape_v}" in rep.problems
    assert f"{vision}: vision tensor stored as F16, expected BF16 or F32" in rep.problems


@pytest.mark.parametrize("break_engram", [False, True])
def test_the_engram_rules_on_the_parsed_index_answer_as_on_the_file(sources, tmp_path, monkeypatch, break_engram):
    """check_hybrid hands its parsed index to locate_tables; forced to read the file again, the
    report is the same (a valid assembly, and one whose index maps an Engram scale elsewhere)."""
    from recipekit.hybrid.engram import rules

    official, pack = sources
    out = tmp_path / "hyb"
    asm.assemble(official, pack, out, hash_sources=False)
    if break_engram:
        ipath = out / sio.INDEX_NAME
        doc = json.loads(ipath.read_text())
        wm = doc["weight_map"]
        layer = next(int(n.split(".")[1]) for n in wm if n.endswith(".engram.embed.scale"))
        other = next(f for f in wm.values() if f != wm[rules.scale_name(layer)])
        wm[rules.scale_name(layer)] = other
        ipath.write_text(json.dumps(doc, indent=2) + "\n")
    shared = asm.check_hybrid(out, quick=True).to_dict()
    with monkeypatch.context() as m:
        m.setattr(asm, "locate_tables", lambda folder, config, index: rules.locate_tables(folder, config))
        own_read = asm.check_hybrid(out, quick=True).to_dict()
    assert shared == own_read
    engram = [p for p in shared["problems"] if p.startswith("engram") or "engram-same-shard" in p]
    assert bool(engram) == break_engram, shared["problems"]


def _ledger_config(official, layers, codebook="mcg"):
    """The official config (tiny, or with the published sizes) with a merged EXL3 ledger for `layers`."""
    from recipekit.hybrid.fullsize import full_config

    cfg = asm.dsv41.load_config(official)
    if layers == "full":
        cfg = full_config(cfg)
        layers = range(asm.dsv41.Geometry.from_config(cfg).n_layers)
    cfg["quantization_config"] = {"layer_bits": {str(i): 2 + i % 3 for i in layers}, "codebook": codebook}
    return cfg


@pytest.mark.parametrize(
    "layers, codebook",
    [("full", "mcg"), ("full", "mul1"), ("full", None), ([0], "mcg"), ([], "mcg")],
)
def test_expected_hybrid_by_runs_is_routed_module_name_by_name(sources, layers, codebook):
    """The contract's runs of backbone experts are the names exl3.routed_module takes: the same
    names in the same order, the same (dtype, shape) objects, the same ledger problems."""
    official, _ = sources
    cfg = _ledger_config(official, layers, codebook)
    runs, runs_problems = asm.expected_hybrid(cfg)
    ref, ref_problems = asm.expected_hybrid(cfg, by_name=True)
    assert list(runs.items()) == list(ref.items())
    assert runs_problems == ref_problems
    if layers == []:
        assert runs_problems and all("layer_bits has no entry" in p for p in runs_problems)


def test_expected_hybrid_refuses_bad_bits_at_the_same_module(sources):
    official, _ = sources
    cfg = _ledger_config(official, "full")
    cfg["quantization_config"]["layer_bits"]["3"] = 9  # exl3_specs refuses 9 bits: the first w1 of layer 3
    with pytest.raises(RecipekitError) as runs:
        asm.expected_hybrid(cfg)
    with pytest.raises(RecipekitError) as ref:
        asm.expected_hybrid(cfg, by_name=True)
    assert runs.value.code == ref.value.code == "exl3-bad-bits"
    assert runs.value.message == ref.value.message == "layers.3.ffn.experts.0.w1: 9 bits"


def test_the_unmapped_shortcuts_answer_as_the_full_scans(sources, tmp_path, monkeypatch):
    """unmapped_tensors with the per-file counts, and skip_rule_exact, answer as the name-by-name forms."""
    official, pack = sources
    asm.assemble(official, pack, tmp_path / "hyb", hash_sources=False)
    index = json.loads((tmp_path / "hyb" / sio.INDEX_NAME).read_text())["weight_map"]
    record = json.loads((tmp_path / "hyb" / asm.RECORD_NAME).read_text())
    headers = {}
    for rel in sorted(set(index.values()) | set(record["links"])):
        if rel.endswith(".safetensors"):
            with sio.SafetensorsFile(tmp_path / "hyb" / rel) as f:
                headers[rel] = f.tensors
    from collections import Counter

    full = unmapped.unmapped_tensors(headers, index)
    assert full and unmapped.unmapped_tensors(headers, index, Counter(index.values())) == full
    all_names = set().union(*headers.values())
    rx = record["skip_weight_re"]
    assert unmapped.skip_rule_exact(rx, full, index) and unmapped.verify_skip_regex(rx, all_names, full) is None
    assert not unmapped.skip_rule_exact(rx, full, [*index, sorted(full)[0]])  # ... or a mapped one
    assert not unmapped.skip_rule_exact("^(a|b)$", full, index)  # not skip_candidate's: the full check
    # the check reports a stale record's skip rule alike with and without the shortcuts
    record["skip_weight_re"] = unmapped.skip_candidate([0])
    (tmp_path / "hyb" / asm.RECORD_NAME).write_text(json.dumps(record))
    fast = asm.check_hybrid(tmp_path / "hyb", quick=True, skip_re=rx)
    with monkeypatch.context() as m:
        _per_tensor_only(m)
        slow = asm.check_hybrid(tmp_path / "hyb", quick=True, skip_re=rx)
    assert fast.problems == slow.problems and fast.warnings == slow.warnings
    assert any("skip_weight_re" in p for p in fast.problems), fast.problems


def test_the_contract_names_each_layers_experts_in_order(sources):
    """dsv41.original_tensors' routed experts (kind expert, group layer:<L>): every backbone layer's
    experts side by side, named and ordered as one f-string per name would (expected_hybrid's runs
    rely on it)."""
    official, _ = sources
    for cfg in (_ledger_config(official, [0]), _ledger_config(official, "full")):
        g = asm.dsv41.Geometry.from_config(cfg)
        contract = asm.dsv41.original_tensors(g)
        got = [n for n, s in contract.items() if s.kind == "expert" and s.group.startswith("layer:")]
        want = [
            f"layers.{layer}.ffn.experts.{e}.{w}.{k}"
            for layer in range(g.n_layers)
            for e in range(g.n_routed)
            for w in ("w1", "w2", "w3")
            for k in ("weight", "scale")
        ]
        assert got == want
        assert all(contract[n].group == f"layer:{n.split('.')[1]}" for n in got[:: len(got) // 97 or 1])
