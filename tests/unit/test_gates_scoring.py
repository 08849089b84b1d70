"""Gate verdicts on recorded responses: each scoring function must both pass and fail."""

from __future__ import annotations

import json
import math

import pytest

from recipekit.bench.gates import decode_prefill, isolation, needle, perplexity, runner, structured
from recipekit.bench.gates.base import thresholds_for
from recipekit.bench.gates.oracle import argmax_of, logprob_of
from recipekit.bench.gates.soak import find_loop
from recipekit.errors import RecipekitError

# A vLLM prompt_logprobs entry as the server returned it (prompt_logprobs=1, rank-1 + actual token).
ENTRY = {
    "17": {"logprob": -2.5, "rank": 3, "decoded_token": "x"},
    "4": {"logprob": -0.4, "rank": 1, "decoded_token": "y"},
}


def test_prompt_logprob_entry_reading():
    assert logprob_of(ENTRY, 17) == -2.5 and logprob_of(ENTRY, 4) == -0.4
    assert logprob_of(ENTRY, 99) is None and logprob_of(None, 1) is None
    assert argmax_of(ENTRY) == 4


def test_perplexity_pass_fail_and_missing_tokens():
    t = thresholds_for("perplexity", {"max_rel_diff": 0.01})
    oracle = [-1.0, -2.0, -0.5, -1.5]
    ok, m = perplexity.compare_logprobs([-1.001, -2.0, -0.5, -1.499], oracle, t)
    assert ok and m["ppl_oracle"] == pytest.approx(math.exp(1.25)) and m["missing"] == 0
    ok, m = perplexity.compare_logprobs([-1.2, -2.2, -0.7, -1.7], oracle, t)  # +0.2 nats per token
    assert not ok and m["rel_diff"] == pytest.approx(math.exp(0.2) - 1, rel=1e-6)
    ok, m = perplexity.compare_logprobs([-1.0, None, -0.5, -1.5], oracle, t)
    assert not ok and m["missing"] == 1


def test_perplexity_against_a_published_oracle_value():
    t = thresholds_for("perplexity", {"oracle_ppl": 1.6239, "max_rel_diff": 0.01})
    lp = [-math.log(1.6180)] * 10
    ok, m = perplexity.compare_logprobs(lp, [0.0] * 10, t)
    assert ok and m["ppl_server"] == pytest.approx(1.6180) and m["ppl_oracle"] == 1.6239


def test_decode_prefill_counts_off_argmax_and_largest_gap():
    t = thresholds_for(
        "decode-prefill", {"max_mean_abs_dlogprob": 0.05, "max_off_argmax_frac": 0.2, "max_gap_nats": 1.0}
    )
    decoded = [[(5, -0.10), (6, -0.20), (7, -0.30)], [(8, -1.0), (9, -0.5)]]
    prefill = [[(-0.11, 5), (-0.20, 6), (-0.31, 7)], [(-1.0, 8), (-0.5, 9)]]
    ok, m = decode_prefill.score(decoded, prefill, t)
    assert ok and m["off_argmax"] == 0 and m["largest_gap"] == pytest.approx(0.01)
    prefill[1][1] = (-1.4, 3)  # token 9 decoded, but prefill prefers 3 and gives 9 a much lower logprob
    ok, m = decode_prefill.score(decoded, prefill, t)
    assert not ok and m["off_argmax"] == 1 and m["largest_gap"] == pytest.approx(0.9)
    assert m["largest_gap_at"] == {"prompt": 1, "position": 1}
    prefill[1][1] = (None, None)
    assert not decode_prefill.score(decoded, prefill, t)[0]


def test_needle_scoring_hits_misses_and_bleed():
    cases = [
        {"code": "BAX-1234", "answer": " BAX-1234."},
        {"code": "KOL-5678", "answer": " no idea"},
        {"code": "TEP-9999", "answer": " KOL-5678"},
    ]
    s = needle.score(cases)
    assert s["hits"] == 1 and s["total"] == 3
    assert s["foreign"] == [("TEP-9999", "KOL-5678")]


