"""The `docker run` command of a recipe's `launch.docker` data, as argument groups.

Shared by every container backend: the CMP recipe renders it as its `docker` artifact (one
group a line, the seed's shell block), the Gaudi recipe starts its Habana container with it
(the rendered launch script mounted read-only and run with bash). Each field of DockerRun
maps to one flag; nothing here knows a backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from recipekit import inert
from recipekit.backends.base import Rendered, Word, argv_of, comment_line, lit, serve_groups, tmpl
from recipekit.errors import RecipekitError

if TYPE_CHECKING:
    from recipekit.config import EffectiveConfig
    from recipekit.schema import DockerRun

# What the plan shows where the host path of the launch script is only known at run time.
SCRIPT_PLACEHOLDER = "<state>/launch.sh"


def docker_groups(eff: EffectiveConfig, script_host_path: Optional[str] = None) -> list[list[Word]]:
    """docker run [flags] [-v ...] [-p ...] [-e ...] [--entrypoint E] IMAGE COMMAND [ARGS], grouped.

    script_host_path: where the rendered launch script is on the host (only with `script`).
    """
    d = eff.recipe.launch.docker
    if d is None:
        raise RecipekitError(code="artifact-not-available", message=f"{eff.recipe.id} declares no docker run")
    head: list[Word] = [lit("docker"), lit("run")]
    if d.detach:
        head.append(lit("-d"))
    if d.name:
        head += [lit("--name"), tmpl(eff, d.name)]
    if d.gpus:
        head += [lit("--gpus"), lit(d.gpus)]
    if d.runtime:
        head.append(lit(f"--runtime={d.runtime}"))
    if d.ipc:
        head.append(lit(f"--ipc={d.ipc}"))
    if d.network:
        head.append(lit(f"--network={d.network}"))
    for cap in d.cap_add:
        head += [lit("--cap-add"), lit(cap)]
    for u in d.ulimits:
        head += [lit("--ulimit"), lit(u)]
    groups = [head]
    # a volume whose host side renders empty (an unset optional setting, e.g. ENGRAM_DISK_DIR) is left out
    rendered = [tmpl(eff, v) for v in d.volumes]
    volumes = [
        w for v in rendered if not (v and isinstance(v[0], str) and v[0].startswith(":")) for w in (lit("-v"), v)
    ]
    if d.script:
        volumes += [lit("-v"), lit(f"{script_host_path or SCRIPT_PLACEHOLDER}:{d.script}:ro")]
    groups.append(volumes)
    groups.append([w for p in d.ports for w in (lit("-p"), tmpl(eff, p))])
    groups += [[lit("-e"), w] for w in _env_words(eff, d)]
    if d.script:
        # the script is the whole launch (exports, steps, engine command)
        groups.append([tmpl(eff, d.image)])
        groups.append([lit("bash"), lit(d.script)])
        return [g for g in groups if g]
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


def docker_argv(eff: EffectiveConfig, script_host_path: Optional[str] = None) -> list[str]:
    """The same command as one argv (runtime env references resolved)."""
    return argv_of([w for g in docker_groups(eff, script_host_path) for w in g], eff)


def _env_words(eff: EffectiveConfig, d: DockerRun) -> list[Word]:
    """The word after each `-e` of the docker run: the recipe's items, then the engine env when passed."""
    words = [tmpl(eff, item) for item in d.env]
    if d.pass_engine_env:
        words += [lit(f"{name}={value}") for name, value in eff.exported_env()]
    return words


def docker_env_pairs(eff: EffectiveConfig) -> list[tuple[str, Optional[str]]]:
    """The (name, value) of every `-e` of the docker run, in order; value None for `-e NAME` (host's value)."""
    d = eff.recipe.launch.docker
    if d is None:
        raise RecipekitError(code="artifact-not-available", message=f"{eff.recipe.id} declares no docker run")
    pairs: list[tuple[str, Optional[str]]] = []
    for word in argv_of(_env_words(eff, d), eff):
        name, eq, value = word.partition("=")
        pairs.append((name, value if eq else None))
    return pairs


def docker_env_artifact(eff: EffectiveConfig) -> Rendered:
    """`docker-env`: the container's environment as a file for `docker run --env-file` (values verbatim).

    The .env artifact is for shells and recipekit's parser (single quotes where a shell needs them);
    docker's env-file format has no quoting, so it gets this file of its own (recipekit/inert.py)."""

    where = f"{eff.recipe.id} (layout {eff.layout})" if eff.layout else eff.recipe.id
    lines = [comment_line(f"container environment of {where}, for docker run --env-file (values verbatim)")]
    lines += [inert.docker_env_line(name, value) for name, value in docker_env_pairs(eff)]
    return Rendered("docker-env", "\n".join(lines) + "\n", filename="docker.env", note="docker run --env-file only")
