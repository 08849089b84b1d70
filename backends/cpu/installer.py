"""Which tool installs the engine venv (uv or pip), and the commands each runs.

uv is faster on the same inputs (`python -m recipekit.backends.cpu.install_bench` measures
both in one run), but it reads none of pip's configuration: a machine whose pip takes torch
from a local folder (find-links) or caps it by a constraints file would hand uv a different
resolution. So uv gets what pip would use, read from pip's own `pip config list` (its files
and PIP_* environment variables, pip's precedence), passed explicitly; nothing here names a
host. Without the uv package (a toolkit venv made before it was a dependency), pip installs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

TOOLS = ("uv", "pip")
# pip options that change what gets resolved, and uv's spelling of each (both repeatable)
_PIP_TO_UV = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


@dataclass(frozen=True)
class PipSources:
    """Where pip looks for packages on this machine, by pip's config option name."""

    options: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def uv_args(self) -> list[str]:
        args: list[str] = []
        for opt, flag in _PIP_TO_UV.items():
            for v in self.options.get(opt, ()):
                args += [flag, v]
        if self.options.get("extra-index-url") or self.options.get("find-links"):
            # pip takes the best version across all indexes; uv stops at the first that has the
            # name unless told (a local torch build would lose to a registry's otherwise)
            args += ["--index-strategy", "unsafe-best-match"]
        return args


def parse_pip_config(text: str) -> PipSources:
    """`pip config list` output (`section.key='value'` lines; `:env:` for PIP_* variables) to
    the options that steer resolution. Precedence is pip's: environment over `install` over
    `global`; values with spaces are lists, as pip splits them."""
    rank = {":env:": 3, "install": 2, "global": 1}
    best: dict[str, tuple[int, tuple[str, ...]]] = {}
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        if not sep or "." not in key:
            continue
        section, _, opt = key.strip().rpartition(".")
        if opt not in _PIP_TO_UV or section not in rank:
            continue
        val = tuple(raw.strip().strip("'\"").split())
        if rank[section] >= best.get(opt, (0, ()))[0]:  # an empty PIP_X="" clears it, as in pip
            best[opt] = (rank[section], val)
    return PipSources({k: v for k, (_, v) in best.items() if v})


def pip_sources(python: str = sys.executable) -> PipSources:
    """What pip on this machine would use (an empty set when pip cannot say)."""
    try:
        out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return parse_pip_config(out)


def uv_binary() -> Optional[str]:
    """The uv executable the toolkit's venv carries, or None (then pip installs)."""
    if os.environ.get("RECIPEKIT_ENGINE_INSTALLER", "").lower() == "pip":
        return None
    try:
        from uv import find_uv_bin  # lazy: only an install needs it
    except ImportError:
        return None
    try:
        return str(find_uv_bin())
    except FileNotFoundError:
        return None


def bytecode_writes_disabled(environ: Optional[dict[str, str]] = None) -> bool:
    """True when PYTHONDONTWRITEBYTECODE is set (any non-empty value, as Python reads it): then no
    import ever writes a .pyc, and every engine start compiles every module it imports again."""
    return bool((os.environ if environ is None else environ).get("PYTHONDONTWRITEBYTECODE"))


def install_commands(
    tool: str,
    venv: Path,
    requirements: Sequence[str],
    uninstall: Sequence[str],
    python: str = sys.executable,
    uv: Optional[str] = None,
    sources: Optional[PipSources] = None,
    compile_bytecode: Optional[bool] = None,
) -> list[list[str]]:
    """The commands that build `venv` with `tool`, in order. uv writes bytecode only with
    `compile_bytecode` (default: when PYTHONDONTWRITEBYTECODE is set); pip always does (its default)."""
    py = str(venv / "bin" / "python")
    if tool == "pip":
        return [
            [python, "-m", "venv", str(venv)],
            # not -q: pip's "Collecting"/"Downloading ... (N MB)" lines feed the live progress line
            [py, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", *requirements],
            [py, "-m", "pip", "uninstall", "-y", "-q", *uninstall],
        ]
    if tool != "uv" or not uv:
        raise ValueError(f"unknown installer {tool!r} (or uv missing)")
    src = (sources if sources is not None else pip_sources(python)).uv_args()
    if compile_bytecode is None:
        compile_bytecode = bytecode_writes_disabled()
    # Where Python may write bytecode, the first start writes the .pyc of what it imports (cheaper
    # than compiling all ~20,800 files here). Under PYTHONDONTWRITEBYTECODE nothing ever would, so
    # every start compiled its imports again: compiling at install (44 s) took a warm start from
    # 54.5 to 32.4 s (README, quick start).
    return [
        [uv, "venv", "--python", python, str(venv)],
        [
            uv,
            "pip",
            "install",
            "--python",
            py,
            *(["--compile-bytecode"] if compile_bytecode else []),
            *src,
            *requirements,
        ],
        [uv, "pip", "uninstall", "--python", py, *uninstall],
    ]


if __name__ == "__main__":
    # start.sh's toolkit install: uv's arguments for pip's package sources, one per line (this file
    # runs before the toolkit is installed, so it imports nothing outside the standard library)
    print("\n".join(pip_sources().uv_args()))
