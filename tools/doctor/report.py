"""The doctor's report: facts apart from checks, the P2P probe when it ran, an exit code."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from recipekit.errors import ExitCode
from recipekit.tools.doctor.checks import FAIL, Check
from recipekit.tools.doctor.facts import Facts

REPORT_SCHEMA = 1


@dataclass
class DoctorReport:
    facts: Facts
    checks: list[Check]
    recipe_id: str | None = None
    layout: str | None = None
    p2p_probe: Any | None = None  # recipekit.tools.p2p.probe.ProbeResult
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def exit_code(self) -> int:

        return int(ExitCode.HOST_CHECK_FAILED if self.failed else ExitCode.OK)

    def summary(self) -> dict[str, int]:
        out = {"OK": 0, "WARN": 0, "FAIL": 0, "SKIP": 0}
        for c in self.checks:
            out[c.status] = out.get(c.status, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": REPORT_SCHEMA,
            "recipe": self.recipe_id,
            "layout": self.layout,
            "facts": self.facts.to_dict(),
            "checks": [c.to_dict() for c in self.checks],
            "p2p_probe": self.p2p_probe.to_dict() if self.p2p_probe is not None else None,
            "summary": self.summary(),
            "exit_code": self.exit_code,
        }

    def render(self, console) -> None:
        """Human output (rich)."""
        from rich.table import Table  # lazy: pulls rich

        f = self.facts
        h = f.host
        title = f"doctor: {self.recipe_id or 'host only'}" + (f" (layout {self.layout})" if self.layout else "")
        console.print(f"[bold]{title}[/bold]")
        if f.accelerators:
            t = Table("#", "name", "memory", "PCIe now/max", "power limit", "uuid", box=None, pad_edge=False)
            for a in f.accelerators:
                t.add_row(
                    str(a.index),
                    a.name,
                    f"{a.memory_total_mib} MiB" if a.memory_total_mib else "?",
                    f"gen{a.pcie_gen_current} x{a.pcie_width_current} / gen{a.pcie_gen_max} x{a.pcie_width_max}",
                    f"{a.power_limit_w:.0f} W" if a.power_limit_w else "?",
                    a.uuid or "?",
                )
            console.print(f"accelerators ({f.accelerator_source}, driver {f.driver_version}):")
            console.print(t)
        else:
            console.print("accelerators: none found")
        if f.p2p_matrix:
            console.print(f"P2P read matrix: {'all OK' if f.p2p_matrix.all_ok() else ', '.join(f.p2p_matrix.not_ok())}")
        gib = 1 << 30
        line = [f"cpus {h.cpu_count}"]
        if h.ram_total_bytes:
            line.append(f"RAM {h.ram_total_bytes / gib:.1f} GiB ({(h.ram_available_bytes or 0) / gib:.1f} available)")
        if h.disk:
            line.append(f"disk {h.disk.free_bytes / gib:.1f} GiB free at {h.disk.measured_at}")
        if h.overcommit_memory is not None:
            line.append(f"overcommit {h.overcommit_memory}")
        if h.docker:
            line.append(
                f"docker {h.docker.server_version or 'unreachable'}"
                + (f" [{', '.join(h.docker.runtimes)}]" if h.docker.runtimes else "")
            )
        console.print("host: " + ", ".join(line))
        if self.p2p_probe is not None:
            p = self.p2p_probe
            console.print(f"P2P probe{' (cached)' if p.cached else ''}: [bold]{p.verdict}[/bold] - {p.reason}")
            for ph in p.phases:
                console.print(
                    f"  {ph.name:<18} {ph.verdict:<10} {ph.checked}/{ph.expected} checked, "
                    f"{ph.seconds:.1f}s {ph.detail}"
                )
        colors = {"OK": "green", "WARN": "yellow", "FAIL": "red", "SKIP": "dim"}
        for c in self.checks:
            hint = f"  [dim](hint: {c.hint})[/dim]" if c.hint else ""
            console.print(f"[{colors[c.status]}]{c.status:<4}[/{colors[c.status]}] {c.id}: {c.message}{hint}")
        s = self.summary()
        console.print(f"{s['OK']} ok, {s['WARN']} warn, {s['FAIL']} fail, {s['SKIP']} skip")
