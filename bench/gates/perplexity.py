"""Perplexity of the served model against an oracle on the same tokens.

The text (bench/prompts/ppl.txt, pinned) is tokenized by the server, cut to `tokens`, and
scored by the server (prompt_logprobs) and by the oracle: the fp32 HF model on the same
checkpoint (local recipes), or a published oracle value (`oracle_ppl` threshold).
Pass: every token scored (missing <= max_missing) and |ppl / oracle_ppl − 1| <= max_rel_diff.

DeepSeek-V4.1 recipes (the recipe's model or the checkpoint's config says deepseek_v41) compare
with the fp32 DSV4.1 oracle instead (recipekit.bench.oracle): a reference file (`--reference FILE`,
made by `recipe oracle run`), else the oracle run first on the local checkpoint; with neither the
gate cannot run and says which command makes the reference. The server scores the reference's own
token ids. Metrics add the paired NLL (server vs oracle) with its standard error; the optional
`max_nll_increase_pct` threshold also bounds that paired increase.
"""

from __future__ import annotations

import hashlib
import math
from importlib import resources
from pathlib import Path
from typing import Any

from recipekit import bounded
from recipekit.bench.gates.base import GateContext, GateResult
from recipekit.bench.gates.oracle import (
    entry_count_problem,
    find_oracle_python,
    oracle_logprobs,
    scored_logprobs,
    server_prompt_logprobs,
)
from recipekit.bench.gates.paired_nll import describe, paired_nll
from recipekit.bench.oracle.run import load_reference, require_torch, run_oracle, tokenize_text
from recipekit.checkpoint.dsv41 import CONFIG_MAX_BYTES
from recipekit.errors import ExitCode, RecipekitError

PPL_TEXT_SHA256 = "9fed0f056310f9256fcad76e121f0e7815afcb8abd47cbfa05ed810ed11d056e"


def ppl_text() -> str:
    data = resources.files("recipekit.bench").joinpath("prompts").joinpath("ppl.txt").read_bytes()
    if hashlib.sha256(data).hexdigest() != PPL_TEXT_SHA256:
        raise RecipekitError(
            code="prompt-hash-mismatch",
            exit_code=ExitCode.DRIFT,
            location="bench/prompts/ppl.txt",
            message="the perplexity text differs from its pinned sha256",
            hint="restore the file",
        )
    return data.decode()


def perplexity(logprobs: list[float]) -> float:
    return math.exp(-sum(logprobs) / len(logprobs)) if logprobs else float("nan")


def fmt(v: float | None, spec: str = ".4f") -> str:
    """A figure for a summary; n/a where none could be computed (no scored tokens)."""
    return "n/a" if v is None or not math.isfinite(v) else format(v, spec)


def compare_logprobs(
    server: list[float | None], oracle: list[float], t: dict, problems: list[str] | None = None
) -> tuple[bool, dict]:
    """Pure scoring, unit-tested. `oracle` holds one log-prob per token asked for; `server` the
    server's, aligned by position (None: missing, or not a finite number <= 0). A server list of
    another length is a problem, never zipped short: positions it lacks count as missing."""
    problems = list(problems or [])
    bad_oracle = [i for i, o in enumerate(oracle) if not (isinstance(o, (int, float)) and math.isfinite(o) and o <= 0)]
    if bad_oracle:
        problems.append(f"the oracle gave no finite log-prob <= 0 for token {bad_oracle[0] + 1}")
    if len(server) != len(oracle):
        problems.append(f"{len(server)} server log-probs for {len(oracle)} scored tokens")
    asked = len(oracle)
    aligned = [server[i] if i < len(server) else None for i in range(asked)]
    pairs = [(s, o) for s, o in zip(aligned, oracle) if s is not None]
    got = len(pairs)
    missing = asked - got
    ppl_s = perplexity([s for s, _ in pairs])
    ppl_o = perplexity(list(oracle)) if t.get("oracle_ppl") is None else float(t["oracle_ppl"])
    rel = abs(ppl_s / ppl_o - 1.0) if got and ppl_o and math.isfinite(ppl_s) and math.isfinite(ppl_o) else float("inf")
    diffs = [abs(s - o) for s, o in pairs]
    m: dict[str, Any] = {
        "asked": asked,
        "scored": got,
        "tokens": asked,
        "missing": missing,
        "max_missing": int(t.get("max_missing", 0)),
        "ppl_server": ppl_s,
        "ppl_oracle": ppl_o,
        "rel_diff": rel,
        "mean_abs_logprob_diff": sum(diffs) / len(diffs) if diffs else None,
        "max_abs_logprob_diff": max(diffs) if diffs else None,
        "problems": problems,
    }
    ok = (
        not problems
        and asked > 0
        and got > 0
        and missing <= int(t.get("max_missing", 0))
        and rel <= float(t["max_rel_diff"])
    )
    return ok, m


