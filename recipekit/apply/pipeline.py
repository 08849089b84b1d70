"""`recipe plan` and `recipe apply`: load, check, build the steps, run them with stamps under
the lifecycle lock.

A recipe from outside the catalog (an exported JSON file or a URL) is validated the same way
and its plan is printed; applying it needs --trust. On Ctrl-C or a failure after this run
started a server that never became ready, that server is stopped, so no orphan is left and
the state (server.json, stamps) only ever describes finished work.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, Callable, Iterable, Optional

from recipekit.apply import stamps
from recipekit.apply.auto import load_recipe
from recipekit.apply.identity import address_of, served_name_of
from recipekit.apply.kit import KIT
from recipekit.apply.launch import early_port_check, load_server, stop_server
from recipekit.apply.lock import LifecycleLock
from recipekit.apply.set_flags import check_set_flags, engine_name_errors
from recipekit.apply.state import write_json
from recipekit.apply.steps import ApplyContext, base_url
from recipekit.backends.base import argv_of, serve_groups
from recipekit.backends.registry import get_backend
from recipekit.config import effective_config
from recipekit.constraints import enforce
from recipekit.deployment import Deployment
from recipekit.errors import ErrorList, ExitCode, RecipekitError, did_you_mean
from recipekit.paths import catalog_dir
from recipekit.step import ORDER, Step
from recipekit.textsafe import shown


def in_catalog(loaded) -> bool:
    origin = loaded.origin or ""
    if origin.startswith(("http://", "https://")):
        return False
    try:
        Path(origin).resolve().relative_to(catalog_dir().resolve())
        return True
    except ValueError:
        return False


def load(
    ref: str, layout: Optional[str] = None, env_file: Optional[str] = None, sets: Iterable[str] = ()
) -> Deployment:
    """The single-node deployment of a recipe reference (a command resolves its own with
    recipekit.cli.common.deployment and hands it in)."""
    loaded = load_recipe(ref)
    sets = tuple(sets or ())
    check_set_flags(loaded.recipe, sets)
    eff = effective_config(loaded, layout=layout, env_file=env_file, sets=sets, host_paths=True)
    return Deployment(loaded, eff, layout, env_file=env_file, sets=sets)


def preflight(dep: Deployment) -> None:
    """apply's checks before any step (and before the plan is shown): the recipe's constraints
    on the effective config, the engine's flag catalog, the served name."""
    enforce(dep.eff)
    check_engine_names(dep)


def check_engine_names(dep: Deployment) -> None:
    """The pinned engine's parser judgement `recipe lint` makes on the serve flags (the recipe's
    and the deployed layout's) and env knobs, before any step: a removed flag fails here with
    its code, not minutes later when the engine exits at start-up."""
    errs = engine_name_errors(dep.loaded, [dep.eff.layout] if dep.eff.layout else [])
    errs += served_name_errors(dep.eff)
    if len(errs) == 1:
        raise errs[0]
    if errs:
        raise ErrorList(errs)


def served_name_errors(eff: Any) -> list[RecipekitError]:
    """The name readiness, smoke and every post-apply command ask the server for (the recipe's
    model.served_name or SERVED_MODEL_NAME) must be one the launch makes it serve
    (`--served-model-name A [B ...]`, vLLM nargs='+'); else every check after launch would fail
    on a server that started fine."""
    asked = served_name_of(eff)
    for g in serve_groups(eff):
        if g and g[0] == ["--served-model-name"]:
            served = [n for w in argv_of(g[1:], eff) for n in w.split()]
            if asked not in served:
                return [
                    RecipekitError(
                        code="served-name-mismatch",
                        exit_code=ExitCode.INVALID_INPUT,
                        location="--served-model-name",
                        message=f"the launch serves {' '.join(served) or '(no name)'} but the checks ask for {asked}",
                        hint="make model.served_name (or SERVED_MODEL_NAME) and the --served-model-name value agree",
                    )
                ]
    return []


def build_steps(dep: Deployment) -> list[Step]:
    eff = dep.eff
    steps = get_backend(eff.recipe.backend).steps(dep, KIT)
    ids = [s.id for s in steps]
    if ids != ORDER:
        raise RecipekitError(
            code="plan-invalid",
            exit_code=ExitCode.FAILURE,
            message=f"backend {eff.recipe.backend} returned steps {ids}, expected {ORDER}",
        )
    return steps


