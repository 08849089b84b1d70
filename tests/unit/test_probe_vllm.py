"""patches/catalogs/probe_vllm.py against fake vLLM module trees: the 0.33.0 layout
(`vllm.entrypoints.common.cli_args`) and the 0.32.0 one (`vllm.entrypoints.launchers.cli_args`).
The probe runs as the catalog generator runs it: a separate python with the tree on its path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parents[2] / "patches" / "catalogs" / "probe_vllm.py"

PARSER = """
def make_arg_parser(parser):
    parser.add_argument("model_tag", nargs="?")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--dtype", choices=["auto", "bfloat16"])
    parser.add_argument("--{tag}", action="store_true")
    return parser
"""


def _fake_vllm(root: Path, cli_args_pkg: str, version: str, body: str | None = None) -> Path:
    files = {
        "vllm/__init__.py": "",
        "vllm/version.py": f"__version__ = {version!r}\n",
        "vllm/envs.py": "environment_variables = {'VLLM_PORT': None, 'VLLM_CPU_KVCACHE_SPACE': None}\n",
        "vllm/utils/__init__.py": "",
        "vllm/utils/argparse_utils.py": "import argparse\nFlexibleArgumentParser = argparse.ArgumentParser\n",
        "vllm/entrypoints/__init__.py": "",
        f"vllm/entrypoints/{cli_args_pkg}/__init__.py": "",
        f"vllm/entrypoints/{cli_args_pkg}/cli_args.py": body or PARSER.format(tag=f"only-in-{cli_args_pkg}"),
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _probe(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, str(PROBE)], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("pkg,version", [("common", "0.33.0"), ("launchers", "0.32.0")])
def test_probe_reads_the_parser_of_either_layout(tmp_path: Path, pkg: str, version: str) -> None:
    r = _probe(_fake_vllm(tmp_path, pkg, version))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["version"] == version
    assert data["cli_args_module"] == f"vllm.entrypoints.{pkg}.cli_args"
    assert f"--only-in-{pkg}" in data["flags"]
    assert data["flags"]["--port"] == {"dest": "port", "takes_value": True, "deprecated": False, "choices": None}
    assert data["flags"]["--enforce-eager"]["takes_value"] is False
    assert data["flags"]["--dtype"]["choices"] == ["auto", "bfloat16"]
    assert data["positionals"] == ["model_tag"]
    assert data["env"] == ["VLLM_CPU_KVCACHE_SPACE", "VLLM_PORT"]


def test_probe_prefers_the_new_home_when_both_exist(tmp_path: Path) -> None:
    _fake_vllm(tmp_path, "launchers", "0.33.0")
    _fake_vllm(tmp_path, "common", "0.33.0")
    data = json.loads(_probe(tmp_path).stdout)
    assert data["cli_args_module"] == "vllm.entrypoints.common.cli_args"
    assert "--only-in-common" in data["flags"] and "--only-in-launchers" not in data["flags"]


def test_probe_does_not_hide_a_broken_import_inside_the_new_module(tmp_path: Path) -> None:
    _fake_vllm(tmp_path, "launchers", "0.33.0")
    _fake_vllm(tmp_path, "common", "0.33.0", body="import vllm_missing_dependency\n")
    r = _probe(tmp_path)
    assert r.returncode != 0
    assert "No module named 'vllm_missing_dependency'" in r.stderr


def test_probe_names_both_homes_when_neither_exists(tmp_path: Path) -> None:
    _fake_vllm(tmp_path, "launchers", "0.31.0")
    (tmp_path / "vllm/entrypoints/launchers/cli_args.py").unlink()
    r = _probe(tmp_path)
    assert r.returncode != 0
    assert "vllm.entrypoints.common.cli_args, vllm.entrypoints.launchers.cli_args" in r.stderr.splitlines()[-1]
