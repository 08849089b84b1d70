"""Gather host facts: run the management tools (bounded in time), read /proc, ask docker.

Read-only: never changes clocks, power or anything else. Every probe that cannot run leaves
its fact None and adds a note. Commands go through a `Runner` so tests can replay recorded
outputs as if the tools were installed.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable

from recipekit import backend_discovery as discovery
from recipekit.tools.doctor import parsers
from recipekit.tools.doctor.facts import DiskFact, DockerFact, Facts, HostFacts, PortFact


class Runner:
    """Runs host commands. `which` + `run` are the only ways collect touches the tools."""

    def which(self, name: str) -> str | None:
        return shutil.which(name)

    def run(self, argv: list[str], timeout: float = 30.0) -> tuple[int, str, str]:
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
            return r.returncode, r.stdout, r.stderr
        except subprocess.TimeoutExpired:
            return 124, "", f"timed out after {timeout:.0f}s"
        except OSError as e:
            return 127, "", str(e)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def meminfo(text: str | None = None) -> tuple[int | None, int | None]:
    """(MemTotal, MemAvailable) in bytes from /proc/meminfo."""
    text = text if text is not None else _read("/proc/meminfo")
    vals: dict[str, int] = {}
    for line in (text or "").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            vals[key.strip()] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return vals.get("MemTotal"), vals.get("MemAvailable")


def disk_fact(path: Path) -> DiskFact:
    """Free space where `path` is (or will be): the nearest existing ancestor is measured."""
    p = Path(path).expanduser().absolute()
    probe = p
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    du = shutil.disk_usage(probe)
    return DiskFact(path=str(p), measured_at=str(probe), free_bytes=du.free, total_bytes=du.total)


def docker_fact(runner: Runner) -> DockerFact:
    """Docker daemon facts through the CLI (`docker info` JSON), else docker-py, else none."""
    cli = runner.which("docker") is not None
    if cli:
        rc, out, err = runner.run(["docker", "info", "--format", "{{json .}}"], timeout=20)
        if rc == 0 and out.strip():
            try:
                return _docker_from_info(json.loads(out), cli=True)
            except json.JSONDecodeError:
                pass
        error = (err or out).strip().splitlines()[-1] if (err or out).strip() else f"docker info exit {rc}"
    else:
        error = "no docker CLI on PATH"
    if os.environ.get("DOCKER_HOST") or Path("/var/run/docker.sock").exists():
        try:
            import docker  # lazy: optional dependency, pulls docker (docker-py; only when a daemon socket is plausible)

            client = docker.from_env(timeout=10)
            try:
                return _docker_from_info(client.info(), cli=cli)
            finally:
                client.close()
        except Exception as e:  # any failure to reach the daemon is a fact, not a crash
            error = f"{error}; docker-py: {type(e).__name__}: {str(e)[:200]}"
    return DockerFact(cli=cli, reachable=False, error=error)


def _docker_from_info(info: dict, cli: bool) -> DockerFact:
    if info.get("ServerErrors"):
        return DockerFact(cli=cli, reachable=False, error="; ".join(info["ServerErrors"])[:300])
    return DockerFact(
        cli=cli,
        reachable=True,
        server_version=info.get("ServerVersion"),
        runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())),
        default_runtime=info.get("DefaultRuntime"),
    )


def port_free(host: str, port: int) -> bool:
    """True when a listener could bind host:port now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def _query(runner: Runner, argv: list[str], timeout: float, parse: Callable[[str], Any], notes: list[str]) -> Any:
    """Run a vendor query tool and parse its output; a failed run or parse becomes a note and None."""
    label = " ".join(argv)
    rc, out, err = runner.run(argv, timeout=timeout)
    if rc != 0:
        notes.append(f"{label} failed (exit {rc}): {(err or out).strip()[:200]}")
        return None
    try:
        return parse(out)
    except ValueError as e:
        notes.append(f"{label}: {e}")
        return None


