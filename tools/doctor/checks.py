"""Checks: policy over facts. Each check compares one fact with what the recipe needs and
returns OK / WARN / FAIL / SKIP with a one-line message and hint. FAIL means the recipe cannot
run as configured on this host (the CLI exits 3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from recipekit.tools.doctor.facts import Facts
from recipekit.tools.doctor.requirements import GIB, Requirements

OK, WARN, FAIL, SKIP = "OK", "WARN", "FAIL", "SKIP"


@dataclass(frozen=True)
class Check:
    id: str
    status: str
    message: str
    hint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "message": self.message, "hint": self.hint}


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f} GiB"


def _layout_hint(req: Requirements) -> str | None:
    if req.fallback_layouts:
        return f"use LAYOUT={req.fallback_layouts[0]} (needs neither P2P nor a x16 link)"
    return None


def check_accelerators(f: Facts, req: Requirements) -> list[Check]:
    out: list[Check] = []
    if not req.vendor:
        return out
    cards = [a for a in f.accelerators if a.vendor == req.vendor]
    tool = "nvidia-smi" if req.vendor == "nvidia" else "hl-smi"
    if len(cards) < req.count:
        out.append(
            Check(
                "accelerator-count",
                FAIL,
                f"{len(cards)} {req.vendor} accelerator(s) found, the recipe needs {req.count}"
                + ("" if f.accelerator_source else f" ({tool} did not report any)"),
                f"run on a host with {req.count}x {req.accelerator}"
                + ("" if f.accelerator_source else f"; check that {tool} works"),
            )
        )
    else:
        out.append(Check("accelerator-count", OK, f"{len(cards)} {req.vendor} accelerator(s), {req.count} needed"))
    if not cards:
        return out
    if req.models:
        other = sorted({a.name for a in cards if not any(m.lower() in a.name.lower() for m in req.models)})
        if other:
            out.append(
                Check(
                    "accelerator-model",
                    WARN,
                    f"found {', '.join(other)}; the recipe is for {req.accelerator}",
                    "numbers and limits in the recipe were measured on other cards",
                )
            )
        else:
            out.append(Check("accelerator-model", OK, f"{cards[0].name}"))
    if req.min_memory_mib:
        small = [a for a in cards if a.memory_total_mib is not None and a.memory_total_mib < req.min_memory_mib]
        if small:
            unlock = next((n for n in req.hardware_notes if "unlock" in n.lower()), None)
            shown = ", ".join(f"GPU{a.index}={a.memory_total_mib} MiB" for a in small[:8])
            out.append(
                Check(
                    "accelerator-memory",
                    FAIL,
                    f"{len(small)} card(s) below {req.min_memory_mib} MiB: {shown}",
                    unlock or f"the recipe needs at least {req.min_memory_mib} MiB per card",
                )
            )
        elif any(a.memory_total_mib is None for a in cards):
            out.append(Check("accelerator-memory", WARN, "the tool did not report card memory"))
        else:
            out.append(
                Check(
                    "accelerator-memory",
                    OK,
                    f"every card has >= {req.min_memory_mib} MiB "
                    f"(smallest {min(a.memory_total_mib or 0 for a in cards)} MiB)",
                )
            )
    return out


def check_pcie(f: Facts, req: Requirements) -> list[Check]:
    if not req.pcie_width_min:
        return []
    cards = [a for a in f.accelerators if a.vendor == req.vendor]
    if not cards:
        return [Check("pcie-link-width", SKIP, "no accelerator to check")]
    narrow = [a for a in cards if a.pcie_width_current is not None and a.pcie_width_current < req.pcie_width_min]
    what = f"layout {req.layout} (TP{req.tensor_parallel})" if req.layout else "the recipe"
    if narrow:
        shown = ", ".join(f"GPU{a.index}=x{a.pcie_width_current}" for a in narrow[:8])
        return [
            Check(
                "pcie-link-width",
                FAIL,
                f"{what} needs PCIe x{req.pcie_width_min}; found {shown}",
                _layout_hint(req) or "seat the cards in x16 slots",
            )
        ]
    if any(a.pcie_width_current is None for a in cards):
        return [Check("pcie-link-width", WARN, "the tool did not report the PCIe link width")]
    gens = sorted({a.pcie_gen_current for a in cards if a.pcie_gen_current})
    return [
        Check(
            "pcie-link-width",
            OK,
            f"every card at x{min(a.pcie_width_current or 0 for a in cards)} or wider"
            + (f" (gen {'/'.join(map(str, gens))} now)" if gens else ""),
        )
    ]


def check_p2p(f: Facts, req: Requirements | None, probe: Any | None) -> list[Check]:
    need = req.p2p if req else "n/a"
    bad_status = FAIL if need == "required" else WARN
    hint = _layout_hint(req) if req else None
    if probe is not None:
        src = "cached probe" if getattr(probe, "cached", False) else "probe"
        if probe.verdict == "skipped":
            st = bad_status if need == "required" else SKIP
            return [
                Check(
                    "p2p",
                    st,
                    f"P2P probe skipped: {probe.reason}",
                    "pass --python <a python with torch+CUDA>" if "GPU" not in probe.reason else hint,
                )
            ]
        if probe.verdict == "ok" and probe.p2p_usable:
            return [Check("p2p", OK, f"P2P verified by the {src}: {probe.reason}")]
        if probe.verdict in ("wrong data", "hang"):
            # Wrong data is a host fault whatever the recipe: never WARN it away.
            return [
                Check(
                    "p2p",
                    FAIL,
                    f"P2P {probe.verdict} ({src}): {probe.reason}",
                    hint or "run with NCCL_P2P_DISABLE=1 / a layout without P2P",
                )
            ]
        st = bad_status if need in ("required", "optional") else WARN
        return [Check("p2p", st, f"P2P not usable ({src}: {probe.verdict}): {probe.reason}", hint)]
    if need not in ("required", "optional"):
        return []
    m = f.p2p_matrix
    if m is None:
        cards = [a for a in f.accelerators if a.vendor == "nvidia"]
        if len(cards) < 2:
            return [Check("p2p", SKIP, "fewer than 2 NVIDIA GPUs: nothing to check")]
        return [Check("p2p", WARN, "no P2P matrix from nvidia-smi topo -p2p r", "run `recipe doctor --p2p-probe`")]
    if not m.all_ok():
        bad = m.not_ok()
        return [
            Check(
                "p2p",
                bad_status,
                f"P2P read not supported: {', '.join(bad[:6])}" + (f" (+{len(bad) - 6})" if len(bad) > 6 else ""),
                hint,
            )
        ]
    return [
        Check(
            "p2p",
            WARN if need == "required" else OK,
            "P2P advertised on every pair (nvidia-smi topo -p2p r), not verified",
            "run `recipe doctor --p2p-probe`: advertised P2P can still return wrong data",
        )
    ]


def check_host(f: Facts, req: Requirements | None, verified_bytes: int = 0) -> list[Check]:
    out: list[Check] = []
    h = f.host
    if req and req.host_ram_bytes:
        if h.ram_total_bytes is None:
            out.append(Check("host-ram", WARN, "could not read MemTotal"))
        elif h.ram_total_bytes < req.host_ram_bytes:
            out.append(
                Check(
                    "host-ram",
                    FAIL,
                    f"{_gib(h.ram_total_bytes)} RAM, the recipe needs {_gib(req.host_ram_bytes)}",
                    "add RAM or choose a recipe for a smaller host",
                )
            )
        else:
            out.append(Check("host-ram", OK, f"{_gib(h.ram_total_bytes)} RAM (needs {_gib(req.host_ram_bytes)})"))
    if req and req.cpu_cores_min and h.cpu_count is not None:
        st = OK if h.cpu_count >= req.cpu_cores_min else FAIL
        out.append(
            Check(
                "cpu-cores",
                st,
                f"{h.cpu_count} CPU core(s) usable, {req.cpu_cores_min} needed",
                None if st == OK else "run on a host with more cores",
            )
        )
    if req and req.disk_bytes and h.disk:
        need = max(0, req.disk_bytes - verified_bytes)
        where = f"{h.disk.path}" + ("" if h.disk.measured_at == h.disk.path else f" (measured at {h.disk.measured_at})")
        have = f"; {_gib(verified_bytes)} already downloaded and verified" if verified_bytes else ""
        if h.disk.free_bytes < need:
            out.append(
                Check(
                    "disk-space",
                    FAIL,
                    f"{_gib(h.disk.free_bytes)} free at {where}, {_gib(need)} still needed{have}",
                    "free space there or set MODELS_DIR to a larger disk",
                )
            )
        else:
            out.append(Check("disk-space", OK, f"{_gib(h.disk.free_bytes)} free at {where}, {_gib(need)} needed{have}"))
    if h.overcommit_memory == 2:
        out.append(
            Check(
                "overcommit-memory",
                WARN,
                "vm.overcommit_memory=2 (strict accounting)",
                "large mmaps of checkpoints and pinned Engram tables can fail; 0 is the default",
            )
        )
    elif h.overcommit_memory is not None:
        out.append(Check("overcommit-memory", OK, f"vm.overcommit_memory={h.overcommit_memory}"))
    return out


def check_docker(f: Facts, req: Requirements | None) -> list[Check]:
    d = f.host.docker
    if d is None:
        return []
    if not (req and req.docker):
        if d.reachable:
            return [Check("docker", OK, f"docker {d.server_version}; runtimes: {', '.join(d.runtimes) or 'none'}")]
        return [
            Check(
                "docker",
                SKIP,
                f"docker not reachable ({d.error}); this recipe does not need it"
                if req
                else f"docker not reachable ({d.error})",
            )
        ]
    if not d.reachable:
        return [
            Check(
                "docker",
                FAIL,
                f"the recipe runs in docker, but no daemon answered: {d.error}",
                "install docker and start dockerd (or set DOCKER_HOST)",
            )
        ]
    out = [Check("docker", OK, f"docker {d.server_version}")]
    for rt in req.docker_runtimes:
        if rt in d.runtimes:
            out.append(Check(f"docker-runtime-{rt}", OK, f"runtime '{rt}' registered"))
        else:
            fix = {
                "nvidia": "install nvidia-container-toolkit, then `nvidia-ctk runtime configure --runtime=docker`",
                "habana": "install habanalabs-container-runtime and register it in /etc/docker/daemon.json",
            }
            out.append(
                Check(
                    f"docker-runtime-{rt}",
                    FAIL,
                    f"docker has no '{rt}' runtime (has: {', '.join(d.runtimes) or 'none'})",
                    fix.get(rt),
                )
            )
    return out


def check_ports(f: Facts) -> list[Check]:
    return [
        Check("port", OK, f"{p.host}:{p.port} is free")
        if p.free
        else Check(
            "port",
            WARN,
            f"{p.host}:{p.port} is in use",
            "fine if it is this recipe's own server; otherwise set PORT=<free port>",
        )
        for p in f.host.ports
    ]


def check_no_recipe(f: Facts) -> list[Check]:
    if f.accelerators:
        names = sorted({a.name for a in f.accelerators})
        return [
            Check(
                "accelerators",
                OK,
                f"{len(f.accelerators)} accelerator(s) via {f.accelerator_source}: {', '.join(names)}",
            )
        ]
    return [
        Check("accelerators", SKIP, "no accelerator found (nvidia-smi / hl-smi): only the local CPU recipe applies")
    ]


def run_checks(f: Facts, req: Requirements | None, probe: Any | None = None, verified_bytes: int = 0) -> list[Check]:
    out: list[Check] = []
    if req is None:
        out += check_no_recipe(f)
    else:
        out += check_accelerators(f, req)
        out += check_pcie(f, req)
    out += check_p2p(f, req, probe)
    out += check_host(f, req, verified_bytes)
    out += check_docker(f, req)
    out += check_ports(f)
    return out
