"""Smoke: a chat completion and a streamed completion answer with usage; with the recipe's
`tool_call: 1` also a tool call (tool_choice required) and with `image: 1` an image message."""

from __future__ import annotations

import base64
import json

from recipekit import png
from recipekit.bench.client import with_nonce
from recipekit.bench.gates.base import GateContext, GateResult


def tiny_png(w: int = 8, h: int = 8) -> bytes:
    """A valid w×h red PNG, made here (no image files in the repo)."""
    return png.from_rows([b"\xff\x00\x00" * w] * h, w, 3, level=6)


async def run(ctx: GateContext, t: dict) -> GateResult:
    from recipekit.bench.gates.structured import TOOLS, check

    c = ctx.client
    await c.resolve_model()
    need = int(t["min_completion_tokens"])
    m: dict = {}
    problems = []
    if t.get("chat", 1):
        status, data = await c.post_json(
            "/v1/chat/completions",
            {
                "model": c.model,
                "messages": [{"role": "user", "content": with_nonce("Say hello.")}],
                "max_tokens": 8,
                "temperature": 0.0,
            },
        )
        m["chat_tokens"] = (data.get("usage") or {}).get("completion_tokens", 0) if status == 200 else 0
        if status != 200 or m["chat_tokens"] < need:
            problems.append(f"chat HTTP {status}, {m['chat_tokens']} tokens")
    rec = await c.stream(
        {"prompt": with_nonce("Once upon a time"), "max_tokens": 8, "temperature": 0.0}, kind="completions", tag="smoke"
    )
    m["stream_tokens"] = rec.completion_tokens
    if not rec.ok or (rec.completion_tokens or 0) < need:
        problems.append(f"stream {rec.error or 'no usage'}")
    if t.get("tool_call"):
        status, data = await c.post_json(
            "/v1/chat/completions",
            {
                "model": c.model,
                "messages": [{"role": "user", "content": "What is the weather in Oslo?"}],
                "tools": TOOLS,
                "tool_choice": "required",
                "parallel_tool_calls": False,
                "max_tokens": 96,
                "temperature": 0.0,
            },
        )
        ok, why = check("tool-required", status, data)
        m["tool_call"] = why
        if not ok:
            problems.append(f"tool call: {why}")
    if t.get("image"):
        url = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()
        status, data = await c.post_json(
            "/v1/chat/completions",
            {
                "model": c.model,
                "max_tokens": 8,
                "temperature": 0.0,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": url}},
                            {"type": "text", "text": "What colour is this?"},
                        ],
                    }
                ],
            },
        )
        m["image_status"] = status
        if status != 200:
            problems.append(f"image HTTP {status}: {json.dumps(data)[:120]}")
    summary = ", ".join(f"{k} {v}" for k, v in m.items())
    return GateResult("smoke", not problems, (summary + ("; " + "; ".join(problems) if problems else "")), m, t)
