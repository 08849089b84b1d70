"""The `StepKit` (recipekit/step.py) the application hands a backend's `steps()`: the shared
steps of steps.py, docker_steps.py and patch_step.py and the launch helpers of launch.py."""

from __future__ import annotations

from recipekit.apply import docker_steps, launch, patch_step, steps


class ApplyKit:
    doctor_step = staticmethod(steps.doctor_step)
    fetch_step = staticmethod(steps.fetch_step)
    wait_ready_step = staticmethod(steps.wait_ready_step)
    smoke_step = staticmethod(steps.smoke_step)
    image_step = staticmethod(docker_steps.image_step)
    patch_profile_step = staticmethod(docker_steps.patch_profile_step)
    patch_pack_step = staticmethod(patch_step.patch_pack_step)
    launch_docker_step = staticmethod(docker_steps.launch_docker_step)
    checkpoint_step = staticmethod(docker_steps.checkpoint_step)
    launch_container = staticmethod(docker_steps.launch_container)
    launch_native = staticmethod(launch.launch_native)
    launch_inputs = staticmethod(launch.launch_inputs)
    launch_verified = staticmethod(launch.launch_verified)


KIT = ApplyKit()
