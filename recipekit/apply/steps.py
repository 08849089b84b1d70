"""The context apply's steps run in, and the steps every backend shares (handed to the backends
through recipekit/apply/kit.py; the Step itself is recipekit/step.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from recipekit.apply import ready
from recipekit.apply.identity import served_name_of, verify_server
from recipekit.apply.runners.registry import runner_for
from recipekit.apply.server import SERVER_FILE, ServerRecord
from recipekit.apply.smoke import smoke
from recipekit.deployment import server_address
from recipekit.errors import ExitCode, RecipekitError
from recipekit.hybrid.engram.fitness import doctor_checks as engram_doctor_checks
from recipekit.step import Step
from recipekit.tools import fetch
from recipekit.tools.doctor import run_doctor

if TYPE_CHECKING:
    from recipekit.config import EffectiveConfig
    from recipekit.tools.doctor.facts import Facts


@dataclass
class ApplyContext:
    eff: Any  # EffectiveConfig (host paths)
    loaded: Any  # LoadedRecipe
    state: Path
    log: Callable[[str], None] = print
    server: Optional[ServerRecord] = None  # the server record (state/server.json)
    outputs: dict = field(default_factory=dict)
    started_server: bool = False  # this run launched it (Ctrl-C / failure stops it)
    docker_host: Optional[str] = None  # None: DOCKER_HOST or the default socket

    @property
    def recipe(self):
        return self.eff.recipe

    @property
    def server_path(self) -> Path:
        return self.state / SERVER_FILE

    @property
    def log_path(self) -> Path:
        return self.state / "server.log"


def base_url(eff: EffectiveConfig) -> str:
    return server_address(eff).url


# --------------------------------------------------------------------------- doctor


def doctor_step(eff: EffectiveConfig, with_docker: bool) -> Step:
    def run(ctx: ApplyContext) -> dict:
        return run_doctor_checks(ctx, with_docker)

    return Step(
        "doctor",
        "check the host against the recipe",
        does=[
            "call: recipekit.tools.doctor.run_doctor(effective) (accelerators, memory, disk, "
            f"ports{', docker' if with_docker else ''}); any FAIL stops the apply with exit 3"
        ],
        run=run,
    )


def run_doctor_checks(ctx: ApplyContext, with_docker: bool, facts: Optional[Facts] = None) -> dict:
    """The doctor's checks on this host's facts, or on `facts` (a rehearsal's host stand-in)."""
    report = run_doctor(ctx.eff, with_docker=with_docker, facts=facts, more_checks=engram_doctor_checks(ctx.eff))
    server = ctx.server
    failed = []
    for c in report.checks:
        if c.status == "WARN" and c.id == "port" and server:
            continue  # our own server holds the port; launch decides
        if c.status == "WARN":
            ctx.log(f"  {c.status} {c.id}: {c.message}" + (f" (hint: {c.hint})" if c.hint else ""))
        if c.status == "FAIL":
            failed.append(c)
    if failed:
        first = failed[0]
        raise RecipekitError(
            code="host-check-failed",
            exit_code=ExitCode.HOST_CHECK_FAILED,
            message=f"{len(failed)} host check(s) failed, first: {first.id}: {first.message}",
            hint=first.hint or "run `recipe doctor <recipe>` for the full report",
            details=[f"{c.id}: {c.message}" + (f" (hint: {c.hint})" if c.hint else "") for c in failed[1:]],
        )
    s = report.summary()
    warned = [c.id for c in report.checks if c.status == "WARN"]
    ctx.log(
        f"  host ok: {s.get('OK', 0)} ok, {s.get('WARN', 0)} warn"
        + (f" ({', '.join(warned)})" if warned else "")
        + f", {s.get('SKIP', 0)} skipped"
    )
    return {"summary": s}


# --------------------------------------------------------------------------- fetch


def fetch_step(eff: EffectiveConfig) -> Step:
    sources = eff.recipe.checkpoint.sources
    remote = [s for s in sources if s.repo and not s.generated_by]
    if not remote:
        return Step(
            "fetch",
            "download what the recipe needs",
            does=[
                "nothing to download: "
                + (
                    ", ".join(f"{s.id} is generated locally ({s.generated_by})" for s in sources)
                    or "the recipe names no sources"
                )
            ],
            run=lambda ctx: {"downloaded": 0},
        )

    def run(ctx: ApplyContext) -> dict:
        res = fetch.fetch(ctx.eff)
        return res.to_dict() if hasattr(res, "to_dict") else {"result": str(res)}

    does = []
    for s in remote:
        files = ", ".join(s.files.include) if s.files.include else "all files"
        try:
            dest = str(fetch.source_dir(eff, s))
        except RecipekitError:  # a local_dir template with a setting missing: the plan names the template
            dest = s.local_dir or "<models dir>"
        does.append(f"download: {s.repo}@{s.revision or 'main'} ({files}) -> {dest} (sha256-verified, resumable)")
    return Step(
        "fetch",
        "download what the recipe needs",
        does=does,
        run=run,
        inputs={"sources": [s.model_dump(mode="json") for s in remote]},
        verify=_fetch_verified,
    )


def _fetch_verified(ctx: ApplyContext, outputs: dict) -> bool:
    try:
        return bool(fetch.verify(ctx.eff))
    except RecipekitError:  # an unreadable or newer fetch record: not verified; the fetch re-run names it
        return False


# --------------------------------------------------------------------------- wait-ready / smoke


def wait_ready_step(eff: EffectiveConfig, timeout_s: Optional[int] = None) -> Step:
    url = base_url(eff)
    path = eff.recipe.launch.ready_path
    timeout_s = timeout_s or eff.recipe.launch.ready_timeout_s

    name = served_name_of(eff)

    def run(ctx: ApplyContext) -> dict:
        return ready.wait_ready(ctx, url, path, timeout_s, name)

    def verify(ctx: ApplyContext, outputs: dict) -> bool:
        return (
            ctx.server is not None
            and outputs.get("server_id") == server_id(ctx.server)
            and verify_server(ctx.server, url, name, also=("/health", path)).ok
        )

    return Step(
        "wait-ready",
        "wait until our server answers",
        does=[
            f"check: the socket listening on {url} belongs to the server we started (no request to another one)",
            f"poll: GET {url}/health, GET {url}{path} and GET {url}/v1/models (must list {name}) every 1 s "
            f"(up to {timeout_s} s); if the server exits first, print its last log lines and stop",
        ],
        run=run,
        verify=verify,
        inputs={"url": url, "path": path},
    )


def smoke_step(eff: EffectiveConfig) -> Step:
    url = base_url(eff)
    model = served_name_of(eff)
    # tool_choice "required" needs a tool parser in vLLM: test tools only where the launch has one
    tools = eff.arg("--tool-call-parser") is not None

    def run(ctx: ApplyContext) -> dict:
        if ctx.server is not None:  # the server that answers is ours (readiness checked; the port can change hands)
            v = verify_server(ctx.server, url, model)
            if not v.ok:
                raise v.error(url, model)
        res = smoke(url, model, log=ctx.log, tools=tools)
        res["server_id"] = server_id(ctx.server) if ctx.server else None
        return res

    def verify(ctx: ApplyContext, outputs: dict) -> bool:
        return (
            ctx.server is not None
            and outputs.get("server_id") == server_id(ctx.server)
            and verify_server(ctx.server, url, model, also=("/health", eff.recipe.launch.ready_path)).ok
        )

    return Step(
        "smoke",
        "smoke-test the API",
        does=[
            f"POST {url}/v1/chat/completions (one chat completion, model {model})",
            f"POST {url}/v1/completions (stream: true, one streamed completion)",
            f"POST {url}/v1/chat/completions (one tool call, tool_choice: required)"
            if tools
            else "no tool call (the launch sets no --tool-call-parser)",
        ],
        run=run,
        verify=verify,
        inputs={"url": url, "model": model, "tools": tools},
    )


def server_id(rec: Optional[ServerRecord]) -> Optional[str]:
    """The identity of the recorded server, as its runner gives it (None without a record)."""
    return runner_for(rec).identity(rec) if rec is not None else None


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