def select_steps(steps: list[Step], only: Optional[list[str]] = None, from_: Optional[str] = None) -> list[Step]:
    ids = [s.id for s in steps]
    for name in list(only or []) + ([from_] if from_ else []):
        if name not in ids:
            raise RecipekitError(
                code="unknown-step",
                message=f"no step '{name}'",
                location="--only/--from",
                hint=did_you_mean(name, ids) or f"steps: {', '.join(ids)}",
            )
    if only and from_:
        raise RecipekitError(code="step-selection-conflict", message="give --only or --from, not both")
    if only:
        return [s for s in steps if s.id in only]
    if from_:
        return steps[ids.index(from_) :]
    return steps


def plan_dict(dep: Deployment, steps: list[Step], trusted: bool) -> dict:
    loaded, eff = dep.loaded, dep.eff
    return {
        "schema_version": 1,
        "recipe": loaded.id,
        "origin": loaded.origin,
        "in_catalog": trusted,
        "content_hash": loaded.content_hash,
        "backend": eff.recipe.backend,
        "layout": eff.layout,
        "state_dir": str(dep.state),
        "steps": [s.to_dict() for s in steps],
    }


def print_plan(plan: dict, write_raw: Callable[[str], None] = print) -> None:

    def write(line: str) -> None:
        write_raw(shown(line))

    write(
        f"plan for {plan['recipe']} (backend {plan['backend']}"
        + (f", layout {plan['layout']}" if plan["layout"] else "")
        + f") from {plan['origin']}"
    )
    write(f"state: {plan['state_dir']}")
    for i, s in enumerate(plan["steps"], 1):
        write(f"{i}. {s['id']}: {s['title']}" + ("" if s["stamped"] else "  [runs every time]"))
        for line in s["does"]:
            write(f"     {line}")
        if s.get("note"):
            write(f"     note: {s['note']}")


# A rehearsal's stand-in steps (recipekit/rehearse) for the commands its children run (`restart`):
# (steps) -> steps. None outside a rehearsal.
_rehearsal_steps: Optional[Callable[[list[Step]], list[Step]]] = None


def set_rehearsal_steps(fn: Optional[Callable[[list[Step]], list[Step]]]) -> None:
    global _rehearsal_steps
    _rehearsal_steps = fn


class ApplyReport(dict):
    pass


OVERRIDES_FILE = "overrides.json"


def apply(
    ref: str,
    *,
    layout: Optional[str] = None,
    env_file: Optional[str] = None,
    sets: Iterable[str] = (),
    dry_run: bool = False,
    only: Optional[list[str]] = None,
    from_: Optional[str] = None,
    trust: bool = False,
    log: Callable[[str], None] = print,
    adjust_steps: Optional[Callable[[list[Step]], list[Step]]] = None,
    deployment: Optional[Deployment] = None,
) -> ApplyReport:
    """Run the plan. `deployment`: the one the command resolved (else the single-node one of
    `ref` with `layout`, `env_file`, `sets`); `adjust_steps`: a multi-node node's changes to the
    backend's steps."""
    dep = deployment if deployment is not None else load(ref, layout, env_file, sets)
    loaded, eff = dep.loaded, dep.eff
    trusted = in_catalog(loaded)
    preflight(dep)
    built = build_steps(dep)
    if _rehearsal_steps is not None:
        built = _rehearsal_steps(built)
    steps = select_steps(adjust_steps(built) if adjust_steps else built, only, from_)
    plan = plan_dict(dep, steps, trusted)
    report = ApplyReport(recipe=loaded.id, dry_run=dry_run, steps=[], plan=plan)
    if dry_run:
        print_plan(plan, log)
        return report
    if not trusted and not trust:
        print_plan(plan, log)
        raise RecipekitError(
            code="untrusted-recipe",
            exit_code=ExitCode.INVALID_INPUT,
            location=loaded.origin,
            message="this recipe is not from the catalog; its plan is shown above",
            hint="read the plan, then re-run with --trust to apply it",
        )
    state = dep.state
    state.mkdir(parents=True, exist_ok=True)
    ctx = ApplyContext(eff=eff, loaded=loaded, state=state, log=log)
    with LifecycleLock(state / "apply.lock", "apply", log=log), _sigterm_as_interrupt():
        ctx.server = load_server(state)
        if any(s.id == "launch" for s in steps):
            # seconds, before any slow step: another program on the port (the launch checks again)
            early_port_check(ctx, *address_of(base_url(eff)))
        # restart without options reuses these (the port, layout and .env of the last apply)
        write_json(state / OVERRIDES_FILE, dep.overrides())
        log(f"applying {loaded.id}" + ("" if trusted else f" (trusted: {loaded.origin})"))
        t_all = time.monotonic()
        try:
            for step in steps:
                report["steps"].append(_run_step(ctx, step, stamps))
        except BaseException as e:
            # A server this run started and that did not pass its checks is not left behind.
            cleaned = []
            if ctx.started_server and ctx.server is not None:
                why = "interrupted" if isinstance(e, KeyboardInterrupt) else "apply failed"
                log(f"{why}: stopping the server this run started ({ctx.server.label})")
                try:
                    stop_server(state, ctx.server, log)
                    cleaned.append("stopped the server this run started")
                except BaseException as stop_err:  # a second Ctrl-C: still report the first cause
                    log(f"could not stop it: {stop_err}")
                for sid in ("launch", "wait-ready", "smoke"):
                    stamps.clear_stamp(state, sid)
            if isinstance(e, KeyboardInterrupt):
                line = _interrupted_line(steps, len(report["steps"]), cleaned)
                log(line)  # here: the CLI parser swallows the exception's text on the way out
                raise KeyboardInterrupt(line) from None
            raise
        report["total_s"] = round(time.monotonic() - t_all, 1)
    report["server"] = ctx.server.model_dump(mode="json") if ctx.server is not None else None
    return report


