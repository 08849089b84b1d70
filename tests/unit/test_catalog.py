"""Catalog loading: ids, paths, JSON, URL; hostile YAML refused with file:line; auto selection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipekit.apply.auto import load_recipe, resolve_auto
from recipekit.catalog import content_hash, list_recipes, parse_recipe_text
from recipekit.errors import ErrorList, ExitCode, RecipekitError

REPO = Path(__file__).resolve().parents[2]
CPU_YAML = REPO / "recipes" / "local" / "tiny-deepseek-cpu.yaml"
IDS = {"deepseek-v4.1-flash-1017-gaudi2-8x", "deepseek-v4.1-flash-1017-cmp170hx-4x", "tiny-deepseek-cpu"}


def errors_of(text: str, origin: str = "r.yaml") -> list[RecipekitError]:
    with pytest.raises((ErrorList, RecipekitError)) as ei:
        parse_recipe_text(text, origin)
    e = ei.value
    return e.errors if isinstance(e, ErrorList) else [e]


def cpu_text() -> str:
    return CPU_YAML.read_text()


def test_catalog_has_the_three_agreed_recipes():
    recipes = list_recipes()
    assert {r.id for r in recipes} == IDS
    by_id = {r.id: r.recipe for r in recipes}
    assert by_id["deepseek-v4.1-flash-1017-cmp170hx-4x"].default_layout == "tp4"
    assert set(by_id["deepseek-v4.1-flash-1017-cmp170hx-4x"].layouts) == {"tp4", "pp4"}
    assert list(by_id["deepseek-v4.1-flash-1017-gaudi2-8x"].layouts) == ["tp8-ep8"]
    assert {r.backend for r in by_id.values()} == {"gaudi", "cuda_sm80", "cpu"}


def test_load_by_id_path_and_hash_is_stable():
    a = load_recipe("tiny-deepseek-cpu")
    b = load_recipe(str(CPU_YAML))
    assert a.content_hash == b.content_hash == content_hash(b.recipe)
    assert a.content_hash.startswith("sha256:") and len(a.content_hash) == 71


def test_unknown_id_did_you_mean():
    with pytest.raises(RecipekitError) as ei:
        load_recipe("tiny-deepseek-cpv")
    assert ei.value.code == "recipe-not-found" and ei.value.exit_code == ExitCode.NOT_FOUND
    assert "tiny-deepseek-cpu" in ei.value.hint


def test_python_tag_refused_with_line():
    text = cpu_text().replace("title: Tiny", "title: !!python/object/apply:os.system ['touch /tmp/x']\n# Tiny", 1)
    (e,) = errors_of(text)
    line = next(i for i, x in enumerate(text.splitlines(), 1) if "!!python" in x)
    assert e.code == "yaml-unsafe-tag" and e.location == f"r.yaml:{line}"


def test_duplicate_key_refused_with_line():
    text = cpu_text().replace("status: local\n", "status: local\nstatus: verified\n", 1)
    (e,) = errors_of(text)
    assert e.code == "duplicate-key" and e.location.startswith("r.yaml:")
    assert "status" in e.message


def test_aliases_refused():
    text = cpu_text().replace("tags: [local,", "x_anchor: &a [1]\ntags: [local,", 1) + "credits2: *a\n"
    (e,) = errors_of(text)
    assert e.code == "yaml-alias"


def test_unknown_field_did_you_mean_with_line_and_path():
    text = cpu_text().replace("  served_name: tiny-deepseek", "  servd_name: tiny-deepseek", 1)
    errs = errors_of(text)
    e = next(x for x in errs if x.code == "unknown-field")
    assert "$.model.servd_name" in e.location and e.location.startswith("r.yaml:")
    line = int(e.location.split(":")[1].split()[0])
    assert text.splitlines()[line - 1].strip().startswith("servd_name")
    assert e.hint == "did you mean 'served_name'?"


def test_wrong_type_and_bad_enum():
    text = cpu_text().replace("  layers: 4\n", "  layers: two\n", 1).replace("backend: cpu", "backend: cpuu", 1)
    codes = {(e.code, e.location.split()[-1]) for e in errors_of(text)}
    assert ("wrong-type", "$.model.layers") in codes
    assert ("invalid-value", "$.backend") in codes
    bad = next(e for e in errors_of(text) if e.code == "invalid-value")
    assert bad.hint == "did you mean 'cpu'?"


@pytest.mark.parametrize("commit", ["058f107", "XYZ" * 13 + "a", "0be63c3337efbb2a0061d5b8bb4006fa186d433F"])
def test_bad_hex_pins_refused(commit):
    text = cpu_text().replace(
        "      version: 0.32.0\n      repo:", f"      version: 0.32.0\n      commit: '{commit}'\n      repo:", 1
    )
    errs = errors_of(text)
    assert any(e.code == "bad-pin" and "$.engine.pins[0].commit" in e.location for e in errs)


def test_pin_that_pins_nothing_refused():
    text = cpu_text().replace("      package: torch==2.13.0\n      version: 2.13.0+cpu\n", "", 1)
    assert any(e.code == "invalid-value" and "pins nothing" in e.message for e in errors_of(text))


def test_yaml_syntax_error_has_line():
    (e,) = errors_of("schema_version: 1\nid: [unclosed\n")
    assert e.code == "yaml-syntax" and e.location.startswith("r.yaml:")


def test_json_recipe_and_duplicate_keys(tmp_path):
    doc = load_recipe("tiny-deepseek-cpu").raw
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc))
    assert load_recipe(str(p)).id == "tiny-deepseek-cpu"
    p.write_text('{"id": "a", "id": "b"}')
    with pytest.raises(RecipekitError) as ei:
        load_recipe(str(p))
    assert ei.value.code == "duplicate-key"


def test_load_from_url(serve_files):
    base = serve_files({"/r.yaml": cpu_text().encode()})
    lr = load_recipe(f"{base}/r.yaml")
    assert lr.id == "tiny-deepseek-cpu" and lr.origin.endswith("/r.yaml")
    with pytest.raises(RecipekitError) as ei:
        load_recipe(f"{base}/missing.yaml")
    assert ei.value.code == "fetch-not-found" and ei.value.exit_code == 6


def test_resolve_auto():
    assert resolve_auto({"accelerator": "none"}) == "tiny-deepseek-cpu"
    assert (
        resolve_auto({"accelerator": "gaudi", "count": 8, "models": ["Gaudi 2"]})
        == "deepseek-v4.1-flash-1017-gaudi2-8x"
    )
    assert (
        resolve_auto({"accelerator": "nvidia", "count": 4, "models": ["NVIDIA CMP 170HX"], "compute_capability": "8.0"})
        == "deepseek-v4.1-flash-1017-cmp170hx-4x"
    )
    assert (
        resolve_auto(
            {"accelerator": "nvidia", "count": 4, "models": ["NVIDIA A100-SXM4-80GB"], "compute_capability": "8.0"}
        )
        == "deepseek-v4.1-flash-1017-cmp170hx-4x"
    )
    # an accelerator no recipe supports falls back to the embedded local default
    assert (
        resolve_auto({"accelerator": "nvidia", "count": 1, "models": ["H200"], "compute_capability": "9.0"})
        == "tiny-deepseek-cpu"
    )
    assert load_recipe("auto", host_facts={"accelerator": "none"}).id == "tiny-deepseek-cpu"


def test_oversized_and_binary_files_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * (2 * 1024 * 1024 + 10) + "\n")
    with pytest.raises(RecipekitError) as ei:
        load_recipe(str(big))
    assert ei.value.code == "file-too-large"
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RecipekitError) as ei:
        load_recipe(str(binary))
    assert ei.value.code == "not-text"
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n- 2\n")
    with pytest.raises(RecipekitError) as ei:
        load_recipe(str(top))
    assert ei.value.code == "not-a-mapping"
