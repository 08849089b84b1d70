"""Protocol, reports, compare and the bench/gate CLI against a local fake OpenAI server."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from recipekit.bench import protocol, target
from recipekit.bench.client import Client, RequestRecord
from recipekit.bench.compare import compare
from recipekit.bench.report import markdown, write_report
from recipekit.bench.sse_server import FakeOpenAIServer
from recipekit.errors import RecipekitError


def _rec(i, t_first, t_last, n, t_start=0.0, t_end=None, arrivals=None):
    return RequestRecord(
        stream_index=i,
        status=200,
        t_start=t_start,
        t_first=t_first,
        t_last=t_last,
        t_end=t_end or t_last,
        completion_tokens=n,
        token_events=n,
        prompt_tokens=10,
        finish_reason="length",
        arrivals=n if arrivals is None else arrivals,
    )


def test_wave_aggregate_is_decode_tokens_over_the_decode_window():
    w = protocol.wave_stats([_rec(0, 1.0, 3.0, 21), _rec(1, 1.5, 4.0, 21)])
    assert w["aggregate_decode_tps"] == pytest.approx(40 / 3.0)  # (20 + 20) / (4.0 − 1.0)
    assert w["stream_decode_tps"] == [pytest.approx(10.0), pytest.approx(8.0)]
    assert w["streams_ok"] == 2 and w["streams_failed"] == 0


def test_level_figure_is_per_stream_median_at_1_and_aggregate_median_above():
    waves = [protocol.wave_stats([_rec(0, 1.0, 1.0 + 20 / tps, 21)]) for tps in (10.0, 30.0, 20.0)]
    c1 = protocol.level_summary("prose", 1, waves)
    assert c1["figure"] == pytest.approx(20.0) and c1["runs"] == 3
    waves = [
        protocol.wave_stats([_rec(0, 1.0, 2.0, 11), _rec(1, 1.0, 2.0, 11)]),
        protocol.wave_stats([_rec(0, 1.0, 3.0, 11), _rec(1, 1.0, 3.0, 11)]),
        protocol.wave_stats([_rec(0, 1.0, 5.0, 11), _rec(1, 1.0, 5.0, 11)]),
    ]
    c2 = protocol.level_summary("prose", 2, waves)
    assert c2["figure"] == pytest.approx(10.0)  # aggregates 20, 10, 5 -> median 10


def test_prompts_are_pinned(monkeypatch):
    assert protocol.load_prompt("structured").startswith("Count from 1 to 200.")
    monkeypatch.setitem(protocol.PROMPT_SHA256, "prose", "0" * 64)
    with pytest.raises(RecipekitError) as e:
        protocol.load_prompt("prose")
    assert e.value.code == "prompt-hash-mismatch" and int(e.value.exit_code) == 4
    with pytest.raises(RecipekitError) as e:
        protocol.load_prompt("poetry")
    assert e.value.code == "unknown-prompt-type"


@pytest.fixture(scope="module")
def fake():
    srv = FakeOpenAIServer(reply=_reply, token_delay=0.0005).start_in_thread()
    yield srv
    srv.stop()


def _reply(body):
    """Answers like a model that reads: the needle's code, or the request's own personal code."""
    text = json.dumps(body.get("messages") or body.get("prompt"))
    m = re.search(r"personal code is ([A-Z]{3}-\d{4})", text) or re.search(r"secret code is ([A-Z]{3}-\d{4})", text)
    return f"{m.group(1)} is the code" if m else "alpha beta gamma"


def test_quick_protocol_on_a_fake_server(fake):
    async def go():
        async with Client(fake.base_url) as c:
            return await protocol.run_protocol(c, protocol.ProtocolConfig.quick_config())

    n0 = len(fake.requests)
    res = asyncio.run(go())
    cells = {(c["prompt_type"], c["streams"]): c for c in res["decode"]}
    assert set(cells) == {(t, n) for t in ("structured", "code", "prose") for n in (1, 2)}
    assert cells[("prose", 1)]["runs"] == 2 and cells[("prose", 2)]["runs"] == 1
    for c in cells.values():
        for w in c["waves"]:
            assert w["completion_tokens"] == [32] * c["streams"] and w["finish_reasons"] == ["length"]
    sent = [r for r in fake.requests[n0:] if "messages" in r]
    contents = [r["messages"][0]["content"] for r in sent]
    assert len(set(contents)) == len(contents)  # nonce: no two prompts alike
    assert any(x.endswith("(stream 2/2)") for x in contents)
    assert res["prefill"]["runs"] == 2 and res["prefill"]["prompt_tokens_target"] == 512
    assert res["protocol"] == protocol.PROTOCOL_VERSION and set(res["prompts_sha256"]) == {
        "structured",
        "code",
        "prose",
    }


def test_report_files_and_compare(tmp_path, fake):
    async def go():
        async with Client(fake.base_url) as c:
            cfg = protocol.ProtocolConfig.quick_config()
            cfg.prompt_types, cfg.prefill_runs = ["prose"], 0
            return await protocol.run_protocol(c, cfg)

    res = asyncio.run(go())
    res.update(model="fake-model", provenance={"date": "d", "recipe": {"id": "x"}})
    c1 = res["decode"][0]["figure"]
    res["compare"] = compare(
        res,
        [
            {"metric": "decode_tps", "streams": 1, "prompt_type": "prose", "value": c1 * 2},
            {"metric": "decode_tps", "streams": 1, "prompt_type": "prose", "value": c1},
            {"metric": "decode_tps", "streams": 8, "prompt_type": "prose", "value": 1.0},
        ],
        0.1,
    )
    assert [r["status"] for r in res["compare"]["rows"]] == ["REGRESSION", "ok", "not measured"]
    assert res["compare"]["regressions"] == 1
    paths = write_report(res, tmp_path)
    assert json.loads(paths["json"].read_text())["decode"][0]["streams"] == 1
    md = paths["markdown"].read_text()
    assert "| Streams | Prose |" in md and "| Streams | Per stream | Aggregate | First token |" in md
    assert "REGRESSION" in md
    for k in ("decode_tps", "ttft"):
        assert paths[k].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_published_points_from_schema_results():
    from recipekit.schema import Result

    rs = [
        Result(metric="decode_tps_per_stream", value=650, unit="tok/s", streams=1, claimed_by="x"),
        Result(metric="decode_tps_aggregate", value=5800, unit="tok/s", streams=16, claimed_by="x"),
        Result(metric="decode_tps_per_stream", value=27, unit="tok/s", streams=4, claimed_by="x"),
        Result(metric="prefill_tps", value=2416, unit="tok/s", claimed_by="x"),
        Result(metric="ppl", value=1.6, unit="", claimed_by="x"),
    ]
    pts = target.published_points(rs)
    assert pts == [
        {"metric": "decode_tps", "streams": 1, "prompt_type": "prose", "value": 650.0},
        {"metric": "decode_tps", "streams": 16, "prompt_type": "prose", "value": 5800.0},
        {"metric": "prefill_tps", "streams": None, "prompt_type": None, "value": 2416.0},
    ]


# ---- CLI -------------------------------------------------------------------------------


def test_cli_bench_quick_writes_reports_and_refuses_overwrite(run_cli, tmp_path, fake):
    out = tmp_path / "b"
    code, stdout, err = run_cli(
        "bench",
        "--url",
        fake.base_url,
        "--quick",
        "--prompts",
        "prose",
        "--prefill-runs",
        "1",
        "--out",
        str(out),
        "--format",
        "json",
    )
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["result"]["provenance"]["server_models"]["data"][0]["id"] == "fake-model"
    assert doc["result"]["provenance"]["toolkit"]["name"] == "recipekit"
    assert {p.name for p in out.iterdir()} == {"bench.json", "bench.md", "decode_tps.png", "ttft.png"}
    code, _, err = run_cli("bench", "--url", fake.base_url, "--quick", "--out", str(out))
    assert code == 2 and "error[out-dir-not-empty]" in err


def test_cli_bench_errors_are_one_line(run_cli, fake):
    code, _, err = run_cli("bench")
    assert code == 2 and err.startswith("error[no-target]")
    code, _, err = run_cli("bench", "--url", "127.0.0.1:1")
    assert code == 2 and "error[bad-url]" in err
    code, _, err = run_cli("bench", "--url", fake.base_url, "--prompts", "poetry")
    assert code == 2 and "error[unknown-prompt-type]" in err
    code, _, err = run_cli("bench", "--url", fake.base_url, "--streams", "1,x")
    assert code == 2 and "error[bad-list]" in err
    assert "Traceback" not in err


def test_cli_bench_and_gate_on_a_dead_server_fail_in_one_line(run_cli, tmp_path):
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    for args in (
        ("bench", "--url", dead, "--quick", "--out", str(tmp_path / "b")),
        ("gate", "--url", dead, "--only", "smoke"),
    ):
        code, out, err = run_cli(*args)
        assert code == 1, (args, code, err)
        lines = err.strip().splitlines()
        assert lines[-1].startswith(f"error[server-unreachable] {dead}/v1/models: "), err
        assert "(hint: start the server" in lines[-1] and "Traceback" not in err
    assert not (tmp_path / "b").exists()  # nothing written for a dead server


def test_cli_gate_pass_fail_and_exit_codes(run_cli, tmp_path, fake):
    code, stdout, err = run_cli(
        "gate",
        "--url",
        fake.base_url,
        "--only",
        "smoke,needle",
        "--format",
        "json",
        "-t",
        "needle.prompt_tokens=[300]",
        "--out",
        str(tmp_path),
    )
    assert code == 0, err
    doc = json.loads(stdout)
    assert [g["status"] for g in doc["gates"]] == ["PASS", "PASS"]
    assert json.loads((tmp_path / "gates.json").read_text())["passed"] is True
    # the fake cannot serve prompt_logprobs: perplexity cannot run -> FAIL, exit 5
    code, stdout, err = run_cli("gate", "--url", fake.base_url, "--only", "perplexity", "--format", "json")
    assert code == 5 and "error[gate-failed]" in err
    assert json.loads(stdout)["gates"][0]["summary"].startswith("could not run")
    code, _, err = run_cli("gate", "--url", fake.base_url, "--only", "smoke", "-t", "nope")
    assert code == 2 and "error[bad-threshold]" in err


def test_cli_isolation_passes_clean_and_fails_on_a_leak(run_cli, fake):
    args = (
        "gate",
        "--url",
        fake.base_url,
        "--only",
        "isolation",
        "--format",
        "json",
        "-t",
        "isolation.requests=6",
        "-t",
        "isolation.rounds=1",
        "-t",
        "isolation.prefix_words=200",
    )
    code, stdout, err = run_cli(*args)
    assert code == 0, err
    m = json.loads(stdout)["gates"][0]["metrics"]
    assert m["own"] == 6 and m["aborted"] == 2 and m["foreign"] == [] and m["prefix_cache_hits_delta"] > 0
    leak = {"code": None}

    def leaky(body):  # every answer after the first carries the previous request's code
        text = json.dumps(body.get("prompt"))
        m_ = re.search(r"personal code is ([A-Z]{3}-\d{4})", text)
        if not m_:
            return "probe answer"
        prev, leak["code"] = leak["code"], m_.group(1)
        return f"{m_.group(1)} and {prev or ''}"

    old = fake.reply
    fake.reply = leaky
    try:
        code, stdout, err = run_cli(*args)
    finally:
        fake.reply = old
    assert code == 5
    g = json.loads(stdout)["gates"][0]
    assert g["status"] == "FAIL" and len(g["metrics"]["foreign"]) >= 1
    assert all(f["kind"] == "code" for f in g["metrics"]["foreign"])


def test_cli_compare_flags_a_regression_against_the_recipe(run_cli, tmp_path):
    slow = FakeOpenAIServer(reply="a b", token_delay=0.02).start_in_thread()  # ~50 tok/s vs 477 published
    try:
        code, stdout, err = run_cli(
            "bench",
            "tiny-deepseek-cpu",
            "--url",
            slow.base_url,
            "--quick",
            "--prompts",
            "prose",
            "--streams",
            "1",
            "--max-tokens",
            "12",
            "--prefill-runs",
            "0",
            "--compare",
            "--out",
            str(tmp_path / "c"),
            "--format",
            "json",
        )
    finally:
        slow.stop()
    assert code == 5 and "error[bench-regression]" in err
    from recipekit.catalog import load_recipe

    published = target.published_points(load_recipe("tiny-deepseek-cpu").recipe.results)
    c1 = [p["value"] for p in published if p["streams"] == 1]
    assert c1 and c1[0] > 300  # the recipe publishes a one-stream figure
    rows = json.loads(stdout)["result"]["compare"]["rows"]
    assert len(rows) == len(published)
    for p, r in zip(published, rows):
        if p["streams"] == 1:
            assert r["status"] == "REGRESSION" and r["published"] == p["value"] and r["change"] < -0.5
        else:
            assert r["status"] == "not measured"  # only one stream was run
    assert json.loads(stdout)["result"]["provenance"]["recipe"]["id"] == "tiny-deepseek-cpu"


def test_cli_lm_eval_is_skipped_when_not_installed(run_cli, fake, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("RECIPEKIT_LM_EVAL", raising=False)
    code, stdout, err = run_cli("gate", "--url", fake.base_url, "--only", "lm-eval", "--format", "json")
    assert code == 0, err
    g = json.loads(stdout)["gates"][0]
    assert g["status"] == "SKIP" and "not installed" in g["summary"]


def test_waves_record_foreign_traffic_from_server_counters():
    srv = FakeOpenAIServer(reply="a b").start_in_thread()
    srv.foreign_per_request = 5  # as if another client generated 5 tokens next to each of ours
    try:

        async def go():
            async with Client(srv.base_url) as c:
                cfg = protocol.ProtocolConfig(
                    prompt_types=["prose"], levels=[2], max_tokens=8, multi_runs=1, warmups=0, prefill_runs=0
                )
                return await protocol.run_protocol(c, cfg)

        res = asyncio.run(go())
    finally:
        srv.stop()
    cell = res["decode"][0]
    assert cell["foreign_tokens"] == 10 and cell["waves"][0]["server_busy_before"] == 0
    from recipekit.bench.report import markdown

    res.update(model="m", provenance={})
    assert "**Not an idle server:** 0 wave(s)" in markdown(res) and "10 tokens" in markdown(res)


def test_burst_delivery_is_counted_not_divided_by_zero():
    r = _rec(0, 2.0, 2.0001, 32, arrivals=2)  # 32 tokens in two reads: a held-back stream
    w = protocol.wave_stats([r, _rec(1, 1.0, 2.0, 11)])
    assert w["streams_burst"] == 1 and w["stream_decode_tps"] == [pytest.approx(10.0)]
    cell = protocol.level_summary("prose", 1, [protocol.wave_stats([r])])
    assert cell["figure"] is None and cell["streams_burst"] == 1
    res = {"protocol": "p", "config": {"max_tokens": 32}, "decode": [cell], "model": "m", "provenance": {}}
    md = markdown(res)
    assert "**Buffered output:** 1 stream(s)" in md and "| 1 | — |" in md
    assert w["aggregate_decode_tps"] is None
