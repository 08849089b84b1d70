"""The LeaderWorkerSet manifest of a multi-node layout (plus a ClusterIP Service for the leaders).

Shape from vLLM's LWS deployment doc (research/oracle-multinode.md §3.4): one group per
replica, `size` = nodes of a group (1 for independent replicas), leader and worker templates
that run the node's launch script, `/dev/shm` as a memory emptyDir, device limits per pod,
`RecreateGroupOnPodRestart`, and a Service selecting `leaderworkerset.sigs.k8s.io/name` +
`role: leader`. The group's facts are the variables LWS injects (LWS_LEADER_ADDRESS,
LWS_GROUP_SIZE, LWS_WORKER_INDEX), expanded by the kubelet with the $(VAR) syntax.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from recipekit import templates
from recipekit.errors import RecipekitError
from recipekit.multinode.forms import serves_api
from recipekit.multinode.launch import node_launch
from recipekit.multinode.nodes import NodeConfig


def k8s_name(text: str) -> str:
    """A DNS-1035 label (Service names are the strictest)."""
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    s = re.sub(r"^[^a-z]+", "", s)
    return (s[:50].rstrip("-")) or "recipe"


def _image(node: NodeConfig) -> str:
    r = node.eff.recipe
    src = (r.launch.docker.image if r.launch.docker else None) or r.engine.image
    if not src:
        raise RecipekitError(
            code="k8s-needs-image",
            message=f"{r.id} runs natively and names no container image",
            hint="the k8s artifact needs a recipe with a container image (engine.image)",
        )
    return "".join(
        p if isinstance(p, str) else f"$({p.name})"
        for p in templates.parts(templates.substitute(src, node.eff.setting))
    )


def _port(node: NodeConfig) -> int:
    try:
        return int(node.eff.setting("PORT"))
    except (RecipekitError, TypeError, ValueError):
        return 8000


def _template(node: NodeConfig, name: str, role: str, script: str) -> dict:
    spec = node.spec
    k8s = spec.k8s
    container: dict[str, Any] = {
        "name": "vllm-" + role,
        "image": _image(node),
        "command": ["/bin/bash", "-c"],
        "args": [script],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if k8s and k8s.resource:
        container["resources"] = {
            "limits": {k8s.resource: spec.cards_per_node},
            "requests": {k8s.resource: spec.cards_per_node},
        }
    if k8s and k8s.capabilities:
        container["securityContext"] = {"capabilities": {"add": list(k8s.capabilities)}}
    if serves_api(spec.backend, node.role):
        port = _port(node)
        container["ports"] = [{"name": "http", "containerPort": port}]
        container["readinessProbe"] = {
            "httpGet": {"path": "/health", "port": port},
            "initialDelaySeconds": 15,
            "periodSeconds": 10,
        }
    return {
        "metadata": {"labels": {"role": role}},
        "spec": {
            "containers": [container],
            "volumes": [
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": k8s.shm_size if k8s else "16Gi"}}
            ],
        },
    }


def manifest_objects(nodes: list[NodeConfig]) -> list[dict]:
    """The LeaderWorkerSet and the leader Service (nodes rendered with lws=True)."""
    head = nodes[0]
    spec = head.spec
    name = k8s_name(f"{head.eff.recipe.id}-{head.layout}")
    size = 1 if spec.backend == "replicas" else spec.nodes
    replicas = spec.nodes if spec.backend == "replicas" else 1
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "recipekit"}}
    if spec.k8s and spec.k8s.namespace:
        meta["namespace"] = spec.k8s.namespace
    lwt: dict[str, Any] = {
        "size": size,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": _template(head, name, "leader", node_launch(head).text),
    }
    if size > 1:
        lwt["workerTemplate"] = _template(nodes[1], name, "worker", node_launch(nodes[1]).text)
    else:
        lwt["workerTemplate"] = lwt.pop("leaderTemplate")
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": meta,
        "spec": {"replicas": replicas, "leaderWorkerTemplate": lwt, "startupPolicy": "LeaderCreated"},
    }
    port = _port(head)
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**meta, "name": name + "-leader"},
        "spec": {
            "type": "ClusterIP",
            "selector": {"leaderworkerset.sigs.k8s.io/name": name, "role": "leader"}
            if size > 1
            else {"leaderworkerset.sigs.k8s.io/name": name},
            "ports": [{"name": "http", "protocol": "TCP", "port": port, "targetPort": port}],
        },
    }
    return [lws, svc]


def manifest_text(nodes: list[NodeConfig]) -> str:
    """The manifest as YAML documents, validated (refused with exit 2 when a schema says no)."""
    from recipekit.errors import ErrorList
    from recipekit.multinode.validate import validate_objects

    objs = manifest_objects(nodes)
    errs = validate_objects(objs, f"{nodes[0].eff.recipe.id} layout {nodes[0].layout} k8s")
    if errs:
        raise ErrorList(errs)
    return "---\n".join(yaml.safe_dump(o, sort_keys=False, width=1000) for o in objs)
