"""Lint finds each kind of problem with code, file:line and hint; export is byte-identical."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipekit.lint import lint_paths

REPO = Path(__file__).resolve().parents[2]
CPU_YAML = REPO / "recipes" / "local" / "tiny-deepseek-cpu.yaml"
CMP_YAML = REPO / "recipes" / "deepseek-ai" / "DeepSeek-V4.1-Flash-1017" / "cmp170hx-4x.yaml"


def lint_text(tmp_path, text: str, name: str = "r.yaml"):
    p = tmp_path / name
    p.write_text(text)
    files, errors = lint_paths([p])
    assert files == [str(p)]
    return p, errors


def test_catalog_is_clean():
    files, errors = lint_paths()
    assert len(files) == 3 and errors == []


@pytest.mark.parametrize(
    "old,new,code,path",
    [
        ("default_layout: tp4", "default_layout: tp5", "unknown-layout", "$.default_layout"),
        (
            "      DSV41_DYNK: accept:3,5",
            "      DSV41_DYNKK: accept:3,5",
            "undeclared-env",
            "$.layouts.tp4.env.DSV41_DYNKK",
        ),
        ("image: ${IMAGE}\nlayouts", "image: ${IMAGEE}\nlayouts", "unknown-setting", "$.launch.docker.image"),
        ("'${BIND}:${PORT}:8000'", "'${BIND}:${PORT:-1}:8000'", "bad-template", "$.launch.docker.ports[0]"),
        (
            "      layout: {equals: tp4}\n    require:\n      host.pcie_width_min",
            "      layout: {equals: tp5}\n    require:\n      host.pcie_width_min",
            "unknown-layout",
            "$.constraints[0].when",
        ),
        (
            "      setting.CUDAGRAPH_MODE: {equals: PIECEWISE}",
            "      setting.CUDAGRAPH_MODE: {equal: PIECEWISE}",
            "bad-constraint",
            "$.constraints[2].require",
        ),
        ("constraint: dynk-tp4-only}", "constraint: dynk-tp4-onl}", "unknown-constraint", "$.do_not[3].constraint"),
        ("      DSV41_DYNK: null\n", "      DSV41_DYNK: accept:3,5\n", "constraint-dynk-tp4-only", "$.constraints"),
    ],
)
def test_lint_problem_kinds(tmp_path, old, new, code, path):
    text = CMP_YAML.read_text()
    assert old in text
    p, errors = lint_text(tmp_path, text.replace(old, new, 1))
    hit = [e for e in errors if e.code == code]
    assert hit, [e.one_line() for e in errors]
    e = hit[0]
    assert e.location.startswith(f"{p}:") and path in e.location
    assert e.hint


def test_lint_schema_errors_and_did_you_mean(tmp_path):
    text = CPU_YAML.read_text().replace("  served_name: tiny-deepseek", "  served_nam: tiny-deepseek", 1)
    text = text.replace("status: local", "status: lokal", 1)
    _, errors = lint_text(tmp_path, text)
    got = {(e.code, e.hint) for e in errors}
    assert ("unknown-field", "did you mean 'served_name'?") in got
    assert ("invalid-value", "did you mean 'local'?") in got


def test_lint_rejects_unsafe_yaml_and_duplicate_ids(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\nid: !!python/name:os.system\n")
    dup = tmp_path / "dup.yaml"
    dup.write_text(CPU_YAML.read_text())
    files, errors = lint_paths([bad, dup, CPU_YAML])
    codes = [e.code for e in errors]
    assert "yaml-unsafe-tag" in codes and "duplicate-id" in codes


def test_export_is_byte_identical_and_complete(tmp_path):
    from recipekit.catalog import load_recipe
    from recipekit.export import export

    a, b = tmp_path / "a", tmp_path / "b"
    files = export(a)
    export(b)
    assert files == [
        "api/v1/recipes.json",
        "api/v1/recipes/deepseek-v4.1-flash-1017-cmp170hx-4x.json",
        "api/v1/recipes/deepseek-v4.1-flash-1017-gaudi2-8x.json",
        "api/v1/recipes/tiny-deepseek-cpu.json",
        "api/v1/schema/recipe.schema.json",
    ]
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
        assert (a / f).stat().st_mode & 0o777 == 0o644, f  # servable by a web server
    index = json.loads((a / files[0]).read_text())
    assert index["schema_version"] == 1 and index["content_hash"].startswith("sha256:")
    entry = next(r for r in index["recipes"] if r["id"] == "deepseek-v4.1-flash-1017-cmp170hx-4x")
    assert entry["layouts"] == ["tp4", "pp4"] and entry["backend"] == "cuda_sm80"
    assert (a / "api/v1" / entry["url"]).is_file()
    doc = json.loads((a / files[1]).read_text())
    assert doc["schema_version"] == 1 and doc["content_hash"] == load_recipe(doc["id"]).content_hash
    pp4 = doc["layouts"]["pp4"]["renders"]["docker"]
    assert "--pipeline-parallel-size" in pp4["argv"] and pp4["shell"].startswith("docker run")
    assert any(v["key"] == "DSV41_VARIANTS" and v["source"] == "layout:pp4" for v in doc["layouts"]["pp4"]["effective"])
    schema = json.loads((a / files[4]).read_text())
    assert schema["schema_version"] == 1 and "properties" in schema and "content_hash" in schema
    # an exported document loads back as the same recipe; a tampered one is refused
    assert load_recipe(str(a / files[3])).id == "tiny-deepseek-cpu"
    tampered = json.loads((a / files[3]).read_text())
    tampered["recipe"]["title"] = "changed"
    t = tmp_path / "t.json"
    t.write_text(json.dumps(tampered))
    from recipekit.errors import RecipekitError

    with pytest.raises(RecipekitError) as ei:
        load_recipe(str(t))
    assert ei.value.code == "content-hash-mismatch"


def test_export_writes_nothing_when_a_recipe_is_invalid(tmp_path):
    from recipekit.catalog import load_recipe, parse_recipe_text
    from recipekit.errors import ErrorList
    from recipekit.export import export

    good = load_recipe("tiny-deepseek-cpu")
    text = CPU_YAML.read_text().replace(
        "      setting.HOST: {in: [127.0.0.1, '::1', localhost]}", "      setting.HOST: {in: [10.0.0.1]}"
    )
    bad = parse_recipe_text(text, "bad.yaml")
    with pytest.raises(ErrorList):
        export(tmp_path / "out", recipes=[good, bad])
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.json"))


@pytest.mark.parametrize("yaml_name", ["cmp170hx-4x.yaml", "gaudi2-8x.yaml"])
def test_lint_checks_seed_flags_against_the_pinned_engine_catalog(tmp_path, yaml_name):
    src = CMP_YAML.parent / yaml_name
    text = src.read_text().replace("{flag: --enable-prefix-caching}", "{flag: --enable-prefix-cachin}", 1)
    _, errors = lint_text(tmp_path, text)
    hit = [e for e in errors if e.code == "unknown-engine-flag"]
    assert hit and hit[0].hint == "did you mean '--enable-prefix-caching'?"


def test_exported_json_schema_validates_the_catalog_and_rejects_unknown_fields():
    jsonschema = pytest.importorskip("jsonschema")
    from recipekit.catalog import list_recipes
    from recipekit.schema import json_schema

    validator = jsonschema.Draft202012Validator(json_schema())
    for lr in list_recipes():
        doc = lr.recipe.model_dump(mode="json", by_alias=True)
        assert list(validator.iter_errors(doc)) == [], lr.id
    doc["unknown_field"] = 1
    doc["engine"]["pins"][0]["commit"] = "zz"
    assert len(list(validator.iter_errors(doc))) >= 1
