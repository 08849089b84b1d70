"""The smoke test of a served OpenAI-compatible API: one chat completion, one streamed
completion (with usage), and one tool call with tool_choice "required".

The tool call uses a strict schema (one enum argument, no parallel calls) so that guided
decoding fully determines a well-formed call even from a model with random weights: the test
is of the serving path (template, parser, structured output), not of the model's skill.

Each answer is judged on its content, not on a status code or on what `usage` claims: the chat
answer needs non-empty text and a `usage.completion_tokens` that is an integer within what was
asked; the stream needs non-empty text, its `[DONE]`, and as many tokens (counted on its events) as
`usage.completion_tokens` says (within one). Every request is bounded in time and bytes, so an
endless stream or a slow-loris server fails the smoke instead of holding it. The summary says
how many observations were asked for and how many were got.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from recipekit.apply import http_probe
from recipekit.errors import ExitCode, RecipekitError

MAX_TOKENS = 16  # asked of the chat and streamed completions
TOOL_MAX_TOKENS = 64
ANSWER_MAX_BYTES = 1024 * 1024  # a 16-token answer is ~1 KiB; a stream of 16 events ~5 KiB
USAGE_SLACK = 1  # tokens counted on the stream may differ from usage by one (a final empty event)
# STREAM_TOKENS: vLLM puts every token generated since the last event into the next one (several
# when the API process lags behind the engine: seen on 2 shared cores, 12 events for 16 tokens),
# and a byte-level token that completes no character has text "". So the smoke asks for
# `logprobs`, whose `tokens` list holds one entry per token of the event (vLLM
# completion/serving.py: _create_completion_logprobs(token_ids=delta_token_ids)); an event
# without that list counts as one token.

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


def _fail_code(code: str, what: str, detail: str, hint: str) -> RecipekitError:
    return RecipekitError(code=code, exit_code=ExitCode.GATE_FAILED, message=f"{what}: {detail}", hint=hint)


def _usage_tokens(usage: Any, what: str) -> int:
    """usage.completion_tokens, refused unless a non-negative JSON integer (a string, NaN, a
    float or a missing count is not a figure the smoke can check anything against)."""
    raw = usage.get("completion_tokens") if isinstance(usage, dict) else None
    n = http_probe.finite_int(raw)
    if n is None or n < 0:
        shown = "missing" if raw is None else json.dumps(raw)[:60]
        raise _fail_code(
            "smoke-usage-invalid",
            what,
            f"usage.completion_tokens is {shown}, not a count",
            "the server's usage accounting is broken; the smoke does not trust it",
        )
    return n


def _mismatch(what: str, detail: str) -> RecipekitError:
    return _fail_code("smoke-usage-mismatch", what, detail, "the server's usage does not count what it generated")


def _answer(r: http_probe.Reply, what: str) -> Any:
    if r.error is not None and r.status == 200:
        raise _fail_code("smoke-unbounded", what, r.error, "the server's answer never ended or grew without bound")
    if not r.ok:
        raise _fail(what, r.why() + (f": {r.body[:300]!r}" if r.body else ""))
    try:
        return r.json()
    except ValueError as e:
        raise _fail(what, f"the answer is not JSON ({str(e)[:100]}): {r.body[:200]!r}") from None


def _chat(base: str, model: str, timeout: float) -> dict:
    what = "chat completion"
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Hello! Who are you?"}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }
    data = _answer(
        http_probe.post_json(base + "/v1/chat/completions", body, timeout_s=timeout, max_bytes=ANSWER_MAX_BYTES), what
    )
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices:
        raise _fail_code("smoke-empty", what, f"no choices in {json.dumps(data)[:200]}", "the server generated nothing")
    try:
        msg = choices[0]["message"]
        role = msg.get("role")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise _fail(what, f"no choices[0].message in {json.dumps(data)[:300]}") from None
    text = msg.get("content")
    if role != "assistant" or not isinstance(text, str) or not text:
        raise _fail_code(
            "smoke-empty",
            what,
            f"no text (role {role!r}, content {json.dumps(text)[:80]})",
            "the server generated nothing",
        )
    ntok = _usage_tokens(data.get("usage"), what)
    if not 1 <= ntok <= MAX_TOKENS:
        raise _mismatch(
            what, f"{len(text)} characters of text but usage.completion_tokens says {ntok} (asked 1..{MAX_TOKENS})"
        )
    return {"completion_tokens": ntok, "content": text}


def _tokens_in(choice: dict) -> int:
    lp = choice.get("logprobs")
    tokens = lp.get("tokens") if isinstance(lp, dict) else None
    return len(tokens) if isinstance(tokens, list) else 1


def _stream(base: str, model: str, timeout: float) -> dict:
    what = "streamed completion"
    body = {
        "model": model,
        "prompt": "The kitchen was quiet",
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "logprobs": 1,  # one logprobs.tokens entry per streamed token (see STREAM_TOKENS)
    }
    r = http_probe.post_sse(base + "/v1/completions", body, timeout_s=timeout, max_bytes=ANSWER_MAX_BYTES)
    if r.status == 200 and (r.error is not None or not r.done):
        why = r.error or f"the stream closed after {len(r.events)} events without data: [DONE]"
        raise _fail_code(
            "smoke-unbounded" if r.error else "smoke-failed", what, why, "the stream must end with data: [DONE]"
        )
    if not r.ok:
        raise _fail(what, r.why())
    stream_tokens, text, usage = 0, "", None
    for ev in r.events:
        if not isinstance(ev, dict):
            raise _fail(what, f"an event is not a JSON object: {str(ev)[:120]!r}")
        if ev.get("usage") is not None:
            usage = ev["usage"]
        choices = ev.get("choices")
        for ch in choices if isinstance(choices, list) else []:
            t = ch.get("text") if isinstance(ch, dict) else None
            if isinstance(t, str):  # an event of generated tokens; its text may be "" (see STREAM_TOKENS)
                stream_tokens += _tokens_in(ch)
                text += t
    if not text:
        raise _fail_code("smoke-empty", what, f"{len(r.events)} events, no text", "the server generated nothing")
    if usage is None:
        raise _fail_code(
            "smoke-usage-invalid",
            what,
            "no usage event (stream_options.include_usage)",
            "the server ignored include_usage",
        )
    ntok = _usage_tokens(usage, what)
    if abs(ntok - stream_tokens) > USAGE_SLACK or stream_tokens > MAX_TOKENS:
        raise _mismatch(
            what, f"{stream_tokens} tokens streamed but usage.completion_tokens says {ntok} (asked {MAX_TOKENS})"
        )
    return {"events": len(r.events), "stream_tokens": stream_tokens, "completion_tokens": ntok, "text": text}


def _tool(base: str, model: str, timeout: float) -> dict:
    what = "tool call"
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [TOOL],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_tokens": TOOL_MAX_TOKENS,
        "temperature": 0,
    }
    data = _answer(
        http_probe.post_json(base + "/v1/chat/completions", body, timeout_s=timeout, max_bytes=ANSWER_MAX_BYTES), what
    )
    try:
        calls = data["choices"][0]["message"].get("tool_calls") or []
        name = calls[0]["function"]["name"] if len(calls) == 1 else None
        raw = calls[0]["function"]["arguments"] if len(calls) == 1 else None
    except (KeyError, IndexError, TypeError, AttributeError):
        raise _fail(what, f"unexpected answer {json.dumps(data)[:300]}") from None
    if name != "get_weather" or not isinstance(raw, str):
        raise _fail(what, f"expected one get_weather call, got {json.dumps(data['choices'][0])[:300]}")
    try:
        args = json.loads(raw)
    except ValueError:
        raise _fail(what, f"arguments are not JSON: {raw[:200]!r}") from None
    if not isinstance(args, dict) or set(args) != {"unit"} or args["unit"] not in ("celsius", "fahrenheit"):
        raise _fail(what, f"arguments do not match the schema: {json.dumps(args)[:200]}")
    return {"name": "get_weather", "arguments": args}


def smoke(
    base: str, model: str, log: Callable[[str], None] = lambda s: None, timeout: float = 120.0, tools: bool = True
) -> dict:
    """Run the checks; a RecipekitError (exit 5) at the first one that fails. `timeout` bounds
    each request (headers and body together)."""
    checks: list[tuple[str, Callable[[str, str, float], dict]]] = [("chat", _chat), ("stream", _stream)]
    if tools:
        checks.append(("tool_call", _tool))
    out: dict = {}
    for key, check in checks:
        t0 = time.monotonic()
        res = check(base, model, timeout)
        res["s"] = round(time.monotonic() - t0, 2)
        out[key] = res
        if key == "chat":
            log(f"  chat completion: {res['completion_tokens']} tokens, text {res['content'][:40]!r}")
        elif key == "stream":
            log(
                f"  streamed completion: {res['stream_tokens']} tokens counted on the stream, usage {res['completion_tokens']} tokens"
            )
        else:
            log(f"  tool call: get_weather({json.dumps(res['arguments'])})")
    out["observations"] = {"asked": len(checks), "got": len(out)}
    log(f"  smoke: {len(out) - 1} of {len(checks)} checks passed")
    return out
