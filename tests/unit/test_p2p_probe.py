"""P2P probe: classification proven with a fake worker (right data, wrong data, a hang whose
process group is killed), the cache (key, atomic write, hit without a worker), and the
recorded H200 result re-judged byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recipekit.tools.p2p import patterns, probe

FAKE = Path(__file__).resolve().parents[1] / "fixtures" / "p2p" / "fake_worker.py"
H200_REPORT = Path(__file__).resolve().parents[1] / "fixtures" / "p2p" / "h200x2-doctor-p2p.json"
SMALL = dict(copy_sizes=(1000, 4096), allreduce_elements=(10, 20, 30))


@pytest.fixture
def fake(monkeypatch, tmp_path):
    def run(fault="", timeout_s=3.0, **kw):
        monkeypatch.setenv("FAKE_FAULT", fault)
        monkeypatch.setenv("FAKE_PIDFILE", str(tmp_path / "pids"))
        return probe.run_probe(sys.executable, worker=FAKE, timeout_s=timeout_s, **{**SMALL, **kw})

    return run


def _phases(res):
    return {p.name: p.verdict for p in res.phases}


def test_all_right(fake):
    r = fake()
    assert r.verdict == "ok" and r.p2p_usable
    assert _phases(r) == {"copy-peer": "ok", "copy-staged": "ok", "allreduce-p2p-on": "ok", "allreduce-p2p-off": "ok"}
    cp = r.phase("copy-peer")
    assert cp.checked == cp.expected == 4 and len(cp.records) == 4
    assert r.phase("allreduce-p2p-on").env == {"NCCL_P2P_LEVEL": "SYS"}
    assert r.phase("allreduce-p2p-off").env == {"NCCL_P2P_DISABLE": "1"}


def test_wrong_copy_is_wrong_data(fake):
    r = fake("copy-wrong")
    assert r.verdict == "wrong data" and not r.p2p_usable
    assert _phases(r)["copy-peer"] == "wrong data" and _phases(r)["copy-staged"] == "ok"
    mm = r.phase("copy-peer").mismatches
    assert len(mm) == 1 and mm[0]["at"] == [1, 1, 0, "peer"]  # size index 1, GPU1 -> GPU0


def test_wrong_allreduce_only_with_p2p(fake):
    r = fake("allreduce-wrong")
    assert r.verdict == "wrong data"
    assert _phases(r)["allreduce-p2p-on"] == "wrong data" and _phases(r)["allreduce-p2p-off"] == "ok"
    assert "allreduce-p2p-on: wrong data" in r.reason


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")  # a zombie waiting for its reaper is dead


def test_hang_is_reported_apart_and_the_group_is_killed(fake, tmp_path):
    t0 = time.monotonic()
    r = fake("allreduce-hang", timeout_s=2.0)
    assert time.monotonic() - t0 < 30
    assert r.verdict == "hang" and not r.p2p_usable
    on = r.phase("allreduce-p2p-on")
    assert on.verdict == "hang" and on.checked == 2 and on.expected == 6  # first size arrived, then nothing
    assert "first missing" in on.detail
    assert _phases(r)["allreduce-p2p-off"] == "ok"
    leader, child = (int(x) for x in (tmp_path / "pids").read_text().split())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (_gone(leader) and _gone(child)):
        time.sleep(0.1)
    assert _gone(leader) and _gone(child), "the hung worker's process group survived"


def test_identity_hang(fake):
    r = fake("identity-hang", timeout_s=1.0)
    assert r.verdict == "hang" and r.phases == [] and "identity" in r.reason


def test_one_gpu_is_skipped(fake, monkeypatch):
    monkeypatch.setenv("FAKE_GPUS", "1")
    r = fake()
    assert r.verdict == "skipped" and "at least 2" in r.reason


def test_overall_when_the_reference_path_fails_too():
    bad = probe.PhaseResult(name="copy-peer", p2p=True, verdict="wrong data")
    ref = probe.PhaseResult(name="copy-staged", p2p=False, verdict="wrong data")
    verdict, usable, reason = probe.overall([bad, ref], {})
    assert verdict == "wrong data" and not usable and "not a P2P-only fault" in reason
    ok = probe.PhaseResult(name="copy-peer", p2p=True, verdict="ok")
    verdict, usable, reason = probe.overall([ok], {"peer": [[None, False], [False, None]]})
    assert verdict == "ok" and not usable and "not advertised" in reason


def test_cache_key_and_atomic_store(fake, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    uuids = ["GPU-AAAA", "GPU-bbbb"]
    first = fake(driver="580.159.04", gpu_uuids=uuids, cache_dir=cache)
    assert first.verdict == "ok" and not first.cached
    files = list(cache.glob("p2p-*.json"))
    assert len(files) == 1 and not list(cache.glob("*.tmp"))
    key = json.loads(files[0].read_text())["key"]
    assert key["gpu_uuids"] == ["aaaa", "bbbb"] and key["driver"] == "580.159.04"
    assert key["boot_id"] == probe.boot_id() and key["probe_sha"] == probe.probe_sha()
    # a hit needs no worker at all
    hit = probe.run_probe(
        sys.executable,
        worker=tmp_path / "missing.py",
        driver="580.159.04",
        gpu_uuids=list(reversed(uuids)),
        cache_dir=cache,
        **SMALL,
    )
    assert hit.cached and hit.verdict == "ok"
    assert probe.cached_result(cache, "580.159.04", uuids).verdict == "ok"
    # another driver, GPU set or boot is another key
    assert probe.cached_result(cache, "580.160.00", uuids) is None
    assert probe.cached_result(cache, "580.159.04", uuids[:1]) is None
    monkeypatch.setattr(probe, "boot_id", lambda: "another-boot")
    assert probe.cached_result(cache, "580.159.04", uuids) is None
    # errors are not cached
    monkeypatch.setenv("FAKE_GPUS", "1")
    assert probe.cache_key(None, uuids, "b", "s") is None and probe.cache_key("d", [None], "b", "s") is None


def test_refresh_reruns(fake, tmp_path):
    cache = tmp_path / "c"
    fake(driver="d1", gpu_uuids=["u0", "u1"], cache_dir=cache)
    again = fake("copy-wrong", driver="d1", gpu_uuids=["u0", "u1"], cache_dir=cache, refresh=True)
    assert not again.cached and again.verdict == "wrong data"
    assert probe.cached_result(cache, "d1", ["u0", "u1"]).verdict == "wrong data"


def test_patterns_are_not_periodic_and_differ_per_seed():
    a = patterns.expected_copy_sha256(1 << 17, 1)
    assert a != patterns.expected_copy_sha256(1 << 17, 2)
    assert a != patterns.expected_copy_sha256((1 << 17) + 1, 1)
    assert patterns.COPY_SIZES[:3] == (131071, 131072, 131073) and patterns.COPY_SIZES[-1] == 32 << 20
    assert [e * 4 for e in patterns.ALLREDUCE_ELEMENTS[:3]] == [131068, 131072, 131076]


# ---------------------------------------------------------------- the real run on 2x H200


def test_recorded_h200_probe_rejudged():
    d = json.loads(H200_REPORT.read_text())
    res = probe.ProbeResult.from_dict(d["p2p_probe"])
    assert res.verdict == "ok" and res.p2p_usable
    assert res.identity["count"] == 2 and res.identity["peer"] == [[None, True], [True, None]]
    names = {p.name: p for p in res.phases}
    assert set(names) == {"copy-peer", "copy-staged", "allreduce-p2p-on", "allreduce-p2p-off"}
    for p in res.phases:
        assert p.verdict == "ok" and p.checked == p.expected == len(p.records) == 18
        assert probe.rejudge(p) == [], p.name  # every recorded digest is the right one
    assert [r[0] for r in names["copy-peer"].records[::2]] == list(patterns.COPY_SIZES)
    assert probe.overall(res.phases, res.identity)[:2] == ("ok", True)
    # a flipped digest in the recording would be caught
    p = names["allreduce-p2p-on"]
    p.records[5][2] = "0" * 64
    assert probe.rejudge(p) == [f"all-reduce rank {p.records[5][0]} {p.records[5][1]} elements"]
    # and the doctor's check reads it as verified P2P
    from recipekit.tools.doctor.checks import check_p2p
    from recipekit.tools.doctor.facts import Facts

    assert check_p2p(Facts(), None, probe.ProbeResult.from_dict(d["p2p_probe"]))[0].status == "OK"


def test_json_worker_output_is_bounded_in_memory(monkeypatch):
    """A worker that floods stdout and stderr: its records come from the first WORKER_STDOUT_MAX
    bytes only (a cut last line dropped), the stderr tail is its last STDERR_TAIL characters."""
    monkeypatch.setattr(probe, "WORKER_STDOUT_MAX", 64 * 1024)
    script = (
        "import json, sys\n"
        "for i in range(20000):\n"
        "    print(json.dumps({'i': i, 'pad': 'x' * 40}))\n"
        "sys.stderr.write('e' * 100000 + 'END')\n"
    )
    records, tail = probe.run_json_worker([sys.executable, "-c", script], 60)
    lines = [len(json.dumps({"i": i, "pad": "x" * 40})) + 1 for i in range(20000)]
    whole = next(n for n in range(len(lines)) if sum(lines[: n + 1]) > 64 * 1024)  # lines wholly inside
    assert whole > 1000 and [r["i"] for r in records] == list(range(whole))
    assert len(tail) == probe.STDERR_TAIL and tail.endswith("eEND")


def test_json_worker_timeout_kills_its_group(tmp_path):
    """The worker and a child it started are both gone when TimeoutExpired reaches the caller."""
    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        f"c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(c.pid))\n"
        "print('{\"started\": 1}', flush=True)\n"
        "time.sleep(60)\n"
    )
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        probe.run_json_worker([sys.executable, "-c", script], 2)
    assert time.monotonic() - t0 < 20
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{child}").exists():
        st = Path(f"/proc/{child}/stat").read_text().split()
        if st[2] == "Z":  # a zombie waiting for its (gone) parent's reaper: dead
            break
        time.sleep(0.1)
    else:
        assert not Path(f"/proc/{child}").exists()
