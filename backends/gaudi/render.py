"""Gaudi renders: the cookbook's launch block (exports, check_checkpoint, warm-up, fixes,
`vllm serve`), the env file, the serve command alone, and the image build command."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recipekit.backends.base import (
    Backend,
    Rendered,
    dockerfile_artifact,
    env_artifact,
    script_artifact,
    serve_artifact,
)
from recipekit.backends.docker_run import docker_env_artifact

if TYPE_CHECKING:
    from recipekit.config import EffectiveConfig


def launch(eff: EffectiveConfig) -> Rendered:
    # No shebang: the text is the page's Launch block, line for line (run it with bash).
    return script_artifact(eff, "launch", "launch.sh", shebang=False, note=eff.recipe.launch.note)


def env(eff: EffectiveConfig) -> Rendered:
    return env_artifact(eff, f"engine environment of {eff.recipe.id}")


class GaudiBackend(Backend):
    name = "gaudi"
    renderers = {
        "launch": launch,
        "env": env,
        "docker-env": docker_env_artifact,
        "serve": serve_artifact,
        "dockerfile": dockerfile_artifact,
    }
