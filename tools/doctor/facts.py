"""Host facts: what the doctor observed, as frozen, JSON-serializable dataclasses.

Facts carry no policy. Checks (checks.py) read them and decide OK/WARN/FAIL/SKIP against a
recipe's requirements. A value the host did not report is None, never a guess.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Accelerator:
    """One accelerator card as its management tool reports it."""

    vendor: str  # "nvidia" | "habana"
    index: int
    name: str
    uuid: str | None = None
    bus_id: str | None = None
    memory_total_mib: int | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    power_limit_w: float | None = None
    driver_version: str | None = None
    compute_capability: str | None = None  # NVIDIA sm version, e.g. "8.0" (nvidia-smi --query-gpu=compute_cap)


@dataclass(frozen=True)
class P2PMatrix:
    """`nvidia-smi topo -p2p <mode>`: status per ordered pair (row -> column).

    Codes as nvidia-smi prints them: X (self), OK, CNS, GNS, TNS, NS, U.
    """

    mode: str  # "r" (read), "w", "n" (nvlink), "a" (atomics), "p" (prop)
    devices: tuple[str, ...]
    status: tuple[tuple[str, ...], ...]

    def pairs(self) -> list[tuple[int, int, str]]:
        return [(i, j, self.status[i][j]) for i in range(len(self.devices)) for j in range(len(self.devices)) if i != j]

    def all_ok(self) -> bool:
        return bool(self.pairs()) and all(s == "OK" for _, _, s in self.pairs())

    def not_ok(self) -> list[str]:
        return [f"{self.devices[i]}->{self.devices[j]}={s}" for i, j, s in self.pairs() if s != "OK"]


@dataclass(frozen=True)
class DiskFact:
    path: str  # the directory asked about (the model dir)
    measured_at: str  # the nearest existing ancestor actually measured
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class DockerFact:
    cli: bool  # a docker client binary is on PATH
    reachable: bool  # a daemon answered
    server_version: str | None = None
    runtimes: tuple[str, ...] = ()
    default_runtime: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class PortFact:
    port: int
    host: str
    free: bool


@dataclass(frozen=True)
class HostFacts:
    cpu_count: int | None = None
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    overcommit_memory: int | None = None  # vm.overcommit_memory: 0 heuristic, 1 always, 2 never
    boot_id: str | None = None
    kernel: str | None = None
    disk: DiskFact | None = None
    docker: DockerFact | None = None
    ports: tuple[PortFact, ...] = ()
    os: str | None = None  # platform.system(): "Linux"
    machine: str | None = None  # platform.machine(): "x86_64"
    cpu_model: str | None = None  # /proc/cpuinfo's first "model name"


@dataclass(frozen=True)
class Facts:
    """Everything observed. `source` says which tool reported the accelerators."""

    accelerators: tuple[Accelerator, ...] = ()
    accelerator_source: str | None = None  # "nvidia-smi" | "hl-smi" | None
    driver_version: str | None = None
    p2p_matrix: P2PMatrix | None = None
    host: HostFacts = field(default_factory=HostFacts)
    notes: tuple[str, ...] = ()  # tools missing, commands that failed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
