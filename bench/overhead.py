"""The client's own cost: streamed tokens parsed per second on one CPU core.

- `recorded`: vLLM-shaped SSE bytes fed to the parser and delta extraction the client uses;
  no socket (the parsing ceiling).
- `live_per_packet`: the full client path (aiohttp, parser, per-request records) with 8
  concurrent streams from the local SSE server in another process, tokens spaced 1 ms apart
  so each token arrives in its own packet, as from a real server. Figure: tokens per client
  CPU-second = what one core of client can keep up with.
- `live_burst`: one stream as fast as the server writes (16 events per write): tokens/s.
The client process is pinned to one core; the server runs on another when there is one.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

from recipekit.bench.sse import DONE, SSEParser, delta_text


def vllm_like_events(n_tokens: int) -> list[bytes]:
    """Chat-completion chunks shaped like vLLM's (same keys, a short word per token)."""
    words = ("the", " hash", " map", " stores", " keys", ",", " then", " resizes", " 17", "\n")
    out = []
    for i in range(n_tokens):
        ev = {
            "id": "chatcmpl-0123456789abcdef",
            "object": "chat.completion.chunk",
            "created": 1764480000,
            "model": "tiny-deepseek",
            "choices": [
                {"index": 0, "delta": {"content": words[i % len(words)]}, "logprobs": None, "finish_reason": None}
            ],
        }
        out.append(b"data: " + json.dumps(ev).encode() + b"\n\n")
    usage = {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": 20, "completion_tokens": n_tokens, "total_tokens": n_tokens + 20},
    }
    out.append(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
    return out


def pin_one_core() -> int | None:
    if hasattr(os, "sched_setaffinity"):
        core = sorted(os.sched_getaffinity(0))[0]
        os.sched_setaffinity(0, {core})
        return core
    return None


def parse_rate_recorded(n_tokens: int = 200_000) -> dict:
    chunks = vllm_like_events(n_tokens)
    parser = SSEParser()
    tokens = 0
    t0 = time.perf_counter()
    for c in chunks:
        for ev in parser.feed(c):
            if ev is DONE:
                continue
            text, _ = delta_text(ev)
            if text:
                tokens += 1
    dt = time.perf_counter() - t0
    return {
        "mode": "recorded",
        "tokens": tokens,
        "seconds": dt,
        "tokens_per_s": tokens / dt,
        "bytes": sum(map(len, chunks)),
    }


def _server(batch: int, delay: float) -> tuple[subprocess.Popen, int]:
    code = (
        "import os\n"
        "cores = sorted(os.sched_getaffinity(0))\n"
        "os.sched_setaffinity(0, set(cores[1:]) or set(cores))\n"
        "from recipekit.bench.sse_server import main; main()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(batch), str(delay)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None  # stdout=PIPE
    return proc, int(proc.stdout.readline())


def parse_rate_live(n_tokens: int = 100_000, batch: int = 16, streams: int = 1, token_delay: float = 0.0) -> dict:
    """Stream `streams` x n_tokens from the local server (a subprocess) through the real client."""
    from recipekit.bench.client import Client  # lazy: pulls aiohttp

    proc, port = _server(batch, token_delay)
    try:

        async def go():
            async with Client(f"http://127.0.0.1:{port}") as c:
                await c.stream(c.chat_body("warm", 20))
                cpu0, t0 = time.process_time(), time.perf_counter()
                recs = await asyncio.gather(*(c.stream(c.chat_body("x", n_tokens)) for _ in range(streams)))
                return recs, time.process_time() - cpu0, time.perf_counter() - t0

        recs, cpu, wall = asyncio.run(go())
    finally:
        proc.terminate()
        proc.wait(10)
    events = sum(r.token_events for r in recs)
    return {
        "streams": streams,
        "token_delay_s": token_delay,
        "events_per_write": batch,
        "tokens": sum(r.completion_tokens or 0 for r in recs),
        "token_events": events,
        "wall_s": wall,
        "tokens_per_s": events / wall,
        "client_cpu_s": cpu,
        "tokens_per_cpu_s": events / cpu if cpu else None,
        "errors": [r.error for r in recs if r.error],
    }


def measure(n_tokens: int = 100_000) -> dict:
    core = pin_one_core()
    return {
        "pinned_core": core,
        "recorded": parse_rate_recorded(2 * n_tokens),
        "live_per_packet": parse_rate_live(2_000, batch=1, streams=8, token_delay=0.001),
        "live_burst": parse_rate_live(n_tokens, batch=16),
        "goal_tokens_per_s": 20_000,
    }
