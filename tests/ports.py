"""Loopback ports for the servers tests start: below the kernel's ephemeral range, never handed out twice in a run."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_HANDED_OUT: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default low end


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range and not handed out before in this run.

    A port the kernel picks (bind to 0) comes from the ephemeral range and is released at once, so any
    later ephemeral bind may take it before our server binds it: seen in CI, where the first replica's
    vLLM (its internal sockets bind port 0) took the port picked for the second replica."""
    low = min(_ephemeral_low(), 32768)
    first, span = 10000, low - 10000
    start = random.randrange(span)
    for i in range(span):
        port = first + (start + i) % span
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {first}..{low - 1}")
