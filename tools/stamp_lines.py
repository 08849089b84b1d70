"""Timestamps a command's output line by line and names its longest silence (stdlib only).

    ./start.sh 2>&1 | python3 tools/stamp_lines.py

Each line comes out prefixed with the seconds since the first read; at the end one line gives the
total and the longest gap between two lines with the line that ended it (the README's "longest
silence" figures; the goal is no gap of 10 s or more).
"""

from __future__ import annotations

import sys
import time


def main() -> int:
    t0 = last = time.time()
    gap, after = 0.0, ""
    for line in sys.stdin:
        now = time.time()
        if now - last > gap:
            gap, after = now - last, line.strip()[:100]
        last = now
        sys.stdout.write(f"{now - t0:8.1f} {line}")
        sys.stdout.flush()
    print(f"TOTAL {time.time() - t0:.1f} s; longest silence {gap:.1f} s before: {after}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
