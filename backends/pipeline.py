"""The recipe's `checkpoint.pipeline` as the commands the apply runs, resolved from the
effective config: each step's `run` followed by its declared `inputs` and `outputs` (source
folders, env knobs, settings, layout fields, templates). A leading `recipe` is this toolkit's
own CLI (the running interpreter's `-m recipekit`). Steps marked `done_by: fetch` are done by
the apply's fetch step and add no command. Backends build their prepare step from this, so a
changed command, source id or env name in the recipe changes the plan with no code change.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from recipekit import templates
from recipekit.backends.base import tmpl
from recipekit.checkpoint.fetch_record import source_dir
from recipekit.errors import RecipekitError, did_you_mean
from recipekit.step import Step, StepKit

if TYPE_CHECKING:
    from recipekit.config import EffectiveConfig

TOOLKIT_CLI = "recipe"


@dataclass(frozen=True)
class Command:
    step: str  # the pipeline step's id
    argv: list[str]
    must_print: Optional[str] = None
    produces: Optional[str] = None


def toolkit_cli() -> list[str]:
    """How `recipe` is run from inside an apply: the same interpreter, the same package."""
    return [sys.executable, "-m", "recipekit"]


def _where(step_index: int, part: str) -> str:
    return f"$.checkpoint.pipeline[{step_index}].{part}"


def _word(eff: EffectiveConfig, text: str) -> str:
    return templates.to_argv_word(tmpl(eff, str(text)), eff.env_values())


def arg_value(eff: EffectiveConfig, arg: Any, where: str) -> Optional[str]:
    """The effective value of one StepArg (None = unset)."""
    r = eff.recipe
    if arg.source is not None:
        src = next((s for s in r.checkpoint.sources if s.id == arg.source), None)
        if src is None:
            ids = [s.id for s in r.checkpoint.sources]
            raise RecipekitError(
                code="pipeline-unknown-source",
                location=where,
                message=f"no checkpoint source '{arg.source}'",
                hint=did_you_mean(arg.source, ids) or f"sources: {', '.join(ids) or 'none'}",
            )
        return str(source_dir(eff, src))
    if arg.env is not None:
        if arg.env not in eff.env and arg.env not in eff.declared_env:
            raise RecipekitError(
                code="pipeline-unknown-env",
                location=where,
                message=f"no env knob '{arg.env}'",
                hint=did_you_mean(arg.env, list(eff.env)) or "declare it under env:",
            )
        v = eff.env_value(arg.env)
        return None if v is None else str(v)
    if arg.setting is not None:
        if arg.setting not in eff.settings:
            raise RecipekitError(
                code="pipeline-unknown-setting",
                location=where,
                message=f"no setting '{arg.setting}'",
                hint=did_you_mean(arg.setting, eff.settings),
            )
        v = eff.settings[arg.setting].value
        return None if v is None else str(v)
    if arg.layout is not None:
        lay = r.layouts.get(eff.layout) if eff.layout else None
        if lay is None:
            raise RecipekitError(
                code="pipeline-needs-layout",
                location=where,
                message=f"the step reads the layout's {arg.layout}, and no layout is selected",
                hint="declare layouts (and default_layout) in the recipe",
            )
        v = getattr(lay, arg.layout)
        if v is None and not arg.optional:
            raise RecipekitError(
                code="pipeline-layout-field-unset",
                location=where,
                message=f"layout {eff.layout} does not declare {arg.layout}",
                hint=f"add {arg.layout}: to layouts.{eff.layout}",
            )
        return None if v is None else str(v)
    return _word(eff, arg.value)


def step_argv(eff: EffectiveConfig, index: int) -> list[str]:
    """One pipeline step's full argv: run, then inputs, then outputs."""
    step = eff.recipe.checkpoint.pipeline[index]
    argv = [_word(eff, t) for t in step.run]
    if argv and argv[0] == TOOLKIT_CLI:
        argv = toolkit_cli() + argv[1:]
    for part, args in (("inputs", step.inputs), ("outputs", step.outputs)):
        for j, a in enumerate(args):
            value = arg_value(eff, a, _where(index, f"{part}[{j}]"))
            if value in (None, ""):
                if a.optional:
                    continue
                raise RecipekitError(
                    code="pipeline-value-unset",
                    location=_where(index, f"{part}[{j}]"),
                    message=f"step {step.id}: {a.flag or 'a positional argument'} has no value",
                    hint="set it, or mark the argument optional: true",
                )
            argv += ([a.flag] if a.flag else []) + [value]
    return argv


def commands(eff: EffectiveConfig) -> list[Command]:
    """The commands of every pipeline step the apply runs, in recipe order."""
    out = []
    for i, step in enumerate(eff.recipe.checkpoint.pipeline):
        if step.done_by is not None:
            continue
        if not step.run:
            raise RecipekitError(
                code="pipeline-step-has-no-command",
                location=_where(i, "run"),
                message=f"step {step.id} has no run command",
                hint="give it run: [...], or done_by: fetch when the fetch step does it",
            )
        produces = _word(eff, step.produces) if step.produces else None
        out.append(Command(step.id, step_argv(eff, i), step.must_print, produces))
    return out


def output_dir(eff: EffectiveConfig, cmds: list[Command]) -> Optional[str]:
    """What the prepare step leaves: checkpoint.output.path, else the last step's `produces`."""
    out = eff.recipe.checkpoint.output
    if out is not None and out.path:
        return _word(eff, out.path)
    return next((c.produces for c in reversed(cmds) if c.produces), None)


def prepare_step(eff: EffectiveConfig, kit: StepKit) -> Step:
    """The apply's prepare-checkpoint step: the pipeline's commands in order, each step's
    must_print checked in its output; done when the checkpoint output folder exists."""
    cmds = commands(eff)
    ck = eff.recipe.checkpoint
    names = [s.name or s.id for s in ck.pipeline if s.done_by is None]
    title = ", then ".join(names) if names else "nothing to prepare"
    must = {tuple(c.argv): c.must_print for c in cmds if c.must_print}
    notes = tuple(f"{c.step}: must print {c.must_print}" for c in cmds if c.must_print)
    if ck.note:
        notes += (" ".join(ck.note.split()),)
    return kit.checkpoint_step(eff, [c.argv for c in cmds], output_dir(eff, cmds), title, must_print=must, notes=notes)
