"""The client's own cost: streamed tokens parsed per second on one CPU core.

Two measurements:
- `recorded`: vLLM-shaped SSE bytes (one event per network chunk, the worst case) fed to the
  same parser and delta extraction the client uses; no socket.
- `live`: the full client path (httpx, parser, per-request record) streaming from the fast
  local SSE server running in another process; the client process is pinned to one core.
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
        ev = {"id": "chatcmpl-0123456789abcdef", "object": "chat.completion.chunk", "created": 1764480000,
              "model": "tiny-deepseek", "choices": [{"index": 0, "delta": {"content": words[i % len(words)]},
                                                    "logprobs": None, "finish_reason": None}]}
        out.append(b"data: " + json.dumps(ev).encode() + b"\n\n")
    usage = {"id": "x", "object": "chat.completion.chunk", "choices": [],
             "usage": {"prompt_tokens": 20, "completion_tokens": n_tokens, "total_tokens": n_tokens + 20}}
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
    return {"mode": "recorded", "tokens": tokens, "seconds": dt, "tokens_per_s": tokens / dt,
            "bytes": sum(map(len, chunks))}


def parse_rate_live(n_tokens: int = 100_000, batch: int = 16) -> dict:
    """Stream n_tokens from the fast local server (in a subprocess) through the real client."""
    from recipekit.bench.client import Client
    proc = subprocess.Popen([sys.executable, "-m", "recipekit.bench.sse_server", str(batch)],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())

        async def go():
            async with Client(f"http://127.0.0.1:{port}") as c:
                await c.stream(c.chat_body("warm", 100))
                return await c.stream(c.chat_body("x", n_tokens))

        cpu0 = time.process_time()
        rec = asyncio.run(go())
        cpu = time.process_time() - cpu0
    finally:
        proc.terminate()
        proc.wait(10)
    span = rec.t_last - rec.t_first
    return {"mode": "live", "tokens": rec.completion_tokens, "token_events": rec.token_events,
            "seconds": span, "tokens_per_s": (rec.token_events - 1) / span, "client_cpu_s": cpu,
            "tokens_per_cpu_s": rec.token_events / cpu if cpu else None, "error": rec.error}


def measure(n_tokens: int = 100_000) -> dict:
    core = pin_one_core()
    return {"pinned_core": core, "recorded": parse_rate_recorded(2 * n_tokens),
            "live": parse_rate_live(n_tokens, batch=1),            # one SSE event per write: the worst case
            "live_batched": parse_rate_live(n_tokens, batch=16),   # 16 events per write (a busy server)
            "goal_tokens_per_s": 20_000}
