"""CPU renders: the native launch script of the local default (env exports + the engine's
module entry point), the .env, and the serve command alone."""
from __future__ import annotations

from recipekit.backends.base import (Backend, Rendered, argv_of, dotenv_text, flatten, launch_script,
                                     multiline, serve_groups, shell_of)


def launch(eff) -> Rendered:
    groups = serve_groups(eff)
    words = flatten(groups)
    return Rendered("launch", launch_script(eff, groups, shebang=True), argv=argv_of(words, eff),
                    shell=shell_of(words), filename="launch.sh", note=eff.recipe.launch.note)


def serve(eff) -> Rendered:
    groups = serve_groups(eff)
    words = flatten(groups)
    return Rendered("serve", multiline(groups) + "\n", argv=argv_of(words, eff), shell=shell_of(words),
                    filename="serve.sh")


def env(eff) -> Rendered:
    return Rendered("env", dotenv_text(eff, f"engine environment of {eff.recipe.id}"), filename=".env")


class CpuBackend(Backend):
    name = "cpu"
    renderers = {"launch": launch, "env": env, "serve": serve}
