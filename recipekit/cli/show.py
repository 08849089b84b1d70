"""`recipe show`: a recipe, or with --effective its effective config with every value's source."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from recipekit.cli.common import deployment
from recipekit.cli.options import EnvFileOpt, FormatOpt, LayoutOpt, RecipeArg, SetOpt
from recipekit.output import Format, Output, print_table
from recipekit.textsafe import markup as m
from recipekit.textsafe import shown

EffectiveOpt = Annotated[bool, typer.Option("--effective", help="Print the effective config with each value's source.")]
HostPathsOpt = Annotated[
    bool, typer.Option("--host-paths", help="Resolve toolkit paths on this host instead of <placeholders>.")
]


def register(app: typer.Typer) -> None:
    @app.command("show")
    def show(
        recipe: RecipeArg,
        layout: LayoutOpt = None,
        effective: EffectiveOpt = False,
        env_file: EnvFileOpt = None,
        set_: SetOpt = None,
        host_paths: HostPathsOpt = False,
        fmt: FormatOpt = Format.human,
    ) -> None:
        """Show a recipe (id, path, URL or 'auto')."""

        out = Output(fmt)
        dep = deployment(recipe, layout, None, env_file, set_, host_paths=host_paths)
        loaded, eff = dep.loaded, dep.eff
        if effective:
            data = eff.to_dict()

            def human() -> None:

                print(shown(f"{loaded.id}  layout={eff.layout or '-'}  {loaded.content_hash}"))
                rows = []
                for row in data["values"]:
                    v = row["value"]
                    if v is None:
                        value_text = "(flag)" if row["kind"] == "arg" else "(unset)"
                    else:
                        value_text = json.dumps(v) if isinstance(v, (dict, list)) else str(v)
                    rows.append({**row, "value": value_text})
                print_table(rows, ["kind", "key", "value", "source"], max_width=48)

            out.result(data, human)
            return
        r = loaded.recipe
        data = {
            "origin": loaded.origin,
            "content_hash": loaded.content_hash,
            **r.model_dump(mode="json", by_alias=True),
        }

        def human_recipe() -> None:

            c = out.console()
            for note in loaded.notes:
                out.err_console().print(f"note: {m(note)}")
            c.print(f"[bold]{m(r.title)}[/bold]  ({m(r.id)}, {m(r.status)}, backend {m(r.backend)})")
            c.print(
                f"model     {m(r.model.hf_id)}  {m(r.model.params_total or '')} ctx {m(r.model.context_served or '-')}"
                + (f"  served as '{m(r.model.served_name)}' (the API's model name)" if r.model.served_name else "")
            )
            if r.multinode:
                c.print(f"layouts   {m(', '.join(sorted(r.multinode)))} (multi-node; --layout NAME)")
            hw = r.hardware
            c.print(f"hardware  {m(hw.count)}x {m(hw.accelerator)}" if hw.count else f"hardware  {m(hw.accelerator)}")
            c.print(f"engine    {m(r.engine.name)} {m(r.engine.version or '')} ({m(r.engine.runner)})")
            for p in r.engine.pins:
                ref = p.commit or p.commit_prefix or p.version
                c.print(f"  pin     {m(p.name)} {m(ref)}  {m(p.role)}")
            if r.layouts:
                c.print(
                    "layouts   "
                    + ", ".join(f"{m(n)}{' (default)' if n == r.default_layout else ''}" for n in r.layouts)
                )
            if r.fixes:
                c.print(
                    f"fixes     profile {m(r.fixes.profile)}: {m(len(r.fixes.items) or r.fixes.count or 0)} "
                    f"fixes ({m(r.fixes.applied_at)})"
                )
            c.print(f"gates     {m(', '.join(g.id for g in r.gates))}")
            c.print(f"rules     {m(', '.join(x.id for x in r.constraints))}")
            c.print(f"results   {m(len(r.results))} published figures; {m(len(r.known_issues))} known issues")
            for d in r.do_not:
                c.print(f"  do not: {m(d.text)}")
            c.print(f"hash      {m(loaded.content_hash)}")

        out.result(data, human_recipe)
