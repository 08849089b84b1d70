"""Stand-ins for the programs a recipe's launch script runs from the engine image before the engine
starts (the Gaudi recipe's cookbook scripts under $COOKBOOK), mounted read-only at their paths in
the stand-in image, each declared in the table with what it does instead.

A script is matched by its path relative to the `${env:NAME}` folder the step names; a launch step
that runs a script this table does not know is left as it is (it then fails in the container, where
the rehearsal shows the server's last lines).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from recipekit.atomic import atomic_write_text
from recipekit.deployment import Deployment


@dataclass(frozen=True)
class ScriptStandin:
    kind: str  # "real check" | "stand-in" | "not rehearsable"
    why: str
    body: str  # the stand-in program (python); {toolkit_python} is filled in


_CHECK = ScriptStandin(
    "real check",
    "the toolkit's own layout check of the converted checkpoint (recipe checkpoint check "
    "--checkpoint-format gaudi: 95 shards and 1,530 tensors at full size, the tiny geometry's here)",
    "import subprocess, sys\n"
    "argv = [{toolkit_python!r}, '-m', 'recipekit', 'checkpoint', 'check', '--checkpoint-format', 'gaudi', sys.argv[1]]\n"
    "sys.exit(subprocess.call(argv))\n",
)
_WARMUP = ScriptStandin(
    "stand-in",
    "no HPU graphs to compile on a CPU: writes the warm-up's done file at once",
    "open('/tmp/dsv41-warmup.done', 'w').write('rehearsal stand-in: no HPU graphs compiled\\n')\n",
)
_FIXES = ScriptStandin(
    "not rehearsable",
    "the vllm-gaudi v0.30.0 pack's patch bodies are not public: nothing is applied; the table's patch row says so",
    "print('rehearsal: fixes/apply_all.py not rehearsable (the pack bodies are not public); nothing applied')\n",
)

# path under the step's ${env:NAME} folder -> its stand-in
STANDINS: dict[str, ScriptStandin] = {
    "ports/deepseek-v4-1-flash/serving/check_checkpoint.py": _CHECK,
    "ports/deepseek-v4-1-flash/serving/warmup.py": _WARMUP,
    "fixes/apply_all.py": _FIXES,
}

_ENV_PATH = re.compile(r"^\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}/(.+)$")


@dataclass(frozen=True)
class Mount:
    host: Path
    container: str
    why: str


def image_env(dep: Deployment) -> list[tuple[str, str, str]]:
    """(name, value, why) of the env the engine image itself sets and the launch script reads:
    a recipe env entry with `export: false` that a launch step names (`${env:NAME}`). The stand-in
    image does not carry the engine image's ENV, so the rehearsal passes these with -e."""
    named = {m.group(1) for step in dep.recipe.launch.steps for w in step.run if (m := _ENV_PATH.match(w))}
    out = []
    for e in dep.recipe.env:
        if e.name in named and e.export is False:
            value = dep.eff.env_value(e.name)
            if value:
                out.append((e.name, str(value), "the engine image sets it (ENV); the stand-in image does not"))
    return out


def script_mounts(dep: Deployment, root: Path) -> list[Mount]:
    """The stand-in programs of `dep`'s launch script, written under `root`, as read-only mounts."""
    out: list[Mount] = []
    for step in dep.recipe.launch.steps:
        if len(step.run) < 2 or Path(step.run[0]).name not in ("python3", "python"):
            continue
        m = _ENV_PATH.match(step.run[1])
        if m is None or m.group(2) not in STANDINS:
            continue
        folder = dep.eff.env_value(m.group(1))
        if not folder:
            continue
        s = STANDINS[m.group(2)]
        host = root / m.group(2)
        host.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(host, s.body.format(toolkit_python=sys.executable))
        out.append(Mount(host, f"{str(folder).rstrip('/')}/{m.group(2)}", f"{s.kind}: {s.why}"))
    return out
