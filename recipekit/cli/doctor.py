"""`recipe doctor [<recipe>] [--p2p-probe] [--memtest] [--microbench]`: host facts and checks against a recipe, and the recipe's fit
(`recipe fit`'s object, from local files and cached headers); exit 3 when a check FAILs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from recipekit.cli.common import deployment
from recipekit.cli.multinode import node_doctor
from recipekit.cli.options import EnvFileOpt, FormatOpt, LayoutOpt, OptRecipeArg, SetOpt
from recipekit.hybrid.engram.fitness import doctor_checks as engram_doctor_checks
from recipekit.output import Format, Output
from recipekit.tools.doctor import run_doctor


def effective_for(
    ref: str, layout: Optional[str] = None, env_file: Optional[str | Path] = None, sets: Optional[list[str]] = None
):
    """The effective config of a recipe's deployment (fetch and engram; a multi-node layout: its head's)."""
    return deployment(ref, layout, None, env_file, sets).eff


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor(
        recipe: OptRecipeArg = None,
        fmt: FormatOpt = Format.human,
        layout: LayoutOpt = None,
        env_file: EnvFileOpt = None,
        set_: SetOpt = None,
        p2p_probe: Annotated[
            bool,
            typer.Option("--p2p-probe", help="Run the functional P2P probe (copies + all-reduce, P2P on and off)."),
        ] = False,
        python: Annotated[
            Optional[str],
            typer.Option(
                "--python", help="Python with torch+CUDA for the probe (default: found on PATH or in the engine venvs)."
            ),
        ] = None,
        p2p_timeout: Annotated[
            float, typer.Option("--p2p-timeout", help="Seconds each probe phase may take before it counts as a hang.")
        ] = 120.0,
        p2p_refresh: Annotated[
            bool, typer.Option("--p2p-refresh", help="Ignore a cached probe result for this driver/GPU set/boot.")
        ] = False,
        node: Annotated[
            Optional[int], typer.Option("--node", help="Node of a multi-node layout (default 0, the head).")
        ] = None,
        memtest: Annotated[
            bool,
            typer.Option(
                "--memtest",
                help="Write and read back each card's free memory (under --python's torch) and time a copy; "
                "FAIL when a card holds less than it reports.",
            ),
        ] = False,
        memtest_timeout: Annotated[
            float, typer.Option("--memtest-timeout", help="Seconds the memory test may take over all cards.")
        ] = 300.0,
        microbench: Annotated[
            bool,
            typer.Option(
                "--microbench",
                help="Time each card's FFMA, FMUL+FADD, HFMA2 and tensor-core MMA (under --python's torch) and pick "
                "the sm_80 kernels' FMA-contraction variant; with a recipe, check its KERNELS_FP_FUSION setting.",
            ),
        ] = False,
        microbench_seconds: Annotated[
            float, typer.Option("--microbench-seconds", help="Seconds per figure and card.")
        ] = 1.0,
    ) -> None:
        """Check this host against a recipe (or only report its facts): accelerators, PCIe,
        P2P, RAM, disk, overcommit, docker runtimes, ports. Exit 3 when a check FAILs."""
        if memtest:
            from recipekit.cli.memtest import run_memtest  # lazy: only --memtest starts a torch process

            raise typer.Exit(run_memtest(Output(fmt), python, memtest_timeout))
        dep = deployment(recipe, layout, node, env_file, set_) if recipe else None
        if microbench:
            from recipekit.bench.kernels.variant import SETTING  # lazy: only --microbench
            from recipekit.cli.microbench import run_microbench  # lazy: only --microbench starts a torch process

            recorded = dep.eff.setting(SETTING, None) if dep is not None else None
            raise typer.Exit(run_microbench(Output(fmt), python, microbench_seconds, recorded, dep is not None))
        if dep is not None and dep.is_multinode:
            nd = node_doctor(dep)
            if nd is not None:
                eff, extra = nd
                report = run_doctor(
                    eff,
                    p2p_probe=p2p_probe,
                    python=python,
                    p2p_timeout=p2p_timeout,
                    p2p_refresh=p2p_refresh,
                    more_checks=engram_doctor_checks(eff),
                )
                out = Output(fmt)
                data = {**report.to_dict(), **extra}
                if extra["node_exit_code"]:
                    data["exit_code"] = max(int(data.get("exit_code") or 0), extra["node_exit_code"])

                def human() -> None:
                    report.render(out.console())
                    for line in extra["lines"]:
                        print(line)

                out.result(data, human=human)
                raise typer.Exit(data["exit_code"])
        report = run_doctor(
            None if dep is None else dep.eff,
            p2p_probe=p2p_probe,
            python=python,
            p2p_timeout=p2p_timeout,
            p2p_refresh=p2p_refresh,
            more_checks=() if dep is None else engram_doctor_checks(dep.eff),
        )
        out = Output(fmt)
        data = report.to_dict()
        if dep is not None:
            from recipekit.cli.fit import fit_section  # lazy: the planner only for a recipe's doctor

            data["fit"] = fit_section(dep.eff)

        def with_fit() -> None:
            report.render(out.console())
            if "fit" in data:
                from recipekit.cli.fit import print_section  # lazy: loaded above when there is a fit

                print_section(data["fit"])

        out.result(data, human=with_fit)
        raise typer.Exit(report.exit_code)
