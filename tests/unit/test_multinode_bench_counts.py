"""The multi-node bench's decode figure (recipekit.multinode.bench.decode_tps) comes from the tokens it
counted on the stream; a usage that disagrees with that count, or is not an integer, gives no figure."""

from __future__ import annotations

import pytest

from recipekit.multinode.bench import decode_tps
from tests.lying_server import LyingServer


def test_honest_stream_gives_a_figure_and_lies_give_none() -> None:
    with LyingServer("honest", served_name="tiny-deepseek") as s:
        s.token_delay = 0.002
        assert 0 < decode_tps(s.url, 16) < 1e5
    for mode, words in (("usage-x2", "usage says 32"), ("usage-nan", "usage says nan"), ("usage-string", "'16'")):
        with LyingServer(mode, served_name="tiny-deepseek") as s:
            with pytest.raises(RuntimeError, match="no figure") as e:
                decode_tps(s.url, 16)
            assert words in str(e.value), str(e.value)
    with LyingServer("empty-choices", served_name="tiny-deepseek") as s:
        with pytest.raises(RuntimeError):
            decode_tps(s.url, 16)
    with LyingServer("wrong-model", served_name="tiny-deepseek") as s:  # another model answers: vLLM's 404
        with pytest.raises(RuntimeError, match="did not end with .DONE.: HTTP 404"):
            decode_tps(s.url, 16)


def test_a_stream_short_of_the_forced_tokens_or_with_unreadable_events_gives_no_figure() -> None:
    with LyingServer("short-forced", served_name="tiny-deepseek") as s:
        with pytest.raises(RuntimeError, match="carried 1 tokens, 16 were forced"):
            decode_tps(s.url, 16)
    with LyingServer("odd-event", served_name="tiny-deepseek") as s:  # [1, 2] before the tokens
        with pytest.raises(RuntimeError, match=r"not an OpenAI chunk: '\[1, 2\]'"):
            decode_tps(s.url, 16)
    for ids, words in (("[-3]", "-3"), ('["7"]', "'7'"), ("[true]", "True"), ("7", "7 are not")):
        with LyingServer("odd-event", served_name="tiny-deepseek") as s:
            s.odd_event = b'{"choices": [{"index": 0, "text": "x", "token_ids": ' + ids.encode() + b"}]}"
            with pytest.raises(RuntimeError, match="are not non-negative integers") as e:
                decode_tps(s.url, 16)
            assert words in str(e.value), str(e.value)


def test_merged_events_count_their_token_ids() -> None:
    with LyingServer("merged-stream", served_name="tiny-deepseek") as s:  # 4 tokens per event, ids named
        s.token_delay = 0.02  # 4 events: 15 tokens over at least 3 gaps of 20 ms
        assert 0 < decode_tps(s.url, 16) <= 15 / 0.06


def test_endless_and_trickling_streams_are_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from recipekit.multinode import bench

    monkeypatch.setattr(bench, "STREAM_MAX_BYTES", 1 << 20)
    with LyingServer("endless-stream", served_name="tiny-deepseek") as s:
        with pytest.raises(RuntimeError, match="stream over 1048576 bytes"):
            decode_tps(s.url, 16)
    monkeypatch.setattr(bench, "STREAM_DEADLINE_S", 1.5)
    for mode in ("slow-loris", "endless-line"):
        with LyingServer(mode, served_name="tiny-deepseek") as s:
            t0 = time.monotonic()
            with pytest.raises(RuntimeError, match="did not end with"):
                decode_tps(s.url, 16)
            assert time.monotonic() - t0 < 10
