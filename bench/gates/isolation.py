"""Isolation over a shared cached prefix, with aborted streams.

All requests share one long filler prefix (so the prefix cache serves it), then carry their
own code and topic and ask for the code back. Per round, `requests` streams run to the end
while another abort_frac × requests streams are cut after a few tokens. Counted: own code
returned, foreign codes or topics (another request's) in an answer, and fixed greedy probes
before and after, which must be identical; the server's prefix-cache hit counter must move
(`require_cache_hits`), or the shared-prefix path was not exercised. A capable model is needed for own codes; the
foreign count and probe identity are meaningful on any model.
"""

from __future__ import annotations

import asyncio
import math
import random
from typing import Any

from recipekit.bench.filler import filler
from recipekit.bench.gates.base import GateContext, GateResult
from recipekit.bench.gates.needle import completion_text, make_code
from recipekit.bench.protocol import prefix_cache_hits

TOPICS = (
    "volcano",
    "lighthouse",
    "glacier",
    "submarine",
    "cathedral",
    "saxophone",
    "cactus",
    "kangaroo",
    "telescope",
    "waterfall",
    "avalanche",
    "pyramid",
    "tornado",
    "penguin",
    "harpsichord",
    "meteorite",
    "flamingo",
    "labyrinth",
    "porcupine",
    "zeppelin",
    "tambourine",
    "iceberg",
    "octopus",
    "windmill",
    "chandelier",
    "rhinoceros",
    "trombone",
    "hurricane",
    "lagoon",
    "monastery",
    "hedgehog",
    "catapult",
    "mangrove",
    "typewriter",
    "walrus",
    "carousel",
    "quicksand",
    "scarecrow",
    "sundial",
    "tarantula",
)
PROBES = ("The capital of France is", "1, 2, 3, 4, 5,", "Water boils at a temperature of")


def score(cases: list[dict]) -> dict:
    """cases: [{code, topic, answer, aborted}] -> own hits (complete streams only) and foreign hits
    (any other request's code or topic in a complete answer). Pure; unit-tested."""
    codes = {c["code"] for c in cases}
    topics = {c["topic"] for c in cases}
    done = [c for c in cases if not c["aborted"]]
    own = sum(1 for c in done if c["code"] in (c["answer"] or ""))
    foreign = []
    for c in done:
        text = (c["answer"] or "").lower()
        for o in codes - {c["code"]}:
            if o.lower() in text:
                foreign.append({"request": c["code"], "found": o, "kind": "code"})
        for tp in topics - {c["topic"]}:
            if tp in text:
                foreign.append({"request": c["code"], "found": tp, "kind": "topic"})
    return {
        "own": own,
        "complete": len(done),
        "aborted": len(cases) - len(done),
        "own_frac": own / len(done) if done else 0.0,
        "foreign": foreign,
    }


def request_text(prefix: str, code: str, topic: str) -> str:
    return (
        f"{prefix}\n\nYour personal code is {code}. Your topic is {topic}. Repeat your personal code, "
        f"then write one sentence about your topic.\nYour personal code is"
    )


async def _probes(c) -> list[str | None]:
    out = []
    for p in PROBES:
        status, data = await c.post_json(
            "/v1/completions", {"model": c.model, "prompt": p, "max_tokens": 16, "temperature": 0.0}
        )
        out.append(completion_text(data) if status == 200 else None)
    return out  # None: no text came back (never equal to a real answer: see `probes_ok`)


async def run(ctx: GateContext, t: dict) -> GateResult:
    c = ctx.client
    await c.resolve_model()
    n, rounds = int(t["requests"]), int(t["rounds"])
    n_abort = math.ceil(n * float(t["abort_frac"]))
    if n + n_abort > len(TOPICS):
        raise ValueError(f"isolation supports at most {len(TOPICS)} requests per round")
    rng = random.Random(str(t.get("seed", "isolation")))
    prefix = filler(int(t["prefix_words"]), seed="isolation-prefix")
    before = await _probes(c)
    hits0 = await prefix_cache_hits(c)
    await c.post_json("/v1/completions", {"model": c.model, "prompt": prefix, "max_tokens": 1})  # fill the cache
    cases: list[dict[str, Any]] = []
    for r in range(rounds):
        ctx.say(f"isolation: round {r + 1}/{rounds}, {n} streams + {n_abort} aborted")
        topics = rng.sample(TOPICS, n + n_abort)
        round_cases: list[dict[str, Any]] = [
            {"round": r, "code": make_code(rng), "topic": topics[i], "aborted": i >= n} for i in range(n + n_abort)
        ]
        recs = await asyncio.gather(
            *(
                c.stream(
                    {
                        "prompt": request_text(prefix, x["code"], x["topic"]),
                        "max_tokens": int(t["max_tokens"]),
                        "temperature": 0.0,
                    },
                    kind="completions",
                    tag="isolation",
                    abort_after_tokens=int(t.get("abort_after_tokens", 3)) if x["aborted"] else None,
                )
                for x in round_cases
            )
        )
        for x, rec in zip(round_cases, recs, strict=True):
            x["answer"] = rec.text
            x["error"] = rec.error
            x["aborted"] = x["aborted"] and rec.aborted or x["aborted"]
        cases += round_cases
    after = await _probes(c)
    hits1 = await prefix_cache_hits(c)
    s = score(cases)
    errors = [x["error"] for x in cases if x["error"] and not x["aborted"]]
    answered = sum(1 for p in before + after if p is not None)
    s.update(
        probes_asked=2 * len(PROBES),
        probes_answered=answered,
        probes_identical=answered == 2 * len(PROBES) and before == after,
        errors=len(errors),
        prefix_cache_hits_delta=(hits1 - hits0) if hits0 is not None and hits1 is not None else None,
    )
    hits = s["prefix_cache_hits_delta"]
    cache_ok = not t.get("require_cache_hits", True) or hits is None or hits > 0
    own_ok = (
        s["own"] >= int(t["min_own"]) if t.get("min_own") is not None else s["own_frac"] >= float(t["min_own_frac"])
    )
    ok = (
        own_ok
        and s["complete"] == n * rounds
        and len(s["foreign"]) <= int(t["max_foreign"])
        and s["probes_identical"]
        and not errors
        and cache_ok
    )
    cache_note = (
        ""
        if hits is None
        else f", prefix-cache hits {int(hits)}"
        + ("" if hits > 0 else " (the shared prefix was never served from cache)")
    )
    return GateResult(
        "isolation",
        ok,
        f"{n} requests x {rounds} over a shared {t['prefix_words']}-word cached prefix, "
        f"{n_abort}/round aborted: asked {n * rounds} complete answers, got {s['complete']}, own code "
        f"{s['own']}/{s['complete']}, {len(s['foreign'])} foreign codes or topics, probes "
        f"{answered}/{2 * len(PROBES)} answered, {'identical' if s['probes_identical'] else 'DIFFERENT'} before and after"
        f"{cache_note}" + (f"; {len(errors)} requests failed: {errors[0][:120]}" if errors else ""),
        s,
        t,
        details=[{"probes_before": before, "probes_after": after}]
        + [{k: x[k] for k in ("round", "code", "topic", "aborted", "answer")} for x in cases[:6]],
    )
