"""CUDA sm_80 renders: the `docker run` of the CMP recipe (every -e/-v/-p/--ulimit/--cap-add and
serve argument), the .env, the in-container serve command, and the image build command."""
from __future__ import annotations

from recipekit.backends.base import (Backend, Rendered, argv_of, dockerfile_artifact, env_artifact, flatten, lit,
                                     multiline, script_artifact, serve_groups, tmpl)
from recipekit.errors import RecipekitError


def docker_groups(eff) -> list[list]:
    d = eff.recipe.launch.docker
    if d is None:
        raise RecipekitError(code="artifact-not-available", message=f"{eff.recipe.id} declares no docker run")
    head = [lit("docker"), lit("run")]
    if d.detach:
        head.append(lit("-d"))
    if d.name:
        head += [lit("--name"), tmpl(eff, d.name)]
    if d.gpus:
        head += [lit("--gpus"), lit(d.gpus)]
    if d.ipc:
        head.append(lit(f"--ipc={d.ipc}"))
    for cap in d.cap_add:
        head += [lit("--cap-add"), lit(cap)]
    for u in d.ulimits:
        head += [lit("--ulimit"), lit(u)]
    groups = [head]
    # a volume whose host side renders empty (an unset optional setting, e.g. ENGRAM_DISK_DIR) is left out
    volumes = [tmpl(eff, v) for v in d.volumes]
    groups.append([w for v in volumes if not (v and isinstance(v[0], str) and v[0].startswith(":"))
                   for w in (lit("-v"), v)])
    groups.append([w for p in d.ports for w in (lit("-p"), tmpl(eff, p))])
    for name, value in eff.exported_env():
        groups.append([lit("-e"), lit(f"{name}={value}")])
    serve = serve_groups(eff)
    command = list(serve[0])
    if d.entrypoint:
        first = command[0] if command else None
        if first == [d.entrypoint]:
            command = command[1:]
        groups.append([lit("--entrypoint"), lit(d.entrypoint), tmpl(eff, d.image)])
    else:
        groups.append([tmpl(eff, d.image)])
    groups.append(command)
    groups += serve[1:]
    return [g for g in groups if g]


def docker(eff) -> Rendered:
    groups = docker_groups(eff)
    words = flatten(groups)
    text = multiline(groups)
    return Rendered("docker", text + "\n", argv=argv_of(words, eff), shell=text, filename="docker-run.sh")


def launch(eff) -> Rendered:
    r = docker(eff)
    return Rendered("launch", "#!/usr/bin/env bash\nset -euo pipefail\n" + r.text, argv=r.argv, shell=r.shell,
                    filename="launch.sh", note="starts the engine container detached")


def serve(eff) -> Rendered:
    return script_artifact(eff, "serve", "serve.sh", shebang=True, note="runs inside the engine container")


def env(eff) -> Rendered:
    return env_artifact(eff, f"engine environment of {eff.recipe.id} (layout {eff.layout})")


class CudaSm80Backend(Backend):
    name = "cuda_sm80"
    renderers = {"launch": launch, "docker": docker, "env": env, "serve": serve,
                 "dockerfile": dockerfile_artifact}
