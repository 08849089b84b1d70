"""CLI glue for multi-node layouts: `status --layout L` and `doctor --layout L [--node N]`."""

from __future__ import annotations

from typing import Any

from recipekit.deployment import Deployment
from recipekit.errors import ExitCode
from recipekit.output import Output


def print_layout_status(dep: Deployment, fmt: Any) -> int:
    """`recipe status <recipe> --layout L` of a multi-node layout: one line per node; returns the exit code."""
    from recipekit.multinode.apply import layout_status  # lazy: pulls pydantic

    st = layout_status(dep)
    layout = st["layout"]

    def human() -> None:
        for row in st["nodes"]:
            if not row["recorded"]:
                state = "not started on this host"
            elif not row["running"]:
                state = f"NOT running ({row['label']} is gone)"
            else:
                state = f"running ({row['label']})"
                if row["url"]:
                    state += f", {'healthy' if row['healthy'] else 'NOT answering'} at {row['url']}"
            print(f"{st['recipe']} {layout} node {row['node']} ({row['role']}): {state}")
        if st["down"]:
            print(f"down: {', '.join(st['down'])}")

    Output(fmt).result(st, human)
    return int(st["exit_code"])


def node_doctor(dep: Deployment) -> tuple[Any, dict] | None:
    """(node effective config, node checks) for `recipe doctor <recipe> --layout L [--node N]`,
    or None for a single-node deployment. Prints what only the other nodes can check."""
    from recipekit.multinode.apply import node_checks  # lazy: pulls pydantic
    from recipekit.multinode.nodes import node_config  # lazy: pulls pydantic

    if not dep.is_multinode:
        return None
    assert dep.multinode is not None
    n = node_config(dep.loaded, dep.multinode, dep.node or 0, env_file=dep.env_file, sets=dep.sets, host_paths=True)
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
