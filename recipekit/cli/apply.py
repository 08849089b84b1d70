"""`recipe plan | apply | status | stop | logs | restart` (thin wrappers over recipekit.apply)."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Annotated, Any, Optional

import typer

from recipekit.apply.lifecycle import logs, restart, status, stop
from recipekit.apply.pipeline import apply, plan, print_plan
from recipekit.backends.cpu import pydoc_model as pm
from recipekit.cli.common import default_env_file, deployment
from recipekit.cli.multinode import print_layout_status
from recipekit.cli.options import EnvFileOpt, FormatOpt, LayoutOpt, NodeOpt, RecipeArg, SetOpt
from recipekit.errors import RecipekitError
from recipekit.multinode.apply import apply_node, stop_layout
from recipekit.output import Format, Output, print_table

DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print every command and file the steps would run or write; change nothing.")
]
OnlyOpt = Annotated[Optional[list[str]], typer.Option("--only", help="Run only this step (repeatable).")]
FromOpt = Annotated[Optional[str], typer.Option("--from", help="Start at this step.")]
TrustOpt = Annotated[
    bool,
    typer.Option("--trust", help="Apply a recipe from outside the catalog (JSON file or URL) after reading its plan."),
]
LinesOpt = Annotated[int, typer.Option("--lines", "-n", help="How many log lines.")]
FollowOpt = Annotated[bool, typer.Option("--follow", "-F", help="Keep printing new lines (Ctrl-C ends).")]
AutoArg = Annotated[str, typer.Argument(help="Recipe id, path, URL, or 'auto'.")]
ReadyTimeoutOpt = Annotated[
    Optional[float], typer.Option("--ready-timeout", help="Seconds the head waits for every node (multi-node layouts).")
]


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _env_file(env_file):
    return default_env_file(env_file)


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan_cmd(
        recipe: RecipeArg,
        layout: LayoutOpt = None,
        env_file: EnvFileOpt = None,
        set_: SetOpt = None,
        only: OnlyOpt = None,
        from_: FromOpt = None,
        fmt: FormatOpt = Format.human,
    ) -> None:
        """The ordered steps apply would run, each with the commands it runs and the files it writes."""
        dep = deployment(recipe, layout, None, env_file, set_)
        if dep.is_multinode:
            raise RecipekitError(
                code="plan-of-a-node",
                location="--layout",
                message=f"{layout} is a multi-node layout: each node's plan is its apply's",
                hint=f"recipe apply {recipe} --layout {layout} --node N --dry-run",
            )
        p = plan(
            recipe, layout=layout, env_file=_env_file(env_file), sets=set_ or (), only=only, from_=from_, deployment=dep
        )
        from recipekit.cli.fit import fit_section, print_section  # lazy: the planner only when a plan is asked

        p["fit"] = fit_section(dep.eff)  # the object `recipe fit --format json` prints

        def human() -> None:
            print_plan(p)
            print_section(p["fit"])

        Output(fmt).result(p, human)

    @app.command("apply")
    def apply_cmd(
        recipe: AutoArg = "auto",
        layout: LayoutOpt = None,
        env_file: EnvFileOpt = None,
        set_: SetOpt = None,
        dry_run: DryRunOpt = False,
        only: OnlyOpt = None,
        from_: FromOpt = None,
        trust: TrustOpt = False,
        node: NodeOpt = None,
        ready_timeout: ReadyTimeoutOpt = None,
        fmt: FormatOpt = Format.human,
    ) -> None:
        """Apply a recipe: doctor, fetch, prepare checkpoint, install engine, patch, launch, wait ready, smoke."""
        out = Output(fmt)
        # the options apply and apply-node share, passed the same way to both
        shared: dict[str, Any] = {
            "env_file": _env_file(env_file),
            "sets": set_ or (),
            "dry_run": dry_run,
            "only": only,
            "from_": from_,
            "trust": trust,
            "log": _err if not dry_run or out.json else print,
        }
        if node is not None and not layout:
            raise RecipekitError(
                code="node-needs-multinode-layout",
                location="--node",
                message="--node needs --layout with a multi-node layout",
            )
        dep = deployment(recipe, layout, node, env_file, set_)
        if dep.multinode is not None:
            if node is None:  # which host this is cannot be guessed: a worker must not start as the head
                raise RecipekitError(
                    code="multinode-needs-node",
                    location="--layout",
                    message=f"{layout} is a multi-node layout: say which node this host is",
                    hint=f"--node 0 on the head, --node 1..{dep.nodes - 1} on the workers",
                )
            rep = apply_node(recipe, dep.multinode, node, ready_timeout_s=ready_timeout, **shared)
        else:
            rep = apply(recipe, layout=layout, deployment=dep, **shared)

        def human() -> None:
            if dry_run:
                return
            srv = rep.get("server") or {}
            url = srv.get("base_url")
            done = [s["id"] for s in rep["steps"] if s["status"] == "done"]
            kept = [s["id"] for s in rep["steps"] if s["status"] == "verified"]
            print(
                f"{rep['recipe']}: {len(done)} step(s) done, {len(kept)} verified and reused "
                f"({rep.get('total_s', 0)} s)"
            )
            if any(s["id"] == "launch" and s["status"] == "verified" for s in rep["steps"]):
                print("the server was already running and healthy: reused, nothing restarted")
            if url:
                print(f"API: {url}  (OpenAI-compatible: {url}/v1)")
                for line in _model_lines(rep["recipe"], url, shared.get("sets") or []):
                    print(line)
                print("stop with ./start.sh stop   (or: recipe stop " + rep["recipe"] + ")")

        out.result(rep, human)

    @app.command("status")
    def status_cmd(
        recipe: AutoArg = "auto",
        layout: LayoutOpt = None,
        env_file: EnvFileOpt = None,
        set_: SetOpt = None,
        fmt: FormatOpt = Format.human,
    ) -> None:
        """Is the recipe's server running and healthy? (exit 0 healthy, 1 running but not answering, 6 not running)"""
        dep = deployment(recipe, layout, None, env_file, set_)
        if dep.is_multinode:
            raise typer.Exit(print_layout_status(dep, fmt))
        st = status(dep)

        def human() -> None:
            if st["running"]:
                srv = st.get("server") or {}
                print(
                    f"{st['recipe']}: running ({srv.get('label')}, up {st.get('uptime_s', '?')} s), "
                    f"{'healthy' if st['healthy'] else 'NOT answering'} at {st['url']}"
                )
            elif st.get("damaged_record"):
                d = st["damaged_record"]
                print(
                    f"{st['recipe']}: not running as far as recipekit can tell: the server record {d['path']} is "
                    f"damaged ({d['problem']}); {d['hint']}"
                )
            else:
                print(
                    f"{st['recipe']}: not running"
                    + (
                        " (a stale record of a server that is gone; `recipe stop` clears it)"
                        if st["stale_record"]
                        else ""
                    )
                )
            print_table(
                [{"step": sid, "stamp": f"stamped {t}" if t else "-"} for sid, t in st["stamps"].items()],
                ["step", "stamp"],
            )

        Output(fmt).result(st, human)
        raise typer.Exit(st["exit_code"])

    @app.command("stop")
    def stop_cmd(
        recipe: AutoArg = "auto",
        timeout: Annotated[float, typer.Option(help="Seconds per signal before the next one.")] = 20.0,
        layout: LayoutOpt = None,
        node: NodeOpt = None,
        env_file: EnvFileOpt = None,
        set_: SetOpt = None,
        fmt: FormatOpt = Format.human,
    ) -> None:
        """Stop the server this recipe's apply started (only that one): SIGINT, SIGTERM, then SIGKILL."""
        dep = deployment(recipe, layout, node, env_file, set_)
        if dep.is_multinode:
            r = stop_layout(dep, node, log=_err, timeout_s=timeout)
            Output(fmt).result(
                r, lambda: [print(f"{r['recipe']} {r['layout']} node {k}: {v}") for k, v in r["nodes"].items()]
            )
            return
        res = stop(dep, log=_err, timeout_s=timeout)
        Output(fmt).result(res, lambda: print(f"{res['recipe']}: {res['result']}"))

    @app.command("logs")
    def logs_cmd(
        recipe: AutoArg = "auto",
        lines: LinesOpt = 50,
        follow: FollowOpt = False,
        layout: LayoutOpt = None,
        node: NodeOpt = None,
        env_file: EnvFileOpt = None,
        set_: SetOpt = None,
    ) -> None:
        """The server's log (last lines; --follow to keep reading).

        With a multi-node layout, the log of node --node (0 = head) on this host."""
        raise typer.Exit(logs(deployment(recipe, layout, node, env_file, set_), lines=lines, follow=follow))

    @app.command("restart")
    def restart_cmd(
        recipe: AutoArg = "auto",
        layout: LayoutOpt = None,
        env_file: EnvFileOpt = None,
        set_: SetOpt = None,
        trust: TrustOpt = False,
        fmt: FormatOpt = Format.human,
    ) -> None:
        """Stop the server, then apply again from the launch step."""
        rep = restart(deployment(recipe, layout, None, env_file, set_), log=_err, trust=trust)
        srv = rep.get("server") or {}
        Output(fmt).result(rep, lambda: print(f"API: {srv.get('base_url')}\nstop with ./start.sh stop"))


