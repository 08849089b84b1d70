"""bench-full's children: warm includes the bytecode cache, kept in the scratch folder."""

from __future__ import annotations

import json
import subprocess
import sys

from recipekit.cli.checkpoint_fullbench import child_env


def test_the_children_may_write_bytecode_and_keep_it_under_the_prefix(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = child_env(tmp_path / "pycache")
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "pycache")
    mod = tmp_path / "src" / "benchprobe.py"
    mod.parent.mkdir()
    mod.write_text("X = 1\n")
    code = f"import sys; sys.path.insert(0, {str(mod.parent)!r}); import benchprobe; print(sys.dont_write_bytecode)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    cached = list((tmp_path / "pycache").rglob("benchprobe.*.pyc"))
    assert len(cached) == 1
    assert not (mod.parent / "__pycache__").exists()  # nothing written beside the sources


def test_the_cpu_reference_parses_every_entry_of_its_fixed_text():
    from recipekit.cli.checkpoint_fullbench import REFERENCE_ENTRIES, cpu_reference, reference_text

    text = reference_text(1000)
    assert reference_text(1000) == text  # deterministic: the same text on every machine
    doc = json.loads(text)
    assert len(doc["weight_map"]) == 1000 == doc["metadata"]["total_size"]
    assert len(json.loads(reference_text())["weight_map"]) == REFERENCE_ENTRIES == 188_245  # the real index's count
    seconds = cpu_reference(text, repeats=3)
    assert 0 < seconds < 5


def test_the_cpu_reference_refuses_a_text_that_lost_entries():
    import pytest

    from recipekit.cli.checkpoint_fullbench import cpu_reference

    with pytest.raises(AssertionError, match="lost entries"):
        cpu_reference('{"metadata": {"total_size": 3}, "weight_map": {"a": "b"}}', repeats=1)
