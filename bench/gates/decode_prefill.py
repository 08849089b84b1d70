"""Decode vs prefill, teacher-forced: the log-probabilities a token got while being decoded
must match those the same tokens get when the whole sequence is read as a prompt.

K prompts decode `tokens` greedy tokens concurrently (logprobs of the chosen token, as ids);
then each prompt + its output is sent back with prompt_logprobs=1. Reported like the seeds:
mean |Δlogprob|, tokens off the prefill argmax, largest gap.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from recipekit.bench.client import with_nonce
from recipekit.bench.filler import filler
from recipekit.bench.gates.base import GateContext, GateResult
from recipekit.bench.gates.oracle import argmax_of, entry_count_problem, scored_logprobs, server_prompt_logprobs
from recipekit.bench.gates.perplexity import fmt


def score(
    decoded: list[list[tuple[int, float]]],
    prefill: list[list[tuple[float | None, int | None]]],
    t: dict,
    asked: int | None = None,
    problems: list[str] | None = None,
) -> tuple[bool, dict]:
    """decoded[k] = [(token id, decode logprob)], prefill[k] = [(prefill logprob, prefill argmax)],
    aligned by position. `asked`: forced tokens asked for in all (default: as many as decoded); every
    one must have been decoded and scored, never fewer (a short list is counted, not zipped away)."""
    problems = list(problems or [])
    diffs, off, got, missing = [], 0, 0, 0
    worst = None
    for k, dec in enumerate(decoded):
        pre = prefill[k] if k < len(prefill) else []
        for j, (tok, lp_d) in enumerate(dec):
            got += 1
            lp_p, am = pre[j] if j < len(pre) else (None, None)
            if lp_p is None or not math.isfinite(lp_d) or lp_d > 0:
                missing += 1
                continue
            d = abs(lp_d - lp_p)
            diffs.append(d)
            if worst is None or d > worst[0]:
                worst = (d, k, j)
            if am is not None and am != tok:
                off += 1
    asked = got if asked is None else asked
    mean = sum(diffs) / len(diffs) if diffs else float("inf")
    gap = worst[0] if worst else float("inf")
    m: dict[str, Any] = {
        "asked": asked,
        "decoded": got,
        "tokens": got,
        "missing": missing,
        "mean_abs_diff": mean,
        "off_argmax": off,
        "off_argmax_fraction": off / got if got else 1.0,
        "largest_gap": gap,
        "largest_gap_at": {"prompt": worst[1], "position": worst[2]} if worst else None,
        "problems": problems,
    }
    ok = (
        not problems
        and got == asked
        and missing == 0
        and got > 0
        and mean <= float(t["max_mean_abs_dlogprob"])
        and m["off_argmax_fraction"] <= float(t["max_off_argmax_frac"])
        and gap <= float(t["max_gap_nats"])
    )
    return ok, m


async def _decode(c, ids: list[int], n: int) -> tuple[list[tuple[int, float]], str | None]:
    """The forced tokens decoded for one prompt (as many as the answer really holds) and what was
    wrong with the answer, if anything."""
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
    choices = data.get("choices") if isinstance(data, dict) else None
    lp = choices[0].get("logprobs") if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    toks = lp.get("tokens") if isinstance(lp, dict) else None
    lps = lp.get("token_logprobs") if isinstance(lp, dict) else None
    if not isinstance(toks, list) or not isinstance(lps, list):
        return [], f"no choices[0].logprobs tokens in the answer: {str(data)[:120]}"
    out: list[tuple[int, float]] = []
    for tok, logp in zip(toks, lps):  # the shorter list is reported below, not hidden
        tid = str(tok).split(":", 1)[1] if str(tok).startswith("token_id:") else None
        if tid is None or not tid.lstrip("-").isdigit() or isinstance(logp, bool) or not isinstance(logp, (int, float)):
            return out, f"token {len(out)} is not a token id with a numeric log-prob: {str(tok)[:40]} {str(logp)[:40]}"
        out.append((int(tid), float(logp)))
    if len(toks) != len(lps):
        return out, f"{len(toks)} tokens but {len(lps)} log-probs"
    if len(out) != n:
        return out, f"asked for {n} forced tokens, the server decoded {len(out)}"
    return out, None


async def run(ctx: GateContext, t: dict) -> GateResult:
    c = ctx.client
    await c.resolve_model()
    k, n = int(t["prompts"]), int(t["tokens"])
    prompts = [with_nonce(filler(40 + 25 * i, seed=f"decode-prefill-{i}")) for i in range(k)]
    ids = [await c.tokenize(p) for p in prompts]
    ctx.say(f"decode-prefill: {k} concurrent prompts x {n} tokens")
    answers = await asyncio.gather(*(_decode(c, p, n) for p in ids))
    decoded = [d for d, _ in answers]
    problems = [f"prompt {i}: {why}" for i, (_, why) in enumerate(answers) if why]
    entries = await asyncio.gather(
        *(server_prompt_logprobs(c, p + [tok for tok, _ in d], top=1) for p, d in zip(ids, decoded) if d)
    )
    prefill: list[list[tuple[float | None, int | None]]] = []
    it = iter(entries)
    for i, (p, d) in enumerate(zip(ids, decoded)):
        if not d:
            prefill.append([])
            continue
        e = next(it)
        why = entry_count_problem(e, p + [tok for tok, _ in d])
        if why:
            problems.append(f"prompt {i}: {why}")
        prefill.append(
            [
                (lp, argmax_of(e[len(p) + j]) if len(p) + j < len(e) else None)
                for j, lp in enumerate(scored_logprobs(e, p + [tok for tok, _ in d])[len(p) - 1 :])
            ]
        )
    ok, m = score(decoded, prefill, t, asked=k * n, problems=problems)
    return GateResult(
        "decode-prefill",
        ok,
        f"{k} concurrent prompts: asked {m['asked']} forced tokens, got {m['decoded']} "
        f"({m['missing']} without a prefill log-prob); mean |Δlogprob| {fmt(m['mean_abs_diff'])}, "
        f"{m['off_argmax']} of {m['decoded']} tokens off the prefill argmax, largest gap "
        f"{fmt(m['largest_gap'], '.3f')} nats" + ("; " + "; ".join(problems[:3]) if problems else ""),
        m,
        t,
    )
