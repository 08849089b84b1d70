"""Doctor: recorded/sample tool outputs parse to exact facts; checks on synthetic hosts;
JSON shape and exit codes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from recipekit.tools.doctor import parsers, run_doctor
from recipekit.tools.doctor.checks import FAIL, OK, SKIP, WARN, run_checks
from recipekit.tools.doctor.collect import Runner, collect_facts, meminfo
from recipekit.tools.doctor.facts import DiskFact, DockerFact, Facts, HostFacts
from recipekit.tools.doctor.requirements import GIB, requirements_from

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "doctor"
H200 = FIX / "nvidia-h200x2"
CMP = Path(__file__).resolve().parents[2] / "recipekit" / "rehearse" / "data" / "hosts" / "cmp170hx-4x"
GAUDI = CMP.parent / "gaudi2-8x"
CMP_ID = "deepseek-v4.1-flash-1017-cmp170hx-4x"
GAUDI_ID = "deepseek-v4.1-flash-1017-gaudi2-8x"


# ---------------------------------------------------------------- parsers on fixtures


def test_h200_nvidia_smi_xml_exact():
    driver, gpus = parsers.parse_nvidia_smi_xml((H200 / "nvidia-smi-q-x.xml").read_text())
    assert driver == "580.159.04"
    assert len(gpus) == 2
    g0, g1 = gpus
    assert (g0.name, g0.uuid, g0.bus_id) == (
        "NVIDIA H200",
        "GPU-00000000-0000-4000-8000-000000000000",
        "00000000:00:06.0",
    )
    assert g1.uuid == "GPU-00000000-0000-4000-8000-000000000001" and g1.bus_id == "00000000:00:07.0"
    for g in gpus:
        assert g.memory_total_mib == 143771
        assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (5, 5, 16, 16)
        assert g.power_limit_w == 700.0
        assert g.driver_version == "580.159.04" and g.vendor == "nvidia"


def test_h200_query_csv_matches_xml():
    rows = parsers.parse_nvidia_query_csv((H200 / "query-gpu.csv").read_text())
    _, xml = parsers.parse_nvidia_smi_xml((H200 / "nvidia-smi-q-x.xml").read_text())
    assert [r.index for r in rows] == [0, 1]
    for r, x in zip(rows, xml):
        assert (
            r.name,
            r.memory_total_mib,
            r.pcie_gen_current,
            r.pcie_width_max,
            r.power_limit_w,
            r.driver_version,
        ) == (x.name, x.memory_total_mib, x.pcie_gen_current, x.pcie_width_max, x.power_limit_w, x.driver_version)


def test_topo_p2p_with_escape_codes():
    raw = (H200 / "topo-p2p-r.txt").read_text()
    assert "\x1b[4m" in raw  # the recorded escape codes are really there
    m = parsers.parse_topo_p2p(raw)
    assert m.devices == ("GPU0", "GPU1")
    assert m.status == (("X", "OK"), ("OK", "X"))
    assert m.all_ok() and m.not_ok() == []
    # the raw recording of all five modes: the first matrix is the `r` one
    assert parsers.parse_topo_p2p((H200 / "topo-p2p.txt").read_text()).status == m.status


def test_cmp_samples():
    driver, locked = parsers.parse_nvidia_smi_xml((CMP / "nvidia-smi-q-x-locked-x4.xml").read_text())
    assert driver == "610.43.02" and len(locked) == 4
    assert {
        (g.name, g.memory_total_mib, g.pcie_gen_current, g.pcie_width_current, g.pcie_width_max) for g in locked
    } == {("NVIDIA CMP 170HX", 8192, 1, 4, 16)}
    _, unlocked = parsers.parse_nvidia_smi_xml((CMP / "nvidia-smi-q-x-unlocked-x16.xml").read_text())
    assert {(g.memory_total_mib, g.pcie_gen_current, g.pcie_width_current, g.power_limit_w) for g in unlocked} == {
        (65536, 2, 16, 180.0)
    }
    stock = parsers.parse_topo_p2p((CMP / "topo-p2p-r-stock.txt").read_text())
    assert len(stock.devices) == 4 and not stock.all_ok() and len(stock.not_ok()) == 12
    assert stock.not_ok()[0] == "GPU0->GPU1=GNS"


def test_hl_smi_q_and_csv():
    driver, cards = parsers.parse_hl_smi_q((GAUDI / "hl-smi-q.txt").read_text())
    assert driver == "1.24.1-1b1e3a8" and len(cards) == 8
    c7 = cards[7]
    assert (c7.vendor, c7.index, c7.name, c7.bus_id, c7.uuid) == (
        "habana",
        7,
        "HL-225",
        "0000:cd:00.0",
        "01P0-HL2080A0-15-TF8A81-00-00-07",
    )
    assert (c7.memory_total_mib, c7.pcie_gen_current, c7.pcie_gen_max, c7.pcie_width_current, c7.power_limit_w) == (
        98304,
        4,
        4,
        16,
        600.0,
    )
    rows = parsers.parse_hl_smi_csv((GAUDI / "hl-smi-Q.csv").read_text())
    assert [(r.index, r.bus_id, r.memory_total_mib, r.driver_version) for r in rows] == [
        (c.index, c.bus_id, c.memory_total_mib, c.driver_version) for c in cards
    ]


@pytest.mark.parametrize(
    "fn,text",
    [
        (parsers.parse_nvidia_smi_xml, "<html/>"),
        (parsers.parse_nvidia_smi_xml, "not xml"),
        (parsers.parse_topo_p2p, "GPU0 has no matrix"),
        (parsers.parse_hl_smi_q, "Driver Version : 1.0\n"),
        (parsers.parse_hl_smi_csv, ""),
    ],
)
def test_parsers_reject_other_text(fn, text):
    with pytest.raises(ValueError):
        fn(text)


def test_meminfo():
    assert meminfo("MemTotal:       1024 kB\nMemAvailable:     512 kB\n") == (1024 * 1024, 512 * 1024)


# ---------------------------------------------------------------- collect through a replaying runner


class Replay(Runner):
    """Answers commands from recorded files, as if the tools were installed."""

    def __init__(self, outputs: dict[tuple, str]):
        self.outputs = outputs
        self.calls: list[list[str]] = []

    def which(self, name):
        return f"/usr/bin/{name}" if any(k[0] == name for k in self.outputs) else None

    def run(self, argv, timeout=30.0):
        self.calls.append(argv)
        key = tuple(argv)
        return (0, self.outputs[key], "") if key in self.outputs else (127, "", "not recorded")


def _cmp_runner(xml="nvidia-smi-q-x-unlocked-x16.xml", topo="topo-p2p-r-unlocked.txt", runtimes=("nvidia", "runc")):
    info = {"ServerVersion": "28.2.2", "Runtimes": {r: {} for r in runtimes}, "DefaultRuntime": "runc"}
    return Replay(
        {
            ("nvidia-smi", "-q", "-x"): (CMP / xml).read_text(),
            ("nvidia-smi", "topo", "-p2p", "r"): (CMP / topo).read_text(),
            ("docker", "info", "--format", "{{json .}}"): json.dumps(info),
        }
    )


def test_collect_replays_tools(tmp_path):
    f = collect_facts(model_dir=tmp_path / "models" / "x", ports=[("127.0.0.1", 0)], runner=_cmp_runner())
    assert f.accelerator_source == "nvidia-smi" and f.driver_version == "610.43.02"
    assert len(f.accelerators) == 4 and f.p2p_matrix.all_ok()
    assert f.host.docker.reachable and f.host.docker.runtimes == ("nvidia", "runc")
    assert f.host.disk.path == str(tmp_path / "models" / "x") and f.host.disk.measured_at == str(tmp_path)
    assert f.host.ram_total_bytes and f.host.ram_total_bytes > 0
    json.dumps(f.to_dict())  # serializable


def test_collect_gaudi_through_hl_smi(tmp_path):
    r = Replay({("hl-smi", "-q"): (GAUDI / "hl-smi-q.txt").read_text()})
    f = collect_facts(model_dir=tmp_path, runner=r, with_docker=False)
    assert f.accelerator_source == "hl-smi" and len(f.accelerators) == 8 and f.p2p_matrix is None
    assert "nvidia-smi not found" in f.notes


def test_collect_notes_failed_and_unparsable_tools(tmp_path):
    class Failing(Replay):
        def run(self, argv, timeout=30.0):
            return (9, "", "boom\n") if argv[0] == "nvidia-smi" else super().run(argv, timeout)

    f = collect_facts(
        model_dir=tmp_path,
        runner=Failing({("nvidia-smi", "-q", "-x"): "", ("hl-smi", "-q"): "garbage"}),
        with_docker=False,
    )
    assert f.accelerators == () and f.accelerator_source is None and f.driver_version is None
    assert f.notes[0] == "nvidia-smi -q -x failed (exit 9): boom"
    assert f.notes[1].startswith("hl-smi -q: ") and "not hl-smi -q output" in f.notes[1]


# ---------------------------------------------------------------- checks on synthetic hosts


def _eff(ref, layout=None, **env):
    from recipekit.catalog import load_recipe
    from recipekit.config import effective_config

    return effective_config(load_recipe(ref), layout=layout, environ=env, host_paths=True)


def _host(ram_gib=128, free_gib=1000, cpus=32, overcommit=0, docker=("nvidia", "runc")):
    return HostFacts(
        cpu_count=cpus,
        ram_total_bytes=ram_gib * GIB,
        ram_available_bytes=ram_gib * GIB,
        overcommit_memory=overcommit,
        boot_id="b",
        disk=DiskFact(path="/m", measured_at="/m", free_bytes=free_gib * GIB, total_bytes=2000 * GIB),
        docker=DockerFact(
            cli=True, reachable=docker is not None, server_version="28.2.2", runtimes=tuple(docker or ())
        ),
    )


def _facts(xml=None, topo=None, host=None, hl=None):
    accels, driver, src, matrix = (), None, None, None
    if xml:
        driver, g = parsers.parse_nvidia_smi_xml(xml.read_text())
        accels, src = tuple(g), "nvidia-smi"
    if hl:
        driver, g = parsers.parse_hl_smi_q(hl.read_text())
        accels, src = tuple(g), "hl-smi"
    if topo:
        matrix = parsers.parse_topo_p2p(topo.read_text())
    return Facts(
        accelerators=accels, accelerator_source=src, driver_version=driver, p2p_matrix=matrix, host=host or _host()
    )


def _by_id(checks):
    return {c.id: c for c in checks}


def test_requirements_from_cmp_recipe():
    req = requirements_from(_eff(CMP_ID))
    assert (req.vendor, req.count, req.min_memory_mib, req.layout, req.tensor_parallel) == (
        "nvidia",
        4,
        61440,
        "tp4",
        4,
    )
    assert (req.pcie_width_min, req.p2p, req.fallback_layouts) == (16, "required", ("pp4",))
    assert req.host_ram_bytes == 64 * GIB and req.disk_bytes == 440 * GIB
    assert req.docker and req.docker_runtimes == ("nvidia",)
    pp4 = requirements_from(_eff(CMP_ID, layout="pp4"))
    assert (pp4.layout, pp4.pcie_width_min, pp4.p2p, pp4.pipeline_parallel) == ("pp4", 1, "unused", 4)


def test_cmp_unlocked_x16_advertised_p2p_is_warn_not_fail():
    f = _facts(CMP / "nvidia-smi-q-x-unlocked-x16.xml", CMP / "topo-p2p-r-unlocked.txt")
    c = _by_id(run_checks(f, requirements_from(_eff(CMP_ID))))
    assert c["accelerator-count"].status == OK and c["accelerator-memory"].status == OK
    assert c["accelerator-model"].status == OK and c["pcie-link-width"].status == OK
    assert c["p2p"].status == WARN and "--p2p-probe" in c["p2p"].hint
    assert c["docker-runtime-nvidia"].status == OK
    assert not [x for x in c.values() if x.status == FAIL]


def test_cmp_locked_card_on_x4_fails_memory_and_width_and_suggests_pp4():
    f = _facts(CMP / "nvidia-smi-q-x-locked-x4.xml", CMP / "topo-p2p-r-stock.txt")
    c = _by_id(run_checks(f, requirements_from(_eff(CMP_ID))))
    mem = c["accelerator-memory"]
    assert mem.status == FAIL and "GPU0=8192 MiB" in mem.message and "61440" in mem.message
    assert "unlocked" in mem.hint  # the recipe's own hardware note
    assert c["pcie-link-width"].status == FAIL and "x4" in c["pcie-link-width"].message
    assert "LAYOUT=pp4" in c["pcie-link-width"].hint
    assert c["p2p"].status == FAIL and "GNS" in c["p2p"].message and "LAYOUT=pp4" in c["p2p"].hint
    # pp4 needs neither: only the memory check still fails
    c4 = _by_id(run_checks(f, requirements_from(_eff(CMP_ID, layout="pp4"))))
    assert "p2p" not in c4 and c4["pcie-link-width"].status == OK
    assert [x.id for x in c4.values() if x.status == FAIL] == ["accelerator-memory"]


def test_h200_host_against_cmp_recipe_fails_count_and_names_the_card():
    f = _facts(H200 / "nvidia-smi-q-x.xml", H200 / "topo-p2p-r.txt")
    c = _by_id(run_checks(f, requirements_from(_eff(CMP_ID))))
    assert c["accelerator-count"].status == FAIL and c["accelerator-count"].message.startswith("2 nvidia")
    assert c["accelerator-model"].status == WARN and "NVIDIA H200" in c["accelerator-model"].message


def test_gaudi_host_against_gaudi_recipe():
    f = _facts(hl=GAUDI / "hl-smi-q.txt", host=_host(docker=("habana", "runc")))
    c = _by_id(run_checks(f, requirements_from(_eff(GAUDI_ID))))
    assert c["accelerator-count"].status == OK and c["accelerator-memory"].status == OK
    assert c["docker-runtime-habana"].status == OK
    f2 = replace(f, host=_host(docker=("runc",)))
    c2 = _by_id(run_checks(f2, requirements_from(_eff(GAUDI_ID))))
    assert c2["docker-runtime-habana"].status == FAIL and "habana" in c2["docker-runtime-habana"].hint


def test_host_resources_ram_disk_overcommit_docker():
    req = requirements_from(_eff(CMP_ID))
    small = _facts(
        CMP / "nvidia-smi-q-x-unlocked-x16.xml", host=_host(ram_gib=62, free_gib=100, overcommit=2, docker=None)
    )
    c = _by_id(run_checks(small, req))
    assert c["host-ram"].status == FAIL and "62.0 GiB" in c["host-ram"].message
    assert c["disk-space"].status == FAIL and "440.0 GiB still needed" in c["disk-space"].message
    assert c["overcommit-memory"].status == WARN
    assert c["docker"].status == FAIL
    # verified downloads count against the disk need
    c = _by_id(run_checks(small, req, verified_bytes=400 * GIB))
    assert c["disk-space"].status == OK and "400.0 GiB already downloaded" in c["disk-space"].message


def test_probe_result_decides_p2p():
    from recipekit.tools.p2p.probe import ProbeResult

    f = _facts(CMP / "nvidia-smi-q-x-unlocked-x16.xml", CMP / "topo-p2p-r-unlocked.txt")
    req = requirements_from(_eff(CMP_ID))
    ok = ProbeResult(verdict="ok", p2p_usable=True, reason="all good")
    assert _by_id(run_checks(f, req, ok))["p2p"].status == OK
    for verdict in ("wrong data", "hang"):
        c = _by_id(run_checks(f, req, ProbeResult(verdict=verdict, p2p_usable=False, reason="x")))["p2p"]
        assert c.status == FAIL and verdict in c.message and "LAYOUT=pp4" in c.hint
    # even without a recipe, wrong data is a FAIL
    assert (
        _by_id(run_checks(f, None, ProbeResult(verdict="wrong data", p2p_usable=False, reason="x")))["p2p"].status
        == FAIL
    )
    skipped = ProbeResult(verdict="skipped", p2p_usable=False, reason="no torch")
    assert _by_id(run_checks(f, req, skipped))["p2p"].status == FAIL
    assert _by_id(run_checks(f, None, skipped))["p2p"].status == SKIP


# ---------------------------------------------------------------- report, JSON, exit codes


def test_report_json_shape_and_exit_code():
    f = _facts(CMP / "nvidia-smi-q-x-locked-x4.xml", CMP / "topo-p2p-r-stock.txt")
    rep = run_doctor(_eff(CMP_ID), facts=f)
    d = json.loads(json.dumps(rep.to_dict()))
    assert set(d) >= {"facts", "checks", "summary", "exit_code", "recipe", "layout"}
    assert d["recipe"] == CMP_ID and d["layout"] == "tp4" and d["exit_code"] == 3
    assert d["facts"]["accelerators"][0]["memory_total_mib"] == 8192
    assert d["facts"]["p2p_matrix"]["status"][0] == ["X", "GNS", "GNS", "GNS"]
    for c in d["checks"]:
        assert set(c) == {"id", "status", "message", "hint"} and c["status"] in ("OK", "WARN", "FAIL", "SKIP")
    assert d["summary"]["FAIL"] == sum(c["status"] == "FAIL" for c in d["checks"]) > 0
    good = run_doctor(
        _eff(CMP_ID), facts=_facts(CMP / "nvidia-smi-q-x-unlocked-x16.xml", CMP / "topo-p2p-r-unlocked.txt")
    )
    assert good.exit_code == 0 and not good.failed


def test_cli_doctor_json_on_this_machine(run_cli):
    code, out, err = run_cli("doctor", "--format", "json")
    d = json.loads(out)
    assert set(d) >= {"facts", "checks"} and d["recipe"] is None
    assert d["facts"]["host"]["ram_total_bytes"] > 0 and d["facts"]["host"]["cpu_count"] >= 1
    assert code == (3 if any(c["status"] == "FAIL" for c in d["checks"]) else 0)


def test_cli_doctor_recipe_exit_code_follows_checks(run_cli):
    code, out, _ = run_cli("doctor", CMP_ID, "--format", "json")
    d = json.loads(out)
    assert d["layout"] == "tp4" and code == d["exit_code"]
    assert code == (3 if any(c["status"] == "FAIL" for c in d["checks"]) else 0)
    # this CI/dev machine has no CMP 170HX cards: the count check must FAIL
    assert next(c for c in d["checks"] if c["id"] == "accelerator-count")["status"] == "FAIL" and code == 3
    code, out, err = run_cli("doctor", CMP_ID, "--layout", "pp9")
    assert code == 2 and "unknown-layout" in err
