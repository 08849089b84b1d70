"""Every content gate and `oracle capture` against the lying server: each lie fails (or is refused)
with the asked/got counts in the summary, honest passes, and a server that never finishes is given up
on within the gate's --timeout."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from recipekit.bench.gates.perplexity import ppl_text
from tests.lying_server import LyingServer, encode, true_logprob

TOKENS = 40  # scored tokens asked of perplexity: TOKENS - 1 log-probs


def honest_ppl() -> float:
    ids = encode(ppl_text())[:TOKENS]
    lps = [true_logprob(ids[t - 1], ids[t]) for t in range(1, len(ids))]
    return math.exp(-sum(lps) / len(lps))


def _gate(run_cli, url: str, gate: str, *thresholds: str, timeout: str = "20") -> tuple[int, dict, str]:
    args = ["gate", "--url", url, "--only", gate, "--format", "json", "--timeout", timeout]
    for t in thresholds:
        args += ["-t", t]
    code, out, err = run_cli(*args)
    doc = json.loads(out) if out.strip().startswith("{") else {}
    return code, (doc.get("gates") or [{}])[0], err


PPL = ("perplexity.tokens=%d" % TOKENS, "perplexity.oracle_ppl=%r" % honest_ppl(), "perplexity.max_rel_diff=1e-6")


@pytest.mark.parametrize(
    "mode,got",
    [("honest", TOKENS - 1), ("truncated-logprobs", 1), ("nan-logprobs", 0), ("positive-logprobs", 0)],
)
def test_perplexity_scores_every_token_or_fails(run_cli, mode, got):
    with LyingServer(mode) as s:
        code, g, err = _gate(run_cli, s.url, "perplexity", *PPL)
    assert f"asked {TOKENS - 1} scored tokens, got {got} ({TOKENS - 1 - got} missing, 0 allowed)" in g["summary"]
    assert g["metrics"]["scored"] == got and g["metrics"]["asked"] == TOKENS - 1
    if mode == "honest":
        assert code == 0 and g["status"] == "PASS", g["summary"]
    else:
        assert code == 5 and g["status"] == "FAIL" and "error[gate-failed]" in err
    if mode == "truncated-logprobs":
        assert f"the server returned 2 prompt_logprobs entries for {TOKENS} prompt tokens" in g["summary"]


def test_perplexity_missing_tokens_are_counted_against_the_threshold(run_cli):
    with LyingServer("truncated-logprobs") as s:
        code, g, _ = _gate(run_cli, s.url, "perplexity", *PPL, f"perplexity.max_missing={TOKENS}")
    # within max_missing, but the entry count still differs from the prompt: never a pass on 1 token
    assert code == 5 and g["status"] == "FAIL" and g["metrics"]["missing"] == TOKENS - 2


@pytest.mark.parametrize("mode", ["empty-choices", "tokenize-disagree"])
def test_perplexity_refuses_other_lies(run_cli, mode):
    with LyingServer(mode) as s:
        code, g, _ = _gate(run_cli, s.url, "perplexity", *PPL)
    assert code == 5 and g["status"] == "FAIL"
    if mode == "empty-choices":
        assert "prompt-logprobs-missing" in g["summary"]


DP = ("decode-prefill.prompts=2", "decode-prefill.tokens=8")


@pytest.mark.parametrize(
    "mode,got",
    [("honest", 16), ("short-forced", 2), ("nan-logprobs", 16), ("positive-logprobs", 16), ("usage-nan", 16)],
)
def test_decode_prefill_needs_every_forced_token(run_cli, mode, got):
    with LyingServer(mode) as s:
        code, g, _ = _gate(run_cli, s.url, "decode-prefill", *DP)
    assert f"asked 16 forced tokens, got {got}" in g["summary"], g["summary"]
    if mode in ("honest", "usage-nan"):  # the gate reads no usage
        assert code == 0 and g["status"] == "PASS", g["summary"]
    else:
        assert code == 5 and g["status"] == "FAIL"
    if mode == "short-forced":
        assert "asked for 8 forced tokens, the server decoded 1" in g["summary"]
    if mode in ("nan-logprobs", "positive-logprobs"):
        assert g["metrics"]["missing"] == 16


def test_decode_prefill_on_empty_choices_fails(run_cli):
    with LyingServer("empty-choices") as s:
        code, g, _ = _gate(run_cli, s.url, "decode-prefill", *DP)
    assert code == 5 and g["status"] == "FAIL" and "asked 16 forced tokens, got 0" in g["summary"]


@pytest.mark.parametrize("gate", ["needle", "structured"])
def test_answers_without_text_fail_the_other_gates(run_cli, gate):
    th = (
        ("needle.prompt_tokens=300", "needle.depths=[0.5]")
        if gate == "needle"
        else ("structured.rounds=1", "structured.requests=4")
    )
    with LyingServer("empty-choices") as s:
        code, g, _ = _gate(run_cli, s.url, gate, *th)
    assert code == 5 and g["status"] == "FAIL"
    assert ("asked 1 needles, 0 answered" if gate == "needle" else "asked 4, got 4, passed 0/4") in g["summary"]


@pytest.mark.parametrize("mode", ["endless-stream", "slow-loris"])
def test_a_server_that_never_finishes_is_given_up_on(run_cli, mode):
    t0 = time.monotonic()
    with LyingServer(mode) as s:
        code, g, err = _gate(run_cli, s.url, "perplexity", *PPL, timeout="3")
    took = time.monotonic() - t0
    assert code in (1, 5) and took < 30, took
    # slow-loris: the time limit; endless-stream: the client's 64 MiB cap on a non-stream answer
    why = "AnswerTooLarge" if mode == "endless-stream" else "TimeoutError"
    assert (why in g.get("summary", "")) or (why in err), (g, err)


def test_capture_against_the_lies(tmp_path: Path):
    from recipekit.bench.oracle.capture import capture_reference
    from recipekit.bench.oracle.run import write_reference
    from recipekit.errors import RecipekitError

    text = ppl_text()
    with LyingServer("honest") as s:
        doc = capture_reference(s.url, None, None, text, TOKENS, "ppl", timeout=10)
    assert doc["scored_tokens"] == TOKENS - 1 and doc["ppl"] == pytest.approx(honest_ppl(), rel=1e-12)
    assert doc["tokenizer"]["round_trip"] == "checked"
    expect = {
        "truncated-logprobs": "oracle-capture-bad-response",
        "nan-logprobs": "oracle-capture-bad-response",
        "positive-logprobs": "oracle-capture-bad-response",
        "empty-choices": "oracle-capture-bad-response",
        "tokenize-disagree": "oracle-capture-tokenizer-disagrees",  # ids that detokenize to other text
        "health-only": "oracle-capture-tokenize-failed",
        "slow-loris": "server-unreachable",
        "endless-stream": "server-answer-too-large",  # the client's 64 MiB answer cap, before the timeout
    }
    for mode, code in expect.items():
        out = tmp_path / f"{mode}.json"
        with LyingServer(mode) as s:
            try:
                d = capture_reference(s.url, None, None, text, TOKENS, "ppl", timeout=2)
                write_reference(d, out)
                got = None
            except RecipekitError as e:
                got = e.code
        assert got == code, (mode, got)
        assert out.exists() == (code is None)


def test_round_trip_allows_a_bos_and_a_cut_character():
    from recipekit.bench.oracle.capture import round_trip_ok

    assert round_trip_ok("Hello world", "<｜begin▁of▁sentence｜>Hello wo")
    assert round_trip_ok("Hé there", "H\ufffd")
    assert not round_trip_ok("Hello world", "HHeelllloo")


def test_capture_refuses_a_short_tokenize(tmp_path: Path):
    from recipekit.bench.oracle.capture import capture_reference
    from recipekit.errors import RecipekitError

    with LyingServer("honest") as s, pytest.raises(RecipekitError) as e:
        capture_reference(s.url, None, None, "x", 1536, "x", timeout=5)
    assert e.value.code == "oracle-capture-short-text" and "gave 1 token ids" in e.value.message


def _captured(tmp_path: Path, tokens: int) -> Path:
    from recipekit.bench.oracle.capture import capture_reference
    from recipekit.bench.oracle.run import write_reference

    with LyingServer("honest") as s:
        doc = capture_reference(s.url, None, None, ppl_text(), tokens, "ppl", timeout=10)
    return write_reference(doc, tmp_path / f"ref-{tokens}.json")


@pytest.mark.parametrize("mode", ["honest", "truncated-logprobs", "nan-logprobs", "positive-logprobs", "empty-choices"])
def test_perplexity_against_a_reference_file(run_cli, tmp_path, mode):
    ref = _captured(tmp_path, TOKENS)
    with LyingServer(mode) as s:
        code, _, err = run_cli(
            "gate", "--url", s.url, "--only", "perplexity", "--reference", str(ref), "--format", "json",
            "-t", f"perplexity.tokens={TOKENS}", "-t", "perplexity.max_rel_diff=1e-9", "--timeout", "20",
        )  # fmt: skip
    if mode == "honest":
        assert code == 0, err
    else:
        assert code == 5 and "error[gate-failed]" in err


def test_a_reference_is_judged_by_its_real_token_list(run_cli, tmp_path):
    ref = _captured(tmp_path, 3)  # 3 ids, 2 log-probs
    lying = json.loads(ref.read_text())
    lying["prompt_set"]["tokens"] = 1536
    fake = tmp_path / "declares-1536.json"
    fake.write_text(json.dumps(lying))
    with LyingServer("honest") as s:
        code, out, _ = run_cli("gate", "--url", s.url, "--only", "perplexity", "--reference", str(fake), "-f", "json")
        code2, out2, _ = run_cli("gate", "--url", s.url, "--only", "perplexity", "--reference", str(ref), "-f", "json")
    g = json.loads(out)["gates"][0]
    assert code == 5 and "error[oracle-reference-invalid]" in g["summary"] and "tokens says 1536" in g["summary"]
    g2 = json.loads(out2)["gates"][0]  # an honest 3-token reference: shorter than the 1,536 the gate asks
    assert code2 == 5 and "the reference holds 3 tokens, the gate asks for 1536" in g2["summary"]


@pytest.mark.parametrize("mode", ["honest", "empty-choices"])
def test_isolation_and_soak_need_text(run_cli, mode):
    iso = ("isolation.requests=2", "isolation.rounds=1", "isolation.prefix_words=20", "isolation.abort_frac=0.0")
    iso += ("isolation.min_own_frac=0.0", "isolation.max_tokens=8")
    soak = ("soak.duration_s=1", "soak.streams=1", "soak.max_requests=2", "soak.max_tokens=8")
    with LyingServer(mode) as s:
        c1, g1, _ = _gate(run_cli, s.url, "isolation", *iso)
        c2, g2, _ = _gate(run_cli, s.url, "soak", *soak)
    if mode == "honest":
        assert c1 == 0 and c2 == 0 and g1["status"] == g2["status"] == "PASS"
        assert "probes 6/6 answered" in g1["summary"] and "asked 2 complete answers, got 2" in g1["summary"]
        assert "(2 answered with text)" in g2["summary"]
    else:
        assert c1 == 5 and g1["status"] == "FAIL" and "probes 0/6 answered" in g1["summary"]
        assert c2 == 5 and g2["status"] == "FAIL" and "(0 answered with text)" in g2["summary"]


def test_smoke_gate_counts_tokens_merged_into_one_event(run_cli):
    # vLLM sends the tokens made since its last event together (and none for text the detokenizer holds back): the
    # gate asks it to name each event's ids, so 8 tokens in two events still count 8 against usage's 8
    with LyingServer("merged-stream") as s:
        code, g, _ = _gate(run_cli, s.url, "smoke")
        (body,) = [b for b in s.bodies if b.get("stream")]
    assert body["return_token_ids"] is True
    assert code == 0 and g["status"] == "PASS", g["summary"]
    assert g["metrics"]["stream_tokens"] == 8 == g["metrics"]["stream_usage_tokens"]


@pytest.mark.parametrize(
    "mode,words",
    [
        ("honest", None),
        ("empty-choices", "chat: no choices in the answer"),
        ("usage-x2", "stream: usage-disagrees"),
        ("usage-string", "chat: usage.completion_tokens is not an integer count"),
        ("usage-nan", "chat: usage.completion_tokens is not an integer count"),
    ],
)
def test_smoke_gate_judges_text_and_counts(run_cli, mode, words):
    with LyingServer(mode) as s:
        code, g, _ = _gate(run_cli, s.url, "smoke")
    assert g["metrics"]["asked"] == 2
    if words is None:
        assert code == 0 and g["status"] == "PASS" and g["metrics"]["got"] == 2, g["summary"]
        assert g["metrics"]["stream_tokens"] == 8 == g["metrics"]["stream_usage_tokens"]
    else:
        assert code == 5 and g["status"] == "FAIL" and words in g["summary"], g["summary"]
        assert g["metrics"]["got"] < 2
