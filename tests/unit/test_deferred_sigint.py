"""Ctrl-C inside `deferred_sigint()` waits for a `check()`; the Gaudi converter's pipe raises it between
chunks, never inside a queue call, so its cleanup cannot wait forever (the CI run of 631a2f9 saw
`checkpoint convert` ignore SIGINT for 120 s)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from recipekit.interrupt import deferred_sigint


def _sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # the handler runs before os.kill returns to Python code


def test_the_first_ctrl_c_waits_for_check_and_the_old_handler_comes_back():
    before = signal.getsignal(signal.SIGINT)
    with deferred_sigint() as interrupt:
        assert signal.getsignal(signal.SIGINT) is not before
        _sigint()
        assert interrupt.pending is True
        work = sum(range(1000))  # code between checks runs on
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
        assert interrupt.pending is False
        interrupt.check()  # recorded once, raised once
    assert work == 499500
    assert signal.getsignal(signal.SIGINT) is before


def test_a_second_ctrl_c_raises_at_once():
    before = signal.getsignal(signal.SIGINT)
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with deferred_sigint():
            _sigint()
            reached.append(1)
            _sigint()
            reached.append(2)
    assert reached == [1]
    assert signal.getsignal(signal.SIGINT) is before


def test_a_ctrl_c_still_pending_at_the_end_raises_there():
    after = []
    with pytest.raises(KeyboardInterrupt):
        with deferred_sigint():
            _sigint()
            after.append("body finished")
    assert after == ["body finished"]


def test_outside_the_main_thread_nothing_changes():
    seen: list[object] = []

    def body() -> None:
        with deferred_sigint() as interrupt:
            seen.append(signal.getsignal(signal.SIGINT))
            interrupt.check()
            seen.append("checked")

    t = threading.Thread(target=body)
    t.start()
    t.join(10)
    assert seen == [signal.getsignal(signal.SIGINT), "checked"]


def test_the_convert_pipe_raises_a_pending_ctrl_c_before_touching_its_queues():
    from recipekit.backends.gaudi.convert import POOL, _Pipe

    with deferred_sigint() as interrupt:
        pipe = _Pipe(64, interrupt=interrupt)
        try:
            buf = pipe.buffer()
            _sigint()
            with pytest.raises(KeyboardInterrupt):
                pipe.put("t", buf[:8], buf)
            assert pipe.hq.unfinished_tasks == 0 and pipe.wq.unfinished_tasks == 0
            pipe.release(buf)
            with pytest.raises(KeyboardInterrupt):
                _sigint()
                pipe.buffer()
            assert pipe.free.qsize() == POOL  # every pooled buffer is back
        finally:
            closer = threading.Thread(target=pipe.close, daemon=True)
            closer.start()
            closer.join(10)
    assert not closer.is_alive(), "the pipe's workers did not stop"


def test_an_ignored_ctrl_c_stays_ignored():
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with deferred_sigint() as interrupt:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            _sigint()
            interrupt.check()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)


_LIBRARY_TURNS_CTRL_C_INTO = """
import os, signal, sys
from recipekit.cli import dispatch

def run(args, as_json):  # what numpy's C import does with a KeyboardInterrupt that lands inside it
    try:
        if args == ["ctrl-c"]:
            os.kill(os.getpid(), signal.SIGINT)
        raise ImportError("numpy._core.multiarray failed to import")
    except KeyboardInterrupt:
        raise ImportError("numpy._core.multiarray failed to import") from None

dispatch._run = run
dispatch._check_command_names = lambda args: None
dispatch.dispatch(sys.argv[1:], in_process=False)
"""


@pytest.mark.parametrize(
    ("arg", "code", "line"),
    [
        ("ctrl-c", 130, "interrupted"),
        ("no-signal", 1, "error[internal-error] ImportError: numpy._core.multiarray failed to import"),
    ],
)
def test_a_ctrl_c_that_a_library_turned_into_an_error_still_says_interrupted(arg, code, line):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RECIPEKIT_DEBUG"}
    r = subprocess.run(
        [sys.executable, "-c", _LIBRARY_TURNS_CTRL_C_INTO, arg], capture_output=True, text=True, timeout=60, env=env
    )
    assert r.returncode == code, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(line), r.stderr
