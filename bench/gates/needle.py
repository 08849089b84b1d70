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


def make_code(rng: random.Random) -> str:
    return f"{rng.choice('BCDFGHJKLMNPQRSTVWXZ')}{rng.choice('AEIOU')}{rng.choice('BCDFGHJKLMNPQRSTVWXZ')}-{rng.randint(1000, 9999)}"


def score(cases: list[dict]) -> dict:
    """cases: [{code, answer, ...}] -> hits and foreign codes (pure; unit-tested)."""
    codes = {c["code"] for c in cases}
    hits = sum(1 for c in cases if c["code"] in (c.get("answer") or ""))
    foreign = [(c["code"], o) for c in cases for o in codes - {c["code"]} if o in (c.get("answer") or "")]
    return {"hits": hits, "total": len(cases), "hit_frac": hits / len(cases) if cases else 0.0, "foreign": foreign}


async def _prompt(c, n_tokens: int, depth: float, code: str, seed: str) -> str:
    question = " What is the secret code? Answer with the code only.\nThe secret code is"
    needle = f"Remember this: the secret code is {code}."
    words = int(n_tokens * 0.7)
    for _ in range(6):  # shrink until the prompt fits the token budget
        text = insert_at_depth(filler(words, seed=seed), needle, depth) + question
        try:
            n = len(await c.tokenize(text))
        except ANSWER_ERRORS:
            return text
        if n <= n_tokens:
            return text
        words = int(words * n_tokens / n * 0.97)
    return text


async def run(ctx: GateContext, t: dict) -> GateResult:
    c = ctx.client
    await c.resolve_model()
    lengths = t["prompt_tokens"] if isinstance(t["prompt_tokens"], list) else [t["prompt_tokens"]]
    rng = random.Random(str(t.get("seed", "needle")))
    cases: list[dict[str, Any]] = [
        {"tokens": int(n), "depth": float(d), "code": make_code(rng)} for n in lengths for d in t["depths"]
    ]
    ctx.say(f"needle: {len(cases)} needles, concurrent")
    prompts = [await _prompt(c, x["tokens"], x["depth"], x["code"], f"needle-{i}") for i, x in enumerate(cases)]
    answers = await asyncio.gather(
        *(
            c.post_json(
                "/v1/completions",
                {"model": c.model, "prompt": p, "max_tokens": int(t["max_tokens"]), "temperature": 0.0},
            )
            for p in prompts
        )
    )
    for x, (status, data) in zip(cases, answers):
        x["answer"] = data["choices"][0]["text"] if status == 200 else None
        x["error"] = None if status == 200 else f"HTTP {status}: {str(data)[:120]}"
        x["prompt_tokens"] = data.get("usage", {}).get("prompt_tokens") if status == 200 else None
    s = score(cases)
    if t.get("min_pass") is not None and t.get("total"):
        enough = s["hit_frac"] >= int(t["min_pass"]) / int(t["total"])
    elif t.get("min_pass") is not None:
        enough = s["hits"] >= int(t["min_pass"])
    else:
        enough = s["hit_frac"] >= float(t["min_hit_frac"])
    ok = enough and not s["foreign"] and not any(x["error"] for x in cases)
    where = ", ".join(
        f"{x['prompt_tokens'] or x['tokens']} tok @ {x['depth']:.0%}: "
        f"{'hit' if x['code'] in (x['answer'] or '') else 'miss'}"
        for x in cases
    )
    return GateResult(
        "needle",
        ok,
        f"{s['hits']}/{s['total']} needles ({where}); {len(s['foreign'])} foreign codes",
        s,
        t,
        details=[{k: x[k] for k in ("tokens", "depth", "code", "answer", "error")} for x in cases],
    )
