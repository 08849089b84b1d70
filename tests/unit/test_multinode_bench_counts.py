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