def _model_lines(recipe_id: str, url: str, sets: list[str]) -> list[str]:
    """The served model's name, a curl line that asks it something and, for the local default, one
    line of its model card (what it is and what it cannot do)."""

    from recipekit.catalog import (  # lazy: looked up when called (tests/hostile/test_no_traceback.py patches catalog.load_recipe)
        LOCAL_DEFAULT_ID,
        load_recipe,
    )

    try:
        recipe = load_recipe(recipe_id).recipe
    except Exception:  # the report is printed anyway; these lines are a courtesy
        return []
    name = recipe.model.served_name or recipe.model.hf_id
    weights = "pydoc"
    for s in sets:
        key, _, value = s.partition("=")
        if key == "SERVED_MODEL_NAME":
            name = value
        elif key == "WEIGHTS":
            weights = value
    pydoc = recipe_id == LOCAL_DEFAULT_ID and weights == "pydoc"
    body = {
        "model": name,
        "messages": [{"role": "user", "content": pm.ASK_QUESTION}],
        "max_tokens": 100,
        **(pm.ASK_FIELDS if pydoc else {}),
    }

    lines = [
        f"model: {name}",
        f"try:   curl -s {url}/v1/chat/completions -H 'Content-Type: application/json' -d {shlex.quote(json.dumps(body))}",
    ]
    if pydoc:
        lines.append(f"about: {pm.card_line()}")
    return lines
