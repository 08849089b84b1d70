"""The flags and env names a recipe uses, judged against two catalogs: kept, removed, renamed,
changed default, changed choices.

A rename comes only from data the new release carries (its catalog's `renames`, e.g. 0.33.0's
`_inverse_prefixes`: `--no-enable-x` -> `--disable-x`) or from a planted/declared pair map given by
the caller; a name that is gone with no such entry is "removed", never guessed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Optional

from recipekit.tools.upgrade.wheel_catalog import Catalog

KEPT, REMOVED, RENAMED, DEFAULT, CHOICES, UNKNOWN = (
    "kept",
    "removed",
    "renamed",
    "changed-default",
    "changed-choices",
    "unknown-before",
)


@dataclass(frozen=True)
class Use:
    kind: str  # "flag" or "env"
    name: str
    where: str  # JSON path in the recipe, or "<multinode layout> node N"


@dataclass
class Finding:
    kind: str
    name: str
    where: list[str]
    status: str
    replacement: Optional[str] = None
    source: Optional[str] = None
    detail: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def normalize_flag(flag: str) -> str:
    """'--max_model_len=5' -> '--max-model-len'; '--compilation-config.mode' -> '--compilation-config'."""
    name = flag.split("=", 1)[0]
    if name.startswith("--"):
        name = ("--" + name[2:].replace("_", "-")).split(".", 1)[0]
    return name


def _flag_finding(name: str, where: list[str], old: Catalog, new: Catalog) -> Finding:
    was, now = old.flags.get(name), new.flags.get(name)
    if was is None and now is None and name not in new.renames:
        return Finding("flag", name, where, UNKNOWN, detail=f"not a flag of {old.version} either")
    if name in new.renames:
        repl, source = new.renames[name]
        return Finding("flag", name, where, RENAMED, repl, f"vllm {new.version} {source}")
    if now is None:
        return Finding("flag", name, where, REMOVED, detail=f"vllm {new.version}'s parser has no {name}")
    if was is not None and was.get("choices") and now.get("choices") and was["choices"] != now["choices"]:
        gone = sorted(set(was["choices"]) - set(now["choices"]))
        added = sorted(set(now["choices"]) - set(was["choices"]))
        return Finding("flag", name, where, CHOICES, source=now.get("source"), detail=f"removed {gone}, added {added}")
    if was is not None and was.get("default") != now.get("default"):
        detail = f"default {was.get('default')!r} -> {now.get('default')!r}"
        return Finding("flag", name, where, DEFAULT, source=now.get("source"), detail=detail)
    return Finding("flag", name, where, KEPT)


def _env_finding(name: str, where: list[str], old: Catalog, new: Catalog) -> Finding:
    if name in new.env:
        return Finding("env", name, where, KEPT)
    if not name.startswith("VLLM_"):
        return Finding("env", name, where, KEPT, detail="not a vLLM-owned name (read by a plugin or the image)")
    if name in old.env:
        return Finding("env", name, where, REMOVED, detail=f"vllm {new.version}'s envs.py has no {name}")
    return Finding("env", name, where, UNKNOWN, detail=f"not in vllm {old.version}'s envs.py either")


def classify(
    uses: Iterable[Use], old: Catalog, new: Catalog, extra_renames: Optional[dict[str, tuple[str, str]]] = None
) -> list[Finding]:
    """One finding per distinct name, with every place that uses it."""
    if extra_renames:
        new = Catalog(new.version, new.cli_args_module, new.flags, new.env, {**new.renames, **extra_renames})
    places: dict[tuple[str, str], list[str]] = {}
    for u in uses:
        key = (u.kind, normalize_flag(u.name) if u.kind == "flag" else u.name)
        places.setdefault(key, []).append(u.where)
    out = []
    for (kind, name), where in sorted(places.items()):
        out.append(_flag_finding(name, where, old, new) if kind == "flag" else _env_finding(name, where, old, new))
    return out
