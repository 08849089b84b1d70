"""Parsers for accelerator management tools: `nvidia-smi -q -x`, `nvidia-smi topo -p2p`,
`nvidia-smi --query-gpu ... --format=csv`, `hl-smi -q` and `hl-smi -Q ... -f csv`.

Pure functions from text to facts; they never run a command. Unknown or "N/A" fields become
None. A text that is not the tool's output raises ValueError with what was missing.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET

from recipekit.tools.doctor.facts import Accelerator, P2PMatrix

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NUM = re.compile(r"[-+]?\d+(?:\.\d+)?")
# PCIe transfer rate per lane -> generation (hl-smi prints the rate, not the generation)
_GTS_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    m = _NUM.search(text)
    return float(m.group()) if m else None


def _int(text: str | None) -> int | None:
    v = _num(text)
    return int(v) if v is not None else None


def _clean(text: str | None) -> str | None:
    if text is None:
        return None
    t = text.strip()
    return None if t in ("", "N/A", "[N/A]", "[Not Supported]", "Not Supported") else t


# --- /proc/cpuinfo ------------------------------------------------------------------------


def parse_cpuinfo_model(text: str) -> str | None:
    """The CPU model from /proc/cpuinfo: the first `model name` line's value (None when absent)."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name":
            return _clean(value)
    return None


# --- nvidia-smi -q -x ---------------------------------------------------------------------


