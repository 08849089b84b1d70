"""Select, run and summarise gates: thresholds from the recipe over the defaults, one result
per gate, a PASS/FAIL table, a JSON document; the CLI exits 5 when any gate failed."""

from __future__ import annotations

import asyncio
import importlib
import time
from typing import Any, Iterable

from recipekit.bench.gates.base import GATE_IDS, GateContext, GateResult, thresholds_for
from recipekit.errors import RecipekitError, did_you_mean


def select(recipe_gates: Iterable[Any] | None, only: list[str] | None) -> list[tuple[str, dict, bool]]:
    """[(gate id, thresholds, required)] in a stable order. With a recipe: its gates (the ones
    bench runs); without: every gate with default thresholds except lm-eval. `only` filters,
    validates, and makes the named gates required (asked for explicitly)."""
    if only:
        for g in only:
            if g not in GATE_IDS:
                raise RecipekitError(
                    code="unknown-gate",
                    message=f"unknown gate {g!r}",
                    hint=did_you_mean(g, GATE_IDS) or f"one of {', '.join(GATE_IDS)}",
                )
    from_recipe: dict[str, dict] = {}
    required: dict[str, bool] = {}
    skip: dict[str, str] = {}
    if recipe_gates is not None:
        for g in recipe_gates:
            gid = g.id if hasattr(g, "id") else g["id"]
            th = g.thresholds if hasattr(g, "thresholds") else g.get("thresholds", {})
            req = g.required if hasattr(g, "required") else g.get("required", True)
            if gid in GATE_IDS:
                from_recipe[gid] = dict(th)
                required[gid] = bool(req)
                applies = g.applies if hasattr(g, "applies") else g.get("applies", True)
                if not applies:  # recipe data: shown as SKIP with the recipe's reason, never run
                    reason = g.reason if hasattr(g, "reason") else g.get("reason", "")
                    skip[gid] = reason or "the recipe says it does not apply"
        ids = [g for g in GATE_IDS if g in from_recipe]
    else:
        ids = [g for g in GATE_IDS if g != "lm-eval"]
    if only:
        ids = [g for g in GATE_IDS if g in only]
    out = [(g, thresholds_for(g, from_recipe.get(g)), True if only else required.get(g, True)) for g in ids]
    # a gate named in `only` was asked for explicitly: it runs even where the recipe says it does not apply
    return [(g, {**th, "_not_applicable": skip[g]} if g in skip and not only else th, req) for g, th, req in out]


def _module(gate_id: str):
    return importlib.import_module(f"recipekit.bench.gates.{gate_id.replace('-', '_')}")


async def run_gates(ctx: GateContext, selected: list[tuple[str, dict, bool]]) -> list[GateResult]:
    results = []
    for gid, th, req in selected:
        t0 = time.monotonic()
        if th.get("_not_applicable"):
            res = GateResult(gid, None, f"does not apply to this recipe's model: {th['_not_applicable']}", {}, {})
            res.required = False
            ctx.say(f"{gid}: {res.status} — {res.summary}")
            results.append(res)
            continue
        try:
            res = await _module(gid).run(ctx, th)
        except RecipekitError as e:
            res = GateResult(gid, False, f"could not run: {e.one_line()}", {}, th)
        except (TimeoutError, asyncio.TimeoutError):
            res = GateResult(gid, False, "could not run: TimeoutError: a request outlived the gate's --timeout", {}, th)
        except Exception as e:  # a gate that cannot run is a failed gate, never a silent pass
            res = GateResult(gid, False, f"could not run: {type(e).__name__}: {str(e)[:200]}", {}, th)
        res.seconds = time.monotonic() - t0
        res.required = req
        ctx.say(f"{gid}: {res.status} — {res.summary}")
        results.append(res)
    return results


def document(results: list[GateResult], provenance: dict) -> dict:
    """The JSON result. `failed` lists required gates that failed (they set exit 5); a failing
    advisory gate (recipe `required: false`) is reported in `advisory_failed`."""
    failed = [r.id for r in results if r.status == "FAIL" and r.required]
    advisory = [r.id for r in results if r.status == "FAIL" and not r.required]
    return {
        "schema": "recipekit.gates/1",
        "provenance": provenance,
        "passed": not failed,
        "failed": failed,
        "advisory_failed": advisory,
        "gates": [r.to_dict() for r in results],
    }


def markdown(doc: dict) -> str:
    lines = ["| Gate | Result | Summary |", "|---|---|---|"]
    for g in doc["gates"]:
        status = g["status"] + ("" if g["required"] else " (advisory)")
        lines.append(f"| {g['id']} | {status} | {g['summary'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


__all__ = ["select", "run_gates", "document", "markdown"]
