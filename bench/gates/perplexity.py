"""Perplexity of the served model against an oracle on the same tokens.

The text (bench/prompts/ppl.txt, pinned) is tokenized by the server, cut to `tokens`, and
scored by the server (prompt_logprobs) and by the oracle: the fp32 HF model on the same
checkpoint (local recipes), or a published oracle value (`oracle_ppl` threshold).
Pass: every token scored (missing <= max_missing) and |ppl / oracle_ppl − 1| <= max_rel_diff.
"""
from __future__ import annotations

from typing import Any

import hashlib
import math
from importlib import resources

from recipekit.bench.gates.base import GateContext, GateResult
from recipekit.bench.gates.oracle import find_oracle_python, logprob_of, oracle_logprobs, server_prompt_logprobs

PPL_TEXT_SHA256 = "9fed0f056310f9256fcad76e121f0e7815afcb8abd47cbfa05ed810ed11d056e"


def ppl_text() -> str:
    data = resources.files("recipekit.bench").joinpath("prompts").joinpath("ppl.txt").read_bytes()
    if hashlib.sha256(data).hexdigest() != PPL_TEXT_SHA256:
        from recipekit.errors import ExitCode, RecipekitError
        raise RecipekitError(code="prompt-hash-mismatch", exit_code=ExitCode.DRIFT, location="bench/prompts/ppl.txt",
                             message="the perplexity text differs from its pinned sha256", hint="restore the file")
    return data.decode()


def perplexity(logprobs: list[float]) -> float:
    return math.exp(-sum(logprobs) / len(logprobs)) if logprobs else float("nan")


def compare_logprobs(server: list[float | None], oracle: list[float], t: dict) -> tuple[bool, dict]:
    """Pure scoring, unit-tested: perplexities, missing tokens, per-token differences."""
    missing = sum(1 for s in server if s is None)
    pairs = [(s, o) for s, o in zip(server, oracle) if s is not None]
    ppl_s = perplexity([s for s, _ in pairs])
    ppl_o = perplexity(list(oracle)) if t.get("oracle_ppl") is None else float(t["oracle_ppl"])
    rel = abs(ppl_s / ppl_o - 1.0) if ppl_o and not math.isnan(ppl_s) else float("inf")
    diffs = [abs(s - o) for s, o in pairs]
    m: dict[str, Any] = {"tokens": len(server), "missing": missing, "ppl_server": ppl_s, "ppl_oracle": ppl_o, "rel_diff": rel,
         "mean_abs_logprob_diff": sum(diffs) / len(diffs) if diffs else None,
         "max_abs_logprob_diff": max(diffs) if diffs else None}
    ok = missing <= int(t.get("max_missing", 0)) and rel <= float(t["max_rel_diff"])
    return ok, m


async def run(ctx: GateContext, t: dict) -> GateResult:
    c = ctx.client
    ids = (await c.tokenize(ppl_text()))[: int(t["tokens"])]
    ctx.say(f"perplexity: {len(ids)} tokens via prompt_logprobs")
    entries = await server_prompt_logprobs(c, ids)
    server = [logprob_of(e, tok) for e, tok in zip(entries[1:], ids[1:])]
    if t.get("oracle_ppl") is not None:
        oracle, source = [0.0] * len(server), "published"
    else:
        model_dir = ctx.model_dir or (await c.models())["data"][0].get("root")
        py = find_oracle_python(ctx.oracle_python)
        ctx.say(f"perplexity: fp32 oracle on {model_dir}")
        oracle = oracle_logprobs(py, model_dir, [ids])["results"][0]["logprobs"]
        source = "hf-transformers-fp32-cpu"
    ok, m = compare_logprobs(server, oracle, t)
    m["oracle"] = source
    return GateResult("perplexity", ok, f"{m['ppl_server']:.4f} vs {m['ppl_oracle']:.4f} ({source}), "
                      f"{m['tokens']} tokens, {m['missing']} missing, rel diff {m['rel_diff']:.2e}", m, t)
