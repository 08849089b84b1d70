"""A real SIGINT during `recipe checkpoint convert`: progress lines with elapsed time came first
(stderr is not a terminal; a heartbeat line every RECIPEKIT_PROGRESS_EVERY_S naming the shard being written), then one line saying what stopped, what is kept and that the same
command resumes; the re-run skips the shards finished before the interrupt."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_ctrl_c_during_convert_says_what_stopped_and_the_rerun_resumes(tmp_path):
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41

    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tiny_dsv41(src, seed=0, size="0.3GiB", force=True)  # ~14 s to convert here: time to interrupt
    argv = [sys.executable, "-m", "recipekit", "checkpoint", "convert", "--src", str(src), "--dst", str(dst)]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RECIPEKIT_PROGRESS_EVERY_S": "0.3"},
    )
    assert proc.stderr is not None
    seen, shards = [], []
    line_re = re.compile(
        r"convert: [\d.]+ (?:[KMG]i)?B/[\d.]+ [KMG]iB \(\d+%\), [\d.]+ [KMG]?i?B/s, \d+ s elapsed(?:; (.+))?$"
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # the heartbeat's lines, until the second shard is being written
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith("convert: "):
            m = line_re.match(line.rstrip("\n"))
            assert m, seen
            if m.group(1) and m.group(1) not in shards:
                shards.append(m.group(1))
            if len(shards) == 2:
                break
    assert len(shards) == 2, seen
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    err = "".join(seen) + rest
    assert proc.returncode == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"interrupted: checkpoint convert into {dst}; finished shards are kept"), err[-2000:]
    assert "the same command again resumes" in last and "Traceback" not in err
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    m = re.search(r"converted (\d+) shard\(s\), skipped (\d+) already done", again.stdout)
    assert m and int(m.group(2)) > 0 and int(m.group(1)) > 0, again.stdout  # resumed, not redone
