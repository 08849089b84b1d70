"""`recipe render`: one artifact of a recipe (launch, env, docker, docker-env, dockerfile, serve)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from recipekit import atomic
from recipekit.backends.registry import render_artifact
from recipekit.cli.common import effective as build
from recipekit.cli.options import EnvFileOpt, FormatOpt, LayoutOpt, RecipeArg, SetOpt
from recipekit.output import Format, Output

ArtifactOpt = Annotated[
    Optional[str],
    typer.Option(
        "--artifact",
        "-a",
        help="launch | env | docker | docker-env | dockerfile | serve; multi-node layouts: k8s | lb too "
        "(default: launch). env is for shells, docker-env for docker run --env-file.",
    ),
]
OutOpt = Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the artifact to this file (atomically).")]
HostPathsOpt = Annotated[
    bool, typer.Option("--host-paths", help="Resolve toolkit paths on this host instead of <placeholders>.")
]
NodeOpt = Annotated[
    Optional[int],
    typer.Option("--node", "-n", help="Node of a multi-node layout (0 = head); artifacts k8s and lb cover all nodes."),
]


def register(app: typer.Typer) -> None:
    @app.command("render")
    def render(
        recipe: RecipeArg,
        layout: LayoutOpt = None,
        artifact: ArtifactOpt = None,
        env_file: EnvFileOpt = None,
        set_: SetOpt = None,
        host_paths: HostPathsOpt = False,
        out_file: OutOpt = None,
        node: NodeOpt = None,
        fmt: FormatOpt = Format.human,
    ) -> None:
        """Render an artifact from the effective config (constraints are enforced first)."""

        from recipekit.cli.multinode import render_multinode  # function-level: multi-node only when rendering

        multi = render_multinode(recipe, layout, node, artifact, env_file, set_, host_paths)
        if multi is not None:
            loaded, eff, rendered = multi
        else:
            loaded, eff = build(recipe, layout, env_file, set_, host_paths)
            rendered = render_artifact(eff, artifact)
        if out_file:
            atomic.atomic_write_text(Path(out_file), rendered.text, sync_dir=None, mode=0o644)
        out = Output(fmt)
        data = {"recipe": loaded.id, "layout": eff.layout, "content_hash": loaded.content_hash, **rendered.to_dict()}
        out.result(data, lambda: sys.stdout.write(rendered.text))
