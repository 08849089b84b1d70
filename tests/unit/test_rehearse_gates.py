"""The gates of a rehearsal: each gate's `rehearsal` entry is recipe data (schema-checked, its
thresholds typed by the gate's own model), the applicable ones become one `recipe gate` child
with -t overrides the gate command itself accepts, the others SKIP rows with the recipe's reason."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from bench.gates.runner import select
from recipekit.catalog import load_recipe
from recipekit.cli.gate import _apply_overrides
from recipekit.deployment import resolve
from recipekit.rehearse.gates import NO_ENTRY, gate_argv, plan, rehearse_gates
from recipekit.rehearse.report import FAILED, NOT_REHEARSABLE, SKIPPED, STANDIN, Rehearsal
from recipekit.schema import Gate
from tests.ports import free_port

CMP_ID = "deepseek-v4.1-flash-1017-cmp170hx-4x"
GAUDI_ID = "deepseek-v4.1-flash-1017-gaudi2-8x"
SELF_COMPARING = ["decode-prefill", "isolation", "structured"]


def _dep(rid):
    return resolve(load_recipe(rid))


def test_gate_rehearsal_entry_is_checked():
    ok = Gate.model_validate(
        {"id": "decode-prefill", "rehearsal": {"applies": True, "reason": "self", "thresholds": {"tokens": 8}}}
    )
    assert ok.rehearsal is not None and ok.rehearsal.thresholds == {"tokens": 8}
    bad = [
        ({"applies": True}, "reason"),  # a reason is required
        ({"applies": True, "reason": "  "}, "needs a reason"),
        ({"applies": True, "reason": "x", "extra": 1}, "extra"),  # extra=forbid
        ({"applies": False, "reason": "x", "thresholds": {"tokens": 8}}, "does not apply"),
        ({"applies": True, "reason": "x", "thresholds": {"tokenz": 8}}, "tokenz"),  # the gate's own model
        ({"applies": True, "reason": "x", "thresholds": {"tokens": -1}}, "tokens"),
    ]
    for entry, words in bad:
        with pytest.raises(ValidationError) as ei:
            Gate.model_validate({"id": "decode-prefill", "rehearsal": entry})
        assert words in str(ei.value), (entry, str(ei.value))


def test_an_alias_in_the_recipe_and_its_name_in_the_rehearsal_are_one_threshold():
    g = Gate.model_validate(
        {
            "id": "decode-prefill",
            "thresholds": {"concurrent": 4},
            "rehearsal": {"applies": True, "reason": "x", "thresholds": {"prompts": 2}},
        }
    )
    assert g.thresholds == {"concurrent": 4}


@pytest.mark.parametrize("rid", [CMP_ID, GAUDI_ID])
def test_the_dsv41_recipes_run_the_self_comparing_gates_and_skip_the_rest_with_reasons(rid):
    dep = _dep(rid)
    plans = plan(dep)
    assert [p.gate for p in plans] == [g.id for g in dep.recipe.gates]
    assert [p.gate for p in plans if p.applies] == SELF_COMPARING
    skipped = {p.gate: p.reason for p in plans if not p.applies}
    assert "perplexity" in skipped and "needle" in skipped and "lm-eval" in skipped
    assert all(r and r != NO_ENTRY for r in skipped.values()), skipped
    # the -t overrides are accepted by `recipe gate` itself, and land on the recipe's thresholds
    selected = select(dep.recipe.gates, SELF_COMPARING)
    argv = gate_argv(["R"], plans, Path("/o"))
    items = [argv[i + 1] for i, w in enumerate(argv) if w == "-t"]
    _apply_overrides(selected, items)
    th = {g: t for g, t, _ in selected}
    assert th["decode-prefill"]["prompts"] == 4 and th["decode-prefill"]["tokens"] == 48
    assert th["decode-prefill"]["max_off_argmax_frac"] == 0.08
    assert th["isolation"]["min_own_frac"] == 0.0 and th["isolation"]["max_foreign"] == 0
    assert th["isolation"]["require_cache_hits"] is False
    assert th["structured"]["requests"] == 4 and th["structured"]["rounds"] == 1
    assert argv[:6] == [sys.executable, "-m", "recipekit", "gate", "R", "--only"]
    assert argv[6] == ",".join(SELF_COMPARING) and argv[-2:] == ["--format", "json"]


def test_a_gate_without_an_entry_is_skipped_with_the_missing_entry_named():
    dep = _dep("tiny-deepseek-cpu")
    plans = plan(dep)
    assert plans and all(not p.applies and p.reason == NO_ENTRY for p in plans)


@pytest.mark.slow
def test_gate_rows_fail_with_the_childs_code_when_no_server_answers(tmp_path, monkeypatch):
    """The child `recipe gate` finds no deployment in the rehearsal's home: every applicable gate
    row FAILs with the child's own error, the others stay SKIP with their reasons."""
    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path))
    dep = _dep(CMP_ID)
    reh = Rehearsal(recipe=dep.id, layout=None, node=None, home=str(tmp_path))
    lines: list[str] = []
    rehearse_gates([CMP_ID, "--set", f"PORT={free_port()}"], dep, reh, 120, lines.append)  # nobody listens there
    rows = {r.step: r for r in reh.rows}
    assert list(rows) == [f"gate {g.id}" for g in dep.recipe.gates]
    for g in SELF_COMPARING:
        r = rows[f"gate {g}"]
        assert r.kind == STANDIN and r.result == FAILED, (r, lines)
        assert r.error.startswith("error[server-unreachable]") and "/v1/models" in r.error, (r, lines)
    assert rows["gate needle"].kind == NOT_REHEARSABLE and rows["gate needle"].result == SKIPPED
    assert "2,048 tokens" in rows["gate needle"].standin
    assert reh.error_code == "server-unreachable"
    assert not reh.ok
