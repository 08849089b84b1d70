"""The apply steps of the gaudi backend, from the recipe's data: the checkpoint pipeline's own
commands (`recipe checkpoint convert`, then `validate`, which must print VALIDATE_OK), the
image build from the rendered `docker build`, the fixes profile applied inside the container,
and the Habana container of `launch.docker` running the rendered launch script. Real only on a
host whose doctor passes (8x Gaudi 2)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recipekit import atomic
from recipekit.backends import docker_run, pipeline
from recipekit.backends.gaudi.render import GaudiBackend
from recipekit.step import Step, StepKit, cmd

if TYPE_CHECKING:
    from recipekit.deployment import Deployment


def launch_step(dep: Deployment, kit: StepKit) -> Step:
    eff = dep.eff
    host, port = dep.address.listen_host, dep.address.port
    script = GaudiBackend().render(eff, "launch")

    def run(ctx: Any) -> dict:

        path = ctx.state / "launch.sh"
        atomic.atomic_write_text(path, script.text, sync_dir="raise")
        path.chmod(0o755)
        return kit.launch_container(ctx, docker_run.docker_argv(eff, str(path)), host, port)

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
        inputs=kit.launch_inputs(argv, {"script": script.text}),
        run=run,
        verify=kit.launch_verified,
    )


def steps(dep: Deployment, kit: StepKit) -> list[Step]:
    eff = dep.eff
    return [
        kit.doctor_step(eff, with_docker=True),
        kit.fetch_step(eff),
        pipeline.prepare_step(eff, kit),
        kit.image_step(eff, GaudiBackend()),
        kit.patch_profile_step(eff),
        launch_step(dep, kit),
        kit.wait_ready_step(eff),
        kit.smoke_step(eff),
    ]
