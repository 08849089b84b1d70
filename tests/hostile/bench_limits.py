"""Measured: what the bench client holds and how long it waits against hostile servers, with its defaults.

    .venv/bin/python -m tests.hostile.bench_limits [--skip-slow]

Each case runs the client (bench/client.py, the bench's default limits) in a fresh subprocess against a
lying-server mode running in this process, and prints the client process's peak RSS (VmHWM) and the
seconds until it gave up, next to a baseline (an honest 256-token stream). Slow-loris waits for the full
default request limit (120 s); --skip-slow leaves it out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from tests.lying_server import LyingServer

# what the child runs: one request with the bench's defaults, then its own peak RSS
_CHILD = r"""
import asyncio, json, resource, sys, time
from recipekit.bench.client import IDLE_TIMEOUT_S, REQUEST_TIMEOUT_S, Client

url, what, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])

async def go():
    async with Client(url, timeout=REQUEST_TIMEOUT_S, idle_timeout=IDLE_TIMEOUT_S) as c:
        t0 = time.monotonic()
        if what == "models":
            try:
                await c.models_or_fail()
                err = None
            except Exception as e:
                err = str(e)
            return time.monotonic() - t0, err, 0
        body = c.chat_body("x", max_tokens) if max_tokens >= 0 else {"messages": [{"role": "user", "content": "x"}]}
        rec = await c.stream(body)
        return time.monotonic() - t0, rec.error, rec.bytes

took, err, nbytes = asyncio.run(go())
# VmHWM: this process image's peak RSS (ru_maxrss would also count the parent's pages at fork time)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
peak = int(hwm[0].split()[1]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": took, "error": err, "bytes": nbytes, "peak_rss_mib": peak / 1024}))
"""


def client_run(mode: str, what: str = "stream", max_tokens: int = 256, timeout: float = 300) -> dict:
    """Peak RSS (MiB), seconds and the record's error of one client request against `mode`."""
    with LyingServer(mode, token_delay=0.0) as s:
        t0 = time.monotonic()
        p = subprocess.run(
            [sys.executable, "-c", _CHILD, s.url, what, str(max_tokens)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        wall = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"client subprocess failed: {p.stderr[-2000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out.update(mode=mode, what=what, max_tokens=max_tokens, wall_s=wall)
    return out


CASES = [
    ("honest", "stream", 256, "baseline: an honest 256-token stream"),
    ("endless-stream", "stream", 256, "endless stream, max_tokens 256 (the protocol's)"),
    ("endless-stream", "stream", -1, "endless stream, no max_tokens (the 64 MiB stream cap)"),
    ("endless-line", "stream", 256, "one never-ending SSE line"),
    ("huge-models", "models", 0, "a 400 MB /v1/models answer"),
    ("slow-loris", "models", 0, "slow-loris (a byte every 5 s), /v1/models"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.hostile.bench_limits", description=__doc__.split("\n")[0])
    ap.add_argument("--skip-slow", action="store_true", help="leave out slow-loris (it waits the full 120 s)")
    ap.add_argument("--format", choices=("human", "json"), default="human")
    a = ap.parse_args(argv)
    rows = []
    for mode, what, mt, label in CASES:
        if a.skip_slow and mode == "slow-loris":
            continue
        r = client_run(mode, what, mt)
        r["case"] = label
        rows.append(r)
        if a.format == "human":
            err = (r["error"] or "")[:90]
            print(f"{label:<55} peak RSS {r['peak_rss_mib']:7.1f} MiB  gave up after {r['seconds']:7.2f} s  {err}")
    if a.format == "json":
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
