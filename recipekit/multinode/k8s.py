"""The LeaderWorkerSet manifest of a multi-node layout (plus a ClusterIP Service for the leaders).

Shape from vLLM's LWS deployment doc (research/oracle-multinode.md §3.4): one group per
replica, `size` = nodes of a group (1 for independent replicas), leader and worker templates,
`/dev/shm` as a memory emptyDir, device limits per pod, `RecreateGroupOnPodRestart`, and a
Service selecting `leaderworkerset.sigs.k8s.io/name` + `role: leader`. The group's facts are
the variables LWS injects (LWS_LEADER_ADDRESS, LWS_GROUP_SIZE, LWS_WORKER_INDEX), expanded by
the kubelet with the $(VAR) syntax.

Each pod is built from the node's launch data, whatever the recipe's runner: the container runs
the engine's own command (the serve argv, exec form) in the recipe's image, with the container
env (the recipe's `launch.docker.env` items and the engine env), the docker volumes as pod
volumes (hostPath of the declared host folder, or what `k8s.volumes` declares for that mount:
a PersistentVolumeClaim or an emptyDir), the engine's port and `/dev/shm`. A recipe whose launch
has steps before the engine (checks, fixes, `ray start`) runs them in `bash -c` and then
`exec`s the serve argv; a pod never runs `docker` (recipekit.multinode.k8s_rules refuses it).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from recipekit import templates
from recipekit.backends.base import Word, flatten, serve_groups, step_line, tmpl
from recipekit.errors import ErrorList, RecipekitError
from recipekit.multinode.forms import serves_api
from recipekit.multinode.launch import ray_line
from recipekit.multinode.nodes import NodeConfig

DEFAULT_ENGINE_PORT = 8000  # vLLM's --port default (vllm/entrypoints/openai/cli_args.py)


def k8s_name(text: str) -> str:
    """A DNS-1035 label (Service names are the strictest)."""
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    s = re.sub(r"^[^a-z]+", "", s)
    return (s[:50].rstrip("-")) or "recipe"


def name_collision(recipe: Any, layout: str) -> str | None:
    """Another multi-node layout of the recipe whose k8s name folds to this one's (None when unique)."""
    mine = k8s_name(f"{recipe.id}-{layout}")
    for other in recipe.multinode:
        if other != layout and k8s_name(f"{recipe.id}-{other}") == mine:
            return other
    return None


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


def engine_port(node: NodeConfig) -> int:
    """The port the engine listens on inside the container (its --port argument)."""
    a = node.eff.arg("--port")
    try:
        return int(a.value) if a is not None and a.value is not None else DEFAULT_ENGINE_PORT
    except (TypeError, ValueError):
        return DEFAULT_ENGINE_PORT  # not a number: refused by the value rules as a port


def _env(node: NodeConfig) -> list[dict]:
    """POD_IP first (others refer to it), then the container env: docker -e items, then the engine env."""
    eff = node.eff
    pairs: dict[str, str] = {}
    d = eff.recipe.launch.docker
    if d is not None:
        for item in d.env:
            name, eq, value = templates.to_argv_word(tmpl(eff, item), eff.env_values()).partition("=")
            if eq:
                pairs[name] = value
    for name, value in eff.exported_env():
        pairs[name] = value
    pairs.pop("POD_IP", None)
    return [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}] + [
        {"name": k, "value": v} for k, v in pairs.items()
    ]


def _word(w: Word, names: set[str], env: dict[str, Any]) -> str:
    """One argv word: an env reference the container defines stays $(NAME) for the kubelet."""
    out = ""
    for p in w:
        if isinstance(p, str):
            out += p
        elif p.strip_suffix is None and p.name in names:
            out += f"$({p.name})"
        else:
            out += templates.to_argv_word([p], env)
    return out


def engine_argv(node: NodeConfig, names: set[str]) -> list[str]:
    """The engine's command (serve argv) of the node, as the pod runs it."""
    env = node.eff.env_values()
    return [_word(w, names, env) for w in flatten(serve_groups(node.eff))]


def _prelude(node: NodeConfig) -> list[str]:
    """Shell lines the launch runs before the engine: its steps, then `ray start` (Ray layouts)."""
    eff = node.eff
    lines = [step_line(eff, s) for s in eff.recipe.launch.steps]
    ray = ray_line(node)
    if ray:
        lines.append(ray)
    return lines


def _command(node: NodeConfig, names: set[str]) -> tuple[list[str], list[str]]:
    """(command, args) of the node's container."""
    argv = engine_argv(node, names)
    prelude = _prelude(node)
    if node.spec.backend == "ray" and not node.role.head:  # a Ray worker runs only `ray start --block`
        return ["/bin/bash", "-c", "\n".join(["set -euo pipefail", ray_line(node) or ""])], []
    if not prelude:
        return argv[:1], argv[1:]
    script = "\n".join(["set -euo pipefail", *prelude, 'exec "$@"'])
    return ["/bin/bash", "-c", script, "engine"], argv


