"""Steps shared by the container backends (gaudi, cuda_sm80): checkpoint commands, the image
build, the in-image patch profile and the `docker run` launch, all rendered from the effective
config. They run for real where the doctor passed (the hardware exists); on any host their
plan and `--dry-run` show every command in full.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from recipekit import templates
from recipekit.apply.launch import launch, launch_inputs, launch_verified
from recipekit.apply.runners import docker as dk
from recipekit.backends.base import tmpl
from recipekit.errors import ExitCode, RecipekitError
from recipekit.step import Step, cmd

if TYPE_CHECKING:
    from recipekit.config import EffectiveConfig

RECIPE_CLI = [sys.executable, "-m", "recipekit"]


def run_commands(ctx, commands: list[list[str]], must_print: Optional[dict] = None) -> dict:
    """Run commands in order, each line of their output passed to the console as it comes (a
    conversion runs for hours: its progress is shown live); a non-zero exit or a missing
    must_print marker stops the apply."""
    outs = []
    for argv in commands:
        ctx.log("  $ " + " ".join(argv))
        marker = (must_print or {}).get(tuple(argv))
        rc, printed = stream_command(argv, lambda line: ctx.log("    " + line), marker)
        if rc != 0:
            raise RecipekitError(
                code="step-command-failed",
                exit_code=ExitCode.FAILURE,
                message=f"`{' '.join(argv[:6])} ...` exited with {rc}",
                hint="its output is above",
            )
        if marker and not printed:
            raise RecipekitError(
                code="step-check-failed",
                exit_code=ExitCode.FAILURE,
                message=f"`{' '.join(argv[:6])} ...` did not print {marker}",
            )
        outs.append({"argv": argv, "rc": rc})
    return {"commands": outs}


def stream_command(argv: list[str], emit: Callable[[str], None], marker: Optional[str] = None) -> tuple[int, bool]:
    """Run argv with stdout+stderr merged, emit each line as soon as it is written; returns the
    exit code and whether a line held `marker`."""
    seen = False
    with subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            seen = seen or bool(marker and marker in line)
            emit(line)
        rc = proc.wait()
    return rc, seen


def checkpoint_step(
    eff: EffectiveConfig,
    commands: list[list[str]],
    produces: Optional[str],
    title: str,
    must_print: Optional[dict] = None,
    notes: tuple[str, ...] = (),
) -> Step:
    def run(ctx) -> dict:
        return run_commands(ctx, commands, must_print)

    def verify(ctx, out) -> bool:
        return produces is None or Path(produces).is_dir()

    does = [cmd(c) for c in commands] + ([f"produces: {produces}"] if produces else []) + list(notes)
    return Step("prepare-checkpoint", title, does=does, inputs={"commands": commands}, run=run, verify=verify)


def image_step(eff: EffectiveConfig, backend) -> Step:
    """Build the engine image with the rendered `docker build` (docker-py, no pull)."""
    b = eff.recipe.engine.build
    image = str(_tmpl(eff, eff.recipe.engine.image or (b.tag if b else "")))
    if b is None:
        return Step(
            "install-engine",
            f"use the engine image {image}",
            does=[f"the image {image} must exist locally (the recipe declares no build)"],
            run=lambda ctx: _require_image(ctx, image),
            inputs={"image": image},
            verify=lambda ctx, out: _image_id(image) is not None,
        )
    rendered = backend.render(eff, "dockerfile")
    context = str(_tmpl(eff, b.context))
    dockerfile = str(_tmpl(eff, b.dockerfile)) if b.dockerfile else None
    buildargs = {k: str(_tmpl(eff, v)) for k, v in b.build_args.items()}

    def run(ctx) -> dict:
        cli = dk.client()
        image_id = dk.build(
            cli, Path(context), image, dockerfile=dockerfile, buildargs=buildargs, log=lambda s: ctx.log("    " + s)
        )
        ctx.log(f"  built {image} ({image_id[:19]})")
        return {"image": image, "image_id": image_id}

    def verify(ctx, out) -> bool:
        return out.get("image_id") is not None and _image_id(image) == out.get("image_id")

    does = [cmd(rendered.argv) + "   (DOCKER_BUILDKIT=0 semantics through docker-py; base image must be local)"]
    if b.base:
        does.append(f"base: {_tmpl(eff, b.base)}")
    return Step(
        "install-engine",
        f"build the engine image {image}",
        does=does,
        note=b.note,
        inputs={"argv": rendered.argv, "context": context, "dockerfile": dockerfile, "buildargs": buildargs},
        run=run,
        verify=verify,
    )


def _require_image(ctx, image: str) -> dict:
    iid = _image_id(image)
    if iid is None:
        raise RecipekitError(
            code="docker-image-missing",
            exit_code=ExitCode.HOST_CHECK_FAILED,
            message=f"image {image} is not present locally",
            hint=f"docker load or build {image}",
        )
    return {"image": image, "image_id": iid}


def _image_id(image: str) -> Optional[str]:
    try:
        cli = dk.client()
        return cli.images.get(image).id
    except Exception:  # docker-py's ImageNotFound/APIError, requests' connection errors, no daemon: no image
        return None


def _tmpl(eff: EffectiveConfig, text):
    return templates.to_argv_word(tmpl(eff, str(text)), eff.env_values())


def patch_profile_step(eff: EffectiveConfig) -> Step:
    f = eff.recipe.fixes
    if f is None:
        return Step("patch", "engine fixes", does=["nothing: the recipe declares no fixes"], run=lambda ctx: {})
    n = len(f.items) or f.count or 0
    does = [
        f"the fixes profile {f.profile} ({n} fixes) is applied {f.applied_at or 'inside the image'}; "
        "nothing is patched on the host"
    ]
    if f.pack:
        does.append(f"pack: {f.pack} (the launch refuses to start if a required fix is missing or drifted)")
    for item in f.items:
        does.append(
            f"  {'required' if item.required else 'opt-in' if item.opt_in else 'optional'} {item.id}: {item.reason}"
        )
    return Step("patch", f"engine fixes (profile {f.profile})", does=does, run=lambda ctx: {"profile": f.profile})


def launch_docker_step(eff: EffectiveConfig, run_argv: list[str], host: str, port: int) -> Step:
    def run(ctx) -> dict:
        return launch_container(ctx, run_argv, host, port)

    does = [
        "reuse our container if it runs with these settings; refuse a port held by another program",
        cmd(run_argv) + "   (docker-py; label recipekit.recipe=" + eff.recipe.id + ")",
        "write: <state>/server.json (container id)",
    ]
    return Step(
        "launch",
        f"start the engine container on {host}:{port}",
        does=does,
        inputs=launch_inputs(run_argv, {}),
        run=run,
        verify=launch_verified,
    )


def launch_container(ctx, run_argv: list[str], host: str, port: int) -> dict:
    """Start (or reuse) the engine container of the rendered `docker run` argv."""
    return launch(ctx, "docker", run_argv, {}, host, port)
