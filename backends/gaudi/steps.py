"""The apply steps of the gaudi backend, from the recipe's data: the checkpoint pipeline's own
commands (`recipe checkpoint convert`, then `validate`, which must print VALIDATE_OK), the
image build from the rendered `docker build`, the fixes profile applied inside the container,
and the Habana container of `launch.docker` running the rendered launch script. Real only on a
host whose doctor passes (8x Gaudi 2)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recipekit.apply.docker_steps import host_port, image_step, launch_container, patch_profile_step
from recipekit.apply.steps import Step, cmd, doctor_step, fetch_step, smoke_step, wait_ready_step
from recipekit.backends import docker_run, pipeline
from recipekit.backends.gaudi.render import GaudiBackend

if TYPE_CHECKING:
    from recipekit.config import EffectiveConfig


def launch_step(eff: EffectiveConfig) -> Step:
    from recipekit.apply.launch import launch_inputs, launch_verified  # function-level: launch imports the runners

    host, port = host_port(eff)
    script = GaudiBackend().render(eff, "launch")

    def run(ctx: Any) -> dict:
        from recipekit import atomic  # function-level: only when it runs

        path = ctx.state / "launch.sh"
        atomic.atomic_write_text(path, script.text, sync_dir="raise")
        path.chmod(0o755)
        return launch_container(ctx, docker_run.docker_argv(eff, str(path)), host, port)

    argv = docker_run.docker_argv(eff)
    does = [
        f"write: {docker_run.SCRIPT_PLACEHOLDER} (the rendered launch script: exports, launch steps, engine command)",
        cmd(argv) + "   (docker-py; label recipekit.recipe=" + eff.recipe.id + ")",
        "write: <state>/server.json (container id)",
    ]
    return Step(
        "launch",
        f"start the {eff.recipe.engine.name} container on port {port}",
        does=does,
        inputs=launch_inputs(argv, {"script": script.text}),
        run=run,
        verify=launch_verified,
    )


def steps(eff: EffectiveConfig) -> list[Step]:
    return [
        doctor_step(eff, with_docker=True),
        fetch_step(eff),
        pipeline.prepare_step(eff),
        image_step(eff, GaudiBackend()),
        patch_profile_step(eff),
        launch_step(eff),
        wait_ready_step(eff),
        smoke_step(eff),
    ]
