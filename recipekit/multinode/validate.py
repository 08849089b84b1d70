"""Kubernetes manifests checked by real validators against the published schemas.

Core objects (Service, the pod templates) go to kubernetes-validate (Kubernetes' own OpenAPI
schemas, bundled offline, strict: unknown fields are errors). kubernetes-validate passes kinds
it has no schema for, so a LeaderWorkerSet is validated with jsonschema against the pinned CRD
schema (recipekit.multinode.crd), like the API server does for a custom resource, and its two
pod templates once more as core `PodTemplate` objects. The API server's value rules, which
neither schema carries (port ranges, DNS-1123 names, namespaces), are checked from
recipekit.multinode.k8s_rules, and a pod that runs docker is refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jsonschema
import yaml

from recipekit.errors import ErrorList, RecipekitError
from recipekit.multinode.crd import LWS_SOURCE, lws_schema
from recipekit.multinode.k8s_rules import value_problems

K8S_VERSION = "1.37.0"
LWS_API = "leaderworkerset.x-k8s.io/v1"


def _err(where: str, msg: str) -> RecipekitError:
    return RecipekitError(
        code="k8s-invalid", location=where, message=msg, hint="the manifest does not match the published schema"
    )


def _core(obj: dict, where: str) -> list[RecipekitError]:
    import kubernetes_validate  # lazy: pulls kubernetes_validate

    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        return [_err(where, f"{obj.get('kind')} {path or '(root)'}: {e.message}")]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [_err(where, f"no Kubernetes {K8S_VERSION} schema for {obj.get('apiVersion')}/{obj.get('kind')}: {e}")]
    return []


def _lws(obj: dict, where: str) -> list[RecipekitError]:
    errs: list[RecipekitError] = []
    validator = jsonschema.Draft4Validator(lws_schema())
    for e in sorted(validator.iter_errors(obj), key=lambda e: list(e.path)):
        path = ".".join(str(p) for p in e.path)
        errs.append(_err(where, f"LeaderWorkerSet {path or '(root)'}: {e.message} (schema: lws {LWS_SOURCE['tag']})"))
    tmpl = (obj.get("spec") or {}).get("leaderWorkerTemplate") or {}
    for key in ("leaderTemplate", "workerTemplate"):
        if isinstance(tmpl.get(key), dict):
            errs += _core(
                {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": key.lower()}, "template": tmpl[key]},
                f"{where} spec.leaderWorkerTemplate.{key}",
            )
    return errs


def validate_objects(objs: Iterable[Any], where: str = "manifest") -> list[RecipekitError]:
    """Every problem of the objects (empty when all are valid)."""
    errs: list[RecipekitError] = []
    for i, obj in enumerate(objs):
        at = f"{where}[{i}]"
        if not isinstance(obj, dict) or "kind" not in obj or "apiVersion" not in obj:
            errs.append(_err(at, "not a Kubernetes object (apiVersion and kind are required)"))
        elif obj["apiVersion"] == LWS_API and obj["kind"] == "LeaderWorkerSet":
            errs += _lws(obj, at)
        elif obj["apiVersion"].startswith("leaderworkerset.x-k8s.io/"):
            errs.append(_err(at, f"unsupported {obj['apiVersion']}/{obj['kind']} (only {LWS_API} LeaderWorkerSet)"))
        else:
            errs += _core(obj, at)
        if isinstance(obj, dict):
            errs += _values(obj, at)
    return errs


def _values(obj: dict, where: str) -> list[RecipekitError]:
    """The API server's value rules (recipekit.multinode.k8s_rules), which the schemas do not carry."""

    out = []
    for path, problem, source in value_problems(obj):
        docker = source.startswith("recipekit:")  # the one rule of our own
        out.append(
            RecipekitError(
                code="k8s-docker-in-pod" if docker else "k8s-invalid-value",
                location=where,
                message=f"{obj.get('kind')} {path}: {problem} ({source})",
                hint="build the pod from the launch data (recipe render --artifact k8s)"
                if docker
                else "the Kubernetes API server refuses this value",
            )
        )
    return out


def validate_text(text: str, where: str = "manifest") -> None:
    """Raise ErrorList (exit 2) when the YAML documents are not valid objects."""
    try:
        objs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise RecipekitError(code="k8s-invalid", location=where, message=f"not YAML: {e}") from None
    errs = validate_objects(objs, where)
    if errs:
        raise ErrorList(errs)