def counts(m: dict) -> str:
    """The summary's observation counts: asked, got, missing against its threshold, and what went wrong."""
    text = f"asked {m['asked']} scored tokens, got {m['scored']} ({m['missing']} missing, {m['max_missing']} allowed)"
    return text + ("; " + "; ".join(m["problems"][:3]) if m["problems"] else "")


def is_dsv41(ctx: GateContext) -> bool:
    """The recipe's model or the local checkpoint is DeepSeek-V4.1 (the HF oracle cannot load it)."""

    if ctx.model_id and "deepseek-v4.1" in ctx.model_id.lower():
        return True
    cfg = Path(ctx.model_dir or "") / "config.json"
    if ctx.model_dir and cfg.is_file():
        try:
            doc = bounded.read_json(cfg, "config.json", CONFIG_MAX_BYTES, code="checkpoint-config-invalid")
        except (OSError, RecipekitError):
            return False
        return isinstance(doc, dict) and doc.get("model_type") == "deepseek_v41"
    return False


MAKE_REFERENCE = "recipe oracle run --checkpoint CHECKPOINT_DIR --tokens {tokens} --out oracle-ref.json"


def dsv41_reference(ctx: GateContext, t: dict) -> tuple[dict, str]:
    """The oracle reference for a DSV4.1 recipe: the file given, else a run on the local checkpoint."""

    if ctx.reference:
        return load_reference(ctx.reference), f"reference {ctx.reference}"
    if ctx.model_dir and (Path(ctx.model_dir) / "config.json").is_file():
        require_torch()
        ctx.say(f"perplexity: fp32 DSV4.1 oracle on {ctx.model_dir}")
        ids = tokenize_text(ctx.model_dir, ppl_text(), int(t["tokens"]))
        return run_oracle(ctx.model_dir, [ids], source="bench/prompts/ppl.txt", progress=ctx.say), "oracle run"
    raise RecipekitError(
        code="oracle-reference-missing",
        exit_code=ExitCode.NOT_FOUND,
        message="no DSV4.1 oracle reference and no local checkpoint to run the oracle on",
        hint="make it with `" + MAKE_REFERENCE.format(tokens=t["tokens"]) + "` and pass --reference oracle-ref.json",
    )


def reference_label(doc: dict) -> str:
    """What produced a reference file, as the gate's summary names it."""
    if doc.get("oracle") == "server-capture":
        srv = doc.get("server") or {}
        return f"server capture of {srv.get('model', '?')} at {srv.get('base_url', '?')}"
    dtype = doc.get("compute_dtype") or "float32"
    return f"{'fp32' if dtype == 'float32' else dtype} DSV4.1 oracle"


