"""Structured output and tool calls under concurrent load.

Each round sends `requests` concurrent requests cycling four kinds: json (response_format
json_schema), tool-required (tool_choice "required"), tool-auto (tool_choice "auto") and a
long plain prompt next to them (grammar requests batched with long prefills is where the
seeds saw stray tokens). Pass per request: json parses and validates against the schema;
required returns a tool call whose name exists and whose arguments validate; auto returns
either valid tool calls or plain content; plain returns tokens. Gate: pass fraction >=
min_pass_frac.
"""

from __future__ import annotations

import json
from typing import Any

from recipekit.bench.client import gather_bounded, with_nonce
from recipekit.bench.filler import filler
from recipekit.bench.gates.base import GateContext, GateResult

KINDS = ("json", "tool-required", "tool-auto", "plain-long")

ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima", "Hanoi"]},
        "sunny": {"type": "boolean"},
        "level": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    "required": ["city", "sunny", "level"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima", "Hanoi"]},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Local time in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TOOLS: list[dict[str, Any]] = [WEATHER_TOOL, TIME_TOOL]


def body_for(kind: str, i: int, max_tokens: int) -> dict:
    def msg(text: str) -> list[dict]:
        return [{"role": "user", "content": with_nonce(text)}]

    if kind == "json":
        return {
            "messages": msg(f"Pick a city and describe its weather as JSON. Request {i}."),
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "weather", "schema": ANSWER_SCHEMA, "strict": True},
            },
        }
    if kind in ("tool-required", "tool-auto"):
        return {
            "messages": msg(f"What is the weather in Oslo right now? Request {i}."),
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "tools": TOOLS,
            "tool_choice": "required" if kind == "tool-required" else "auto",
            "parallel_tool_calls": False,
        }  # one call: a random model would append array items forever
    return {
        "messages": msg(filler(500, seed=f"plain-{i}") + " Summarise the above."),
        "max_tokens": 32,
        "temperature": 0.0,
    }


def _valid(instance, schema) -> str | None:
    import jsonschema  # lazy: pulls attrs, jsonschema

    try:
        jsonschema.validate(instance, schema)
        return None
    except jsonschema.ValidationError as e:
        return e.message[:160]


def check(kind: str, status: int, data) -> tuple[bool, str]:
    """Pure verdict on one response (unit-tested on recorded responses)."""
    if status != 200 or not isinstance(data, dict) or not data.get("choices"):
        return False, f"HTTP {status}: {str(data)[:160]}"
    ch = data["choices"][0]
    if not isinstance(ch, dict):
        return False, f"choices[0] is not an object: {str(ch)[:80]}"
    msg = ch.get("message") or {}
    if not isinstance(msg, dict):
        return False, f"message is not an object: {str(msg)[:80]}"
    calls = msg.get("tool_calls") or []
    if kind == "json":
        try:
            obj = json.loads(msg.get("content") or "")
        except ValueError:
            return False, f"not JSON (finish {ch.get('finish_reason')}): {str(msg.get('content'))[:80]!r}"
        err = _valid(obj, ANSWER_SCHEMA)
        return (err is None), (err or "valid")
    if kind in ("tool-required", "tool-auto"):
        if kind == "tool-required" and not calls:
            return False, f"no tool call: {str(msg.get('content'))[:80]!r}"
        tools = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
        for c in calls:
            fn = c.get("function") or {}
            if fn.get("name") not in tools:
                return False, f"unknown tool {fn.get('name')!r}"
            try:
                args = json.loads(fn.get("arguments") or "")
            except ValueError:
                return False, f"arguments not JSON: {str(fn.get('arguments'))[:80]!r}"
            err = _valid(args, tools[fn["name"]])
            if err:
                return False, f"arguments invalid: {err}"
        if calls:
            return True, f"{len(calls)} valid tool call(s)"
        return (bool(msg.get("content")), "plain answer" if msg.get("content") else "empty answer")
    text = msg.get("content")
    if not isinstance(text, str) or not text:  # the text itself, never a count the server claims in usage
        return False, f"no text in the answer (finish {ch.get('finish_reason')})"
    return True, f"{len(text)} characters"


async def run(ctx: GateContext, t: dict) -> GateResult:
    c = ctx.client
    await c.resolve_model()
    n, rounds, mt = int(t["requests"]), int(t["rounds"]), int(t["max_tokens"])
    # `groups`: each round sends groups × one request of every kind, `requests` of them in flight
    per_round = int(t["groups"]) * len(KINDS) if t.get("groups") else n
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        ctx.say(f"structured: round {r + 1}/{rounds}, {per_round} requests, {n} concurrent")
        kinds = [KINDS[i % len(KINDS)] for i in range(per_round)]

        def factory(kind, i):
            async def go():
                body = body_for(kind, i, mt)
                body["model"] = c.model
                return await c.post_json("/v1/chat/completions", body)

            return go

        answers = await gather_bounded([factory(k, r * per_round + i) for i, k in enumerate(kinds)], n)
        for kind, (status, data) in zip(kinds, answers, strict=True):
            ok, why = check(kind, status, data)
            rows.append({"round": r, "kind": kind, "ok": ok, "why": why})
    passed = sum(x["ok"] for x in rows)
    by_kind = {k: f"{sum(x['ok'] for x in rows if x['kind'] == k)}/{sum(x['kind'] == k for x in rows)}" for k in KINDS}
    frac = passed / len(rows) if rows else 0.0
    m: dict[str, Any] = {"passed": passed, "total": len(rows), "pass_frac": frac, "by_kind": by_kind}
    if t.get("min_pass") is not None and t.get("total"):  # a published count, e.g. 60/60: as a fraction
        ok = frac >= int(t["min_pass"]) / int(t["total"])
    elif t.get("min_pass") is not None:
        ok = passed >= int(t["min_pass"])
    else:
        ok = frac >= float(t["min_pass_frac"])
    ok = ok and len(rows) == rounds * per_round > 0
    return GateResult(
        "structured",
        ok,
        f"{rounds} rounds x {per_round} requests, {n} concurrent: asked {rounds * per_round}, "
        f"got {len(rows)}, passed {passed}/{len(rows)} "
        f"({', '.join(f'{k} {v}' for k, v in by_kind.items())})",
        m,
        t,
        details=[x for x in rows if not x["ok"]][:20],
    )