def test_isolation_catches_a_planted_foreign_code_leak():
    cases = [
        {
            "code": f"C{i}X-100{i}",
            "topic": isolation.TOPICS[i],
            "aborted": i >= 4,
            "answer": f" C{i}X-100{i}. A sentence about the {isolation.TOPICS[i]}.",
        }
        for i in range(5)
    ]
    clean = isolation.score(cases)
    assert clean["own"] == 4 and clean["complete"] == 4 and clean["aborted"] == 1 and clean["foreign"] == []
    # plant: request 2's answer carries the code of request 4 (an ABORTED stream) — the bleed to catch
    cases[2]["answer"] += " Also C4X-1004."
    leaked = isolation.score(cases)
    assert leaked["own"] == 4
    assert leaked["foreign"] == [{"request": "C2X-1002", "found": "C4X-1004", "kind": "code"}]
    # and a foreign topic
    cases[0]["answer"] += f" ({isolation.TOPICS[1]})"
    assert {"request": "C0X-1000", "found": isolation.TOPICS[1], "kind": "topic"} in isolation.score(cases)["foreign"]


def test_isolation_aborted_answers_do_not_count_as_own_misses():
    cases = [
        {"code": "AAA-1111", "topic": "volcano", "aborted": True, "answer": ""},
        {"code": "BBB-2222", "topic": "glacier", "aborted": False, "answer": "BBB-2222"},
    ]
    s = isolation.score(cases)
    assert s["own"] == 1 and s["own_frac"] == 1.0


def _chat(content=None, tool_calls=None, status=200, finish="stop"):
    return status, {
        "choices": [
            {
                "message": {"role": "assistant", "content": content, "tool_calls": tool_calls or []},
                "finish_reason": finish,
            }
        ],
        "usage": {"completion_tokens": 7},
    }


def _call(name, args):
    return {
        "id": "c1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args) if not isinstance(args, str) else args},
    }


def test_structured_check_on_recorded_responses():
    def ok(kind, r):
        return structured.check(kind, *r)[0]

    assert ok("json", _chat('{"city":"Oslo","sunny":true,"level":3}'))
    assert not ok("json", _chat('{"city":"Oslo","sunny":true,"level":3'))  # cut at max_tokens
    assert not ok("json", _chat('{"city":"Rome","sunny":true,"level":3}'))  # not in the enum
    assert not ok("json", _chat('{"city":"Oslo","sunny":true,"level":3,"x":1}'))  # extra property
    good = _call("get_weather", {"city": "Oslo", "unit": "celsius"})
    assert ok("tool-required", _chat("", [good]))
    assert not ok("tool-required", _chat("I would call a tool"))  # no call
    assert not ok("tool-required", _chat("", [_call("get_wether", {"city": "Oslo", "unit": "celsius"})]))
    assert not ok("tool-required", _chat("", [_call("get_weather", {"city": "Oslo"})]))  # missing unit
    assert not ok("tool-required", _chat("", [_call("get_weather", '{"city": "Os')]))  # arguments not JSON
    assert ok("tool-auto", _chat("plain words"))
    assert ok("tool-auto", _chat(None, [good]))
    assert not ok("tool-auto", _chat(""))
    assert not ok("json", (400, {"error": "bad"}))
    assert ok("plain-long", _chat("x"))


def test_find_loop_detects_degenerate_repetition_only():
    unit = "the cat sat on the mat, "
    assert find_loop("An opening line. " + unit * 12)["period"] == len(unit)
    import random

    rng = random.Random(1)
    text = " ".join("".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 9))) for _ in range(200))
    assert find_loop(text) is None
    assert find_loop("x" * 100) is None  # too short a span to call it a loop
    assert find_loop("x" * 200)["period"] == 1