def _interrupted_line(steps: list, done: int, cleaned: list[str]) -> str:
    """One line for a Ctrl-C: the step it stopped, what was cleaned up, and that a re-run resumes."""
    step = steps[done] if done < len(steps) else None
    what = f"step {done + 1}/{len(steps)} {step.id} ({step.title})" if step is not None else "apply"
    # each step writes into a temporary place and renames it into place: nothing half-written stays
    cleaned = [*cleaned, "its partial output was removed"] if step is not None else cleaned
    return (
        f"interrupted: {what}; {', '.join(cleaned) or 'nothing to clean up'}; "
        f"./start.sh (or recipe apply) again resumes here, reusing the {done} finished step(s)"
    )


class _sigterm_as_interrupt:
    """SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so the same cleanup runs."""

    def __enter__(self) -> "_sigterm_as_interrupt":
        self.old: Any = None
        if threading.current_thread() is threading.main_thread():

            def handler(signum: int, frame: Optional[FrameType]) -> None:
                raise KeyboardInterrupt("SIGTERM")

            self.old = signal.signal(signal.SIGTERM, handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)


def _run_step(ctx: ApplyContext, step: Step, stamps: ModuleType) -> dict:
    stamp = stamps.read_stamp(ctx.state, step.id)
    if step.verify is not None and stamps.matches(stamp, step.inputs):
        try:
            ok = step.verify(ctx, stamp.get("outputs") or {})
        except RecipekitError:
            ok = False
        if ok:
            ctx.log(f"= {step.id}: verified, skipped")
            ctx.outputs[step.id] = stamp.get("outputs") or {}
            return {"id": step.id, "status": "verified", "s": 0.0}
        ctx.log(f"> {step.id}: its stamp no longer verifies; doing it again")
    else:
        ctx.log(f"> {step.id}: {step.title}")
    stamps.clear_stamp(ctx.state, step.id)
    t0 = time.monotonic()
    outputs = step.run(ctx) if step.run else {}
    dt = time.monotonic() - t0
    if step.verify is not None:
        stamps.write_stamp(ctx.state, step.id, step.inputs, outputs or {})
    ctx.outputs[step.id] = outputs or {}
    ctx.log(f"  {step.id} done in {dt:.1f} s")
    return {"id": step.id, "status": "done", "s": round(dt, 1), "outputs": outputs}


def plan(
    ref: str,
    *,
    layout: Optional[str] = None,
    env_file: Optional[str] = None,
    sets: Iterable[str] = (),
    only: Optional[list[str]] = None,
    from_: Optional[str] = None,
    deployment: Optional[Deployment] = None,
) -> dict:
    dep = deployment if deployment is not None else load(ref, layout, env_file, sets)
    steps = select_steps(build_steps(dep), only, from_)
    return plan_dict(dep, steps, in_catalog(dep.loaded))
