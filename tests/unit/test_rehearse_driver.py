"""The rehearsal driver without an engine: apply's own steps with the host and hub stand-ins,
the table, and failures stopping at the right step with the right code (no dockerd here: a
docker recipe's doctor FAILs on it, as on a real host)."""

from __future__ import annotations

import json

import pytest

from recipekit.rehearse.driver import rehearse
from recipekit.rehearse.report import (
    FAILED,
    NOT_REACHED,
    NOT_REHEARSABLE,
    OK,
    REAL,
    SKIPPED,
    STANDIN,
    Rehearsal,
    Row,
    table,
)
from tests.ports import free_port
from tests.rehearse_steps import APPLY_STEPS

GAUDI_ID = "deepseek-v4.1-flash-1017-gaudi2-8x"
CMP_ID = "deepseek-v4.1-flash-1017-cmp170hx-4x"
ORDER = APPLY_STEPS


def test_table_notes_and_verdict():
    reh = Rehearsal(recipe="r", layout=None, node=None, home="/h", total_s=1.5)
    reh.rows = [
        Row("doctor", STANDIN, "host stand-in x", OK, 0.2),
        Row("fetch", REAL, "", FAILED, 1.0, "error[fetch-revision-not-found] nope"),
        Row("smoke", REAL),
    ]
    reh.error_code = "fetch-revision-not-found"
    lines = table(reh)
    assert lines[0].split() == ["step", "real/stand-in", "time", "result"]
    assert lines[1].split() == ["doctor", "stand-in", "[1]", "0.2", "s", "ok"]
    assert lines[2].split()[:5] == ["fetch", "real", "1.0", "s", "FAIL"] and lines[2].endswith("[2]")
    assert lines[3].split() == ["smoke", "real", "not", "reached"]
    assert lines[4:6] == ["[1] host stand-in x", "[2] error[fetch-revision-not-found] nope"]
    assert lines[-1] == "rehearsal FAILED (fetch-revision-not-found) in 1.5 s; state in /h"
    assert not reh.ok and json.loads(json.dumps(reh.to_dict()))["ok"] is False


@pytest.fixture
def no_docker(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-dockerd.sock")
    # the user's own state must not be touched: a RECIPEKIT_HOME that fails the test if written
    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path / "users-home"))


@pytest.mark.slow
def test_docker_recipe_stops_at_the_doctor_without_a_dockerd(no_docker, tmp_path):
    home = tmp_path / "reh"
    reh = rehearse(GAUDI_ID, home=home, log=lambda s: None)
    gates = [f"gate {g}" for g in ("install", "conversion", "kernel", "perplexity", "decode-prefill", "needle")]
    gates += [f"gate {g}" for g in ("isolation", "structured", "lm-eval")]
    assert [r.step for r in reh.rows] == ORDER + ["status", "logs", "bench --quick", *gates, "restart", "stop"]
    doctor = reh.row("doctor")
    assert doctor.kind == STANDIN and "gaudi2-8x" in doctor.standin
    assert doctor.result == FAILED and doctor.error.startswith("error[host-check-failed]") and "docker" in doctor.error
    assert reh.error_code == "host-check-failed" and not reh.ok
    # the gates the recipe says mean nothing on a stand-in are SKIP whatever happened; the rest not reached
    skip = {r.step for r in reh.rows if r.step.startswith("gate ") and r.kind == NOT_REHEARSABLE}
    assert reh.row("preflight").result == OK and reh.row("preflight").kind == REAL
    assert all(r.result == (SKIPPED if r.step in skip else NOT_REACHED) for r in reh.rows[2:])
    assert reh.row("gate decode-prefill").result == NOT_REACHED and reh.row("gate needle").result == SKIPPED
    assert reh.row("fetch").kind == STANDIN and "loopback hub" in reh.row("fetch").standin
    assert (home / "state" / GAUDI_ID).is_dir() and not (tmp_path / "users-home").exists()


@pytest.mark.slow
def test_locked_card_fails_the_doctor_on_its_memory(no_docker, tmp_path):
    reh = rehearse(
        CMP_ID,
        home=tmp_path / "reh",
        host="cmp170hx-4x-locked-x4",
        post_apply=False,
        sets=(f"PORT={free_port()}",),  # not 8000: another server here may hold it
        log=lambda s: None,
    )
    assert [r.step for r in reh.rows] == ORDER
    d = reh.row("doctor")
    assert d.result == FAILED and "locked-x4" in d.standin
    assert "4 host check(s) failed" in d.error and "accelerator-memory" in d.error
    assert reh.error_code == "host-check-failed"
