"""recipekit.lock: the one file-lock implementation (filelock) behind every lock the toolkit takes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from filelock import Timeout

from recipekit.lock import hold

HOLDER = """
import sys, time
from recipekit.lock import hold
with hold(sys.argv[1]):
    print("held", flush=True)
    time.sleep(30)
"""


@pytest.fixture
def other_process(tmp_path):
    procs = []

    def start(path):
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "held"
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait(timeout=10)


class Busy(Exception):
    pass


@pytest.mark.timeout(60)
def test_held_by_another_process_is_busy_then_free_when_it_dies(tmp_path, other_process):
    path = tmp_path / "sub" / "x.lock"
    p = other_process(path)
    with pytest.raises(Busy):
        with hold(path, timeout=0, busy=lambda: Busy("held")):
            pass
    t0 = time.monotonic()
    with pytest.raises(Timeout):  # no busy(): filelock's Timeout, after the wait
        with hold(path, timeout=0.3):
            pass
    assert time.monotonic() - t0 >= 0.3
    p.kill()  # SIGKILL: the kernel frees the flock
    p.wait(timeout=10)
    with hold(path, timeout=0) as lock:
        assert lock.is_locked
    assert path.is_file()  # the lock file stays for the next holder


def test_on_acquired_sees_the_previous_contents_and_can_write(tmp_path):
    path = tmp_path / "l"
    path.write_text("previous holder\n")
    seen = []

    def claim(fd: int) -> None:
        seen.append(os.pread(fd, 100, 0))
        os.ftruncate(fd, 0)
        os.pwrite(fd, b"me\n", 0)

    with hold(path, timeout=0, on_acquired=claim):
        assert path.read_bytes() == b"me\n"
    assert seen == [b"previous holder\n"]


def test_a_lock_file_removed_by_its_holder_is_retried_not_counted_as_busy(tmp_path, monkeypatch):
    import fcntl

    path = tmp_path / "l"
    path.write_text("")
    real = fcntl.flock
    calls = []

    def remove_then_flock(fd, op):
        if not calls:
            os.unlink(path)  # the holder removes the file between our open and flock
        calls.append(op)
        return real(fd, op)

    monkeypatch.setattr(fcntl, "flock", remove_then_flock)
    with hold(path, timeout=0, busy=lambda: Busy("held")):
        monkeypatch.setattr(fcntl, "flock", real)
        assert path.is_file() and len(calls) == 2
