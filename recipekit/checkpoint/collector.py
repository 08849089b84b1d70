"""The cyclic garbage collector paused around one header-heavy checkpoint command.

A full-size assembly holds ~280,000 header entries and as many index strings; every 700 new
container objects Python's collector runs a young collection, and each full collection walks all
of them again (~9,000 collections, 30% of `assemble` at full size). These objects hold no
reference cycles: pausing the collector for the command (and only for it) frees nothing later
than reference counting does, and the pause ends when the command returns or raises.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collector_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block; restore its previous state after it.
    Usable as a decorator."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
