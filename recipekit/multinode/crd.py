"""The pinned LeaderWorkerSet CRD schema: where it comes from and how the shipped file was made.

`data/lws-v1-schema.json` is the `openAPIV3Schema` of version v1 of
`config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml` in kubernetes-sigs/lws at
tag v0.10.0 (Apache-2.0), with every `description` removed (they are 90 % of the 1.3 MB file
and carry no rule). `LWS_SOURCE` records the file's sha256; `extract_schema` is the
transformation, so a newer CRD can be pinned the same way.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import yaml

LWS_SOURCE = {
    "repository": "https://github.com/kubernetes-sigs/lws",
    "tag": "v0.10.0",
    "commit": "2161f38ff333f9e24d3c44adef7cd5d9787cac00",
    "path": "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    "sha256": "c5dcad8ed943e495490241f00b9a1b45d51203b6d484020db3636d5bf553568e",
    "license": "Apache-2.0",
    "api_version": "leaderworkerset.x-k8s.io/v1",
    "transformation": "spec.versions[name=v1].schema.openAPIV3Schema, every 'description' key removed",
}


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(obj, list):
        return [_strip(x) for x in obj]
    return obj


def extract_schema(crd_yaml: str, version: str = "v1") -> dict:
    """The openAPIV3Schema of one version of a CRD document, descriptions removed."""
    crd = yaml.safe_load(crd_yaml)
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return _strip(v["schema"]["openAPIV3Schema"])
    raise LookupError(f"CRD has no version {version}")


def lws_schema() -> dict:
    """The shipped LeaderWorkerSet v1 schema (JSON)."""
    text = resources.files("recipekit.multinode").joinpath("data/lws-v1-schema.json").read_text()
    return json.loads(text)
