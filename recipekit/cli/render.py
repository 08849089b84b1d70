"""`recipe render`: one artifact of a recipe (launch, env, docker, docker-env, dockerfile, serve)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from recipekit import atomic
from recipekit.backends.registry import render_artifact
from recipekit.cli.common import deployment
from recipekit.cli.options import EnvFileOpt, FormatOpt, LayoutOpt, RecipeArg, SetOpt
from recipekit.errors import RecipekitError
from recipekit.multinode.render import render as render_nodes
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


def _check_out_file(path: Path) -> None:
    """--out names a file to (re)place: refuse a folder or a missing parent folder before rendering."""

    if path.is_dir() and not path.is_symlink():
        raise RecipekitError(
            code="out-is-a-folder",
            location=str(path),
            message="--out is an existing folder; it takes the path of the file to write",
            hint=f"give a file name, e.g. --out {path / 'launch.sh'}",
        )
    if not path.parent.is_dir():
        raise RecipekitError(
            code="out-folder-missing",
            location=str(path),
            message=f"the folder {path.parent} does not exist",
            hint="create it first, or give a path in an existing folder",
        )


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

        if out_file:
            _check_out_file(Path(out_file))
        dep = deployment(recipe, layout, node, env_file, set_, host_paths=host_paths)
        loaded, shown_layout = dep.loaded, dep.multinode or dep.eff.layout
        if dep.is_multinode:
            assert dep.multinode is not None
            kw: dict[str, Any] = {"env_file": dep.env_file, "sets": dep.sets, "host_paths": host_paths}
            rendered = render_nodes(loaded, dep.multinode, node, artifact, **kw)
        else:
            rendered = render_artifact(dep.eff, artifact)
        if out_file:
            atomic.atomic_write_text(Path(out_file), rendered.text, sync_dir=None, mode=0o644)
        out = Output(fmt)
        data = {"recipe": loaded.id, "layout": shown_layout, "content_hash": loaded.content_hash, **rendered.to_dict()}
        out.result(data, lambda: sys.stdout.write(rendered.text))
