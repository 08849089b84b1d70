"""Renders of a multi-node layout: each node's launch, the LeaderWorkerSet manifest, the balancer.

`render(loaded, layout, node, artifact)`:
  launch (default)  node N's launch script: the single-node backend's launch of the node's
                    effective config under a header naming the node; Ray nodes get their
                    `ray start` line first (workers run only that). Without a node: every
                    node's script, head first, each under its header.
  env / serve       the backend's artifact for the node's config (node required for env).
  k8s               a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) + a Service for the leader,
                    pods built from the launch data (recipekit.multinode.k8s), validated against
                    the published schemas and the API server's value rules before it is returned.
  lb                the HAProxy configuration of a replicas layout (health checks on /health),
                    read back against the layout and checked with `haproxy -c`.
Rules (recipekit.multinode.rules), the nodes' typed values (recipekit.multinode.typed) and every
node's recipe constraints are enforced first.
"""

from __future__ import annotations

from typing import Any

from recipekit.backends.base import Rendered
from recipekit.backends.registry import render_artifact
from recipekit.constraints import enforce
from recipekit.errors import ErrorList, RecipekitError, did_you_mean
from recipekit.multinode import rules
from recipekit.multinode.balancer import checked_config
from recipekit.multinode.launch import node_launch
from recipekit.multinode.nodes import NodeConfig, all_nodes, multinode_spec, node_config
from recipekit.multinode.typed import check_nodes_values

ARTIFACTS = ("launch", "env", "serve", "k8s", "lb")


def checked_nodes(loaded: Any, layout: str, **kw: Any) -> list[NodeConfig]:
    """Every node's config after the layout's rules and each node's constraints hold."""

    recipe = loaded.recipe
    rules.enforce(recipe, layout)
    nodes = all_nodes(loaded, layout, **kw)
    rules.enforce(recipe, layout, nodes)
    bad = check_nodes_values(nodes)
    if bad:
        raise ErrorList(bad)
    for n in nodes:
        enforce(n.eff)
    return nodes


def render(loaded: Any, layout: str, node: int | None = None, artifact: str | None = None, **kw: Any) -> Rendered:
    artifact = artifact or "launch"
    if artifact not in ARTIFACTS:
        raise RecipekitError(
            code="artifact-not-available",
            message=f"multi-node layouts have no '{artifact}' artifact",
            hint=did_you_mean(artifact, ARTIFACTS) or f"artifacts: {', '.join(ARTIFACTS)}",
        )
    nodes = checked_nodes(loaded, layout, **kw)
    if artifact == "k8s":
        from recipekit.multinode.k8s import manifest_text  # lazy: pulls yaml

        lws_nodes = checked_nodes(loaded, layout, lws=True, **kw)
        return Rendered("k8s", manifest_text(lws_nodes), filename=f"{loaded.id}-{layout}-lws.yaml")
    if artifact == "lb":
        text, note = checked_config(nodes)
        return Rendered("lb", text, filename="haproxy.cfg", note=note)
    if node is not None:
        if not 0 <= node < len(nodes):
            node_config(loaded, layout, node, **kw)  # raises node-out-of-range
        n = nodes[node]
        if artifact == "launch":
            return node_launch(n)
        return render_artifact(n.eff, artifact, check=False)
    if artifact != "launch":
        raise RecipekitError(
            code="node-required",
            location="--node",
            message=f"the {artifact} artifact is per node",
            hint="add --node N (0 = head)",
        )
    texts = [node_launch(n).text for n in nodes]
    return Rendered("launch", "\n".join(texts), filename=f"launch-{layout}.sh")


def describe(loaded: Any, layout: str) -> dict:
    """The layout's facts for show/json output."""
    spec = multinode_spec(loaded.recipe, layout)
    return spec.model_dump(mode="json", by_alias=True)
