"""CLI glue for multi-node layouts: `render --layout L [--node N]`, `apply --node`, `status --layout`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recipekit.errors import ExitCode, RecipekitError
from recipekit.output import Output


def render_multinode(
    recipe_ref: str,
    layout: str | None,
    node: int | None,
    artifact: str | None,
    env_file: str | Path | None,
    sets: list[str] | None,
    host_paths: bool,
) -> tuple | None:
    """(loaded, head effective config, Rendered) for a multi-node layout, or None for a single-node one."""
    from recipekit.apply.auto import load_recipe
    from recipekit.cli.common import default_env_file  # lazy: pulls pydantic, pydantic_core

    loaded = load_recipe(recipe_ref)
    if not layout or layout not in loaded.recipe.multinode:
        if node is not None:
            raise RecipekitError(
                code="node-needs-multinode-layout",
                location="--node",
                message=f"--node needs a multi-node layout of {loaded.id}",
                hint=(
                    f"multi-node layouts: {', '.join(loaded.recipe.multinode)}"
                    if loaded.recipe.multinode
                    else "this recipe declares none"
                ),
            )
        return None
    from recipekit.multinode.nodes import node_config  # lazy: pulls pydantic, pydantic_core
    from recipekit.multinode.render import render  # lazy: pulls pydantic, pydantic_core

    kw: dict[str, Any] = {"env_file": default_env_file(env_file), "sets": sets or (), "host_paths": host_paths}
    rendered = render(loaded, layout, node, artifact, **kw)
    head = node_config(loaded, layout, node or 0, **kw)
    head.eff.layout = layout
    return loaded, head.eff, rendered


def print_layout_status(recipe_ref: str, layout: str, fmt: Any) -> int:
    """`recipe status <recipe> --layout L`: one line per node; returns the exit code."""
    from recipekit.multinode.apply import layout_status  # lazy: pulls pydantic, pydantic_core

    st = layout_status(recipe_ref, layout)

    def human() -> None:
        for row in st["nodes"]:
            if not row["recorded"]:
                state = "not started on this host"
            elif not row["running"]:
                state = f"NOT running (pid {row['pid']} is gone)"
            else:
                state = f"running (pid {row['pid']})"
                if row["url"]:
                    state += f", {'healthy' if row['healthy'] else 'NOT answering'} at {row['url']}"
            print(f"{st['recipe']} {layout} node {row['node']} ({row['role']}): {state}")
        if st["down"]:
            print(f"down: {', '.join(st['down'])}")

    Output(fmt).result(st, human)
    return int(st["exit_code"])


def node_doctor(
    recipe_ref: str, layout: str, node: int | None, env_file: str | Path | None, sets: list[str] | None
) -> tuple[Any, dict] | None:
    """(node effective config, node checks) for `recipe doctor <recipe> --layout L [--node N]`,
    or None for a single-node layout. Prints what only the other nodes can check."""
    from recipekit.apply.auto import load_recipe
    from recipekit.cli.common import default_env_file  # lazy: pulls pydantic, pydantic_core
    from recipekit.multinode.apply import node_checks  # lazy: pulls pydantic, pydantic_core
    from recipekit.multinode.nodes import node_config  # lazy: pulls pydantic, pydantic_core

    loaded = load_recipe(recipe_ref)
    if layout not in loaded.recipe.multinode:
        return None
    n = node_config(loaded, layout, node or 0, env_file=default_env_file(env_file), sets=sets or (), host_paths=True)
    checks, elsewhere = node_checks(n)
    lines = [f"{n.label}:"] + [f"  {st:<4} {cid}: {detail}" for cid, st, detail in checks]
    lines += [f"  check on the other nodes: {x}" for x in elsewhere]
    failed = any(st == "FAIL" for _, st, _ in checks)
    return n.eff, {
        "node": n.role.rank,
        "node_checks": [{"id": c, "status": st, "detail": d} for c, st, d in checks],
        "other_nodes": elsewhere,
        "lines": lines,
        "node_exit_code": int(ExitCode.HOST_CHECK_FAILED) if failed else 0,
    }