def _with_compute_caps(runner: Runner, accels: list, notes: list[str]) -> list:
    """The cards with their compute capability (not in `nvidia-smi -q -x`; its own query)."""
    if not accels:
        return accels
    caps = _query(
        runner,
        ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
        30,
        parsers.parse_compute_caps,
        notes,
    )
    if not caps or len(caps) != len(accels):
        return accels
    return [replace(a, compute_capability=c) for a, c in zip(accels, caps)]


def accelerator_summary(facts: Facts) -> dict[str, Any]:
    """What `recipe apply auto` matches recipes on (recipekit/catalog.py): the accelerator kind
    (the discovered backend whose device vendor the cards report), count, names, compute capability."""
    vendor = facts.accelerators[0].vendor if facts.accelerators else None
    cards = [a for a in facts.accelerators if a.vendor == vendor]
    caps = [a.compute_capability for a in cards if a.compute_capability]
    return {
        "accelerator": discovery.accelerator_of_vendor(vendor),
        "count": len(cards),
        "models": [a.name for a in cards],
        "compute_capability": caps[0] if caps else None,
    }


def collect_host(
    model_dir: Path | None = None,
    ports: Iterable[tuple[str, int]] = (),
    runner: Runner | None = None,
    with_docker: bool = True,
) -> HostFacts:
    """The host part of the facts (CPU, memory, kernel, disk, docker, ports), without the
    accelerator tools; bench reports take their host facts from here too."""
    total, avail = meminfo()
    oc = _read("/proc/sys/vm/overcommit_memory")
    try:
        cpus: int | None = len(os.sched_getaffinity(0))  # the CPUs this process may use
    except AttributeError:
        cpus = os.cpu_count()
    boot = _read("/proc/sys/kernel/random/boot_id")
    cpuinfo = _read("/proc/cpuinfo")
    return HostFacts(
        cpu_count=cpus,
        ram_total_bytes=total,
        ram_available_bytes=avail,
        overcommit_memory=int(oc) if oc and oc.strip().isdigit() else None,
        boot_id=boot.strip() if boot else None,
        kernel=platform.release(),
        disk=disk_fact(model_dir) if model_dir else None,
        docker=docker_fact(runner or Runner()) if with_docker else None,
        ports=tuple(PortFact(port=p, host=h, free=port_free(h, p)) for h, p in ports),
        os=platform.system(),
        machine=platform.machine(),
        cpu_model=parsers.parse_cpuinfo_model(cpuinfo) if cpuinfo else None,
    )


def collect_facts(
    model_dir: Path | None = None,
    ports: Iterable[tuple[str, int]] = (),
    runner: Runner | None = None,
    with_docker: bool = True,
) -> Facts:
    runner = runner or Runner()
    notes: list[str] = []
    accels: list = []
    source = driver = None
    matrix = None
    if runner.which("nvidia-smi"):
        got = _query(runner, ["nvidia-smi", "-q", "-x"], 60, parsers.parse_nvidia_smi_xml, notes)
        if got is not None:
            (driver, accels), source = got, "nvidia-smi"
        accels = _with_compute_caps(runner, accels, notes)
        if len(accels) > 1:
            rc, out, err = runner.run(["nvidia-smi", "topo", "-p2p", "r"], timeout=30)
            try:
                matrix = parsers.parse_topo_p2p(out, "r") if rc == 0 else None
            except ValueError as e:
                notes.append(f"nvidia-smi topo -p2p r: {e}")
    else:
        notes.append("nvidia-smi not found")
    if not accels and runner.which("hl-smi"):
        got = _query(runner, ["hl-smi", "-q"], 60, parsers.parse_hl_smi_q, notes)
        if got is not None:
            (driver, accels), source = got, "hl-smi"
    elif not accels:
        notes.append("hl-smi not found")

    host = collect_host(model_dir, ports, runner, with_docker)
    return Facts(
        accelerators=tuple(accels),
        accelerator_source=source,
        driver_version=driver,
        p2p_matrix=matrix,
        host=host,
        notes=tuple(notes),
    )
