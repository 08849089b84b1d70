"""`recipe bench <recipe> | --url URL`: the MiaAI decode protocol, reports, --compare;
`--against-vllm-bench` (our client next to vLLM's benchmark) and `--parse-rate` (client cost)."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from recipekit.bench import target as tg
from recipekit.bench.client import IDLE_TIMEOUT_S, REQUEST_TIMEOUT_S, RUN_TIMEOUT_S, Client
from recipekit.bench.compare import compare as do_compare
from recipekit.bench.gates.oracle import find_oracle_python
from recipekit.bench.overhead import measure
from recipekit.bench.protocol import load_prompt, run_protocol
from recipekit.bench.report import markdown, provenance, write_report
from recipekit.bench.vllm_compare import compare as vllm_compare
from recipekit.cli.common import deployment_and_url as _deployment_and_url
from recipekit.cli.options import ApiKeyOpt, EnvFileOpt, FormatOpt, LayoutOpt, ModelOpt, NodeOpt, OptRecipeArg, SetOpt
from recipekit.errors import ExitCode, RecipekitError
from recipekit.output import Format, Output, print_table
from recipekit.tools.doctor.collect import collect_host

UrlOpt = Annotated[
    Optional[str],
    typer.Option("--url", help="Base URL of an OpenAI-compatible server (wins over the recipe's HOST/PORT)."),
]


def _ints(s: Optional[str]) -> Optional[list[int]]:
    if not s:
        return None
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise RecipekitError(
            code="bad-list", message=f"expected comma-separated integers, got {s!r}", hint="e.g. 1,2,4,8"
        ) from None


def _default_out(recipe_id: Optional[str]):
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("bench-results") / (recipe_id or "server") / stamp


def register(app: typer.Typer) -> None:
    @app.command("bench")
    def bench_cmd(
        recipe: OptRecipeArg = None,
        url: UrlOpt = None,
        model: ModelOpt = None,
        api_key: ApiKeyOpt = None,
        out: Annotated[
            Optional[Path],
            typer.Option("--out", "-o", help="Output folder (default bench-results/<recipe>/<UTC time>)."),
        ] = None,
        quick: Annotated[
            bool, typer.Option("--quick", help="A short run: 1 and 2 streams, 32 tokens, few repeats.")
        ] = False,
        levels: Annotated[Optional[str], typer.Option("--streams", help="Stream counts, e.g. 1,2,4,8.")] = None,
        prompt_types: Annotated[
            Optional[str], typer.Option("--prompts", help="Prompt types: structured,code,prose.")
        ] = None,
        max_tokens: Annotated[
            Optional[int], typer.Option("--max-tokens", help="Forced output length per request.")
        ] = None,
        prefill_tokens: Annotated[
            Optional[int], typer.Option("--prefill-tokens", help="Cold prefill prompt length in tokens.")
        ] = None,
        prefill_runs: Annotated[
            Optional[int], typer.Option("--prefill-runs", help="Cold prefill runs (median); 0 skips.")
        ] = None,
        compare: Annotated[
            bool, typer.Option("--compare", help="Compare with the recipe's published results.")
        ] = False,
        tolerance: Annotated[
            float, typer.Option("--tolerance", help="Regression tolerance for --compare (fraction).")
        ] = 0.10,
        force: Annotated[
            bool, typer.Option("--force", help="Write into an --out folder that already holds a report.")
        ] = False,
        against_vllm_bench: Annotated[
            bool,
            typer.Option(
                "--against-vllm-bench",
                help="Run vLLM's `bench serve` and our client on the same workload, side by side.",
            ),
        ] = False,
        engine_python: Annotated[
            Optional[str], typer.Option("--engine-python", help="Python of the engine venv (for --against-vllm-bench).")
        ] = None,
        tokenizer: Annotated[
            Optional[Path],
            typer.Option("--tokenizer", help="Tokenizer folder for vllm bench (default: the server's model root)."),
        ] = None,
        concurrency: Annotated[
            int, typer.Option("--concurrency", help="--against-vllm-bench: requests in flight.")
        ] = 4,
        num_prompts: Annotated[
            int, typer.Option("--num-prompts", help="--against-vllm-bench: requests per round.")
        ] = 64,
        rounds: Annotated[
            int, typer.Option("--rounds", help="--against-vllm-bench: A/B rounds (medians are compared).")
        ] = 3,
        parse_rate: Annotated[
            bool,
            typer.Option(
                "--parse-rate", help="Measure the client's own cost: streamed tokens parsed per second on one core."
            ),
        ] = False,
        request_timeout: Annotated[
            float,
            typer.Option(
                "--request-timeout",
                help="Seconds one request may take, start to last byte; then it fails and gives no figure.",
            ),
        ] = REQUEST_TIMEOUT_S,
        idle_timeout: Annotated[
            float,
            typer.Option(
                "--idle-timeout",
                help="Seconds a request may wait for the next byte of its answer.",
            ),
        ] = IDLE_TIMEOUT_S,
        run_timeout: Annotated[
            float,
            typer.Option("--run-timeout", help="Seconds the whole run may take; then it fails and writes no report."),
        ] = RUN_TIMEOUT_S,
        layout: LayoutOpt = None,
        node: NodeOpt = None,
        set_: SetOpt = None,
        env_file: EnvFileOpt = None,
        format: FormatOpt = Format.human,
    ) -> None:
        """Run the decode protocol against a server; write JSON, Markdown and PNG plots."""
        limits = _limits(request_timeout, idle_timeout, run_timeout)
        o = Output(format)
        if parse_rate:
            return _parse_rate(o)
        t = tg.resolve(*_deployment_and_url(recipe, url, layout, node, set_, env_file))
        if against_vllm_bench:
            return _against_vllm(o, t, model, engine_python, tokenizer, concurrency, num_prompts, rounds)
        _bench(
            o,
            t,
            model,
            api_key,
            out,
            quick,
            _ints(levels),
            prompt_types,
            max_tokens,
            prefill_tokens,
            prefill_runs,
            compare,
            tolerance,
            force,
            limits,
        )


def _limits(request_s: float, idle_s: float, run_s: float) -> dict[str, float]:
    for name, v in (("--request-timeout", request_s), ("--idle-timeout", idle_s), ("--run-timeout", run_s)):
        if not (math.isfinite(v) and v > 0):
            raise RecipekitError(
                code="bad-timeout", message=f"{name} must be a positive number of seconds, got {v!r}", hint="e.g. 60"
            )
    return {"request_s": request_s, "idle_s": idle_s, "run_s": run_s}


def _bench(
    o,
    t,
    model,
    api_key,
    out,
    quick,
    levels,
    prompt_types,
    max_tokens,
    prefill_tokens,
    prefill_runs,
    compare,
    tolerance,
    force,
    limits,
) -> None:

    cfg = tg.protocol_from_recipe(t.bench, quick)
    if levels:
        cfg.levels = levels
    if prompt_types:
        cfg.prompt_types = [p.strip() for p in prompt_types.split(",") if p.strip()]
        for p in cfg.prompt_types:
            load_prompt(p)  # unknown or tampered prompt -> one-line error before any request
    if max_tokens:
        cfg.max_tokens = max_tokens
    if prefill_tokens:
        cfg.prefill_tokens = prefill_tokens
    if prefill_runs is not None:
        cfg.prefill_runs = prefill_runs
    points = tg.published_points(t.results) if compare else []
    if compare and t.loaded is None:
        raise RecipekitError(
            code="compare-needs-recipe",
            message="--compare needs a recipe (its published results)",
            hint="name the recipe: recipe bench <recipe> --compare",
        )
    out_dir = Path(out) if out else _default_out(t.recipe_info["id"] if t.recipe_info else None)
    if (out_dir / "bench.json").exists() and not force:
        raise RecipekitError(
            code="out-dir-not-empty",
            location=str(out_dir),
            message="a bench report is already there; reports are never overwritten",
            hint="pick another --out or pass --force",
        )

    async def go():
        async with Client(
            t.url,
            model=model,
            api_key=api_key,
            max_connections=max(cfg.levels) + 4,
            timeout=limits["request_s"],
            idle_timeout=limits["idle_s"],
        ) as c:
            models = await c.models_or_fail()
            res = await run_protocol(c, cfg, o.progress())
            res["model"] = c.model
            res["server_url"] = t.url
            res["limits"] = limits
            res["provenance"] = provenance(models, collect_host(with_docker=False), t.recipe_info)
            return res

    async def bounded():
        try:
            return await asyncio.wait_for(go(), limits["run_s"])
        except asyncio.TimeoutError:
            raise RecipekitError(
                code="bench-timeout",
                exit_code=ExitCode.FAILURE,
                message=f"the run took longer than --run-timeout {limits['run_s']:g} s; no report written",
                hint="raise --run-timeout for a slow server, or run fewer --streams/--prompts",
            ) from None

    result = asyncio.run(bounded())
    if compare:
        result["compare"] = do_compare(result, points, tolerance)
    paths = write_report(result, out_dir)

    def human():
        c = o.console()
        c.print(markdown(result), markup=False)
        c.print("wrote " + ", ".join(str(p) for p in paths.values()), markup=False)

    o.result({"out": {k: str(v) for k, v in paths.items()}, "result": result}, human=human)
    if compare and result["compare"]["regressions"]:
        raise RecipekitError(
            code="bench-regression",
            exit_code=ExitCode.GATE_FAILED,
            message=f"{result['compare']['regressions']} point(s) regressed beyond {tolerance:.0%} of the published results",
            hint=f"see {paths['markdown']}",
        )


def _parse_rate(o) -> None:
    res = measure()

    def human():
        c = o.console()
        c.print(f"client overhead, pinned to core {res['pinned_core']} (goal ≥ {res['goal_tokens_per_s']:,} tokens/s):")
        r, pp, b = res["recorded"], res["live_per_packet"], res["live_burst"]
        c.print(
            f"  recorded SSE bytes, parser only         : {r['tokens_per_s']:>10,.0f} tokens/s ({r['tokens']:,} tokens)"
        )
        c.print(
            f"  live client, 8 streams, 1 token/packet  : {pp['tokens_per_cpu_s']:>10,.0f} tokens per client CPU-second "
            f"({pp['token_events']:,} tokens at {pp['tokens_per_s']:,.0f} tok/s)"
        )
        c.print(
            f"  live client, 1 stream, as fast as served: {b['tokens_per_s']:>10,.0f} tokens/s "
            f"({b['token_events']:,} tokens; {b['tokens_per_cpu_s']:,.0f} per client CPU-second)"
        )

    o.result(res, human=human)


def _against_vllm(o, t, model, engine_python, tokenizer, concurrency, num_prompts, rounds) -> None:

    py = engine_python or find_oracle_python(None)
    if not tokenizer:

        async def root():
            async with Client(t.url) as c:
                return (await c.models())["data"][0].get("root")

        tokenizer = t.model_dir if t.model_dir and Path(t.model_dir).is_dir() else asyncio.run(root())
    res = vllm_compare(
        t.url,
        py,
        tokenizer,
        num_prompts=num_prompts,
        concurrency=concurrency,
        rounds=rounds,
        model=model,
        progress=o.progress(),
    )

    def human():
        c = o.console()
        w = res["workload"]
        c.print(
            f"same server, same run: {w['num_prompts']} requests x {w['rounds']} rounds, {w['input_len']} in / "
            f"{w['output_len']} out tokens, concurrency {w['concurrency']} (medians of the rounds)"
        )
        print_table(
            [
                {
                    "metric": k,
                    "recipekit": f"{v['recipekit']:.2f}",
                    "vllm bench": f"{v['vllm_bench']:.2f}",
                    "diff": f"{v['diff']:+.1%}",
                }
                for k, v in res["side_by_side"].items()
            ],
            ["metric", "recipekit", "vllm bench", "diff"],
            right=("recipekit", "vllm bench", "diff"),
        )

    o.result(res, human=human)
