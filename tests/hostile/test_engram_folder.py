"""Class: the Engram folder (`recipe engram place --mode copy`, `recipe engram verify`).

A symlink or a hard link planted in `.recipekit-partial/` (or the partial folder itself replaced by a
link) must never make the copy write into a file outside the Engram folder: the entry is removed
(the name only), the copy restarts from zero with a message, and the outside file keeps its size and
bytes. A damaged `engram-placement.json` (shards as numbers, strings, lists) is one error line, exit 2,
and nothing in the folder changes. A folder whose tables were replaced by other bytes of the same
size fails the full verify (rule engram-same-bytes); `--quick` and a verify without `--model` cannot
see it and say so, in their output and JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.hostile.conftest import Sandbox, guard, refused
from tests.unit.test_engram_placement import make_model

SHARD = "model-00002-of-00003.safetensors"
OUTSIDE = b"o" * 100


def _setup(sb: Sandbox) -> tuple[Path, Path, Path]:
    model = make_model(sb.parent / "model")
    out = sb.parent / "engram"
    (out / ".recipekit-partial").mkdir(parents=True)
    outside = sb.parent / "outside.bin"
    outside.write_bytes(OUTSIDE)
    return model, out, outside


def _place(sb: Sandbox, model: Path, out: Path):
    return sb.cli("engram", "place", "--from", str(model), "--out", str(out), "--mode", "copy")


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_planted_link_in_the_partial_folder_is_removed_and_the_copy_restarts(sandbox: Sandbox, kind: str):
    model, out, outside = _setup(sandbox)
    part = out / ".recipekit-partial" / SHARD
    if kind == "symlink":
        part.symlink_to(outside)
    else:
        os.link(outside, part)
    with guard(sandbox, allowed=("engram",)):
        res = _place(sandbox, model, out)
    assert res.code == 0, res.err
    assert outside.stat().st_size == 100 and outside.read_bytes() == OUTSIDE
    assert outside.stat().st_nlink == 1  # our name for it was removed, not written through
    what = "is a symbolic link" if kind == "symlink" else "is a hard link"
    line = next(ln for ln in res.err.splitlines() if "the partial copy" in ln)
    assert f"{SHARD}: the partial copy {what}" in line and line.endswith("removed, the copy restarts from zero")
    assert "resuming" not in res.err
    placed = out / SHARD
    assert placed.read_bytes() == (model / SHARD).read_bytes() and not placed.is_symlink()
    assert placed.stat().st_nlink == 1
    assert sandbox.cli("engram", "verify", str(out), "--model", str(model)).code == 0


def test_partial_folder_replaced_by_a_link_is_not_followed(sandbox: Sandbox):
    model, out, outside = _setup(sandbox)
    elsewhere = sandbox.parent / "elsewhere"
    elsewhere.mkdir()
    planted = elsewhere / SHARD
    planted.write_bytes(OUTSIDE)
    (out / ".recipekit-partial").rmdir()
    (out / ".recipekit-partial").symlink_to(elsewhere)
    with guard(sandbox, allowed=("engram",)):
        res = _place(sandbox, model, out)
    assert res.code == 0, res.err
    assert ".recipekit-partial is a symbolic link: removed" in res.err
    assert planted.read_bytes() == OUTSIDE and outside.read_bytes() == OUTSIDE
    assert (out / SHARD).read_bytes() == (model / SHARD).read_bytes()


def test_a_genuine_partial_copy_still_resumes(sandbox: Sandbox):
    model, out, _ = _setup(sandbox)
    src = (model / SHARD).read_bytes()
    (out / ".recipekit-partial" / SHARD).write_bytes(src[:1000])
    res = _place(sandbox, model, out)
    assert res.code == 0, res.err
    assert "resuming the copy at 1,000" in res.err and (out / SHARD).read_bytes() == src


def test_partial_entry_that_is_a_folder_is_refused(sandbox: Sandbox):
    model, out, _ = _setup(sandbox)
    (out / ".recipekit-partial" / SHARD).mkdir()
    (out / ".recipekit-partial" / SHARD / "keep").write_bytes(b"x")
    with guard(sandbox):
        res = _place(sandbox, model, out)
    refused(res, "engram-partial-unsafe", 2)


RECORDS = [
    pytest.param({"shards": 5}, id="shards-number"),
    pytest.param({"shards": "model-00002-of-00003.safetensors"}, id="shards-string"),
    pytest.param({"shards": [SHARD]}, id="shards-list"),
    pytest.param({"shards": {SHARD: 7}}, id="shard-number"),
    pytest.param({"shards": {SHARD: "copy"}}, id="shard-string"),
    pytest.param({"shards": {SHARD: {"size": "12", "how": "copy"}}}, id="size-string"),
    pytest.param({"shards": {SHARD: {"sha256": 12, "how": "copy"}}}, id="sha-number"),
    pytest.param({"shards": {SHARD: {"source_mtime_ns": True}}}, id="mtime-bool"),
]


@pytest.mark.parametrize("doc", RECORDS)
def test_damaged_placement_record_is_refused_and_nothing_changes(sandbox: Sandbox, doc: dict):
    model, out, _ = _setup(sandbox)
    assert _place(sandbox, model, out).code == 0
    rec = json.loads((out / "engram-placement.json").read_text())
    rec.update(doc)
    (out / "engram-placement.json").write_text(json.dumps(rec))
    with guard(sandbox):
        res = _place(sandbox, model, out)
    refused(res, "engram-record-invalid", 2)
    assert "engram-placement.json" in res.err


def _swapped_tables(sb: Sandbox) -> tuple[Path, Path]:
    """A copied Engram folder whose shard holds other bytes of the same size (its header intact)."""
    model, out, _ = _setup(sb)
    assert _place(sb, model, out).code == 0
    shard = out / SHARD
    data = bytearray(shard.read_bytes())
    hlen = int.from_bytes(data[:8], "little") + 8
    data[hlen:] = bytes(b ^ 0x5A for b in data[hlen:])
    shard.write_bytes(bytes(data))
    return model, out


def test_full_verify_refuses_tables_replaced_by_same_size_bytes(sandbox: Sandbox):
    model, out = _swapped_tables(sandbox)
    with guard(sandbox):
        res = sandbox.cli("engram", "verify", str(out), "--model", str(model))
    assert res.code == 2 and "rule engram-same-bytes:" in res.out and SHARD in res.out
    assert "NOT CHECKED" not in res.out


@pytest.mark.parametrize(
    "args, said",
    [
        pytest.param(("--quick",), "by size only", id="quick"),
        pytest.param((), "no --model", id="no-model"),
    ],
)
def test_partial_verify_says_what_it_did_not_check(sandbox: Sandbox, args: tuple, said: str):
    model, out = _swapped_tables(sandbox)
    extra = ("--model", str(model)) if args else ()
    with guard(sandbox):
        res = sandbox.cli("engram", "verify", str(out), *extra, *args)
        js = sandbox.cli("engram", "verify", str(out), *extra, *args, "--format", "json")
    assert res.code == 0 and res.out.startswith("ENGRAM_OK") and "(PARTIAL check)" in res.out
    note = next(ln for ln in res.out.splitlines() if "NOT CHECKED:" in ln)
    assert said in note and "same size pass" in note
    doc = json.loads(js.out)
    assert doc["ok"] is True and doc["complete"] is False and len(doc["not_checked"]) == 1
    assert said in doc["not_checked"][0]


def test_full_verify_is_complete_and_the_pipeline_runs_it(sandbox: Sandbox):
    model, out, _ = _setup(sandbox)
    assert _place(sandbox, model, out).code == 0
    js = sandbox.cli("engram", "verify", str(out), "--model", str(model), "--format", "json")
    doc = json.loads(js.out)
    assert js.code == 0 and doc["ok"] is True and doc["complete"] is True and doc["not_checked"] == []
    res = sandbox.cli("apply", "deepseek-v4.1-flash-1017-cmp170hx-4x", "--dry-run")
    assert res.code == 0, res.err
    verify = next(ln for ln in res.out.splitlines() if "-m recipekit engram verify" in ln)
    assert " --model " in verify and "--quick" not in verify and "--no-hash" not in verify
