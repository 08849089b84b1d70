"""The rehearsal's host stand-in: the doctor's real checks on recorded tool outputs of the
recipe's hardware pass for the seeds' rigs and FAIL/WARN for a locked card on an x4 link."""

from __future__ import annotations

import pytest

from recipekit.errors import RecipekitError
from recipekit.rehearse.hostfacts import RecordedTools, profile_for, profile_names, standin_facts
from recipekit.tools.doctor import run_doctor

CMP_ID = "deepseek-v4.1-flash-1017-cmp170hx-4x"
GAUDI_ID = "deepseek-v4.1-flash-1017-gaudi2-8x"


def _eff(ref, layout=None):
    from recipekit.catalog import load_recipe
    from recipekit.config import effective_config

    return effective_config(load_recipe(ref), layout=layout, environ={}, host_paths=True)


def _checks(ref, profile, tmp_path, layout=None):
    eff = _eff(ref, layout)
    facts = standin_facts(profile_for(eff.recipe.backend, profile), tmp_path / "models", (), with_docker=False)
    return facts, {c.id: c for c in run_doctor(eff, facts=facts).checks}


def test_default_profiles_follow_the_backend():
    assert profile_for("cuda_sm80").name == "cmp170hx-4x-p2p"
    assert profile_for("gaudi").name == "gaudi2-8x"
    assert profile_for("cpu") is None  # the CPU recipe's hardware is this machine
    assert profile_names() == ["cmp170hx-4x-locked-x4", "cmp170hx-4x-p2p", "gaudi2-8x"]


def test_unknown_profile_is_a_clear_error():
    with pytest.raises(RecipekitError) as e:
        profile_for("gaudi", "gaudi2-8")
    assert e.value.code == "unknown-host-profile" and "gaudi2-8x" in (e.value.hint or "")


def test_recorded_tools_answer_only_what_was_recorded():
    r = RecordedTools(profile_for("gaudi"))
    assert r.which("hl-smi") and r.which("nvidia-smi") is None
    rc, out, _ = r.run(["hl-smi", "-q"])
    assert rc == 0 and "HL-225" in out
    assert r.run(["hl-smi", "-Q", "index"])[0] == 127


def test_cmp_p2p_rig_passes_the_doctor(tmp_path):
    facts, c = _checks(CMP_ID, None, tmp_path)
    assert facts.accelerator_source == "nvidia-smi" and len(facts.accelerators) == 4
    assert [a.compute_capability for a in facts.accelerators] == ["8.0"] * 4
    assert facts.host.disk.measured_at == "<host stand-in cmp170hx-4x-p2p>"
    assert not [x.id for x in c.values() if x.status == "FAIL"], {k: v.message for k, v in c.items()}
    assert c["accelerator-memory"].status == "OK"
    assert c["p2p"].status == "WARN"  # advertised, not probed: as on the real rig


def test_cmp_locked_x4_card_fails_as_on_a_real_host(tmp_path):
    _, c = _checks(CMP_ID, "cmp170hx-4x-locked-x4", tmp_path)
    failed = sorted(x.id for x in c.values() if x.status == "FAIL")
    assert failed == ["accelerator-memory", "p2p", "pcie-link-width"]
    assert "GPU0=8192 MiB" in c["accelerator-memory"].message
    assert "x4" in c["pcie-link-width"].message and "GNS" in c["p2p"].message


def test_gaudi_node_passes_the_doctor(tmp_path):
    facts, c = _checks(GAUDI_ID, None, tmp_path)
    assert facts.accelerator_source == "hl-smi" and len(facts.accelerators) == 8
    assert not [x.id for x in c.values() if x.status == "FAIL"], {k: v.message for k, v in c.items()}
    assert c["accelerator-count"].status == "OK"
