"""One node of a multi-node layout as an ordinary effective config.

A node's config is the recipe's effective config for the layout's `base_layout`, with the
multi-node overlay applied as `--set` items placed before the user's own (so the user still
wins), except the node's own settings (`per_node[N].settings`, e.g. PORT: ${NODE1_PORT}), which
come after them (set the setting they refer to instead): the layout's settings, then the shared and per-node
env (templates resolved against those settings and the builtins NNODES, NODE_RANK, TP, PP,
DP, CARDS_PER_NODE), `VLLM_PP_LAYER_PARTITION` from `partition`, the backend's distributed
flags (recipekit.multinode.forms) and the layout's own argument changes. Every renderer and
constraint of the single-node recipe then applies to each node unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipekit import templates
from recipekit.config import EffectiveConfig, effective_config
from recipekit.errors import RecipekitError, did_you_mean
from recipekit.multinode.forms import FORMS, LWS_ENV, LWS_VALUES, Role, applies
from recipekit.schema import MultiNodeLayout, Recipe

PARTITION_ENV = "VLLM_PP_LAYER_PARTITION"


@dataclass
class NodeConfig:
    layout: str  # the multi-node layout's name
    spec: MultiNodeLayout
    role: Role
    eff: EffectiveConfig
    lws: bool = False

    @property
    def label(self) -> str:
        return f"{self.layout} node {self.role.rank} ({self.role.name})"


def multinode_spec(recipe: Recipe, name: str | None) -> MultiNodeLayout:
    """The multi-node layout `name` of a recipe, or a one-line error naming the choices."""
    if name in recipe.multinode:
        return recipe.multinode[name]
    choices = list(recipe.multinode)
    raise RecipekitError(
        code="unknown-multinode-layout",
        location="--layout",
        message=f"'{name}' is not a multi-node layout of {recipe.id}",
        hint=did_you_mean(str(name), choices)
        or (f"multi-node layouts: {', '.join(choices)}" if choices else "this recipe declares none"),
    )


def builtins(spec: MultiNodeLayout, role: Role) -> dict[str, Any]:
    return {
        "NNODES": spec.nodes,
        "NODE_RANK": role.rank,
        "TP": spec.tensor_parallel,
        "PP": spec.pipeline_parallel,
        "DP": spec.data_parallel,
        "CARDS_PER_NODE": spec.cards_per_node,
    }


def _set_value(v: Any) -> str:
    if isinstance(v, list):
        return json.dumps(v)
    if isinstance(v, bool):
        return "1" if v else "0"
    return "" if v is None else str(v)


def profile_layout(recipe: Recipe, spec: MultiNodeLayout) -> str | None:
    """The single-node layout whose engine profile the nodes take over their base layout's, or None.

    Keyed on declared parallelism, never on names: when the base layout's pipeline kind
    (pipeline_parallel > 1 or not) differs from the multi-node layout's, the profile is
    `spec.profile`, else the recipe's one layout of the multi-node layout's kind (none: the base's).
    """
    want = spec.pipeline_parallel > 1
    base = recipe.layouts.get(spec.base_layout) if spec.base_layout else None
    if base is None or (base.pipeline_parallel > 1) == want:
        return None
    if spec.profile is not None:
        return spec.profile
    same = [n for n, lay in recipe.layouts.items() if (lay.pipeline_parallel > 1) == want]
    if len(same) <= 1:  # none: the base profile stands, and the recipe's parallel.* rules judge it
        return same[0] if same else None
    kind = "pipeline parallel > 1" if want else "pipeline parallel 1"
    raise RecipekitError(
        code="mn-profile-ambiguous",
        message=f"base layout {spec.base_layout} is not {kind} and the recipe has {len(same)} layouts that are "
        f"({', '.join(same) or 'none'})",
        hint="name the layout whose engine profile the nodes run: profile: <layout>",
    )


def _profile_items(recipe: Recipe, spec: MultiNodeLayout) -> tuple[list[str], list[str]]:
    """(settings items, env items) of the profile layout, TP/PP left to the layout's builtins."""
    name = profile_layout(recipe, spec)
    if name is None:
        return [], []
    lay = recipe.layouts[name]
    settings = [f"{k}={_set_value(v)}" for k, v in lay.settings.items() if k not in ("TP", "PP")]
    env = [f"{k}=" if v is None else f"{k}={v}" for k, v in lay.env.items()]
    return settings, env


def _settings_items(recipe: Recipe, spec: MultiNodeLayout, role: Role) -> list[str]:
    items = _profile_items(recipe, spec)[0]
    for key in ("TP", "PP"):  # a recipe that declares TP/PP settings gets the layout's values
        if key in recipe.settings:
            items.append(f"{key}={builtins(spec, role)[key]}")
    for k, v in spec.settings.items():
        items.append(f"{k}={_set_value(v)}")
    return items


def _node_items(spec: MultiNodeLayout, role: Role) -> list[str]:
    if not spec.per_node:
        return []
    return [f"{k}={_set_value(v)}" for k, v in spec.per_node[role.rank].settings.items()]


def node_config(
    loaded: Any,
    layout: str,
    node: int,
    env_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    sets: Iterable[str] = (),
    host_paths: bool = False,
    lws: bool = False,
) -> NodeConfig:
    """The effective config of node `node` (0 = head) of the multi-node layout `layout`.

    `lws=True` renders the group facts as the variables a LeaderWorkerSet injects.
    """
    recipe: Recipe = loaded.recipe if hasattr(loaded, "recipe") else loaded
    spec = multinode_spec(recipe, layout)
    if not 0 <= node < spec.nodes:
        raise RecipekitError(
            code="node-out-of-range",
            location="--node",
            message=f"{layout} has nodes 0..{spec.nodes - 1}, not {node}",
            hint="0 is the head; workers are 1..N-1",
        )
    role = Role(node, spec.nodes)
    user = list(sets or ())
    facts = builtins(spec, role)
    base = effective_config(
        loaded, layout=spec.base_layout, env_file=env_file, environ=environ, sets=user, host_paths=host_paths
    )

    def base_lookup(name: str) -> Any:
        return facts[name] if name in facts else base.setting(name)

    def resolved(items: list[str]) -> list[str]:
        return [
            i
            if "${" not in i
            else i.split("=", 1)[0] + "=" + str(templates.substitute(i.split("=", 1)[1], base_lookup))
            for i in items
        ]

    items = resolved(_settings_items(recipe, spec, role))
    own = resolved(_node_items(spec, role))  # a node's own settings win over a --set of the same key
    first = effective_config(
        loaded,
        layout=spec.base_layout,
        env_file=env_file,
        environ=environ,
        sets=items + user + own,
        host_paths=host_paths,
    )

    def lookup(name: str) -> Any:
        return facts[name] if name in facts else first.setting(name)

    def resolve(text: str) -> str:
        if lws:
            for k, v in LWS_VALUES.items():
                text = text.replace(k, v)
        out = templates.substitute(text, lookup)
        return "".join(p if isinstance(p, str) else f"${{env:{p.name}}}" for p in templates.parts(out))

    declared = {k.name for k in recipe.env}
    env_items: list[str] = _profile_items(recipe, spec)[1]
    env: dict[str, str | None] = dict(spec.env)
    if spec.partition:
        env[PARTITION_ENV] = spec.partition
    if spec.per_node:
        env.update(spec.per_node[role.rank].env)
    for name, value in env.items():
        key = name if name in declared else f"env.{name}"
        if value is None:
            if name in declared:
                env_items.append(f"{key}=")
            continue
        env_items.append(f"{key}={LWS_ENV[name] if lws and name in LWS_ENV else resolve(value)}")
    flag_items: list[str] = []
    for flag, value, where in FORMS[spec.backend]:
        if not applies(where, role):
            continue
        if flag == "--pipeline-parallel-size" and spec.pipeline_parallel == 1 and spec.backend == "replicas":
            continue
        flag_items.append(f"{flag}=" if value is None else f"{flag}={resolve(value)}")
    for ov in spec.args:
        if ov.remove:
            flag_items.append(f"!{ov.flag}")
        elif ov.json_value is not None:
            flag_items.append(f"{ov.flag}={json.dumps(ov.json_value)}")
        else:
            flag_items.append(f"{ov.flag}=" if ov.value is None else f"{ov.flag}={resolve(_set_value(ov.value))}")
    eff = effective_config(
        loaded,
        layout=spec.base_layout,
        env_file=env_file,
        environ=environ,
        sets=items + env_items + flag_items + user + own,
        host_paths=host_paths,
    )
    # rules and profiles key on the layout's declared parallelism, not on the base layout's name
    eff.parallel = {"tensor": spec.tensor_parallel, "pipeline": spec.pipeline_parallel, "data": spec.data_parallel}
    return NodeConfig(layout, spec, role, eff, lws)


def all_nodes(loaded: Any, layout: str, **kw: Any) -> list[NodeConfig]:
    recipe = loaded.recipe if hasattr(loaded, "recipe") else loaded
    return [node_config(loaded, layout, n, **kw) for n in range(multinode_spec(recipe, layout).nodes)]
