"""One node's launch script: the backend's launch of the node's config under a header naming the
node; Ray nodes get their `ray start` line after the exports (Ray workers run only that)."""

from __future__ import annotations

import shlex

from recipekit import templates
from recipekit.backends.base import Rendered, comment_line, env_exports
from recipekit.backends.registry import render_artifact
from recipekit.multinode.forms import serves_api
from recipekit.multinode.nodes import NodeConfig


def ray_line(node: NodeConfig) -> str | None:
    spec = node.spec
    if spec.backend != "ray":
        return None
    port = templates.substitute(str(spec.ray_port or 6379), node.eff.setting)
    head = "$(LWS_LEADER_ADDRESS)" if node.lws else templates.substitute(spec.head_address, node.eff.setting)
    if node.role.head:
        return f'ray start --head --port={shlex.quote(str(port))} --node-ip-address="$VLLM_HOST_IP"'
    return f'ray start --address={shlex.quote(f"{head}:{port}")} --node-ip-address="$VLLM_HOST_IP" --block'


def node_launch(node: NodeConfig) -> Rendered:
    spec = node.spec
    header = [
        comment_line(
            f"{node.eff.recipe.id} layout {node.layout}: node {node.role.rank} of {spec.nodes} "
            f"({node.role.name}), backend {spec.backend}, TP {spec.tensor_parallel} x PP "
            f"{spec.pipeline_parallel} x DP {spec.data_parallel}"
        )
    ]
    ray = ray_line(node)
    if not serves_api(spec.backend, node.role) and spec.backend == "ray":
        text = (
            "\n".join(["#!/usr/bin/env bash", "set -euo pipefail", *header, *env_exports(node.eff), ray or ""]) + "\n"
        )
        return Rendered("launch", text, filename=f"launch-node{node.role.rank}.sh")
    r = render_artifact(node.eff, "launch", check=False)
    lines = r.text.splitlines()
    at = 2 if lines[:1] == ["#!/usr/bin/env bash"] else 0
    if ray:  # after the exports: `ray start` reads VLLM_HOST_IP and the socket interfaces
        last_export = max((i for i, ln in enumerate(lines) if ln.startswith("export ")), default=at - 1)
        lines.insert(last_export + 1, ray)
    lines[at:at] = header
    return Rendered(
        "launch",
        "\n".join(lines) + "\n",
        argv=r.argv,
        shell=r.shell,
        filename=f"launch-node{node.role.rank}.sh",
        note=r.note,
    )
