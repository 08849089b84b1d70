"""The patch step: apply the recipe's patch pack to the engine's site-packages with the patch
applier (recipekit.patches.applier). A backend whose engine is patched in place (the cpu backend)
gets it from the StepKit with the site-packages folder of its engine."""

from __future__ import annotations

from pathlib import Path

from recipekit.config import EffectiveConfig
from recipekit.errors import ExitCode, RecipekitError
from recipekit.patches.applier import apply_pack, check_pack
from recipekit.patches.fsio import sha256_file
from recipekit.patches.manifest import resolve_pack_dir
from recipekit.step import Step


def patch_pack_step(eff: EffectiveConfig, target: Path) -> Step:
    """Apply the recipe's patch pack (`fixes.pack`) to the engine's site-packages `target`."""
    fixes = eff.recipe.fixes
    if fixes is None or not fixes.pack:
        return Step(
            "patch",
            "apply the engine's patch pack",
            does=["nothing: the recipe names no patch pack"],
            run=lambda ctx: {"applied": []},
        )
    pack_ref = fixes.pack
    pack_short = pack_ref[len("patches/packs/") :] if pack_ref.startswith("patches/packs/") else pack_ref

    def _pack_dir() -> Path:
        return resolve_pack_dir(pack_short)

    def run(ctx) -> dict:
        rep = apply_pack(_pack_dir(), target)
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
        try:
            rep = check_pack(_pack_dir(), target)
        except (RecipekitError, OSError):  # a pack or venv that cannot be read: not verified, the step re-runs
            return False
        return int(rep.exit_code) == 0 and all(p.status == "applied" for p in rep.patches if p.selected)

    try:
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
