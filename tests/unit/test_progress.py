"""Progress lines with elapsed time (recipekit/progress.py): off a terminal one line per
EVERY_S with done/total, percent, rate and elapsed; a closing line for a step that showed any."""

from __future__ import annotations

import io

from recipekit.progress import Ticker, human_bytes


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_line_every_few_seconds_with_bytes_rate_and_elapsed():
    out, clk = io.StringIO(), Clock()
    t = Ticker("fetch model.safetensors", total=100 << 20, stream=out, tty=False, clock=clk)
    t.update(done=1 << 20)  # before EVERY_S: silent
    assert out.getvalue() == ""
    clk.t += 5
    t.update(done=25 << 20)
    clk.t += 2
    t.update(done=30 << 20)  # 2 s after the last line: silent
    clk.t += 3
    t.update(done=50 << 20, note="shard 2")
    t.close()
    assert out.getvalue().splitlines() == [
        "fetch model.safetensors: 25.0 MiB/100.0 MiB (25%), 5.0 MiB/s, 5 s elapsed",
        "fetch model.safetensors: 50.0 MiB/100.0 MiB (50%), 5.0 MiB/s, 10 s elapsed; shard 2",
        "fetch model.safetensors: 50.0 MiB/100.0 MiB (50%), 5.0 MiB/s, 10 s elapsed; done",
    ]


def test_counts_and_quick_steps():
    out, clk = io.StringIO(), Clock()
    with Ticker("assemble", total=40, unit="tensors", stream=out, tty=False, clock=clk) as t:
        clk.t += 6
        t.update(advance=10)
    assert out.getvalue().splitlines() == [
        "assemble: 10/40 tensors (25%), 6 s elapsed",
        "assemble: 10/40 tensors (25%), 6 s elapsed; done",
    ]
    out2 = io.StringIO()
    with Ticker("quick", total=3, stream=out2, tty=False, clock=Clock()) as t:
        t.update(done=3)
    assert out2.getvalue() == ""  # under EVERY_S: no noise
    assert human_bytes(1536) == "1.5 KiB" and human_bytes(3 << 30) == "3.0 GiB" and human_bytes(12) == "12 B"


def test_an_interrupted_step_prints_no_done_line():
    out, clk = io.StringIO(), Clock()
    try:
        with Ticker("convert", total=10, stream=out, tty=False, clock=clk) as t:
            clk.t += 7
            t.update(done=4)
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert out.getvalue().splitlines() == ["convert: 4 B/10 B (40%), 1 B/s, 7 s elapsed"]


def test_the_interval_setting_is_honoured_and_bad_values_fall_back(monkeypatch):
    from recipekit.progress import EVERY_S, every_s_setting

    monkeypatch.setenv("RECIPEKIT_PROGRESS_EVERY_S", "0.25")
    assert every_s_setting() == 0.25
    for bad in ("", "x", "-1", "0", "nan"):
        monkeypatch.setenv("RECIPEKIT_PROGRESS_EVERY_S", bad)
        assert every_s_setting() == EVERY_S, bad


def test_a_heartbeat_prints_without_updates_and_updates_print_nothing():
    import threading

    out = io.StringIO()
    seen = threading.Event()

    class Stream(io.StringIO):
        def write(self, s: str) -> int:
            n = out.write(s)
            if out.getvalue().count("\n") >= 2:
                seen.set()
            return n

    t = Ticker("assemble", total=3, unit="shards", stream=Stream(), tty=False, every_s=0.05, heartbeat=True)
    t.update(advance=1, note="reading official headers")  # no output of its own
    assert seen.wait(10), "the heartbeat printed no lines"
    t.update(advance=1)
    t.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("assemble: 1/3 shards (33%), 0 s elapsed; reading official headers")
    assert lines[-1].startswith("assemble: 2/3 shards (67%)") and lines[-1].endswith("; done")
    n = len(lines)
    import time

    time.sleep(0.2)  # closed: the thread has stopped
    assert len(out.getvalue().splitlines()) == n
