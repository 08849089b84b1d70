"""The HAProxy configuration in front of independent replicas (a `replicas` layout).

HAProxy (Debian's haproxy package) checks every replica with `GET <health_path>` (vLLM's
/health answers 200 once the engine is up), takes one out after `fall` failed checks and puts it
back after `rise` good ones. A request whose connection is refused or reset is retried on
another replica (`retries` + `option redispatch` + `retry-on conn-failure empty-response`),
so a client does not see one replica going away. `checked_config` reads the text back
(recipekit.multinode.haproxy_check) against the frontends, backends and servers the layout
implies, then runs `haproxy -c -f FILE` on it.
"""

from __future__ import annotations

from recipekit import templates
from recipekit.deployment import server_address
from recipekit.errors import RecipekitError
from recipekit.multinode.haproxy_check import check_with_haproxy, compare
from recipekit.multinode.nodes import NodeConfig


def replica_address(node: NodeConfig) -> str:
    """host:port the balancer reaches node N's API at (recipekit.deployment.server_address:
    NODE_ADDRESS, else the listen address, a wildcard reached on loopback)."""
    a = server_address(node.eff)
    return f"{a.reach_host}:{a.port}"


def _frontend(nodes: list[NodeConfig]) -> tuple[str, str]:
    lb = nodes[0].spec.balancer
    assert lb is not None
    eff = nodes[0].eff
    return str(templates.substitute(lb.bind_host, eff.setting)), str(templates.substitute(str(lb.port), eff.setting))


def expected_structure(nodes: list[NodeConfig]) -> dict:
    """The sections, binds, backends and servers a replicas layout implies (for the read-back)."""
    bind_host, port = _frontend(nodes)
    return {
        "global": {"keywords": ["maxconn"]},
        "defaults": {"keywords": ["mode", "option", "retries", "retry-on", "timeout"]},
        "frontend recipekit_api": {
            "keywords": ["bind", "default_backend"],
            "binds": [[f"{bind_host}:{port}"]],
            "backends": [["replicas"]],
        },
        "backend replicas": {
            "keywords": ["balance", "default-server", "http-check", "option", "server"],
            "servers": [[f"node{n.role.rank}", replica_address(n), "check"] for n in nodes],
        },
    }


def checked_config(nodes: list[NodeConfig]) -> tuple[str, str]:
    """The configuration and a note, after the read-back and `haproxy -c` (raises when either says no)."""

    text = haproxy_config(nodes)
    compare(text, expected_structure(nodes))
    note = f"read back: 1 frontend, 1 backend, {len(nodes)} servers as the layout implies; {check_with_haproxy(text)}"
    return text, note


def haproxy_config(nodes: list[NodeConfig]) -> str:
    spec = nodes[0].spec
    lb = spec.balancer
    if spec.backend != "replicas" or lb is None:
        raise RecipekitError(
            code="artifact-not-available",
            message=f"layout {nodes[0].layout} is not a replicas layout with a balancer",
            hint="the lb artifact belongs to backend: replicas layouts",
        )
    eff = nodes[0].eff
    bind_host, port = _frontend(nodes)
    lines = [
        f"# {eff.recipe.id} layout {nodes[0].layout}: {spec.nodes} independent replicas behind HAProxy",
        "global",
        "    maxconn 1024",
        "",
        "defaults",
        "    mode http",
        "    timeout connect 2s",
        f"    timeout client {lb.timeout_server_s}s",
        f"    timeout server {lb.timeout_server_s}s",
        "    retries 3",
        "    option redispatch 1",
        "    retry-on conn-failure empty-response",
        "",
        "frontend recipekit_api",
        f"    bind {bind_host}:{port}",
        "    default_backend replicas",
        "",
        "backend replicas",
        "    balance leastconn",
        f"    option httpchk GET {lb.health_path}",
        "    http-check expect status 200",
        f"    default-server inter {lb.check_interval_ms}ms fall {lb.fall} rise {lb.rise}",
    ]
    for n in nodes:
        lines.append(f"    server node{n.role.rank} {replica_address(n)} check")
    return "\n".join(lines) + "\n"
