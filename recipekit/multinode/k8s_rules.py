"""The Kubernetes API server's own value rules for the objects recipekit writes, as data.

The OpenAPI schemas kubernetes-validate (and the LWS CRD schema) check carry types and
required fields, not value formats: a containerPort of -1, a namespace `Evil NS; x` or a name
with a newline pass them. The API server refuses those in its Go validation code. Each rule
below names the function that enforces it there:
  apimachinery  kubernetes/kubernetes staging/src/k8s.io/apimachinery/pkg/util/validation/
                validation.go @ 008b3652 (IsDNS1123Label, IsDNS1123Subdomain, IsDNS1035Label,
                IsValidPortNum, IsValidPortName, IsEnvVarName) and
                staging/src/k8s.io/apimachinery/pkg/api/validate/content (IsLabelValue,
                IsLabelKey = IsQualifiedName)
  core          kubernetes/kubernetes pkg/apis/core/validation/validation.go @ a7264f95
                (ValidateServiceName = NameIsDNS1035Label, ValidateNamespaceName = NameIsDNSLabel,
                validateContainers: container name DNS-1123 label, validateContainerPorts,
                validateVolumes: volume name DNS-1123 label, validateServicePort,
                validateHostPathVolumeSource: no '..' path element, ValidatePortNumOrName)
  lws           kubernetes-sigs/lws pkg/webhooks/leaderworkerset_webhook.go ValidateCreate
                (replicas >= 0, size >= 1); the LWS name also names the group's headless
                Service, hence DNS-1035.
Plus recipekit's own rule (`k8s-docker-in-pod`): a pod's command never runs docker.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

K8S_SOURCE_COMMIT = {
    "apimachinery": "008b3652959ca58af8be3fb5b6ecfe9ae7638282",
    "core": "a7264f95ffc8b56377da16e83461aa59467ebb3e",
}

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_ENV_VAR_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
_DOCKER = re.compile(r"(^|[\s;&|(`/])docker(\s+|\s+--?\S+\s+)*(run|create|start|exec|compose)\b")


def dns1123_label(v: Any) -> str | None:
    if not isinstance(v, str) or len(v) > 63 or not _DNS1123_LABEL.fullmatch(v):
        return "must be a DNS-1123 label (lowercase letters, digits, '-'; at most 63)"
    return None


def dns1123_subdomain(v: Any) -> str | None:
    if not isinstance(v, str) or len(v) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(v):
        return "must be a DNS-1123 subdomain (lowercase letters, digits, '-', '.'; at most 253)"
    return None


def dns1035_label(v: Any) -> str | None:
    if not isinstance(v, str) or len(v) > 63 or not _DNS1035_LABEL.fullmatch(v):
        return "must be a DNS-1035 label (starts with a letter; lowercase letters, digits, '-'; at most 63)"
    return None


def port_num(v: Any) -> str | None:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535:
        return "must be a port number 1..65535"
    return None


def port_name(v: Any) -> str | None:
    ok = (
        isinstance(v, str)
        and 0 < len(v) <= 15
        and re.fullmatch(r"[-a-z0-9]+", v) is not None
        and re.search(r"[a-z]", v) is not None
        and "--" not in v
        and not v.startswith("-")
        and not v.endswith("-")
    )
    return None if ok else "must be an IANA service name (1..15 of a-z, 0-9, '-', a letter, no '--')"


def port_num_or_name(v: Any) -> str | None:
    return port_name(v) if isinstance(v, str) else port_num(v)


def label_value(v: Any) -> str | None:
    if not isinstance(v, str) or len(v) > 63 or not _LABEL_VALUE.fullmatch(v):
        return "must be a label value (alphanumerics, '-', '_', '.'; at most 63)"
    return None


def label_key(v: Any) -> str | None:
    if not isinstance(v, str):
        return "must be a label key"
    prefix, _, name = v.rpartition("/")
    if (prefix and dns1123_subdomain(prefix)) or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        return "must be a qualified name ([prefix/]name; name alphanumerics, '-', '_', '.'; at most 63)"
    return None


def env_var_name(v: Any) -> str | None:
    if not isinstance(v, str) or not _ENV_VAR_NAME.fullmatch(v):
        return "must be an environment variable name (letters, digits, '_', '-', '.'; not starting with a digit)"
    return None


def no_backtrack(v: Any) -> str | None:
    if not isinstance(v, str) or ".." in v.split("/"):
        return "must not contain a '..' path element"
    return None


def non_negative(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else "must be >= 0"


def positive(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else "must be >= 1"


def no_docker(v: Any) -> str | None:
    words = v if isinstance(v, list) else [v]
    for w in words:
        if isinstance(w, str) and (w.rsplit("/", 1)[-1] == "docker" or _DOCKER.search(w)):
            return "runs docker inside the pod (a pod runs the engine's command in the recipe's image)"
    return None


@dataclass(frozen=True)
class ValueRule:
    path: str  # dotted; '[]' = every item of a list, '{}' = every key of a mapping, '{v}' = every value
    check: Callable[[Any], str | None]
    source: str


# Rules of a pod spec (relative to the pod template's `spec`).
POD_RULES = (
    ValueRule("containers[].name", dns1123_label, "core validateContainers: ValidateDNS1123Label"),
    ValueRule("containers[].ports[].containerPort", port_num, "core validateContainerPorts: IsValidPortNum"),
    ValueRule("containers[].ports[].name", port_name, "core validateContainerPorts: IsValidPortName"),
    ValueRule("containers[].env[].name", env_var_name, "core validateEnv: IsEnvVarName"),
    ValueRule("containers[].volumeMounts[].name", dns1123_label, "core validateVolumeMounts: a volume's name"),
    ValueRule("containers[].readinessProbe.httpGet.port", port_num_or_name, "core validateHTTPGetAction: ValidatePortNumOrName"),
    ValueRule("containers[].command", no_docker, "recipekit: the pod runs the engine, never docker"),
    ValueRule("containers[].args", no_docker, "recipekit: the pod runs the engine, never docker"),
    ValueRule("volumes[].name", dns1123_label, "core validateVolumes: IsDNS1123Label"),
    ValueRule("volumes[].hostPath.path", no_backtrack, "core validateHostPathVolumeSource: validatePathNoBacktracks"),
    ValueRule("volumes[].persistentVolumeClaim.claimName", dns1123_subdomain, "core: PVC names are NameIsDNSSubdomain"),
)  # fmt: skip
META_RULES = (
    ValueRule("metadata.namespace", dns1123_label, "core ValidateNamespaceName = NameIsDNSLabel"),
    ValueRule("metadata.labels{}", label_key, "apimachinery ValidateLabels: IsQualifiedName"),
    ValueRule("metadata.labels{v}", label_value, "apimachinery ValidateLabels: IsValidLabelValue"),
)
KIND_RULES: dict[str, tuple[ValueRule, ...]] = {
    "Service": (
        ValueRule("metadata.name", dns1035_label, "core ValidateServiceName = NameIsDNS1035Label"),
        ValueRule("spec.ports[].port", port_num, "core validateServicePort: IsValidPortNum"),
        ValueRule("spec.ports[].targetPort", port_num_or_name, "core validateServicePort: ValidatePortNumOrName"),
        ValueRule("spec.ports[].name", port_name, "core validateServicePort: IsValidPortName"),
        ValueRule("spec.selector{v}", label_value, "core ValidateService: selector values are label values"),
    ),
    "LeaderWorkerSet": (
        ValueRule("metadata.name", dns1035_label, "lws: the name also names the group's headless Service"),
        ValueRule("spec.replicas", non_negative, "lws ValidateCreate: Replicas >= 0"),
        ValueRule("spec.leaderWorkerTemplate.size", positive, "lws ValidateCreate: Size >= 1"),
    ),
}
LWS_POD_TEMPLATES = ("spec.leaderWorkerTemplate.leaderTemplate", "spec.leaderWorkerTemplate.workerTemplate")


def _walk(obj: Any, parts: list[str], at: str) -> Iterator[tuple[str, Any]]:
    if not parts:
        yield at, obj
        return
    head, rest = parts[0], parts[1:]
    for suffix, kind in (("[]", "list"), ("{v}", "values"), ("{}", "keys")):
        if head.endswith(suffix):
            key = head[: -len(suffix)]
            coll = obj.get(key) if isinstance(obj, dict) else None
            here = f"{at}.{key}" if at else key
            if kind == "list" and isinstance(coll, list):
                for i, item in enumerate(coll):
                    yield from _walk(item, rest, f"{here}[{i}]")
            elif kind == "values" and isinstance(coll, dict):
                for k, item in coll.items():
                    yield from _walk(item, rest, f"{here}.{k}")
            elif kind == "keys" and isinstance(coll, dict):
                for k in coll:
                    yield f"{here} key {k!r}", k
            return
    if isinstance(obj, dict) and head in obj:
        yield from _walk(obj[head], rest, f"{at}.{head}" if at else head)


def _apply(obj: Any, rules: tuple[ValueRule, ...], prefix: str = "") -> list[tuple[str, str, str]]:
    out = []
    for r in rules:
        for at, value in _walk(obj, r.path.split("."), prefix):
            problem = r.check(value)
            if problem:
                out.append((at, f"{value!r} {problem}", r.source))
    return out


def value_problems(obj: dict) -> list[tuple[str, str, str]]:
    """(path, problem, source) for every value of the object that the API server would refuse."""
    out = _apply(obj, META_RULES) + _apply(obj, KIND_RULES.get(str(obj.get("kind")), ()))
    templates = [obj.get("template")] if obj.get("kind") == "PodTemplate" else []
    paths = ["template"] if templates else []
    if obj.get("kind") == "LeaderWorkerSet":
        for p in LWS_POD_TEMPLATES:
            node: Any = obj
            for k in p.split("."):
                node = node.get(k) if isinstance(node, dict) else None
            templates.append(node)
            paths.append(p)
    for tmpl, p in zip(templates, paths):
        if isinstance(tmpl, dict):
            out += _apply(tmpl, META_RULES, p)
            out += _apply(tmpl.get("spec"), POD_RULES, p + ".spec")
    return out