def compare_reference(
    server: list[float | None], oracle: list[float], t: dict, ref_tokens: int, problems: list[str] | None = None
) -> tuple[bool, dict]:
    """Pure scoring against an oracle reference: the perplexity rule plus the paired NLL.
    `ref_tokens` is the reference's real token count (its ids), never the count it declares."""

    ok, m = compare_logprobs(server, oracle, dict(t, oracle_ppl=None), problems)
    m["published_oracle_ppl"] = t.get("oracle_ppl")
    m["reference_tokens"] = ref_tokens
    try:
        m["paired"] = paired_nll(oracle, server)
    except ValueError as e:
        m["paired"] = {"error": str(e)}
        ok = False
    if ref_tokens < int(t["tokens"]):
        ok = False
        m["short_reference"] = f"the reference holds {ref_tokens} tokens, the gate asks for {t['tokens']}"
        m["problems"].append(m["short_reference"])
    limit = t.get("max_nll_increase_pct")
    if limit is not None and "rel_ppl_change_pct" in m["paired"]:
        ok = ok and m["paired"]["rel_ppl_change_pct"] <= float(limit)
    return ok, m


async def run_dsv41(ctx: GateContext, t: dict) -> GateResult:
    doc, source = dsv41_reference(ctx, t)
    server: list[float | None] = []
    oracle: list[float] = []
    problems: list[str] = []
    for r in doc["results"]:
        ids = r["ids"]
        entries = await server_prompt_logprobs(ctx.client, ids)
        why = entry_count_problem(entries, ids)
        if why:
            problems.append(why)
        server += scored_logprobs(entries, ids)
        oracle += list(r["logprobs"])
    ref_tokens = sum(len(r["ids"]) for r in doc["results"])
    ok, m = compare_reference(server, oracle, t, ref_tokens, problems)
    m["oracle"] = doc.get("oracle")
    m["oracle_source"] = source
    m["oracle_numerics"] = doc.get("numerics")
    m["oracle_checkpoint"] = doc.get("checkpoint")
    p = m["paired"]
    paired = describe(p) if "sigma" in p else p.get("error", "")
    return GateResult(
        "perplexity",
        ok,
        f"{fmt(m['ppl_server'])} vs {fmt(m['ppl_oracle'])} ({reference_label(doc)}, {source}), "
        f"{counts(m)}, rel diff {fmt(m['rel_diff'], '.2e')}; {paired}",
        m,
        t,
    )


async def run(ctx: GateContext, t: dict) -> GateResult:
    if ctx.reference or is_dsv41(ctx):
        return await run_dsv41(ctx, t)
    c = ctx.client
    want = int(t["tokens"])
    ids = (await c.tokenize(ppl_text()))[:want]
    problems = [] if len(ids) == want else [f"the server's /tokenize gave {len(ids)} tokens, the gate asks for {want}"]
    ctx.say(f"perplexity: {len(ids)} tokens via prompt_logprobs")
    entries = await server_prompt_logprobs(c, ids)
    why = entry_count_problem(entries, ids)
    problems += [why] if why else []
    server = scored_logprobs(entries, ids)
    if t.get("oracle_ppl") is not None:
        oracle, source = [0.0] * max(want - 1, 0), "published"
    else:
        model_dir = ctx.model_dir or (await c.models())["data"][0].get("root")
        py = find_oracle_python(ctx.oracle_python)
        ctx.say(f"perplexity: fp32 oracle on {model_dir}")
        oracle = oracle_logprobs(py, model_dir, [ids])["results"][0]["logprobs"]
        source = "hf-transformers-fp32-cpu"
        if len(oracle) != len(ids) - 1:
            problems.append(f"the oracle gave {len(oracle)} log-probs for {len(ids) - 1} scored tokens")
    ok, m = compare_logprobs(server, oracle, t, problems)
    m["oracle"] = source
    return GateResult(
        "perplexity",
        ok,
        f"{fmt(m['ppl_server'])} vs {fmt(m['ppl_oracle'])} ({source}), {counts(m)}, "
        f"rel diff {fmt(m['rel_diff'], '.2e')}",
        m,
        t,
    )
