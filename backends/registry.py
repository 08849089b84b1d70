"""Backend registry: backend name -> Backend (discovered, backends/discovery.py), and
`render_artifact` / `render_all` (constraints first)."""
from __future__ import annotations

import importlib
from typing import Any, Optional

from recipekit.backends import discovery
from recipekit.backends.base import Backend, Rendered
from recipekit.constraints import enforce
from recipekit.errors import RecipekitError, did_you_mean


def get_backend(name: str) -> Backend:
    spec = discovery.spec(name)
    if spec is None:
        known = discovery.names()
        raise RecipekitError(code="unknown-backend", message=f"no backend '{name}'",
                             hint=did_you_mean(name, known) or f"backends: {', '.join(known)}")
    module, _, cls = spec.entry.partition(":")
    backend = getattr(importlib.import_module(f"{discovery.PACKAGE}.{name}.{module}"), cls)()
    if not backend.name:
        backend.name = name
    return backend


def render_artifact(effective: Any, artifact: Optional[str] = None, check: bool = True) -> Rendered:
    """Render one artifact of an effective config; violated constraints refuse first."""
    if check:
        enforce(effective)
    return get_backend(effective.recipe.backend).render(effective, artifact)


def render_all(effective: Any, check: bool = True) -> dict[str, Rendered]:
    """Every artifact the backend has, by name."""
    if check:
        enforce(effective)
    backend = get_backend(effective.recipe.backend)
    return {name: backend.render(effective, name) for name in backend.artifacts()}
