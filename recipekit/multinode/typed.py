"""The typed values of every node of a multi-node layout, checked before anything is rendered.

`check_nodes_values(nodes)` returns one error per value that breaks its grammar
(recipekit.multinode.values): the head address and rendezvous ports, each node's
VLLM_HOST_IP, API port and pipeline partition, each replica's address (distinct across
replicas), and the balancer's bind address, port and health path. Exit 2, nothing written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from recipekit import templates
from recipekit.errors import RecipekitError
from recipekit.multinode import values
from recipekit.multinode.balancer import replica_address
from recipekit.multinode.forms import serves_api
from recipekit.multinode.nodes import PARTITION_ENV, NodeConfig

HINTS = {
    "mn-bad-address": "give an IPv4/IPv6 address or a host name (letters, digits, '-', '.'), nothing else on the line",
    "mn-bad-port": "give a port 1..65535",
    "mn-bad-http-path": "give a path such as /health (no spaces, newlines or '#')",
    "mn-bad-partition": "give comma-separated positive layer counts without spaces, e.g. 20,20",
    "mn-replicas-share-address": "give each replica its own address or port (per_node settings NODE_ADDRESS / PORT)",
}


def _err(code: str, where: str, what: str, problem: str) -> RecipekitError:
    return RecipekitError(code=code, location=where, message=f"{what}: {problem}", hint=HINTS[code])


def _sub(node: NodeConfig, text: Any) -> str:
    return str(templates.substitute(str(text), node.eff.setting))


def _check(out: list[RecipekitError], code: str, where: str, what: str, problem: str | None) -> None:
    if problem:
        out.append(_err(code, where, what, problem))


def _node_values(n: NodeConfig, out: list[RecipekitError]) -> None:
    spec, eff = n.spec, n.eff
    where = f"{eff.recipe.id} layout {n.layout} node {n.role.rank}"
    addr: Callable[[Any], str | None] = lambda v: values.address_problem(v, lws=n.lws)  # noqa: E731
    if spec.backend in ("mp", "ray") and not n.lws:
        _check(out, "mn-bad-address", where, f"head address {spec.head_address}", addr(_sub(n, spec.head_address)))
    if spec.backend == "mp":
        _check(
            out, "mn-bad-port", where, f"master port {spec.master_port}", values.port_problem(_sub(n, spec.master_port))
        )
    if spec.backend == "ray":
        port = _sub(n, spec.ray_port or 6379)
        _check(out, "mn-bad-port", where, f"ray port {spec.ray_port}", values.port_problem(port))
    host_ip = eff.env_value("VLLM_HOST_IP")
    if host_ip is not None and host_ip != "":
        _check(out, "mn-bad-address", where, "env VLLM_HOST_IP", addr(host_ip))
    partition = eff.env_value(PARTITION_ENV)
    if partition is not None and partition != "":
        _check(out, "mn-bad-partition", where, f"env {PARTITION_ENV}", values.partition_problem(partition))
    if serves_api(spec.backend, n.role):
        # the PORT setting itself is range-checked where the Deployment works out the address
        a = eff.arg("--port")
        if a is not None and a.value is not None:
            _check(out, "mn-bad-port", where, "serve argument --port", values.port_problem(a.value))


def _replicas(nodes: list[NodeConfig], out: list[RecipekitError]) -> None:
    seen: dict[str, int] = {}
    for n in nodes:
        where = f"{n.eff.recipe.id} layout {n.layout} node {n.role.rank}"
        host, port = values.host_port(replica_address(n))
        before = len(out)
        _check(out, "mn-bad-address", where, "replica address", values.address_problem(host))
        _check(out, "mn-bad-port", where, "replica port", values.port_problem(port))
        if len(out) > before:
            continue
        key = f"{host}:{port}"
        if key in seen:
            out.append(
                _err(
                    "mn-replicas-share-address",
                    where,
                    f"replica address {key}",
                    f"node {seen[key]} is already at {key}: the balancer would send both replicas' share to one server",
                )
            )
        seen.setdefault(key, n.role.rank)


def _balancer(nodes: list[NodeConfig], out: list[RecipekitError]) -> None:
    head = nodes[0]
    lb = head.spec.balancer
    if lb is None:
        return
    where = f"{head.eff.recipe.id} layout {head.layout} balancer"
    _check(
        out,
        "mn-bad-address",
        where,
        f"bind_host {lb.bind_host}",
        values.address_problem(_sub(head, lb.bind_host), wildcard=True),
    )
    _check(out, "mn-bad-port", where, f"port {lb.port}", values.port_problem(_sub(head, lb.port)))
    _check(out, "mn-bad-http-path", where, "health_path", values.http_path_problem(lb.health_path))


def check_nodes_values(nodes: list[NodeConfig]) -> list[RecipekitError]:
    """One error per value of the nodes that breaks its grammar (empty when all hold)."""
    out: list[RecipekitError] = []
    if not nodes:
        return out
    for n in nodes:
        _node_values(n, out)
    if nodes[0].spec.backend == "replicas":
        _replicas(nodes, out)
        _balancer(nodes, out)
    return out
