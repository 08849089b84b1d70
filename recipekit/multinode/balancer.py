"""The HAProxy configuration in front of independent replicas (a `replicas` layout).

HAProxy (Debian's haproxy package) checks every replica with `GET <health_path>` (vLLM's
/health answers 200 once the engine is up), takes one out after `fall` failed checks and puts it
back after `rise` good ones. A request whose connection is refused or reset is retried on
another replica (`retries` + `option redispatch` + `retry-on conn-failure empty-response`),
so a client does not see one replica going away. `haproxy -c -f FILE` validates the text.
"""

from __future__ import annotations

from recipekit import templates
from recipekit.deployment import server_address
from recipekit.errors import RecipekitError
from recipekit.multinode.nodes import NodeConfig


def replica_address(node: NodeConfig) -> str:
    """host:port the balancer reaches node N's API at (recipekit.deployment.server_address:
    NODE_ADDRESS, else the listen address, a wildcard reached on loopback)."""
    a = server_address(node.eff)
    return f"{a.reach_host}:{a.port}"


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
    bind_host = templates.substitute(lb.bind_host, eff.setting)
    port = templates.substitute(str(lb.port), eff.setting)
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
