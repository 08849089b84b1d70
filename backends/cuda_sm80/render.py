"""CUDA sm_80 renders: the `docker run` of the CMP recipe (every -e/-v/-p/--ulimit/--cap-add and
serve argument), the .env, the in-container serve command, and the image build command."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recipekit.backends.base import (
    Backend,
    Rendered,
    argv_of,
    dockerfile_artifact,
    env_artifact,
    flatten,
    multiline,
    script_artifact,
)
from recipekit.backends.docker_run import docker_env_artifact, docker_groups

if TYPE_CHECKING:
    from recipekit.config import EffectiveConfig


def docker(eff: EffectiveConfig) -> Rendered:
    groups = docker_groups(eff)
    words = flatten(groups)
    text = multiline(groups)
    return Rendered("docker", text + "\n", argv=argv_of(words, eff), shell=text, filename="docker-run.sh")


def launch(eff: EffectiveConfig) -> Rendered:
    r = docker(eff)
    return Rendered(
        "launch",
        "#!/usr/bin/env bash\nset -euo pipefail\n" + r.text,
        argv=r.argv,
        shell=r.shell,
        filename="launch.sh",
        note="starts the engine container detached",
    )


def serve(eff: EffectiveConfig) -> Rendered:
    return script_artifact(eff, "serve", "serve.sh", shebang=True, note="runs inside the engine container")


def env(eff: EffectiveConfig) -> Rendered:
    return env_artifact(eff, f"engine environment of {eff.recipe.id} (layout {eff.layout})")


class CudaSm80Backend(Backend):
    name = "cuda_sm80"
    renderers = {
        "launch": launch,
        "docker": docker,
        "docker-env": docker_env_artifact,
        "env": env,
        "serve": serve,
        "dockerfile": dockerfile_artifact,
    }
