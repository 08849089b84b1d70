"""Ctrl-C that lands only where the code can stop cleanly.

Python raises KeyboardInterrupt in the main thread between any two bytecodes, also inside
`queue.Queue.put` or a `with lock:` block. A converter whose main thread feeds worker threads
through queues can then be left with a lock held or a task count off by one, and its cleanup
(join the queues, stop the workers) waits forever: the CI run of 631a2f9 saw
`checkpoint convert` ignore Ctrl-C for 120 s while its heartbeat went on printing.

Inside `deferred_sigint()` the first SIGINT only records itself; the code calls `check()` at
points where stopping is safe (between chunks), which raises KeyboardInterrupt there. A second
SIGINT raises at once, as the user insists. Outside the main thread (where Python cannot set a
signal handler), or where SIGINT is ignored (a background job) or has a handler of its own, the
window changes nothing and `check()` never raises.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from types import FrameType
from typing import Iterator

_received = False  # a SIGINT reached this process (set by the handlers below)


def _record_and_raise(signum: int, frame: FrameType | None) -> None:
    """Python's own behaviour (KeyboardInterrupt), remembered."""
    global _received
    _received = True
    raise KeyboardInterrupt


def install() -> None:
    """In the CLI's process: remember a Ctrl-C. A C extension importing numpy turns a KeyboardInterrupt that
    lands inside that import into an ImportError ("numpy._core.multiarray failed to import"); `received()`
    lets the CLI still say `interrupted` instead of calling it a bug."""
    if threading.current_thread() is threading.main_thread() and _replaceable():
        signal.signal(signal.SIGINT, _record_and_raise)


def received() -> bool:
    return _received


def _replaceable() -> bool:
    """Python's default SIGINT behaviour or install()'s; not an ignored SIGINT (nohup, `&`) or someone's own."""
    return signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _record_and_raise)


class PendingInterrupt:
    """What the deferred handler recorded; `check()` turns it into KeyboardInterrupt."""

    def __init__(self) -> None:
        self.pending = False

    def check(self) -> None:
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        global _received
        _received = True
        if self.pending:  # the second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.pending = True


@contextlib.contextmanager
def deferred_sigint() -> Iterator[PendingInterrupt]:
    """Defer SIGINT to `check()` calls for the body; a Ctrl-C still pending at the end raises there."""
    state = PendingInterrupt()
    if threading.current_thread() is not threading.main_thread() or not _replaceable():
        yield state
        return
    old = signal.signal(signal.SIGINT, state._handler)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, old)
    state.check()
