"""The package layout: every folder with __init__.py is listed in pyproject, and the CLI stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]


def _listed():
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    st = data["tool"]["setuptools"]
    return st["package-dir"], set(st["packages"])


def test_every_package_folder_is_listed():
    package_dir, packages = _listed()
    # map each listed top folder to its namespace
    missing = []
    for ns, folder in package_dir.items():
        root = REPO / folder
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root)
            if any(p.startswith(".") or p == "__pycache__" for p in rel.parts):
                continue
            if ns != "recipekit" and rel.parts and (REPO / folder / rel.parts[0]).is_dir() is False:
                continue
            name = ".".join((ns, *rel.parts)) if rel.parts else ns
            # folders of recipekit/ that are mapped elsewhere are not sub-packages of it
            if ns == "recipekit" and rel.parts and f"recipekit.{rel.parts[0]}" in package_dir:
                continue
            if name not in packages:
                missing.append(f"{init.parent.relative_to(REPO)} -> {name}")
    assert not missing, f"packages missing from pyproject.toml [tool.setuptools].packages: {missing}"


def test_listed_packages_exist():
    package_dir, packages = _listed()
    for name in packages:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in package_dir:
                path = REPO / package_dir[prefix] / Path(*parts[i:])
                break
        assert (path / "__init__.py").is_file(), f"{name} listed but {path}/__init__.py is missing"


def test_no_top_level_tools_or_bench_installed():
    for bad in ("tools", "bench", "hybrid", "backends", "patches"):
        r = subprocess.run([sys.executable, "-c", f"import {bad}"], capture_output=True, cwd="/")
        assert r.returncode != 0, f"a top-level '{bad}' package is importable"


def test_help_imports_nothing_heavy():
    code = (
        "import sys\n"
        "from recipekit.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'numpy', 'transformers', 'matplotlib', 'safetensors', 'huggingface_hub', 'openai', 'docker', 'vllm') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert "HEAVY []" in r.stdout, r.stdout + r.stderr


# distribution name -> import name, where they differ
_IMPORT_NAME = {
    "pyyaml": "yaml",
    "huggingface_hub": "huggingface_hub",
    "markdown-it-py": "markdown_it",
    "docker": "docker",
}


def test_every_declared_dependency_is_imported():
    """A runtime dependency nothing imports is dropped (issue 12: openai was one)."""
    import re

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].strip().lower() for d in deps]
    sources = "\n".join(
        py.read_text()
        for folder in ("recipekit", "backends", "bench", "patches", "tools", "hybrid")
        for py in (REPO / folder).rglob("*.py")
    )
    unused = [
        n
        for n in names
        if not re.search(rf"^\s*(import|from)\s+{re.escape(_IMPORT_NAME.get(n, n.replace('-', '_')))}\b", sources, re.M)
    ]
    assert unused == []
