"""The URL a client on this host uses to reach a server bound to (host, port).

A leaf of the core: the application (apply, lifecycle) and the domain (bench's target) both
turn a bind address into a URL, so it lives below both.
"""

from __future__ import annotations


def base_url(host: str, port: int) -> str:
    """The URL a client on this host uses: a wildcard or empty bind address is reached on loopback."""
    h = "127.0.0.1" if host in ("", "0.0.0.0", "::", "[::]") else host
    return f"http://{f'[{h}]' if ':' in h else h}:{port}"  # an IPv6 literal goes in brackets
