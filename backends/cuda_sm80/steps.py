"""The apply steps of the cuda_sm80 backend, from the recipe's data: the checkpoint pipeline's
own commands (hybrid assembly with no tensor copied, the Engram row store; their sources, env
knobs and rank count come from the steps' declared inputs and the layout), the image build
from the rendered `docker build` (the patch steps are in its Dockerfile), and the rendered
`docker run` (TP4 or PP4 from the layout). Real only on a host whose doctor passes (4x CMP 170HX)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recipekit.backends import pipeline
from recipekit.backends.cuda_sm80.render import CudaSm80Backend
from recipekit.step import Step, StepKit

if TYPE_CHECKING:
    from recipekit.deployment import Deployment


def steps(dep: Deployment, kit: StepKit) -> list[Step]:
    eff = dep.eff
    backend = CudaSm80Backend()
    host, port = dep.address.listen_host, dep.address.port
    run_argv = backend.render(eff, "docker").argv
    assert run_argv is not None  # the docker render always carries its argv
    return [
        kit.doctor_step(eff, with_docker=True),
        kit.fetch_step(eff),
        pipeline.prepare_step(eff, kit),
        kit.image_step(eff, backend),
        kit.patch_profile_step(eff),
        kit.launch_docker_step(eff, run_argv, host, port),
        kit.wait_ready_step(eff),
        kit.smoke_step(eff),
    ]
