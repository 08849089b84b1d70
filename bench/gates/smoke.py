"""Smoke: a chat completion and a streamed completion answer with text (the chat's usage an integer within
what was asked; the stream's tokens counted by the client and its usage agreeing within one); with the recipe's
`tool_call: 1` also a tool call (tool_choice required) and with `image: 1` an image message."""

from __future__ import annotations

import base64
import json

from recipekit import png
from recipekit.bench.client import check_counts, with_nonce
from recipekit.bench.gates.base import GateContext, GateResult
from recipekit.bench.gates.structured import TOOLS, check


def tiny_png(w: int = 8, h: int = 8) -> bytes:
    """A valid w×h red PNG, made here (no image files in the repo)."""
    return png.from_rows([b"\xff\x00\x00" * w] * h, w, 3, level=6)


def chat_tokens(data: object) -> int | None:
    """usage.completion_tokens when it is a JSON integer (never a string, a float, NaN or a bool)."""
    usage = data.get("usage") if isinstance(data, dict) else None
    n = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def chat_problem(status: int, data: object, need: int, max_tokens: int) -> str | None:
    """Why a chat answer does not pass the smoke (None: it does): it must carry a choice with non-empty
    text, and a usage count between what the smoke needs and what it asked for."""
    if status != 200:
        return f"HTTP {status}"
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "no choices in the answer"
    msg = choices[0].get("message")
    text = msg.get("content") if isinstance(msg, dict) else None
    if not isinstance(text, str) or not text.strip():
        return "the answer has no text"
    n = chat_tokens(data)
    if n is None:
        return "usage.completion_tokens is not an integer count"
    if not need <= n <= max_tokens:
        return f"usage says {n} completion tokens for max_tokens {max_tokens} ({need} needed)"
    return None


async def run(ctx: GateContext, t: dict) -> GateResult:
    c = ctx.client
    await c.resolve_model()
    need = int(t["min_completion_tokens"])
    m: dict = {"asked": 0, "got": 0}
    problems = []
    if t.get("chat", 1):
        m["asked"] += 1
        status, data = await c.post_json(
            "/v1/chat/completions",
            {
                "model": c.model,
                "messages": [{"role": "user", "content": with_nonce("Say hello.")}],
                "max_tokens": 8,
                "temperature": 0.0,
            },
        )
        why = chat_problem(status, data, need, max_tokens=8)
        m["chat_tokens"] = chat_tokens(data) if why is None else None
        if why:
            problems.append(f"chat: {why}")
        else:
            m["got"] += 1
    m["asked"] += 1
    # return_token_ids: vLLM sends the tokens made since its last event together, and none for a step whose text
    # the detokenizer holds back; the ids it names per event keep the client's count exact (a server that does not
    # know the field is asked again without it)
    rec = await c.stream(
        {"prompt": with_nonce("Once upon a time"), "max_tokens": 8, "temperature": 0.0, "return_token_ids": True},
        kind="completions",
        tag="smoke",
    )
    check_counts(rec)
    m["stream_tokens"] = rec.token_events  # counted on the stream; usage only cross-checks it
    m["stream_usage_tokens"] = rec.completion_tokens
    if not rec.ok:
        problems.append(f"stream: {rec.error}")
    elif rec.excluded:
        problems.append(f"stream: {rec.excluded}")
    elif not (rec.text or "").strip():
        problems.append("stream: no text in the streamed tokens")
    elif rec.token_events < need:
        problems.append(f"stream: {rec.token_events} tokens, {need} needed")
    else:
        m["got"] += 1
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
    summary = f"asked {m['asked']} answers, got {m['got']} with text and checked counts; " + ", ".join(
        f"{k} {v}" for k, v in m.items() if k not in ("asked", "got")
    )
    return GateResult("smoke", not problems, (summary + ("; " + "; ".join(problems) if problems else "")), m, t)
