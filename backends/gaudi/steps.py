"""The apply steps of the gaudi backend: lossless conversion + independent validation
(`recipe checkpoint convert/validate`), the image build from the rendered `docker build`, the
fixes profile applied inside the container, and a Habana container that runs the rendered
launch script. Real only on a host whose doctor passes (8x Gaudi 2)."""
from __future__ import annotations

from recipekit.apply.docker_steps import (RECIPE_CLI, checkpoint_step, host_port, image_step,
                                          launch_container, patch_profile_step)
from recipekit.apply.steps import Step, cmd, doctor_step, fetch_step, smoke_step, wait_ready_step

LAUNCH_IN_CONTAINER = "/recipekit/launch.sh"


def docker_run_argv(eff, script_path: str) -> list[str]:
    """The Habana container (the usual Gaudi docker invocation) running the rendered launch script."""
    image = str(eff.setting("IMAGE", eff.recipe.engine.image))
    models = str(eff.setting("MODELS_DIR", None))
    ckpt = str(eff.setting("CHECKPOINT_DIR", models))
    argv = ["docker", "run", "-d", "--name", eff.recipe.id, "--runtime=habana",
            "-e", "HABANA_VISIBLE_DEVICES=all", "-e", "OMPI_MCA_btl_vader_single_copy_mechanism=none",
            "--cap-add=sys_nice", "--ipc=host", "--network=host",
            "-v", f"{script_path}:{LAUNCH_IN_CONTAINER}:ro", "-v", f"{models}:{models}"]
    if not ckpt.startswith(models.rstrip("/") + "/"):
        argv += ["-v", f"{ckpt}:{ckpt}"]
    return argv + [image, "bash", LAUNCH_IN_CONTAINER]


def prepare_step(eff) -> Step:
    src, dst = str(eff.setting("SRC_DIR", None)), str(eff.setting("CHECKPOINT_DIR", None))
    convert = [*RECIPE_CLI, "checkpoint", "convert", "--src", src, "--dst", dst, "--part", "all", "--no-progress"]
    validate = [*RECIPE_CLI, "checkpoint", "validate", "--src", src, "--dst", dst, "--part", "all"]
    return checkpoint_step(eff, [convert, validate], dst, "convert the checkpoint to the HPU MXFP4 layout and validate it",
                           must_print={tuple(validate): "VALIDATE_OK"},
                           notes=("the launch's check_checkpoint refuses any other layout",))


def launch_step(eff) -> Step:
    from recipekit.apply.launch import launch_inputs, launch_verified
    from recipekit.backends.registry import get_backend
    host, port = host_port(eff)
    script = get_backend("gaudi").render(eff, "launch")

    def run(ctx) -> dict:
        from recipekit import atomic
        path = ctx.state / "launch.sh"
        atomic.atomic_write_text(path, script.text, sync_dir="raise")
        path.chmod(0o755)
        return launch_container(ctx, docker_run_argv(eff, str(path)), host, port)

    argv = docker_run_argv(eff, "<state>/launch.sh")
    does = ["write: <state>/launch.sh (the rendered launch script: exports, check_checkpoint, warm-up, vllm serve)",
            cmd(argv) + "   (docker-py; label recipekit.recipe=" + eff.recipe.id + ")",
            "write: <state>/server.json (container id)"]
    return Step("launch", f"start the vllm-gaudi container on port {port}", does=does,
                inputs=launch_inputs(argv, {"script": script.text}), run=run, verify=launch_verified)


def steps(eff) -> list[Step]:
    from recipekit.backends.registry import get_backend
    return [doctor_step(eff, with_docker=True), fetch_step(eff), prepare_step(eff),
            image_step(eff, get_backend("gaudi")), patch_profile_step(eff), launch_step(eff),
            wait_ready_step(eff), smoke_step(eff)]