def test_select_uses_recipe_thresholds_and_required_flags():
    gates = [
        {"id": "perplexity", "thresholds": {"max_rel_diff": 0.5}},
        {"id": "needle", "thresholds": {}, "required": False},
        {"id": "kernel", "thresholds": {}},
    ]
    sel = runner.select(gates, None)
    assert [(g, r) for g, _, r in sel] == [("perplexity", True), ("needle", False)]
    assert sel[0][1]["max_rel_diff"] == 0.5 and sel[0][1]["tokens"] == 1536  # default fills the rest
    only = runner.select(gates, ["needle"])
    assert only[0][0] == "needle" and only[0][2] is True  # asked for explicitly: required
    with pytest.raises(RecipekitError) as e:
        runner.select(None, ["perplexty"])
    assert e.value.code == "unknown-gate" and "perplexity" in e.value.hint
    assert "lm-eval" not in [g for g, _, _ in runner.select(None, None)]


def test_document_exit_semantics():
    from recipekit.bench.gates.base import GateResult

    a = GateResult("perplexity", True, "ok")
    b = GateResult("needle", False, "0/3")
    b.required = False
    doc = runner.document([a, b], {})
    assert doc["passed"] and doc["failed"] == [] and doc["advisory_failed"] == ["needle"]
    c = GateResult("structured", False, "1/2")
    doc = runner.document([a, b, c], {})
    assert not doc["passed"] and doc["failed"] == ["structured"]
    assert "| needle | FAIL (advisory) | 0/3 |" in runner.markdown(doc)


def test_thresholds_map_seed_aliases_and_refuse_unknown_keys():
    t = thresholds_for("isolation", {"repeats": 3, "min_own": 48})
    assert t["rounds"] == 3 and t["min_own"] == 48
    with pytest.raises(RecipekitError) as e:
        thresholds_for("isolation", {"repeats": 3, "min_own": 48, "prefix_word": 10})
    assert e.value.code == "bad-threshold" and "prefix_word" in e.value.message
    assert e.value.hint == "did you mean 'prefix_words'?"
    assert thresholds_for("needle", {"depth": 0.5})["depths"] == [0.5]
    assert thresholds_for("decode-prefill", {"concurrent": 4})["prompts"] == 4
    assert thresholds_for("structured", {"concurrent": 12, "min_pass": 60, "total": 60})["requests"] == 12
    with pytest.raises(RecipekitError, match="same threshold"):
        thresholds_for("decode-prefill", {"concurrent": 4, "prompts": 8})
    for bad in ({"tokens": True}, {"tokens": "5"}, {"max_rel_diff": float("nan")}, {"max_missing": -1}):
        with pytest.raises(RecipekitError) as e:
            thresholds_for("perplexity", bad)
        assert e.value.code == "bad-threshold" and next(iter(bad)) in e.value.location


def test_an_unread_threshold_is_refused_before_any_gate_runs(run_cli):
    from recipekit.bench.sse_server import FakeOpenAIServer

    with pytest.raises(RecipekitError) as e:
        runner.select([{"id": "smoke", "thresholds": {"chat": 1, "min_completion_token": 1}}], None)
    assert e.value.code == "bad-threshold" and e.value.hint == "did you mean 'min_completion_tokens'?"
    srv = FakeOpenAIServer(reply="hello there").start_in_thread()
    try:
        code, _, err = run_cli("gate", "--url", srv.base_url, "--only", "smoke", "-t", "smoke.colour=1")
        code2, _, err2 = run_cli("gate", "--url", srv.base_url, "--only", "soak", "-t", "soak.streams=0")
    finally:
        srv.stop()
    assert code == 2 and "error[bad-threshold]" in err and "colour" in err and "min_completion_tokens" in err
    assert code2 == 2 and "error[bad-threshold]" in err2 and "greater than or equal to 1" in err2


def test_tiny_png_is_a_valid_png():
    import struct
    import zlib

    from recipekit.bench.gates.smoke import tiny_png

    data = tiny_png(4, 3)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    w, h = struct.unpack(">II", data[16:24])
    assert (w, h) == (4, 3)
    n = struct.unpack(">I", data[33:37])[0]
    assert len(zlib.decompress(data[41 : 41 + n])) == 3 * (1 + 3 * 4)
