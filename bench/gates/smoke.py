"""Smoke: one chat completion and one streamed completion answer, with usage."""
from __future__ import annotations

from recipekit.bench.client import with_nonce
from recipekit.bench.gates.base import GateContext, GateResult


async def run(ctx: GateContext, t: dict) -> GateResult:
    c = ctx.client
    await c.resolve_model()
    status, data = await c.post_json("/v1/chat/completions", {
        "model": c.model, "messages": [{"role": "user", "content": with_nonce("Say hello.")}],
        "max_tokens": 8, "temperature": 0.0})
    chat_tokens = (data.get("usage") or {}).get("completion_tokens", 0) if status == 200 else 0
    rec = await c.stream({"prompt": with_nonce("Once upon a time"), "max_tokens": 8, "temperature": 0.0},
                         kind="completions", tag="smoke")
    need = int(t["min_completion_tokens"])
    ok = status == 200 and chat_tokens >= need and rec.ok and (rec.completion_tokens or 0) >= need
    m = {"chat_status": status, "chat_completion_tokens": chat_tokens, "stream_status": rec.status,
         "stream_completion_tokens": rec.completion_tokens, "stream_error": rec.error}
    return GateResult("smoke", ok, f"chat HTTP {status} ({chat_tokens} tokens), stream HTTP {rec.status} "
                      f"({rec.completion_tokens} tokens, usage {'present' if rec.completion_tokens else 'MISSING'})", m, t)
