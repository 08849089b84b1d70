"""Progress of one long step (a download, a conversion) with elapsed time: a rich bar on a
terminal, else one plain line every EVERY_S seconds (CI logs, pipes), and a closing line.
RECIPEKIT_PROGRESS_EVERY_S sets that interval (a test that must see a line before a fast step
ends sets it short; a quiet log sets it long).

    with Ticker("fetch model.safetensors", total=size) as t:
        t.update(done=n)          # or t.update(advance=k, note="shard 3")

With heartbeat=True the plain line comes from a thread every EVERY_S seconds whether or not
update() is called (a step with long stretches between updates still shows it is alive), and
update() only records numbers: no clock read, no output.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Optional, TextIO

EVERY_S = 5.0


def every_s_setting() -> float:
    """The plain line's interval: RECIPEKIT_PROGRESS_EVERY_S when it is a positive number, else EVERY_S."""
    try:
        v = float(os.environ.get("RECIPEKIT_PROGRESS_EVERY_S", ""))
    except ValueError:
        return EVERY_S
    return v if v > 0 and v == v else EVERY_S


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


class Ticker:
    """One step's progress; `unit="B"` shows bytes and a rate, anything else counts items."""

    def __init__(
        self,
        label: str,
        total: Optional[int] = None,
        unit: str = "B",
        every_s: Optional[float] = None,
        stream: Optional[TextIO] = None,
        tty: Optional[bool] = None,
        clock: Any = time.monotonic,
        heartbeat: bool = False,
    ) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.every_s = every_s_setting() if every_s is None else every_s
        self.stream = stream or sys.stderr
        self.clock = clock
        self.t0 = self.last = clock()
        self.done = 0
        self.note = ""
        self.closed = False
        is_tty = self.stream.isatty() if tty is None else tty
        self._bar: Any = None
        if is_tty:
            from rich.console import Console  # lazy: pulls rich
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TransferSpeedColumn,
            )  # lazy: pulls rich

            cols: list[Any] = [TextColumn("{task.description}"), BarColumn()]
            cols += [DownloadColumn(), TransferSpeedColumn()] if unit == "B" else [MofNCompleteColumn()]
            self._bar = Progress(*cols, TimeElapsedColumn(), console=Console(file=self.stream), transient=False)
            self._bar.start()
            self._task = self._bar.add_task(label, total=total)
        self._stop: Optional[threading.Event] = None
        self._beat: Optional[threading.Thread] = None
        if heartbeat and self._bar is None:
            self._stop = threading.Event()
            self._beat = threading.Thread(target=self._beat_loop, name=f"progress {label}", daemon=True)
            self._beat.start()

    def _beat_loop(self) -> None:
        assert self._stop is not None
        while not self._stop.wait(self.every_s):
            print(self.line(), file=self.stream, flush=True)

    def __enter__(self) -> "Ticker":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.close(ok=exc_type is None)

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def _amount(self, n: float) -> str:
        return human_bytes(n) if self.unit == "B" else f"{n:.0f}"

    def line(self) -> str:
        """The plain progress line: label, done/total (percent), rate, elapsed, note."""
        el = self.elapsed()
        amount = self._amount(self.done)
        if self.total:
            amount += f"/{self._amount(self.total)} {self.unit if self.unit != 'B' else ''}".rstrip()
            amount += f" ({100 * self.done / self.total:.0f}%)"
        elif self.unit != "B":
            amount += f" {self.unit}"
        rate = f", {human_bytes(self.done / el)}/s" if self.unit == "B" and el > 0 else ""
        return f"{self.label}: {amount}{rate}, {el:.0f} s elapsed" + (f"; {self.note}" if self.note else "")

    def update(
        self, done: Optional[int] = None, advance: int = 0, total: Optional[int] = None, note: Optional[str] = None
    ) -> None:
        if total is not None:
            self.total = total
        if done is not None:
            self.done = done
        self.done += advance
        if note is not None:
            self.note = note
        if self._bar is not None:
            desc = f"{self.label} {self.note}".strip()
            self._bar.update(self._task, completed=self.done, total=self.total, description=desc)
        elif self._beat is None and self.clock() - self.last >= self.every_s:
            self.last = self.clock()
            print(self.line(), file=self.stream, flush=True)

    def close(self, ok: bool = True) -> None:
        if self.closed:
            return
        self.closed = True
        if self._stop is not None and self._beat is not None:
            self._stop.set()
            self._beat.join()
        if self._bar is not None:
            self._bar.stop()
        elif ok and self.elapsed() >= self.every_s:  # a step that showed progress says it ended
            self.note = "done"
            print(self.line(), file=self.stream, flush=True)
