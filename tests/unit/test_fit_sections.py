"""The fit section of `recipe plan` and `recipe doctor <recipe>`: the very object `recipe fit --format json` prints
(computed once, by the same planner), the per-card table and the verdict line in human output; those commands
read no network (headers only from the cache: a hub stand-in on loopback sees no request), and a fit that
cannot be computed is an error object, never a failed plan. `recipe fit` itself turns an unreachable hub into
fit-hub-unreachable, not an internal error."""

from __future__ import annotations

import json

import pytest

from recipekit import paths
from recipekit.rehearse.hub import FakeHub
from recipekit.tools.fit import inventory
from tests.ports import free_port
from tests.unit.real_dsv41_config import REAL

CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"
HUB_REPO, HUB_REV = "deepseek-ai/DeepSeek-V4.1-Flash-1017", "1bae0e10"


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path / "home"))


def _json(run_cli, *args: str) -> tuple[int, dict]:
    code, out, err = run_cli(*args, "--format", "json")
    assert out, err
    return code, json.loads(out)


def test_plan_and_doctor_carry_the_fit_object(run_cli) -> None:
    code, fit = _json(run_cli, "fit", "tiny-deepseek-cpu")
    assert code == 0 and fit["fits"] is True and fit["pool"]["kv_cache_tokens"] == 233_008
    code, plan = _json(run_cli, "plan", "tiny-deepseek-cpu")
    assert code == 0 and plan["steps"]
    assert plan["fit"] == fit
    code, doc = _json(run_cli, "doctor", "tiny-deepseek-cpu")
    assert doc["fit"] == fit
    assert code == doc["exit_code"]  # the fit does not change the doctor's verdict on the host


def test_a_plan_that_does_not_fit_says_so_and_still_plans(run_cli) -> None:
    code, plan = _json(run_cli, "plan", "tiny-deepseek-cpu", "--set", "--max-model-len=500000")
    assert code == 0 and plan["steps"]
    assert plan["fit"]["fits"] is False and plan["fit"]["largest_max_model_len"] == 4096
    code, out, err = run_cli("plan", "tiny-deepseek-cpu", "--set", "--max-model-len=500000")
    assert code == 0, err
    section = out[out.index("fit: tiny-deepseek-cpu") :]
    assert "Available KV cache memory" in section and "1.00" in section
    assert (
        "does not fit: KV cache size: 233,008 tokens; maximum concurrency for 500,000 tokens per request: 0.47x"
        in section
    )
    assert "the largest max_model_len that fits is 4,096" in section


def test_doctor_human_shows_the_table_and_verdict(run_cli) -> None:
    code, out, err = run_cli("doctor", "tiny-deepseek-cpu")
    section = out[out.index("fit: tiny-deepseek-cpu") :]
    assert "KV cache size" in section and "233,008 tokens" in section and "14,563 blocks of 16" in section
    assert "fits: KV cache size: 233,008 tokens; maximum concurrency for 2,048 tokens per request: 113.77x" in section


def test_sections_read_no_network(run_cli, monkeypatch) -> None:
    with FakeHub({}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, plan = _json(run_cli, "plan", CMP)
        assert code == 0
        assert plan["fit"]["error"]["code"] == "fit-headers-not-cached"
        assert HUB_REPO in plan["fit"]["error"]["message"]
        code, out, _ = run_cli("plan", CMP)
        assert code == 0 and "fit: not computed: error[fit-headers-not-cached]" in out
        assert hub.log == []  # not one request
        # with the headers cached (what one `recipe fit` leaves), the plan's fit is the fit's
        cache = inventory._cache_path(paths.cache_dir(), HUB_REPO, HUB_REV)
        cache.parent.mkdir(parents=True, exist_ok=True)
        tensors = inventory.from_layout("original", REAL)
        cache.write_text(json.dumps({"tensors": tensors, "config": REAL, "shards": 46}))
        code, fit = _json(run_cli, "fit", CMP)
        code2, plan = _json(run_cli, "plan", CMP)
        assert code2 == 0 and plan["fit"] == fit and fit["fits"] is True
        assert fit["weights_per_rank_bytes"] > 40 * 1024**3
        assert hub.log == []


def test_unreachable_hub_is_a_clear_error(run_cli, monkeypatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", False)
    code, out, err = run_cli("fit", CMP)
    assert code == 1, err
    assert "error[fit-hub-unreachable]" in err and "internal-error" not in err
    assert HUB_REPO in err


def test_fit_timing_is_asked_for(run_cli) -> None:
    code, doc = _json(run_cli, "fit", "tiny-deepseek-cpu", "--timing")
    assert code == 0
    t = doc["timing"]
    assert set(t) == {"inventory_s", "plan_s", "total_s", "inventory"}
    assert t["total_s"] >= t["inventory_s"] >= 0 and t["total_s"] == pytest.approx(
        t["inventory_s"] + t["plan_s"], abs=2e-4
    )
    assert t["inventory"].startswith("the recipe's model config")
    code, out, err = run_cli("fit", "tiny-deepseek-cpu", "--timing")
    assert code == 0 and "timing: inventory " in out and " ms, plan " in out
    code, plain = _json(run_cli, "fit", "tiny-deepseek-cpu")
    assert "timing" not in plain
