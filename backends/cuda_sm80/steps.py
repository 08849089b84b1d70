"""The apply steps of the cuda_sm80 backend: hybrid assembly (`recipe checkpoint assemble`,
no tensor copied) and the Engram folder the engine reads (`recipe engram place` + `verify`:
the official shards by hard link or verified copy, a reduced index, config.json), the image build from the
rendered `docker build` (the patch steps are in its Dockerfile), and the rendered `docker run`
(TP4 or PP4 from the layout). Real only on a host whose doctor passes (4x CMP 170HX)."""
from __future__ import annotations

from recipekit.apply.docker_steps import (RECIPE_CLI, checkpoint_step, host_port, image_step,
                                          launch_docker_step, patch_profile_step)
from recipekit.apply.steps import Step, doctor_step, fetch_step, setting, smoke_step, wait_ready_step


def _source_dir(eff, sid: str) -> str:
    from pathlib import Path
    src = next((s for s in eff.recipe.checkpoint.sources if s.id == sid), None)
    if src is None:
        return f"<{sid}>"
    try:
        from recipekit.tools.fetch import source_dir
        return str(source_dir(eff, src))
    except ImportError:
        return str(Path(str(setting(eff, "MODELS_DIR"))) / (src.repo or sid).split("/")[-1])


def _experts_re(eff) -> str | None:
    """The effective DSV41_EXPERTS_ONLY_FILES_RE (None when unset or empty)."""
    v = eff.env.get("DSV41_EXPERTS_ONLY_FILES_RE")
    return str(v.value) if v is not None and v.value not in (None, "") else None


def prepare_step(eff) -> Step:
    from recipekit import templates
    from recipekit.hybrid.engram.deploy import prepare_commands
    out = eff.recipe.checkpoint.output
    hybrid = str(templates.substitute(out.path, eff.setting)) if out and out.path else str(setting(eff, "MODELS_DIR"))
    official, exl3 = _source_dir(eff, "official"), _source_dir(eff, "exl3-experts")
    assemble_argv = [*RECIPE_CLI, "checkpoint", "assemble", "--official", official, "--exl3", exl3, "--out", hybrid]
    experts_re = _experts_re(eff)
    if experts_re:
        # assembly fails (assemble-experts-re-mismatch) unless the regex the engine will get
        # matches exactly the experts-only files it finds
        assemble_argv += ["--experts-re", experts_re]
    commands = [assemble_argv]
    commands += prepare_commands(eff, list(RECIPE_CLI))
    return checkpoint_step(eff, commands, hybrid, "assemble the hybrid checkpoint, place and verify the Engram shards")


def steps(eff) -> list[Step]:
    from recipekit.backends.registry import get_backend
    backend = get_backend("cuda_sm80")
    host, port = host_port(eff)
    run_argv = backend.render(eff, "docker").argv
    return [doctor_step(eff, with_docker=True), fetch_step(eff), prepare_step(eff), image_step(eff, backend),
            patch_profile_step(eff), launch_docker_step(eff, run_argv, host, port), wait_ready_step(eff),
            smoke_step(eff)]
