"""CPU renders: the native launch script of the local default (env exports + the engine's
module entry point), the .env, and the serve command alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recipekit.backends.base import Backend, Rendered, env_artifact, script_artifact, serve_artifact

if TYPE_CHECKING:
    from recipekit.config import EffectiveConfig


def launch(eff: EffectiveConfig) -> Rendered:
    return script_artifact(eff, "launch", "launch.sh", shebang=True, note=eff.recipe.launch.note)


def env(eff: EffectiveConfig) -> Rendered:
    return env_artifact(eff, f"engine environment of {eff.recipe.id}")


class CpuBackend(Backend):
    name = "cpu"
    renderers = {"launch": launch, "env": env, "serve": serve_artifact}
