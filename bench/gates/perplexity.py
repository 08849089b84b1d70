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
from typing import Any

from recipekit.bench.gates.base import GateContext, GateResult
from recipekit.bench.gates.oracle import find_oracle_python, logprob_of, oracle_logprobs, server_prompt_logprobs

PPL_TEXT_SHA256 = "9fed0f056310f9256fcad76e121f0e7815afcb8abd47cbfa05ed810ed11d056e"


def ppl_text() -> str:
    data = resources.files("recipekit.bench").joinpath("prompts").joinpath("ppl.txt").read_bytes()
    if hashlib.sha256(data).hexdigest() != PPL_TEXT_SHA256:
        from recipekit.errors import ExitCode, RecipekitError

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


def compare_logprobs(server: list[float | None], oracle: list[float], t: dict) -> tuple[bool, dict]:
    """Pure scoring, unit-tested: perplexities, missing tokens, per-token differences."""
    missing = sum(1 for s in server if s is None)
    pairs = [(s, o) for s, o in zip(server, oracle) if s is not None]
    ppl_s = perplexity([s for s, _ in pairs])
    ppl_o = perplexity(list(oracle)) if t.get("oracle_ppl") is None else float(t["oracle_ppl"])
    rel = abs(ppl_s / ppl_o - 1.0) if ppl_o and not math.isnan(ppl_s) else float("inf")
    diffs = [abs(s - o) for s, o in pairs]
    m: dict[str, Any] = {
        "tokens": len(server),
        "missing": missing,
        "ppl_server": ppl_s,
        "ppl_oracle": ppl_o,
        "rel_diff": rel,
        "mean_abs_logprob_diff": sum(diffs) / len(diffs) if diffs else None,
        "max_abs_logprob_diff": max(diffs) if diffs else None,
    }
    ok = missing <= int(t.get("max_missing", 0)) and rel <= float(t["max_rel_diff"])
    return ok, m


def is_dsv41(ctx: GateContext) -> bool:
    """The recipe's model or the local checkpoint is DeepSeek-V4.1 (the HF oracle cannot load it)."""
    from pathlib import Path

    if ctx.model_id and "deepseek-v4.1" in ctx.model_id.lower():
        return True
    cfg = Path(ctx.model_dir or "") / "config.json"
    if ctx.model_dir and cfg.is_file():
        from recipekit import bounded
        from recipekit.checkpoint.dsv41 import CONFIG_MAX_BYTES
        from recipekit.errors import RecipekitError

        try:
            doc = bounded.read_json(cfg, "config.json", CONFIG_MAX_BYTES, code="checkpoint-config-invalid")
        except (OSError, RecipekitError):
            return False
        return isinstance(doc, dict) and doc.get("model_type") == "deepseek_v41"
    return False


MAKE_REFERENCE = "recipe oracle run --checkpoint CHECKPOINT_DIR --tokens {tokens} --out oracle-ref.json"


def dsv41_reference(ctx: GateContext, t: dict) -> tuple[dict, str]:
    """The oracle reference for a DSV4.1 recipe: the file given, else a run on the local checkpoint."""
    from pathlib import Path

    from recipekit.errors import ExitCode, RecipekitError

    if ctx.reference:
        from recipekit.bench.oracle.run import load_reference

        return load_reference(ctx.reference), f"reference {ctx.reference}"
    if ctx.model_dir and (Path(ctx.model_dir) / "config.json").is_file():
        try:
            from recipekit.bench.oracle.run import run_oracle, tokenize_text
        except ImportError as e:
            raise RecipekitError(
                code="oracle-torch-missing",
                exit_code=ExitCode.NOT_FOUND,
                message=f"the DSV4.1 oracle needs torch ({e})",
                hint="pip install 'recipekit[oracle]' (CPU: pip install torch==2.13.0), "
                "or pass --reference FILE from " + MAKE_REFERENCE.format(tokens=t["tokens"]),
            ) from None
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


def compare_reference(server: list[float | None], oracle: list[float], t: dict, ref_tokens: int) -> tuple[bool, dict]:
    """Pure scoring against an oracle reference: the perplexity rule plus the paired NLL."""
    from recipekit.bench.gates.paired_nll import paired_nll

    ok, m = compare_logprobs(server, oracle, dict(t, oracle_ppl=None))
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
    limit = t.get("max_nll_increase_pct")
    if limit is not None and "rel_ppl_change_pct" in m["paired"]:
        ok = ok and m["paired"]["rel_ppl_change_pct"] <= float(limit)
    return ok, m


async def run_dsv41(ctx: GateContext, t: dict) -> GateResult:
    from recipekit.bench.gates.paired_nll import describe

    doc, source = dsv41_reference(ctx, t)
    server: list[float | None] = []
    oracle: list[float] = []
    for r in doc["results"]:
        ids = r["ids"]
        entries = await server_prompt_logprobs(ctx.client, ids)
        server += [logprob_of(e, tok) for e, tok in zip(entries[1:], ids[1:])]
        oracle += list(r["logprobs"])
    ok, m = compare_reference(server, oracle, t, int(doc["prompt_set"]["tokens"]))
    m["oracle"] = doc.get("oracle")
    m["oracle_source"] = source
    m["oracle_numerics"] = doc.get("numerics")
    m["oracle_checkpoint"] = doc.get("checkpoint")
    paired = describe(m["paired"]) if "sigma" in m["paired"] else m["paired"].get("error", "")
    return GateResult(
        "perplexity",
        ok,
        f"{m['ppl_server']:.4f} vs {m['ppl_oracle']:.4f} "
        f"({reference_label(doc)}, {source}), "
        f"{m['tokens']} tokens, {m['missing']} missing, rel diff {m['rel_diff']:.2e}; {paired}",
        m,
        t,
    )


async def run(ctx: GateContext, t: dict) -> GateResult:
    if ctx.reference or is_dsv41(ctx):
        return await run_dsv41(ctx, t)
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
    return GateResult(
        "perplexity",
        ok,
        f"{m['ppl_server']:.4f} vs {m['ppl_oracle']:.4f} ({source}), "
        f"{m['tokens']} tokens, {m['missing']} missing, rel diff {m['rel_diff']:.2e}",
        m,
        t,
    )
