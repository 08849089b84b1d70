"""Typed gate thresholds: one model per gate, checked when a recipe loads (lint, render), one id list."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from pydantic import ValidationError

from recipekit import gate_thresholds as gt
from recipekit.bench.gates import base, runner
from recipekit.schema import Gate

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "local" / "tiny-deepseek-cpu.yaml"
GAUDI = REPO / "recipes" / "deepseek-ai" / "DeepSeek-V4.1-Flash-1017" / "gaudi2-8x.yaml"


def test_one_list_of_gate_ids():
    assert typing.get_args(Gate.model_fields["id"].annotation) == gt.GATE_IDS
    assert tuple(gt.MODELS) == gt.GATE_IDS
    assert base.GATE_IDS == gt.BENCH_GATE_IDS and set(gt.BENCH_GATE_IDS).isdisjoint(gt.TOOL_GATE_IDS)
    assert runner.select([{"id": "kernel", "thresholds": {}}], None) == []  # recorded, not run


@pytest.mark.parametrize("gid", gt.GATE_IDS)
def test_every_model_refuses_an_unknown_key_and_has_defaults(gid):
    model = gt.MODELS[gid]
    assert model.model_config.get("extra") == "forbid"
    model.model_validate({})  # every threshold has a default
    with pytest.raises(ValidationError) as e:
        gt.validate(gid, {"no_such_key": 1})
    assert e.value.errors()[0]["type"] == "unknown_threshold" and e.value.errors()[0]["loc"] == ("no_such_key",)


def test_perplexity_has_the_missing_token_threshold():
    assert gt.resolved("perplexity", {})["max_missing"] == 0
    assert gt.resolved("perplexity", {"max_missing": 3})["max_missing"] == 3
    with pytest.raises(ValidationError):
        gt.validate("perplexity", {"max_missing": -1})


def _copy_with(tmp_path: Path, src: Path, old: str, new: str) -> tuple[Path, int]:
    text = src.read_text()
    assert text.count(old) == 1, old
    out = tmp_path / src.name
    out.write_text(text.replace(old, new))
    line = text[: text.index(old)].count("\n") + 1
    return out, line


@pytest.mark.parametrize("command", ["lint", "render"])
def test_a_typoed_threshold_is_refused_by_lint_and_render_with_its_location(tmp_path, run_cli, command):
    bad, line = _copy_with(tmp_path, TINY, "max_rel_diff: 0.012", "max_rel_dif: 0.012")
    code, out, err = run_cli(command, str(bad))
    assert code == 2, (out, err)
    assert (
        f"error[unknown-threshold] {bad}:{line} $.gates[1].thresholds.max_rel_dif: "
        "gate perplexity has no threshold 'max_rel_dif' (hint: did you mean 'max_rel_diff'?)"
    ) in err


def test_a_threshold_of_the_wrong_type_is_refused_at_load(tmp_path, run_cli):
    bad, line = _copy_with(tmp_path, GAUDI, "ranks: 8", "ranks: eight")
    code, _, err = run_cli("lint", str(bad))
    assert code == 2 and f"{bad}:{line} $.gates[2].thresholds.ranks" in err and "error[wrong-type]" in err


def test_the_shipped_recipes_thresholds_are_valid(run_cli):
    from recipekit.catalog import load_path

    for path in sorted((REPO / "recipes").rglob("*.yaml")):
        recipe = load_path(path).recipe
        for g in recipe.gates:
            gt.validate(g.id, g.thresholds)