def _mounts(node: NodeConfig) -> tuple[list[dict], list[dict]]:
    """(volumeMounts, volumes) from the docker volumes and the layout's k8s.volumes."""
    eff = node.eff
    d = eff.recipe.launch.docker
    declared = node.spec.k8s.volumes if node.spec.k8s else {}
    mounts: list[dict] = []
    volumes: list[dict] = []
    for i, v in enumerate(d.volumes if d else []):
        text = templates.to_argv_word(tmpl(eff, v), eff.env_values())
        parts = text.split(":")
        mode = parts.pop() if len(parts) == 3 else ""
        if len(parts) != 2:
            raise RecipekitError(
                code="k8s-bad-volume",
                message=f"docker volume {text!r} is not SRC:DST[:MODE]",
                hint="write launch.docker.volumes as host:container[:ro]",
            )
        src, dst = parts
        if not src:
            continue  # an unset optional folder: docker leaves it out too
        name = f"mount-{i}"
        mounts.append({"name": name, "mountPath": dst, **({"readOnly": True} if mode == "ro" else {})})
        decl = declared.get(dst)
        if decl is not None:
            volumes.append({"name": name, **decl.source()})
        elif src.startswith("/") or placeholder_folder(src):
            volumes.append({"name": name, "hostPath": {"path": src}})
        else:
            raise RecipekitError(
                code="k8s-volume-undeclared",
                message=f"docker volume {src}:{dst} has a relative host folder, which a pod cannot mount",
                hint=f"declare it under multinode.{node.layout}.k8s.volumes['{dst}'] (pvc, host_path or empty_dir)",
            )
    return mounts, volumes


def placeholder_folder(src: str) -> bool:
    """A host folder left as the recipe's placeholder (`<MODELS_DIR>`), filled in where deployed."""
    return re.fullmatch(r"<[A-Za-z0-9_-]+>(/.*)?", src) is not None


def _capabilities(node: NodeConfig) -> list[str]:
    k8s = node.spec.k8s
    d = node.eff.recipe.launch.docker
    caps = list(k8s.capabilities if k8s else []) + [c.upper() for c in (d.cap_add if d else [])]
    return list(dict.fromkeys(caps))


def _template(node: NodeConfig, role: str) -> dict:
    spec = node.spec
    k8s = spec.k8s
    env = _env(node)
    command, args = _command(node, {e["name"] for e in env})
    mounts, volumes = _mounts(node)
    container: dict[str, Any] = {
        "name": "vllm-" + role,
        "image": _image(node),
        "command": command,
        **({"args": args} if args else {}),
        "env": env,
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, *mounts],
    }
    if k8s and k8s.resource:
        container["resources"] = {
            "limits": {k8s.resource: spec.cards_per_node},
            "requests": {k8s.resource: spec.cards_per_node},
        }
    caps = _capabilities(node)
    if caps:
        container["securityContext"] = {"capabilities": {"add": caps}}
    if serves_api(spec.backend, node.role):
        port = engine_port(node)
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
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": k8s.shm_size if k8s else "16Gi"}},
                *volumes,
            ],
        },
    }


def manifest_objects(nodes: list[NodeConfig]) -> list[dict]:
    """The LeaderWorkerSet and the leader Service (nodes rendered with lws=True)."""
    head = nodes[0]
    spec = head.spec
    other = name_collision(head.eff.recipe, head.layout)
    if other is not None:
        raise RecipekitError(
            code="k8s-name-collision",
            message=f"layouts {head.layout!r} and {other!r} fold to the same Kubernetes name "
            f"{k8s_name(f'{head.eff.recipe.id}-{head.layout}')!r}",
            hint="rename one of the multi-node layouts (lowercase letters, digits and '-')",
        )
    name = k8s_name(f"{head.eff.recipe.id}-{head.layout}")
    size = 1 if spec.backend == "replicas" else spec.nodes
    replicas = spec.nodes if spec.backend == "replicas" else 1
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "recipekit"}}
    if spec.k8s and spec.k8s.namespace:
        meta["namespace"] = spec.k8s.namespace
    lwt: dict[str, Any] = {
        "size": size,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": _template(head, "leader"),
    }
    if size > 1:
        lwt["workerTemplate"] = _template(nodes[1], "worker")
    else:
        lwt["workerTemplate"] = lwt.pop("leaderTemplate")
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": meta,
        "spec": {"replicas": replicas, "leaderWorkerTemplate": lwt, "startupPolicy": "LeaderCreated"},
    }
    port = engine_port(head)
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
    """The manifest as YAML documents, validated (refused with exit 2 when a schema or value rule says no)."""
    from recipekit.multinode.validate import validate_objects  # lazy: pulls attrs, jsonschema

    objs = manifest_objects(nodes)
    errs = validate_objects(objs, f"{nodes[0].eff.recipe.id} layout {nodes[0].layout} k8s")
    if errs:
        raise ErrorList(errs)
    return "---\n".join(yaml.safe_dump(o, sort_keys=False, width=1000) for o in objs)
