"""One host detection: the doctor's fact gathering (tools/doctor/) is the only code that probes
the host (CPU, memory, OS, accelerator tools); bench reports take their host facts from it."""

from __future__ import annotations

import re
from pathlib import Path

from recipekit.bench import report
from recipekit.tools.doctor import collect, parsers

ROOT = Path(collect.__file__).resolve().parents[2]

# what probing the host looks like in source: reading its CPU/memory files, running lscpu or an
# accelerator management tool (a quoted argv item), psutil's memory, platform's OS/kernel/machine
PROBES = re.compile(
    r"/proc/cpuinfo|/proc/meminfo|\blscpu\b|[\"'](?:nvidia-smi|hl-smi)[\"']|virtual_memory\("
    r"|platform\.(?:system|release|machine|processor|uname)\(|os\.uname\("
)


def probing_modules(root: Path) -> list[str]:
    """Each module under root's package folders, tools/doctor/ aside, that probes the host."""
    doctor = (root / "tools" / "doctor").resolve()
    return sorted(
        f"{py.relative_to(root)}: {m.group(0)}"
        for folder in ("recipekit", "backends", "bench", "tools", "hybrid", "patches", "recipes")
        for py in (root / folder).rglob("*.py")
        if doctor not in py.resolve().parents
        for m in [PROBES.search(py.read_text(encoding="utf-8"))]
        if m
    )


# the rehearsal's host stand-in names the accelerator tools to answer the doctor's own calls with
# recorded outputs (and to refuse this machine's real ones): it runs none of them
NAMES_WITHOUT_PROBING = {'recipekit/rehearse/hostfacts.py: "nvidia-smi"'}
# the GPU host's result scripts (kernels_driver.driver) ask nvidia-smi for the driver version only where the doctor's
# collector cannot import (the device image has no pydantic), and their output says so beside the figure
DEVICE_SCRIPT_FALLBACK = {'recipekit/cli/kernels_driver.py: "nvidia-smi"'}


def test_no_module_outside_the_doctor_probes_the_host():
    assert [p for p in probing_modules(ROOT) if p not in NAMES_WITHOUT_PROBING | DEVICE_SCRIPT_FALLBACK] == []


def test_the_probe_pattern_sees_a_second_detection(tmp_path):
    for i, line in enumerate(
        [
            'open("/proc/cpuinfo").read()',
            'subprocess.run(["nvidia-smi", "-q"])',
            "psutil.virtual_memory().total",
            "platform.release()",
            "subprocess.run(['lscpu'])",
        ]
    ):
        mod = tmp_path / "bench" / f"m{i}.py"
        mod.parent.mkdir(exist_ok=True)
        mod.write_text(f"x = {line}\n")
    assert len(probing_modules(tmp_path)) == 5
    (tmp_path / "tools" / "doctor").mkdir(parents=True)
    (tmp_path / "tools" / "doctor" / "collect.py").write_text('open("/proc/cpuinfo")\n')
    assert len(probing_modules(tmp_path)) == 5  # the doctor itself may


def test_cpu_model_is_parsed_from_cpuinfo():
    text = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Fake CPU 9000 @ 3.00GHz\n\nmodel name\t: other\n"
    assert parsers.parse_cpuinfo_model(text) == "Fake CPU 9000 @ 3.00GHz"
    assert parsers.parse_cpuinfo_model("processor\t: 0\nmodel\t: 85\n") is None


def test_bench_host_facts_are_the_doctors(monkeypatch):
    files = {
        "/proc/cpuinfo": "processor\t: 0\nmodel name\t: Fake CPU 9000\n",
        "/proc/meminfo": "MemTotal:       8388608 kB\nMemAvailable:   4194304 kB\n",
    }
    real_read = collect._read
    monkeypatch.setattr(collect, "_read", lambda path: files.get(path, real_read(path)))
    host = collect.collect_host(with_docker=False)
    facts = report.host_facts(host)
    assert facts["cpu_model"] == host.cpu_model == "Fake CPU 9000"
    assert facts["mem_total_gib"] == 8.0 and host.ram_total_bytes == 8 * 2**30
    assert (facts["os"], facts["kernel"], facts["machine"], facts["cpu_count"]) == (
        host.os,
        host.kernel,
        host.machine,
        host.cpu_count,
    )
    assert set(facts) == {"os", "kernel", "machine", "python", "cpu_count", "mem_total_gib", "cpu_model"}
    assert "boot_id" not in facts  # a per-boot identifier is no business of a published report