def parse_nvidia_smi_xml(text: str) -> tuple[str | None, list[Accelerator]]:
    """Return (driver_version, accelerators) from `nvidia-smi -q -x` output."""
    try:
        root = ET.fromstring(text.encode() if isinstance(text, str) else text)
    except ET.ParseError as e:
        raise ValueError(f"not nvidia-smi XML: {e}") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"not nvidia-smi XML: root element is <{root.tag}>")
    driver = _clean(root.findtext("driver_version"))
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):

        def t(path: str) -> str | None:
            return _clean(gpu.findtext(path))  # noqa: B023  (t is used within this iteration only)

        # The power limit moved from <power_readings> to <gpu_power_readings> in newer drivers.
        power = (
            t("gpu_power_readings/current_power_limit")
            or t("power_readings/power_limit")
            or t("power_readings/current_power_limit")
        )
        gpus.append(
            Accelerator(
                vendor="nvidia",
                index=index,
                name=t("product_name") or "unknown",
                uuid=t("uuid"),
                bus_id=t("pci/pci_bus_id") or gpu.get("id"),
                memory_total_mib=_int(t("fb_memory_usage/total")),
                pcie_gen_current=_int(t("pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
                pcie_gen_max=_int(t("pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
                pcie_width_current=_int(t("pci/pci_gpu_link_info/link_widths/current_link_width")),
                pcie_width_max=_int(t("pci/pci_gpu_link_info/link_widths/max_link_width")),
                power_limit_w=_num(power),
                driver_version=driver,
            )
        )
    return driver, gpus


# --- nvidia-smi --query-gpu=... --format=csv ----------------------------------------------

_QUERY_FIELDS = {
    "index": "index",
    "name": "name",
    "uuid": "uuid",
    "pci.bus_id": "bus_id",
    "memory.total": "memory_total_mib",
    "pcie.link.gen.current": "pcie_gen_current",
    "pcie.link.gen.max": "pcie_gen_max",
    "pcie.link.width.current": "pcie_width_current",
    "pcie.link.width.max": "pcie_width_max",
    "power.limit": "power_limit_w",
    "driver_version": "driver_version",
}


def parse_compute_caps(text: str) -> list[str]:
    """`nvidia-smi --query-gpu=compute_cap --format=csv,noheader`: one "8.0" a line, in index order."""
    caps = [line.strip() for line in text.splitlines() if line.strip()]
    bad = [c for c in caps if not re.match(r"^[0-9]+\.[0-9]+$", c)]
    if bad:
        raise ValueError(f"not a compute capability: {bad[0]!r}")
    return caps


def parse_nvidia_query_csv(text: str) -> list[Accelerator]:
    """`nvidia-smi --query-gpu=<fields> --format=csv` (with its header line)."""
    rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if r]
    if not rows:
        raise ValueError("empty nvidia-smi CSV")
    header = [h.split(" [")[0].strip() for h in rows[0]]
    if "name" not in header:
        raise ValueError("nvidia-smi CSV without a 'name' column (run with a header line)")
    out = []
    for n, row in enumerate(rows[1:]):
        rec = {_QUERY_FIELDS[h]: _clean(v) for h, v in zip(header, row) if h in _QUERY_FIELDS}
        out.append(_accel_from_record("nvidia", n, rec))
    return out


def _accel_from_record(vendor: str, n: int, rec: dict) -> Accelerator:
    index = _int(rec.get("index"))
    return Accelerator(
        vendor=vendor,
        index=index if index is not None else n,
        name=rec.get("name") or "unknown",
        uuid=rec.get("uuid"),
        bus_id=rec.get("bus_id"),
        memory_total_mib=_int(rec.get("memory_total_mib")),
        pcie_gen_current=_int(rec.get("pcie_gen_current")),
        pcie_gen_max=_int(rec.get("pcie_gen_max")),
        pcie_width_current=_int(rec.get("pcie_width_current")),
        pcie_width_max=_int(rec.get("pcie_width_max")),
        power_limit_w=_num(rec.get("power_limit_w")),
        driver_version=rec.get("driver_version"),
    )


# --- nvidia-smi topo -p2p <mode> ------------------------------------------------------------


def parse_topo_p2p(text: str, mode: str = "r") -> P2PMatrix:
    """The first P2P matrix in `nvidia-smi topo -p2p <mode>` output.

    nvidia-smi underlines the header row with terminal escape codes even when piped; they are
    stripped. Rows are tab-separated: `GPU0<TAB>X<TAB>OK<TAB>`.
    """
    lines = [strip_ansi(line).rstrip("\n") for line in text.splitlines()]
    start = None
    for i, line in enumerate(lines):
        cells = line.split()
        if cells and all(re.fullmatch(r"GPU\d+", c) for c in cells):
            start = i
            devices = tuple(cells)
            break
    if start is None:
        raise ValueError("no P2P matrix header (GPU0 GPU1 ...) found")
    status: list[tuple[str, ...]] = []
    for line in lines[start + 1 : start + 1 + len(devices)]:
        cells = line.split()
        if len(cells) != len(devices) + 1 or cells[0] != devices[len(status)]:
            raise ValueError(f"malformed P2P matrix row: {line.strip()!r}")
        status.append(tuple(cells[1:]))
    if len(status) != len(devices):
        raise ValueError(f"P2P matrix has {len(status)} rows for {len(devices)} devices")
    return P2PMatrix(mode=mode, devices=devices, status=tuple(status))


# --- hl-smi -q ------------------------------------------------------------------------------

_AIP = re.compile(r"^\[(\d+)\]\s+AIP\s+\((\w+)\)\s*(\S+)?")


def parse_hl_smi_q(text: str) -> tuple[str | None, list[Accelerator]]:
    """Return (driver_version, accelerators) from `hl-smi -q` (indented `key : value` blocks,
    one `[N] AIP (accelN) <bus id>` block per card)."""
    driver = None
    cards: list[dict] = []
    stack: list[tuple[int, str]] = []  # (indent, section name) of the current card
    for raw in text.splitlines():
        if not raw.strip():
            continue
        indent = len(raw.expandtabs(8)) - len(raw.expandtabs(8).lstrip())
        line = raw.strip()
        m = _AIP.match(line)
        if m:
            cards.append({"index": m.group(1), "bus_id": m.group(3)})
            stack = []
            continue
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not cards:
            if key == "Driver Version":
                driver = value or None
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not sep or (not value and not key.startswith("[")):
            stack.append((indent, key))  # a section header such as "Memory Usage"
            continue
        path = "/".join([s for _, s in stack] + [key])
        cards[-1].setdefault(path, value)
    if not cards:
        raise ValueError("no '[N] AIP (accelN)' block found: not hl-smi -q output")
    out = []
    for n, c in enumerate(cards):

        def g(*paths: str) -> str | None:
            for p in paths:
                for k, v in c.items():  # noqa: B023  (g is used within this iteration only)
                    if k == p or k.endswith("/" + p):
                        return _clean(v)
            return None

        out.append(
            Accelerator(
                vendor="habana",
                index=int(c["index"]) if c.get("index") is not None else n,
                name=g("Product Name") or "unknown",
                uuid=g("AIP UUID"),
                bus_id=g("PCI/Bus Id") or c.get("bus_id"),
                memory_total_mib=_int(g("Memory Usage/Total")),
                pcie_gen_current=_gen_from_rate(g("Link Speed/Current")),
                pcie_gen_max=_gen_from_rate(g("Link Speed/Max")),
                pcie_width_current=_int(g("Link Width/Current")),
                pcie_width_max=_int(g("Link Width/Max")),
                power_limit_w=_num(g("Power Limit")),
                driver_version=driver,
            )
        )
    return driver, out


def _gen_from_rate(rate: str | None) -> int | None:
    v = _num(rate)
    return _GTS_TO_GEN.get(v) if v is not None else None


# --- hl-smi -Q <fields> -f csv ----------------------------------------------------------------

_HL_FIELDS = {
    "index": "index",
    "name": "name",
    "uuid": "uuid",
    "bus_id": "bus_id",
    "memory.total": "memory_total_mib",
    "driver_version": "driver_version",
    "power.max": "power_limit_w",
    "power.limit": "power_limit_w",
}


def parse_hl_smi_csv(text: str) -> list[Accelerator]:
    """`hl-smi -Q index,name,bus_id,memory.total,driver_version,... -f csv` (header line kept)."""
    rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if r]
    if not rows:
        raise ValueError("empty hl-smi CSV")
    header = [h.split(" [")[0].strip() for h in rows[0]]
    if "index" not in header and "name" not in header:
        raise ValueError("hl-smi CSV without an 'index' or 'name' column (keep the header line)")
    out = []
    for n, row in enumerate(rows[1:]):
        rec = {_HL_FIELDS[h]: _clean(v) for h, v in zip(header, row) if h in _HL_FIELDS}
        out.append(_accel_from_record("habana", n, rec))
    return out
