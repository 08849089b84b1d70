"""Gaudi renders: the cookbook's launch block (exports, check_checkpoint, warm-up, fixes,
`vllm serve`), the env file, the serve command alone, and the image build command."""
from __future__ import annotations

from recipekit.backends.base import (Backend, Rendered, argv_of, build_words, dotenv_text, flatten,
                                     launch_script, multiline, serve_groups, shell_of)


def launch(eff) -> Rendered:
    groups = serve_groups(eff)
    words = flatten(groups)
    # No shebang: the text is the page's Launch block, line for line (run it with bash).
    return Rendered("launch", launch_script(eff, groups, shebang=False), argv=argv_of(words, eff),
                    shell=shell_of(words), filename="launch.sh", note=eff.recipe.launch.note)


def serve(eff) -> Rendered:
    groups = serve_groups(eff)
    words = flatten(groups)
    return Rendered("serve", multiline(groups) + "\n", argv=argv_of(words, eff), shell=shell_of(words),
                    filename="serve.sh")


def env(eff) -> Rendered:
    return Rendered("env", dotenv_text(eff, f"engine environment of {eff.recipe.id}"), filename=".env")


def dockerfile(eff) -> Rendered:
    words = build_words(eff)
    b = eff.recipe.engine.build
    return Rendered("dockerfile", shell_of(words) + "\n", argv=argv_of(words, eff), shell=shell_of(words),
                    filename="build.sh", note=b.note if b else "")


class GaudiBackend(Backend):
    name = "gaudi"
    renderers = {"launch": launch, "env": env, "serve": serve, "dockerfile": dockerfile}
