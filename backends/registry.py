"""Backend registry: backend name -> Backend (discovered, recipekit/backend_discovery.py), each
backend's checkpoint tools and layouts, and `render_artifact` / `render_all` (constraints first)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable, Optional

from recipekit import backend_discovery as discovery
from recipekit.backends.base import Backend, Rendered
from recipekit.checkpoint.layout import LAYOUT_CHECKERS
from recipekit.constraints import enforce
from recipekit.errors import RecipekitError, did_you_mean

if TYPE_CHECKING:
    from recipekit.checkpoint.layout import CheckpointFormat
    from recipekit.config import EffectiveConfig


def get_backend(name: str) -> Backend:
    spec = discovery.spec(name)
    if spec is None:
        known = discovery.names()
        raise RecipekitError(
            code="unknown-backend",
            message=f"no backend '{name}'",
            hint=did_you_mean(name, known) or f"backends: {', '.join(known)}",
        )
    module, _, cls = spec.entry.partition(":")
    backend = getattr(importlib.import_module(f"{discovery.PACKAGE}.{name}.{module}"), cls)()
    if not backend.name:
        backend.name = name
    return backend


def checkpoint_tool(target: Optional[str], which: str) -> Callable[..., Any]:
    """One function of a backend's checkpoint conversion (convert, validate, bench, render_bench).
    target None: the backend that offers one (an error when several do)."""
    offering = {n: s.checkpoint for n, s in discovery.specs().items() if s.checkpoint is not None}
    if target is None:
        if len(offering) != 1:
            raise RecipekitError(
                code="checkpoint-target-needed",
                message="give the conversion target",
                hint=f"--target {' or '.join(offering) or '(no backend converts checkpoints)'}",
            )
        target = next(iter(offering))
    tools = offering.get(target)
    if tools is None:
        raise RecipekitError(
            code="unknown-target",
            message=f"no conversion target {target!r}",
            hint=did_you_mean(target, offering) or f"targets: {', '.join(offering) or 'none'}",
        )
    ref = getattr(tools, which)
    if not ref:
        raise RecipekitError(code="unknown-target", message=f"the {target} backend has no checkpoint {which}")
    module, _, fn = ref.partition(":")
    return getattr(importlib.import_module(f"{discovery.PACKAGE}.{target}.{module}"), fn)


def load_layouts() -> dict[str, CheckpointFormat]:
    """Every checkpoint layout by name: the core ones (recipekit.checkpoint.layout) and those the
    discovered backends' `layouts` modules register when imported (BackendSpec.layouts)."""
    # lazy: the layout code (safetensors reading, the DSV4.1 contract) is needed only to check a checkpoint

    for name, spec in discovery.specs().items():
        for module in spec.layouts:
            full = f"{discovery.PACKAGE}.{name}{module}" if module.startswith(".") else module
            try:
                importlib.import_module(full)
            except Exception as e:  # a broken layout module is bad input, named with its backend
                raise RecipekitError(
                    code="backend-import-failed",
                    location=f"{discovery.PACKAGE}.{name} BACKEND.layouts",
                    message=f"importing {full} failed: {type(e).__name__}: {e}",
                    hint="fix the layout module, or remove it from the backend's BACKEND.layouts",
                ) from e
    return LAYOUT_CHECKERS


def render_artifact(effective: EffectiveConfig, artifact: Optional[str] = None, check: bool = True) -> Rendered:
    """Render one artifact of an effective config; violated constraints refuse first."""
    if check:
        enforce(effective)
    return get_backend(effective.recipe.backend).render(effective, artifact)


def render_all(effective: EffectiveConfig, check: bool = True) -> dict[str, Rendered]:
    """Every artifact the backend has, by name."""
    if check:
        enforce(effective)
    backend = get_backend(effective.recipe.backend)
    return {name: backend.render(effective, name) for name in backend.artifacts()}
