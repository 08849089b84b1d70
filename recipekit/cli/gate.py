"""`recipe gate <recipe> | --url URL [--only G,G...]`: quality gates with thresholds from the
recipe; a PASS/FAIL table, a JSON result, exit 5 when any gate fails."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from recipekit import atomic
from recipekit.bench import target as tg
from recipekit.bench.client import Client
from recipekit.bench.gates import runner
from recipekit.bench.gates.base import GateContext, canonical_key, thresholds_for
from recipekit.bench.report import provenance
from recipekit.cli.common import deployment_and_url as _deployment_and_url
from recipekit.cli.options import ApiKeyOpt, EnvFileOpt, FormatOpt, LayoutOpt, ModelOpt, NodeOpt, OptRecipeArg, SetOpt
from recipekit.errors import ExitCode, RecipekitError
from recipekit.output import Format, Output
from recipekit.tools.doctor.collect import collect_host


def register(app: typer.Typer) -> None:
    @app.command("gate")
    def gate_cmd(
        recipe: OptRecipeArg = None,
        url: Annotated[Optional[str], typer.Option("--url", help="Base URL of an OpenAI-compatible server.")] = None,
        only: Annotated[
            Optional[str],
            typer.Option(
                "--only",
                help="Comma-separated gate ids: perplexity,decode-prefill,needle,isolation,structured,soak,smoke,lm-eval.",
            ),
        ] = None,
        threshold: Annotated[
            Optional[list[str]],
            typer.Option("--threshold", "-t", help="Override one threshold: GATE.KEY=VALUE (JSON value), repeatable."),
        ] = None,
        model: ModelOpt = None,
        api_key: ApiKeyOpt = None,
        model_dir: Annotated[
            Optional[Path],
            typer.Option(
                "--model-dir",
                help="Checkpoint folder for the fp32 oracle (default: recipe MODEL_DIR or the server's model root).",
            ),
        ] = None,
        oracle_python: Annotated[
            Optional[str],
            typer.Option("--oracle-python", help="A python with torch + transformers (default: the engine venv's)."),
        ] = None,
        reference: Annotated[
            Optional[Path],
            typer.Option(
                "--reference", help="DSV4.1 oracle reference file for the perplexity gate (`recipe oracle run`)."
            ),
        ] = None,
        out: Annotated[
            Optional[Path], typer.Option("--out", "-o", help="Also write gates.json and gates.md into this folder.")
        ] = None,
        timeout: Annotated[
            float,
            typer.Option("--timeout", help="Seconds one request may take before the gate gives up on it."),
        ] = 600.0,
        layout: LayoutOpt = None,
        node: NodeOpt = None,
        set_: SetOpt = None,
        env_file: EnvFileOpt = None,
        format: FormatOpt = Format.human,
    ) -> None:
        """Run the recipe's quality gates against its server (or any server with --url)."""

        o = Output(format)
        if not (timeout > 0 and timeout < float("inf")):
            raise RecipekitError(
                code="bad-option",
                message=f"--timeout {timeout} is not a positive number of seconds",
                hint="--timeout 600",
            )
        t = tg.resolve(*_deployment_and_url(recipe, url, layout, node, set_, env_file))
        ids = [g.strip() for g in only.split(",") if g.strip()] if only else None
        selected = runner.select(t.gates, ids)
        _apply_overrides(selected, threshold or [])
        if not selected:
            raise RecipekitError(
                code="no-gates",
                message="nothing to run: the recipe lists none of the selected gates",
                hint="pass --only with gate ids, or use --url for the default set",
            )
        # GateContext carries plain strings: they go into the gates' JSON document and child argv
        md = str(model_dir) if model_dir else (t.model_dir if t.model_dir and Path(t.model_dir).is_dir() else None)

        async def go():
            async with Client(t.url, model=model, api_key=api_key, timeout=timeout) as c:
                models = await c.models_or_fail()
                ctx = GateContext(
                    c,
                    model_dir=md,
                    oracle_python=oracle_python,
                    progress=o.progress(),
                    reference=str(reference) if reference else None,
                    model_id=_model_id(t),
                )
                res = await runner.run_gates(ctx, selected)
                return runner.document(
                    res, provenance(models, collect_host(with_docker=False), t.recipe_info, {"server_url": t.url})
                )

        doc = asyncio.run(go())
        if out:
            atomic.atomic_write_text(
                Path(out) / "gates.json", json.dumps(doc, indent=2, default=str) + "\n", sync_dir=None
            )
            atomic.atomic_write_text(Path(out) / "gates.md", runner.markdown(doc), sync_dir=None)

        def human():
            tab = Table(title=f"gates: {t.recipe_info['id'] if t.recipe_info else t.url}")
            for col in ("gate", "result", "summary"):
                tab.add_column(col, overflow="fold")
            for g in doc["gates"]:
                style = {"PASS": "green", "FAIL": "red", "SKIP": "yellow"}[g["status"]]
                adv = "" if g["required"] else " (advisory)"
                tab.add_row(g["id"], f"[{style}]{g['status']}[/]{adv}", g["summary"])
            o.console().print(tab)

        o.result(doc, human=human)
        if doc["failed"]:
            raise RecipekitError(
                code="gate-failed",
                exit_code=ExitCode.GATE_FAILED,
                message=f"{len(doc['failed'])} gate(s) failed: {', '.join(doc['failed'])}",
                hint="see the summary above" + (f" and {out}/gates.json" if out else ""),
            )


def _model_id(t: object) -> str | None:
    """The recipe's model hf_id, when the target came from a recipe."""
    recipe = getattr(getattr(t, "loaded", None), "recipe", None)
    return getattr(getattr(recipe, "model", None), "hf_id", None)


def _apply_overrides(selected: list[tuple[str, dict, bool]], items: list[str]) -> None:

    by_id = {gid: th for gid, th, _ in selected}
    for item in items:
        key, sep, raw = item.partition("=")
        gid, dot, name = key.partition(".")
        if not sep or not dot or gid not in by_id:
            raise RecipekitError(
                code="bad-threshold",
                message=f"cannot apply threshold {item!r}",
                hint="GATE.KEY=VALUE for a selected gate, e.g. soak.duration_s=10",
            )
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON (or nesting thousands deep): the text itself
            value = raw
        merged = dict(by_id[gid], **{canonical_key(gid, name): value})
        by_id[gid].clear()
        by_id[gid].update(thresholds_for(gid, merged))  # typed again: a wrong key, type or range is refused
