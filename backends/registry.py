"""Backend registry: backend name -> Backend, and `render_artifact` (constraints first)."""
from __future__ import annotations

import importlib
from typing import Optional

from recipekit.errors import RecipekitError, did_you_mean

BACKENDS = {
    "gaudi": ("recipekit.backends.gaudi.render", "GaudiBackend"),
    "cuda_sm80": ("recipekit.backends.cuda_sm80.render", "CudaSm80Backend"),
    "cpu": ("recipekit.backends.cpu.render", "CpuBackend"),
}


def get_backend(name: str):
    if name not in BACKENDS:
        raise RecipekitError(code="unknown-backend", message=f"no backend '{name}'",
                             hint=did_you_mean(name, BACKENDS) or f"backends: {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name]
    return getattr(importlib.import_module(module), cls)()


def render_artifact(effective, artifact: Optional[str] = None, check: bool = True):
    """Render one artifact of an effective config; violated constraints refuse first."""
    if check:
        from recipekit.constraints import enforce
        enforce(effective)
    return get_backend(effective.recipe.backend).render(effective, artifact)


def render_all(effective, check: bool = True) -> dict:
    """Every artifact the backend has, by name."""
    if check:
        from recipekit.constraints import enforce
        enforce(effective)
    backend = get_backend(effective.recipe.backend)
    return {name: backend.render(effective, name) for name in backend.artifacts()}
