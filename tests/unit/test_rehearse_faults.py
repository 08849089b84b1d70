"""Planted faults caught before any engine starts, at the step that owns them, with their code:
a removed engine flag and a served name the launch does not serve (apply's preflight, first in
a rehearsal), a read-only mount whose host folder is missing (the docker runner, before the
container is created), a patch pack pin the stand-in image does not record (the patch step)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from recipekit.apply.pipeline import apply, load, preflight
from recipekit.apply.runners.docker import check_bind_sources, start
from recipekit.errors import ErrorList, ExitCode, RecipekitError
from recipekit.rehearse.driver import PREFLIGHT, rehearse
from recipekit.rehearse.report import FAILED

REPO = Path(__file__).resolve().parents[2]
CMP_YAML = REPO / "recipes/deepseek-ai/DeepSeek-V4.1-Flash-1017/cmp170hx-4x.yaml"
GAUDI_YAML = REPO / "recipes/deepseek-ai/DeepSeek-V4.1-Flash-1017/gaudi2-8x.yaml"
REMOVED_FLAG = (
    "    - {flag: --enable-prefix-caching}",
    "    - {flag: --enable-prefix-caching}\n    - {flag: --disable-log-requests}",
)
WRONG_NAME = (
    "    - {flag: --served-model-name, value: deepseek-v4.1-flash}",
    "    - {flag: --served-model-name, value: deepseek-v41-flash}",
)


def planted(tmp_path: Path, src: Path, *pairs: tuple[str, str]) -> str:
    text = src.read_text()
    for old, new in pairs:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    p = tmp_path / src.name
    p.write_text(text)
    return str(p)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_the_catalog_recipes_pass_the_preflight_on_every_layout(home):
    from recipekit.catalog import load_recipe

    for rid in ("deepseek-v4.1-flash-1017-cmp170hx-4x", "deepseek-v4.1-flash-1017-gaudi2-8x", "tiny-deepseek-cpu"):
        for lay in list(load_recipe(rid).recipe.layouts) or [None]:
            preflight(load(rid, lay))


def test_a_removed_engine_flag_is_refused_by_applys_preflight_with_its_code(home, tmp_path):
    ref = planted(tmp_path, CMP_YAML, REMOVED_FLAG)
    with pytest.raises(RecipekitError) as ei:
        apply(ref, dry_run=True, trust=True, log=lambda s: None)  # even the plan is not shown
    e = ei.value
    assert e.code == "removed-engine-flag" and e.exit_code == ExitCode.INVALID_INPUT
    assert "--disable-log-requests was removed before" in e.message and "$.serve.args[" in e.location
    assert not (home / "state").exists()  # nothing ran, nothing written


def test_a_removed_flag_in_another_layout_does_not_block_this_one(home, tmp_path):
    pp4 = ("    pipeline_parallel: 4\n", "    pipeline_parallel: 4\n    args: [{flag: --disable-log-requests}]\n")
    ref = planted(tmp_path, CMP_YAML, pp4)
    preflight(load(ref, "tp4"))
    with pytest.raises(RecipekitError) as ei:
        preflight(load(ref, "pp4"))
    assert ei.value.code == "removed-engine-flag" and "$.layouts.pp4.args[0]" in ei.value.location


def test_a_served_name_the_launch_does_not_serve_is_refused_before_any_step(home, tmp_path):
    ref = planted(tmp_path, CMP_YAML, WRONG_NAME)
    with pytest.raises(RecipekitError) as ei:
        preflight(load(ref))
    e = ei.value
    assert e.code == "served-name-mismatch" and e.exit_code == ExitCode.INVALID_INPUT
    assert e.message == "the launch serves deepseek-v41-flash but the checks ask for deepseek-v4.1-flash"


def test_both_faults_are_listed_together(home, tmp_path):
    ref = planted(tmp_path, CMP_YAML, REMOVED_FLAG, WRONG_NAME)
    with pytest.raises(ErrorList) as ei:
        preflight(load(ref))
    assert [e.code for e in ei.value.errors] == ["removed-engine-flag", "served-name-mismatch"]


def test_a_rehearsal_stops_at_the_preflight_in_seconds_without_making_checkpoints(tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path / "users-home"))
    name = "    - {flag: --served-model-name, value: deepseek-ai/DeepSeek-V4.1-Flash-1017}"
    ref = planted(tmp_path, GAUDI_YAML, (name, name.replace("deepseek-ai/DeepSeek-V4.1-Flash-1017}", "dsv41}")))
    reh = rehearse(ref, home=tmp_path / "reh", post_apply=False, trust=True, log=lambda s: None)
    assert reh.error_code == "served-name-mismatch" and not reh.ok
    assert [r.step for r in reh.rows] == [PREFLIGHT]
    row = reh.rows[0]
    assert row.result == FAILED and row.error.startswith("error[served-name-mismatch]") and "dsv41" in row.error
    assert not (tmp_path / "reh" / "cache").exists() and not (tmp_path / "users-home").exists()


# ------------------------------------------------------------------ bind sources


def test_a_missing_read_only_source_is_refused_and_a_writable_one_created(tmp_path):
    (tmp_path / "models").mkdir()
    made = check_bind_sources([f"{tmp_path}/models:/models:ro", f"{tmp_path}/cache/a:/root/.cache", "named:/data"])
    assert made == [tmp_path / "cache" / "a"] and (tmp_path / "cache" / "a").is_dir()
    with pytest.raises(RecipekitError) as ei:
        check_bind_sources([f"{tmp_path}/cache/a:/c", f"{tmp_path}/nope:/models:ro,z"])
    e = ei.value
    assert e.code == "mount-source-missing" and e.exit_code == ExitCode.NOT_FOUND
    assert e.message == f"the read-only mount {tmp_path}/nope -> /models has no host folder {tmp_path}/nope"
    assert not (tmp_path / "nope").exists()


class _NoDaemonCalls:
    """A docker client on a local socket whose every container call fails the test."""

    api = SimpleNamespace(base_url="http+docker://localhost")

    @property
    def containers(self):
        raise AssertionError("the daemon was asked to create something")


def test_the_docker_runner_refuses_before_asking_the_daemon(tmp_path):
    argv = ["docker", "run", "--name", "x", "-v", f"{tmp_path}/gone:/models:ro", "-v", "./cache:/c", "img"]
    with pytest.raises(RecipekitError) as ei:
        start(_NoDaemonCalls(), argv, "r", cwd=tmp_path)
    assert ei.value.code == "mount-source-missing"
    # relative sources resolve against the launch's folder (the caches are made before the refusal
    # only if they come first: here the refusal came first)
    assert not (tmp_path / "gone").exists()


# ------------------------------------------------------------------ pins vs the stand-in image


def _recorded(rid: str) -> dict[str, str]:
    """What the stand-in image records for a recipe: its engine pins (recipekit.rehearse.engine)."""
    from recipekit.catalog import load_recipe
    from recipekit.deployment import resolve
    from recipekit.rehearse.engine import recipe_pins

    return recipe_pins(resolve(load_recipe(rid)))


def test_the_cmp_packs_pins_verify_against_what_the_image_records_and_its_bodies_are_not_public():
    from recipekit.rehearse.pack_pins import pack_pins_note

    note = pack_pins_note("patches/packs/vllm-cmp170hx/1.2.0", _recorded("deepseek-v4.1-flash-1017-cmp170hx-4x"), "L")
    assert note.startswith("pack pins verified against L: recipe, dsv41reap-pp, tc-moe-kernels;")
    assert "not recorded there" not in note
    without = {k: v for k, v in _recorded("deepseek-v4.1-flash-1017-cmp170hx-4x").items() if k != "tc-moe-kernels"}
    assert "not recorded there: tc-moe-kernels" in pack_pins_note("patches/packs/vllm-cmp170hx/1.2.0", without, "L")
    assert "34 of 34 patch bodies are not public" in note


def test_the_gaudi_packs_pins_verify_and_its_bodies_are_not_public():
    from recipekit.rehearse.pack_pins import pack_pins_note

    note = pack_pins_note("patches/packs/vllm-gaudi/v0.30.0", _recorded("deepseek-v4.1-flash-1017-gaudi2-8x"), "L")
    assert note.startswith("pack pins verified against L: vllm-gaudi, vllm")
    assert "patch bodies are not public" in note


def test_a_pin_the_image_record_contradicts_fails_with_the_pin_error():
    from recipekit.rehearse.pack_pins import pack_pins_note

    recorded = {**_recorded("deepseek-v4.1-flash-1017-cmp170hx-4x"), "dsv41reap-pp": "138e7489"}
    with pytest.raises(RecipekitError) as ei:
        pack_pins_note("patches/packs/vllm-cmp170hx/1.2.0", recorded, "the labels")
    e = ei.value
    assert e.code == "pin-mismatch" and e.exit_code == ExitCode.DRIFT and e.location == "the labels"
    assert e.message == "dsv41reap-pp commit: expected 138e7488, actual 138e7489"


@pytest.mark.parametrize(
    ("pin", "recorded", "status"),
    [
        ({"commit_prefix": "138e7488"}, "138e7488", "ok"),
        ({"commit_prefix": "138e7488"}, "138e7488aa", "ok"),  # a longer record of the same commit
        ({"commit": "138e7488" + "0" * 32}, "138e7488", "ok"),  # an abbreviated record
        ({"commit": "138e7488" + "0" * 32}, "138e748", "ok"),
        ({"commit": "138e7488" + "0" * 32}, "138e74", "mismatch"),  # too short to say
        ({"commit_prefix": "138e7488"}, "138e7489", "mismatch"),
        ({"version": "1.2.0"}, "1.2.0", "ok"),
        ({"version": "1.2.0"}, "1.2.1", "mismatch"),
    ],
)
def test_a_recorded_commit_is_compared_as_the_pin_says(pin, recorded, status):
    from recipekit.patches.pins import Pin, Where, verify_pin

    checks = verify_pin(Pin(name="p", **pin), Where(recorded={"p": recorded}, recorded_source="labels"))
    assert [(c.status, c.actual, c.source) for c in checks] == [(status, recorded, "labels")]
    assert [c.status for c in verify_pin(Pin(name="q", **pin), Where(recorded={"p": recorded}))] == ["missing"]
