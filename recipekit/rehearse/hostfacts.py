"""The host stand-in: the doctor's own collector reads recorded tool outputs (`nvidia-smi -q -x`,
`nvidia-smi topo -p2p r`, `hl-smi -q`) of the recipe's hardware as if the tools were installed,
and the host sizes (RAM, CPUs, free disk, docker runtimes) the profile declares; docker
reachability and the ports are this machine's, observed. The doctor's checks run unchanged.

Profiles are data: recipekit/rehearse/data/hosts/profiles.json.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from importlib.resources import files
from pathlib import Path
from typing import Any, Optional

from recipekit.bounded import read_json, read_text
from recipekit.errors import ExitCode, RecipekitError, did_you_mean
from recipekit.tools.doctor.collect import Runner, collect_facts
from recipekit.tools.doctor.facts import DiskFact, Facts

GIB = 1024**3
# the recorded outputs are a few KiB; a profile naming a larger file is a mistake
MAX_RECORDED_BYTES = 1 << 20


def hosts_dir() -> Path:
    return Path(str(files("recipekit.rehearse") / "data" / "hosts"))


@dataclass(frozen=True)
class HostProfile:
    name: str
    about: str
    tools: dict[str, str]  # "argv joined by spaces" -> recorded output file (relative to hosts_dir)
    host: dict[str, Any]

    def describe(self) -> str:
        return f"host stand-in {self.name}: {self.about}"


def _profiles_doc() -> dict:
    return read_json(hosts_dir() / "profiles.json", "host stand-in profiles", MAX_RECORDED_BYTES)


def profile_names() -> list[str]:
    return sorted(_profiles_doc()["profiles"])


def profile_for(backend: str, name: Optional[str] = None) -> Optional[HostProfile]:
    """The named profile, else the backend's default; None for a backend that runs on this host
    (the CPU recipe: its hardware is here)."""
    doc = _profiles_doc()
    name = name or doc["default_for_backend"].get(backend)
    if name is None:
        return None
    p = doc["profiles"].get(name)
    if p is None:
        raise RecipekitError(
            code="unknown-host-profile",
            exit_code=ExitCode.INVALID_INPUT,
            location="--host",
            message=f"no host stand-in named '{name}'",
            hint=did_you_mean(name, list(doc["profiles"])) or f"profiles: {', '.join(sorted(doc['profiles']))}",
        )
    return HostProfile(name=name, about=p["about"], tools=dict(p["tools"]), host=dict(p["host"]))


class RecordedTools(Runner):
    """Answers the vendor tools from recorded outputs; anything else (docker) runs for real."""

    def __init__(self, profile: HostProfile):
        self.profile = profile
        self.calls: list[list[str]] = []

    def _recorded(self, argv: list[str]) -> Optional[Path]:
        rel = self.profile.tools.get(" ".join(argv))
        return hosts_dir() / rel if rel else None

    def which(self, name: str) -> Optional[str]:
        if any(k.split()[0] == name for k in self.profile.tools):
            return f"<recorded {name}>"
        if name in ("nvidia-smi", "hl-smi"):
            return None  # this machine's own cards (if any) are not the recipe's hardware
        return super().which(name)

    def run(self, argv: list[str], timeout: float = 30.0) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        path = self._recorded(argv)
        if path is not None:
            return 0, read_text(path, "recorded tool output", MAX_RECORDED_BYTES), ""
        if argv and argv[0] in ("nvidia-smi", "hl-smi"):
            return 127, "", f"not recorded in host stand-in {self.profile.name}"
        return super().run(argv, timeout)


def standin_facts(profile: HostProfile, model_dir: Path, ports, with_docker: bool) -> Facts:
    """The facts the doctor checks: the profile's cards and host sizes, this machine's docker
    daemon (reachable or not, as observed) and ports."""
    facts = collect_facts(model_dir=model_dir, ports=ports, runner=RecordedTools(profile), with_docker=with_docker)
    h = profile.host
    host = facts.host
    disk = DiskFact(
        path=str(model_dir),
        measured_at=f"<host stand-in {profile.name}>",
        free_bytes=int(h["disk_free_gib"] * GIB),
        total_bytes=int(h["disk_free_gib"] * GIB),
    )
    docker = host.docker
    if docker is not None and docker.reachable:
        docker = replace(docker, runtimes=tuple(sorted(set(docker.runtimes) | set(h.get("docker_runtimes", ())))))
    host = replace(
        host,
        cpu_count=int(h["cpu_count"]),
        ram_total_bytes=int(h["ram_gib"] * GIB),
        ram_available_bytes=int(h["ram_gib"] * GIB),
        overcommit_memory=int(h.get("overcommit_memory", 0)),
        disk=disk,
        docker=docker,
    )
    return replace(facts, host=host)
