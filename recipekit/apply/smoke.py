"""The smoke test of a served OpenAI-compatible API: one chat completion, one streamed
completion (with usage), and one tool call with tool_choice "required".

The tool call uses a strict schema (one enum argument, no parallel calls) so that guided
decoding fully determines a well-formed call even from a model with random weights: the test
is of the serving path (template, parser, structured output), not of the model's skill.
"""

from __future__ import annotations

import json
import time
from typing import Callable

from recipekit.errors import ExitCode, RecipekitError

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["unit"],
            "additionalProperties": False,
        },
    },
}


def _fail(what: str, detail: str) -> RecipekitError:
    return RecipekitError(
        code="smoke-failed",
        exit_code=ExitCode.GATE_FAILED,
        message=f"{what}: {detail}",
        hint="the server answers but not as expected; see `recipe logs`",
    )


def _post(client, path: str, body: dict, what: str) -> dict:
    import httpx  # lazy: backends import this module to render and lint

    try:
        r = client.post(path, json=body)
    except httpx.HTTPError as e:
        raise _fail(what, f"request failed: {e}") from None
    if r.status_code != 200:
        raise _fail(what, f"HTTP {r.status_code}: {r.text[:300]}")
    return r.json()


def smoke(
    base: str, model: str, log: Callable[[str], None] = lambda s: None, timeout: float = 120.0, tools: bool = True
) -> dict:
    import httpx  # lazy: backends import this module to render and lint

    out: dict = {}
    with httpx.Client(base_url=base, timeout=timeout) as c:
        t0 = time.monotonic()
        data = _post(
            c,
            "/v1/chat/completions",
            {
                "model": model,
                "messages": [{"role": "user", "content": "Hello! Who are you?"}],
                "max_tokens": 16,
                "temperature": 0,
            },
            "chat completion",
        )
        try:
            msg = data["choices"][0]["message"]
            ntok = data["usage"]["completion_tokens"]
        except (KeyError, IndexError, TypeError):
            raise _fail("chat completion", f"unexpected answer {json.dumps(data)[:300]}") from None
        if ntok < 1 or msg.get("role") != "assistant":
            raise _fail("chat completion", f"no tokens generated ({ntok})")
        out["chat"] = {"completion_tokens": ntok, "content": msg.get("content"), "s": round(time.monotonic() - t0, 2)}
        log(f"  chat completion: {ntok} tokens")

        t0 = time.monotonic()
        chunks, text, usage = 0, "", None
        body = {
            "model": model,
            "prompt": "The kitchen was quiet",
            "max_tokens": 16,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        try:
            with c.stream("POST", "/v1/completions", json=body) as r:
                if r.status_code != 200:
                    raise _fail("streamed completion", f"HTTP {r.status_code}: {r.read()[:300]!r}")
                for line in r.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    ev = json.loads(line[6:])
                    if ev.get("usage"):
                        usage = ev["usage"]
                    for ch in ev.get("choices") or []:
                        if ch.get("text"):
                            chunks += 1
                            text += ch["text"]
        except httpx.HTTPError as e:
            raise _fail("streamed completion", f"stream broke: {e}") from None
        if not usage or usage.get("completion_tokens", 0) < 1 or chunks < 1:
            raise _fail("streamed completion", f"{chunks} text chunks, usage {usage}")
        out["stream"] = {
            "chunks": chunks,
            "completion_tokens": usage["completion_tokens"],
            "s": round(time.monotonic() - t0, 2),
        }
        log(f"  streamed completion: {chunks} chunks, {usage['completion_tokens']} tokens")

        if not tools:
            return out
        t0 = time.monotonic()
        data = _post(
            c,
            "/v1/chat/completions",
            {
                "model": model,
                "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                "tools": [TOOL],
                "tool_choice": "required",
                "parallel_tool_calls": False,
                "max_tokens": 64,
                "temperature": 0,
            },
            "tool call",
        )
        try:
            calls = data["choices"][0]["message"].get("tool_calls") or []
        except (KeyError, IndexError, TypeError):
            raise _fail("tool call", f"unexpected answer {json.dumps(data)[:300]}") from None
        if len(calls) != 1 or calls[0]["function"]["name"] != "get_weather":
            raise _fail("tool call", f"expected one get_weather call, got {json.dumps(data['choices'][0])[:300]}")
        try:
            args = json.loads(calls[0]["function"]["arguments"])
        except ValueError:
            raise _fail("tool call", f"arguments are not JSON: {calls[0]['function']['arguments']!r}") from None
        if set(args) != {"unit"} or args["unit"] not in ("celsius", "fahrenheit"):
            raise _fail("tool call", f"arguments do not match the schema: {args}")
        out["tool_call"] = {"name": "get_weather", "arguments": args, "s": round(time.monotonic() - t0, 2)}
        log(f"  tool call: get_weather({json.dumps(args)})")
    return out
