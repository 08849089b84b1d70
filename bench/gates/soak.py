"""Soak: `streams` workers send requests back to back for `duration_s` (and at most
`max_requests`); counts requests, tokens, errors and degenerate repetition loops."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from recipekit.bench.client import with_nonce
from recipekit.bench.gates.base import GateContext, GateResult
from recipekit.bench.gates.perplexity import fmt
from recipekit.bench.protocol import load_prompt


def find_loop(text: str, min_span: int = 160, min_repeats: float = 2.5, max_period: int = 200) -> dict | None:
    """A repetition loop at the END of `text`: a unit of 1..max_period chars repeated at least
    `min_repeats` times over at least `min_span` chars. Returns {period, span, unit} or None."""
    n = len(text)
    best: dict[str, Any] | None = None
    for p in range(1, min(max_period, n // 2) + 1):
        run = 0
        i = n - 1
        while i - p >= 0 and text[i] == text[i - p]:
            run += 1
            i -= 1
        span = run + p
        if span >= min_span and span / p >= min_repeats:
            if best is None or span > best["span"]:
                best = {"period": p, "span": span, "unit": text[n - p :]}
    return best


async def run(ctx: GateContext, t: dict) -> GateResult:
    c = ctx.client
    await c.resolve_model()
    prompts = [load_prompt(p) for p in ("prose", "code", "structured")]
    deadline = time.monotonic() + float(t["duration_s"])
    budget = {"left": int(t["max_requests"])}
    records, loops = [], []

    async def worker(w: int):
        k = 0
        while time.monotonic() < deadline and budget["left"] > 0:
            budget["left"] -= 1
            body = c.chat_body(
                with_nonce(prompts[(w + k) % len(prompts)]),
                int(t["max_tokens"]),
                forced=False,
                temperature=float(t["temperature"]),
            )
            rec = await c.stream(body, tag="soak", stream_index=w, keep_itl=False)
            records.append(rec)
            loop = find_loop(rec.text)
            if loop:
                loops.append({"worker": w, **loop})
            k += 1

    ctx.say(f"soak: {t['streams']} streams for {t['duration_s']} s (at most {t['max_requests']} requests)")
    t0 = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(int(t["streams"]))))
    wall = time.monotonic() - t0
    # a request that streamed no text is an error whatever its usage says
    errors = [r.error or "no text streamed" for r in records if r.error or not r.text]
    tokens = sum(r.completion_tokens or 0 for r in records)
    m: dict[str, Any] = {
        "requests": len(records),
        "tokens": tokens,
        "errors": len(errors),
        "loops": len(loops),
        "loop_frac": len(loops) / len(records) if records else 0.0,
        "wall_s": wall,
        "mean_tps": tokens / wall if wall else None,
    }
    ok = bool(records) and len(errors) <= int(t["max_errors"]) and m["loop_frac"] <= float(t["max_loop_frac"])
    return GateResult(
        "soak",
        ok,
        f"{wall:.0f} s x {t['streams']} streams: {len(records)} requests "
        f"({len(records) - len(errors)} answered with text), {tokens} tokens, "
        f"{len(errors)} errors, {len(loops)} repetition loops, {fmt(m['mean_tps'], '.1f')} tok/s mean",
        m,
        t,
        details=errors[:10] + loops[:10],
    )
