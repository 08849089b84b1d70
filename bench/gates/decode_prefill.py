"""Decode vs prefill, teacher-forced: the log-probabilities a token got while being decoded
must match those the same tokens get when the whole sequence is read as a prompt.

K prompts decode `tokens` greedy tokens concurrently (logprobs of the chosen token, as ids);
then each prompt + its output is sent back with prompt_logprobs=1. Reported like the seeds:
mean |Δlogprob|, tokens off the prefill argmax, largest gap.
"""

from __future__ import annotations

import asyncio
from typing import Any

from recipekit.bench.client import with_nonce
from recipekit.bench.filler import filler
from recipekit.bench.gates.base import GateContext, GateResult
from recipekit.bench.gates.oracle import argmax_of, logprob_of, server_prompt_logprobs


def score(
    decoded: list[list[tuple[int, float]]], prefill: list[list[tuple[float | None, int | None]]], t: dict
) -> tuple[bool, dict]:
    """decoded[k] = [(token id, decode logprob)], prefill[k] = [(prefill logprob, prefill argmax)]."""
    diffs, off, total, missing = [], 0, 0, 0
    worst = None
    for k, (dec, pre) in enumerate(zip(decoded, prefill)):
        for j, ((tok, lp_d), (lp_p, am)) in enumerate(zip(dec, pre)):
            total += 1
            if lp_p is None:
                missing += 1
                continue
            d = abs(lp_d - lp_p)
            diffs.append(d)
            if worst is None or d > worst[0]:
                worst = (d, k, j)
            if am is not None and am != tok:
                off += 1
    mean = sum(diffs) / len(diffs) if diffs else float("inf")
    gap = worst[0] if worst else float("inf")
    m: dict[str, Any] = {
        "tokens": total,
        "missing": missing,
        "mean_abs_diff": mean,
        "off_argmax": off,
        "off_argmax_fraction": off / total if total else 1.0,
        "largest_gap": gap,
        "largest_gap_at": {"prompt": worst[1], "position": worst[2]} if worst else None,
    }
    ok = (
        missing == 0
        and total > 0
        and mean <= float(t["max_mean_abs_dlogprob"])
        and m["off_argmax_fraction"] <= float(t["max_off_argmax_frac"])
        and gap <= float(t["max_gap_nats"])
    )
    return ok, m


async def _decode(c, ids: list[int], n: int) -> list[tuple[int, float]]:
    status, data = await c.post_json(
        "/v1/completions",
        {
            "model": c.model,
            "prompt": ids,
            "max_tokens": n,
            "min_tokens": n,
            "ignore_eos": True,
            "temperature": 0.0,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
        },
    )
    if status != 200:
        raise RuntimeError(f"decode request failed: HTTP {status} {str(data)[:160]}")
    lp = data["choices"][0]["logprobs"]
    return [(int(tok.split(":", 1)[1]), float(logp)) for tok, logp in zip(lp["tokens"], lp["token_logprobs"])]


async def run(ctx: GateContext, t: dict) -> GateResult:
    c = ctx.client
    await c.resolve_model()
    k, n = int(t["prompts"]), int(t["tokens"])
    prompts = [with_nonce(filler(40 + 25 * i, seed=f"decode-prefill-{i}")) for i in range(k)]
    ids = [await c.tokenize(p) for p in prompts]
    ctx.say(f"decode-prefill: {k} concurrent prompts x {n} tokens")
    decoded = await asyncio.gather(*(_decode(c, p, n) for p in ids))
    entries = await asyncio.gather(
        *(server_prompt_logprobs(c, p + [tok for tok, _ in d], top=1) for p, d in zip(ids, decoded))
    )
    prefill = []
    for p, d, e in zip(ids, decoded, entries):
        tail = e[len(p) :]
        prefill.append([(logprob_of(x, tok), argmax_of(x)) for x, (tok, _) in zip(tail, d)])
    ok, m = score(decoded, prefill, t)
    return GateResult(
        "decode-prefill",
        ok,
        f"{k} concurrent prompts: mean |Δlogprob| {m['mean_abs_diff']:.4f}, {m['off_argmax']} of "
        f"{m['tokens']} tokens off the prefill argmax, largest gap {m['largest_gap']:.3f} nats",
        m,
        t,
    )
