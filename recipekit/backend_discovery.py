"""Backend discovery: the sub-packages of `recipekit.backends` that declare a `BACKEND` spec.

A backend is one folder: `backends/<name>/__init__.py` declares `BACKEND = BackendSpec(...)`
(recipekit/backend_spec.py) and the folder holds its renders and steps. Nothing else names it: the
schema's backend and accelerator choices, the catalog's auto-detection and the doctor's
vendor mapping all come from here.

Folders outside the tree join through RECIPEKIT_BACKEND_PATH (os.pathsep-separated folders,
each holding backend packages): they are appended to the package's `__path__`, so such a
backend imports as `recipekit.backends.<name>` exactly like a built-in one. A path setting
rather than an entry point: it needs no installed distribution (nothing to pip install, no
venv to change), it is scoped to the process that sets it, and it is how the tests add a
backend that lives only in the test folder.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from pathlib import Path
from typing import Optional

from recipekit.backend_spec import BackendSpec
from recipekit.errors import RecipekitError

PATH_SETTING = "RECIPEKIT_BACKEND_PATH"
PACKAGE = "recipekit.backends"

_cache: dict[str, dict[str, BackendSpec]] = {}


def extra_dirs() -> list[Path]:
    """The folders named by RECIPEKIT_BACKEND_PATH, in order (empty entries skipped)."""
    raw = os.environ.get(PATH_SETTING, "")
    dirs = [Path(p).expanduser().resolve() for p in raw.split(os.pathsep) if p.strip()]
    for d in dirs:
        if not d.is_dir():
            raise RecipekitError(
                code="backend-path-missing",
                location=PATH_SETTING,
                message=f"{d} is not a folder",
                hint="list folders that hold backend packages, separated by " + repr(os.pathsep),
            )
    return dirs


_appended: set[str] = set()


def _search_path() -> list[str]:
    """The package's own folders, then the RECIPEKIT_BACKEND_PATH folders set now."""
    path = importlib.import_module(PACKAGE).__path__
    own = [p for p in path if p not in _appended]
    extra = [str(d) for d in extra_dirs()]
    for d in extra:
        if d not in path:
            path.append(d)  # a namespace extension, as pkgutil.extend_path does
            _appended.add(d)
    return own + [d for d in extra if d not in own]


def specs() -> dict[str, BackendSpec]:
    """Every discovered backend by name (its folder name), sorted by name."""
    key = os.environ.get(PATH_SETTING, "")
    if key in _cache:
        return _cache[key]
    found: dict[str, BackendSpec] = {}
    where: dict[str, str] = {}
    # one folder at a time: pkgutil would silently skip a name seen in an earlier folder
    for folder, info in ((d, i) for d in _search_path() for i in pkgutil.iter_modules([d])):
        if not info.ispkg:
            continue
        if info.name in where:
            raise RecipekitError(
                code="backend-name-taken",
                location=f"{folder}/{info.name}",
                message=f"a backend package '{info.name}' already exists in {where[info.name]}",
                hint="rename the folder: a backend's name is its folder name",
            )
        where[info.name] = folder
        name = f"{PACKAGE}.{info.name}"
        try:
            mod = sys.modules.get(name) or importlib.import_module(name)
        except Exception as e:  # a broken backend folder is bad input, named with its folder
            raise RecipekitError(
                code="backend-import-failed",
                location=f"{folder}/{info.name}/__init__.py",
                message=f"importing {name} failed: {type(e).__name__}: {e}",
                hint="fix the backend package, or remove its folder from " + PATH_SETTING,
            ) from e
        spec = getattr(mod, "BACKEND", None)
        if isinstance(spec, BackendSpec):
            found[info.name] = spec
    _cache[key] = dict(sorted(found.items()))
    return _cache[key]


def names() -> list[str]:
    return list(specs())


def spec(name: str) -> Optional[BackendSpec]:
    return specs().get(name)


def accelerators() -> list[str]:
    """The `host.accelerator` kinds recipes may name: "none" and each backend's kind."""
    kinds = {"none"} | {s.accelerator for s in specs().values()}
    return sorted(kinds)


def vendor_of(accelerator: str) -> Optional[str]:
    """The doctor's `Accelerator.vendor` for a host.accelerator kind (None: no card)."""
    return next((s.device_vendor for s in specs().values() if s.accelerator == accelerator and s.device_vendor), None)


def accelerator_of_vendor(vendor: Optional[str]) -> str:
    """The host.accelerator kind of cards the doctor reports with this vendor ("none" if no backend has it)."""
    if not vendor:
        return "none"
    return next((s.accelerator for s in specs().values() if s.device_vendor == vendor), "none")
