"""Needles: a code hidden at chosen depths of a long filler prompt must come back verbatim.

Prompt lengths are in tokens (the filler is cut with the server's tokenizer when /tokenize
exists); the answer is read through /v1/completions after "The secret code is" so chat
templates and thinking do not get in the way. Concurrent needles carry distinct codes, so a
code from another request in an answer is also reported (cross-request bleed).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from recipekit.bench.client import ANSWER_ERRORS
from recipekit.bench.filler import filler, insert_at_depth
from recipekit.bench.gates.base import GateContext, GateResult


def completion_text(data: object) -> str | None:
    """choices[0].text of a completions answer when it is a non-empty string, else None."""
    choices = data.get("choices") if isinstance(data, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    text = first.get("text") if isinstance(first, dict) else None
    return text if isinstance(text, str) and text else None


def make_code(rng: random.Random) -> str:
    return f"{rng.choice('BCDFGHJKLMNPQRSTVWXZ')}{rng.choice('AEIOU')}{rng.choice('BCDFGHJKLMNPQRSTVWXZ')}-{rng.randint(1000, 9999)}"


def score(cases: list[dict]) -> dict:
    """cases: [{code, answer, ...}] -> hits and foreign codes (pure; unit-tested)."""
    codes = {c["code"] for c in cases}
    hits = sum(1 for c in cases if c["code"] in (c.get("answer") or ""))
    foreign = [(c["code"], o) for c in cases for o in codes - {c["code"]} if o in (c.get("answer") or "")]
    return {"hits": hits, "total": len(cases), "hit_frac": hits / len(cases) if cases else 0.0, "foreign": foreign}


async def _prompt(c, n_tokens: int, depth: float, code: str, seed: str) -> tuple[str, int | None]:
    """The needle prompt cut to fit `n_tokens` by the server's tokenizer, and its measured length
    (None: the server has no /tokenize, so the length was not checked; the summary says so)."""
    question = " What is the secret code? Answer with the code only.\nThe secret code is"
    needle = f"Remember this: the secret code is {code}."
    words = int(n_tokens * 0.7)
    n: int | None = None
    for _ in range(6):  # shrink until the prompt fits the token budget
        text = insert_at_depth(filler(words, seed=seed), needle, depth) + question
        try:
            n = len(await c.tokenize(text))
        except ANSWER_ERRORS:  # no /tokenize (not vLLM): the prompt goes unmeasured, and is reported so
            return text, None
        if n <= n_tokens:
            return text, n
        words = int(words * n_tokens / n * 0.97)
    return text, n


async def run(ctx: GateContext, t: dict) -> GateResult:
    c = ctx.client
    await c.resolve_model()
    lengths = t["prompt_tokens"] if isinstance(t["prompt_tokens"], list) else [t["prompt_tokens"]]
    rng = random.Random(str(t.get("seed", "needle")))
    cases: list[dict[str, Any]] = [
        {"tokens": int(n), "depth": float(d), "code": make_code(rng)} for n in lengths for d in t["depths"]
    ]
    ctx.say(f"needle: {len(cases)} needles, concurrent")
    prompts = []
    for i, x in enumerate(cases):
        text, x["measured_tokens"] = await _prompt(c, x["tokens"], x["depth"], x["code"], f"needle-{i}")
        prompts.append(text)
    answers = await asyncio.gather(
        *(
            c.post_json(
                "/v1/completions",
                {"model": c.model, "prompt": p, "max_tokens": int(t["max_tokens"]), "temperature": 0.0},
            )
            for p in prompts
        )
    )
    for x, (status, data) in zip(cases, answers, strict=True):
        x["answer"] = completion_text(data) if status == 200 else None
        x["error"] = (
            f"HTTP {status}: {str(data)[:120]}"
            if status != 200
            else (None if x["answer"] else f"no text in the answer: {str(data)[:120]}")
        )
    s = score(cases)
    if t.get("min_pass") is not None and t.get("total"):
        enough = s["hit_frac"] >= int(t["min_pass"]) / int(t["total"])
    elif t.get("min_pass") is not None:
        enough = s["hits"] >= int(t["min_pass"])
    else:
        enough = s["hit_frac"] >= float(t["min_hit_frac"])
    errors = sum(1 for x in cases if x["error"])
    ok = enough and not s["foreign"] and not errors and bool(cases)
    where = ", ".join(
        f"{x['measured_tokens'] if x['measured_tokens'] is not None else '? (no /tokenize)'} of {x['tokens']} tok "
        f"@ {x['depth']:.0%}: {'hit' if x['code'] in (x['answer'] or '') else 'miss'}"
        for x in cases
    )
    return GateResult(
        "needle",
        ok,
        f"asked {s['total']} needles, {s['total'] - errors} answered, {s['hits']} found ({where}); "
        f"{len(s['foreign'])} foreign codes",
        s,
        t,
        details=[{k: x[k] for k in ("tokens", "measured_tokens", "depth", "code", "answer", "error")} for x in cases],
    )
