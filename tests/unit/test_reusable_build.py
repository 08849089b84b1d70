"""checkpoint.manifest.reusable_build: when a folder generator reuses, rebuilds or refuses `out`."""

from __future__ import annotations

import json

import pytest

from recipekit.checkpoint.manifest import reusable_build
from recipekit.errors import RecipekitError

WANT = {"generator": 3, "seed": 0}


def test_reuse_rebuild_refuse(tmp_path):
    out = tmp_path / "ckpt"
    assert reusable_build(out, "stamp.json", WANT, False, "make-x") is None  # absent: build
    out.mkdir()
    assert reusable_build(out, "stamp.json", WANT, False, "make-x") is None  # empty: build
    (out / "stamp.json").write_text(json.dumps({**WANT, "tensors": 7}))
    assert reusable_build(out, "stamp.json", WANT, False, "make-x") == {**WANT, "tensors": 7}
    assert reusable_build(out, "stamp.json", WANT, True, "make-x") is None  # --force
    assert reusable_build(out, "stamp.json", {**WANT, "seed": 1}, False, "make-x") is None
    (out / "stamp.json").write_text("{not json")
    with pytest.raises(RecipekitError) as ei:
        reusable_build(out, "stamp.json", WANT, False, "make-x")
    assert ei.value.code == "output-exists" and "not made by make-x" in ei.value.message


def test_tiny_dsv41_refuses_a_foreign_folder(tmp_path):
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41

    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(RecipekitError) as ei:
        make_tiny_dsv41(tmp_path)
    assert ei.value.code == "output-exists" and "not made by make-tiny" in ei.value.message
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]
