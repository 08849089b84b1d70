"""Every constraint of the catalog refuses a violating effective config with its id."""

from __future__ import annotations

import pytest

from recipekit.backends.registry import get_backend, render_artifact
from recipekit.catalog import list_recipes, load_recipe, parse_recipe_text
from recipekit.config import effective_config
from recipekit.constraints import check, enforce
from recipekit.errors import ErrorList

GAUDI = "deepseek-v4.1-flash-1017-gaudi2-8x"
CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"
CPU = "tiny-deepseek-cpu"

# (recipe, layout, --set items, environ, constraint id)
VIOLATIONS = [
    (GAUDI, None, ["!--no-async-scheduling"], {}, "async-scheduling-off"),
    (GAUDI, None, ["--async-scheduling="], {}, "async-scheduling-off"),
    (GAUDI, None, ["!--enforce-eager"], {}, "enforce-eager-kept"),
    (GAUDI, None, ["SKIP_FIXES=1"], {}, "fixes-not-skipped"),
    (GAUDI, None, ["PORT=9000"], {}, "port-is-vllm-default"),
    (GAUDI, None, ["--num-gpu-blocks-override=2305"], {}, "kv-blocks-within-gated"),
    (GAUDI, None, [], {"DSV41_MXK": "0"}, "sinkhorn-kernel-needs-mxk"),
    (GAUDI, None, ["DSV41_MXK="], {}, "sinkhorn-kernel-needs-mxk"),
    (GAUDI, None, ["!--language-model-only"], {}, "text-only"),
    (GAUDI, None, ["CHECKPOINT_LAYOUT=deepseek-fp8-original"], {}, "converted-checkpoint-only"),
    (CMP, "pp4", ["DSV41_VARIANTS=dsv41_topk_meta,dsv41_gate"], {}, "pp4-keeps-four-variants"),
    (CMP, "pp4", [], {"DSV41_VARIANTS": ""}, "pp4-keeps-four-variants"),
    (CMP, "pp4", ["CUDAGRAPH_MODE=FULL_AND_PIECEWISE"], {}, "pp4-piecewise-graphs"),
    (CMP, "pp4", ["DSV41_DYNK=accept:3,5"], {}, "dynk-tp4-only"),
    (CMP, "tp4", ["CUDAGRAPH_SIZES=1,2,4,8"], {}, "dynk-capture-sizes"),
    (CMP, "tp4", ["SKIP_FIXES=1"], {}, "fixes-not-skipped"),
    (CMP, "tp4", ["CHECKPOINT_LAYOUT=fp8-original"], {}, "hybrid-checkpoint-only"),
    (CMP, "tp4", ["DSV41_SKIP_WEIGHT_RE=engram"], {}, "engram-skip-exact"),
    (CMP, "pp4", [], {"DSV41_SKIP_WEIGHT_RE": r"^layers\.1\.engram\.embed\.(weight|scale)$"}, "engram-skip-exact"),
    (
        CMP,
        "tp4",
        [r"DSV41_SKIP_WEIGHT_RE=^layers\.(1|14)\.engram\.embed\.(weight|scale)$", "DSV41_ENGRAM_STORAGE=ram"],
        {},
        "engram-skip-needs-ssd",
    ),
    (CMP, "tp4", ["DSV41_MODEL_DIR=/models/DeepSeek-V4.1-Flash-1017"], {}, "engram-model-dir"),
    (CPU, None, ["SKIP_FIXES=true"], {}, "fixes-not-skipped"),
    (CPU, None, ["HOST=0.0.0.0"], {}, "loopback-only"),
]


@pytest.mark.parametrize("rid,layout,sets,environ,cid", VIOLATIONS)
def test_violation_refused_by_render_with_id(rid, layout, sets, environ, cid):
    eff = effective_config(load_recipe(rid), layout=layout, environ=environ, sets=sets)
    assert cid in [v.id for v in check(eff)]
    with pytest.raises(ErrorList) as ei:
        render_artifact(eff, None)
    assert f"constraint-{cid}" in [e.code for e in ei.value.errors]
    line = next(e.one_line() for e in ei.value.errors if e.code == f"constraint-{cid}")
    assert line.startswith(f"error[constraint-{cid}] {rid}")


def test_defaults_satisfy_every_constraint():
    for lr in list_recipes():
        for lay in list(lr.recipe.layouts) or [None]:
            enforce(effective_config(lr, layout=lay, environ={}))


def test_acknowledgement_allows_more_kv_blocks():
    eff = effective_config(load_recipe(GAUDI), environ={}, sets=["--num-gpu-blocks-override=4096", "ack.gates-rerun=1"])
    assert check(eff) == []
    eff = effective_config(load_recipe(GAUDI), environ={}, sets=["--num-gpu-blocks-override=2304"])
    assert check(eff) == []


def test_dynk_unset_under_tp4_is_fine_and_sinkhorn_torch_path_ok():
    eff = effective_config(load_recipe(CMP), layout="tp4", environ={"DSV41_DYNK": ""})
    assert check(eff) == []
    eff = effective_config(load_recipe(GAUDI), environ={"DSV41_MXK": "0", "DSV41_HC_SINKHORN": "torch"})
    assert check(eff) == []


def test_tp4_host_requirement_checked_with_host_facts():
    eff = effective_config(load_recipe(CMP), layout="tp4", environ={})
    assert check(eff, host_facts=None, scopes=("config", "host")) == []  # no facts: deferred to the doctor
    bad = check(eff, host_facts={"pcie_width_min": 4, "p2p": False}, scopes=("host",))
    assert [v.id for v in bad] == ["tp4-needs-x16-p2p"]
    assert check(eff, host_facts={"pcie_width_min": 16, "p2p": True}, scopes=("host",)) == []
    pp4 = effective_config(load_recipe(CMP), layout="pp4", environ={})
    assert check(pp4, host_facts={"pcie_width_min": 1, "p2p": False}, scopes=("host",)) == []
    reqs = {r.id: r.value for r in get_backend("cuda_sm80").host_requirements(eff)}
    assert reqs["pcie-width-min"] == 16 and reqs["p2p"] is True and "tp4-needs-x16-p2p" in reqs
    reqs_pp4 = {r.id for r in get_backend("cuda_sm80").host_requirements(pp4)}
    assert "p2p" not in reqs_pp4


def test_mla_latent_rule_reads_the_recipe_document():
    lr = load_recipe(CPU)
    text = open(lr.origin).read().replace("    kv_lora_rank: 512", "    kv_lora_rank: 256")
    eff = effective_config(parse_recipe_text(text, "x.yaml"), environ={})
    assert [v.id for v in check(eff)] == ["mla-latent-576"]


def test_every_catalog_constraint_has_a_violation_test():
    tested = {(rid, cid) for rid, _, _, _, cid in VIOLATIONS}
    tested |= {(CMP, "tp4-needs-x16-p2p"), (CPU, "mla-latent-576")}
    for lr in list_recipes():
        for c in lr.recipe.constraints:
            assert (lr.id, c.id) in tested, f"no violation test for {lr.id}:{c.id}"
