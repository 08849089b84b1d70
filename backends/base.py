"""The Backend interface and the rendering pieces every backend shares.

A backend turns an EffectiveConfig into artifacts: `render(effective, artifact) -> Rendered`
with `argv` (the main command as a list, runtime env references resolved), `shell` (the same
command as one shell string, quoted with shlex; runtime env references stay "$NAME") and
`text` (the whole file: script, .env, ...). argv and shell come from the same token list, so
they cannot disagree. `steps()` gives the apply plan (backends/<name>/steps.py).
"""

from __future__ import annotations

import importlib
import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from recipekit import inert, templates
from recipekit.errors import RecipekitError, did_you_mean

if TYPE_CHECKING:
    from recipekit.config import EffectiveConfig
    from recipekit.deployment import Deployment
    from recipekit.step import Step, StepKit

Word = list  # list of templates.Part (literal str | EnvRef)


@dataclass
class Rendered:
    artifact: str
    text: str
    argv: Optional[list[str]] = None
    shell: Optional[str] = None
    filename: str = ""
    note: str = ""

    def to_dict(self) -> dict:
        return {
            "artifact": self.artifact,
            "filename": self.filename,
            "argv": self.argv,
            "shell": self.shell,
            "text": self.text,
            "note": self.note,
        }


@dataclass
class HostRequirement:
    """Something the host must provide (checked by the doctor, not by lint)."""

    id: str
    what: str
    value: Any
    reason: str = ""
    constraint: Optional[str] = None


# --------------------------------------------------------------------------- words


def lit(s: Any) -> Word:
    """A literal word (user data or a resolved value): never parsed as a template."""
    return [str(s)]


def tmpl(eff: EffectiveConfig, text: str) -> Word:
    """A recipe template word: settings substituted, runtime env references kept."""
    return templates.parts(templates.substitute(text, eff.setting))


def argv_of(words: list[Word], eff: EffectiveConfig) -> list[str]:
    env = eff.env_values()
    return [templates.to_argv_word(w, env) for w in words]


def shell_of(words: list[Word]) -> str:
    return " ".join(templates.to_shell_word(w) for w in words)


def comment_line(text: str) -> str:
    return "# " + re.sub(r"[\r\n]+", " ", text)


# --------------------------------------------------------------------------- serve command


def serve_groups(eff: EffectiveConfig) -> list[list[Word]]:
    """The engine command as groups of words: [command + model], then one group per argument."""
    serve = eff.recipe.serve
    head: list[Word] = [tmpl(eff, c) for c in serve.command]
    groups: list[list[Word]] = [head]
    if serve.model is not None:
        model = tmpl(eff, serve.model)
        if serve.model_flag:
            groups.append([lit(serve.model_flag), model])
        else:
            head.append(model)
    for a in eff.args:
        g: list[Word] = [lit(a.flag)]
        if a.value is not None:
            g.append(list(a.value_parts()))
        groups.append(g)
    return groups


def flatten(groups: list[list[Word]]) -> list[Word]:
    return [w for g in groups for w in g]


def multiline(groups: list[list[Word]], indent: str = "  ") -> str:
    """Groups joined with ' \\' continuation lines (the shape of the seeds' launch blocks)."""
    lines = [shell_of(g) for g in groups]
    return (" \\\n" + indent).join(lines)


# --------------------------------------------------------------------------- env + steps


def env_exports(eff) -> list[str]:

    return [
        f"export {inert.check_name(name, name)}={shlex.quote(inert.check_value(name, value))}"
        for name, value in eff.exported_env()
    ]


def dotenv_line(name: str, value: str) -> str:
    """KEY=VALUE as recipekit's .env parser and a sourcing shell read back (recipekit/inert.py)."""

    return inert.dotenv_line(name, value)


def dotenv_text(eff: EffectiveConfig, header: str = "") -> str:
    """A .env that recipekit reads back to the same effective env (LAYOUT first when there is one)."""
    lines = [comment_line(header)] if header else []
    if eff.layout:
        lines.append(dotenv_line("LAYOUT", eff.layout))
    lines += [dotenv_line(n, v) for n, v in eff.exported_env()]
    return "\n".join(lines) + "\n"


def step_line(eff: EffectiveConfig, step) -> str:
    words = [tmpl(eff, t) for t in step.run]
    line = shell_of(words)
    if step.stdout:
        line += " > " + shlex.quote(step.stdout)
        if step.stderr_to_stdout:
            line += " 2>&1"
    if step.or_exit is not None:
        line += f" || exit {int(step.or_exit)}"
    if step.background:
        line += " &"
    return line


def step_comments(eff: EffectiveConfig, step) -> list[str]:
    return [comment_line(templates.to_argv_word(tmpl(eff, c), {})) for c in step.comment]


def launch_script(eff: EffectiveConfig, groups: list[list[Word]], shebang: bool) -> str:
    """exports, blank, the launch steps, blank, the engine command (multi-line)."""
    launch = eff.recipe.launch
    out: list[str] = []
    if shebang:
        out += ["#!/usr/bin/env bash", "set -euo pipefail"]
    out += env_exports(eff)
    if launch.blank_after_env and out:
        out.append("")
    for step in launch.steps:
        if step.blank_before:
            out.append("")
        out += step_comments(eff, step)
        out.append(step_line(eff, step))
    if launch.steps:
        out.append("")
    out.append(multiline(groups))
    return "\n".join(out) + "\n"


def build_words(eff: EffectiveConfig) -> list[Word]:
    b = eff.recipe.engine.build
    if b is None:
        raise RecipekitError(code="artifact-not-available", message=f"{eff.recipe.id} declares no image build")
    words: list[Word] = [lit("docker"), lit("build")]
    if b.dockerfile:
        words += [lit("-f"), tmpl(eff, b.dockerfile)]
    for k, v in b.build_args.items():
        words += [lit("--build-arg"), _join(lit(f"{k}="), tmpl(eff, v))]
    if b.tag:
        words += [lit("-t"), tmpl(eff, b.tag)]
    words.append(tmpl(eff, b.context))
    return words


def _join(a: Word, b: Word) -> Word:
    return list(a) + list(b)


# --------------------------------------------------------------------------- whole artifacts


def script_artifact(eff: EffectiveConfig, artifact: str, filename: str, shebang: bool, note: str = "") -> Rendered:
    """The launch script (exports, launch steps, engine command); argv/shell: the engine command."""
    groups = serve_groups(eff)
    words = flatten(groups)
    return Rendered(
        artifact,
        launch_script(eff, groups, shebang=shebang),
        argv=argv_of(words, eff),
        shell=shell_of(words),
        filename=filename,
        note=note,
    )


def serve_artifact(eff: EffectiveConfig) -> Rendered:
    """`serve`: the engine command alone, one argument group a line."""
    groups = serve_groups(eff)
    words = flatten(groups)
    return Rendered(
        "serve", multiline(groups) + "\n", argv=argv_of(words, eff), shell=shell_of(words), filename="serve.sh"
    )


def env_artifact(eff: EffectiveConfig, header: str) -> Rendered:
    """`env`: the engine environment as a .env file under a comment header."""
    return Rendered("env", dotenv_text(eff, header), filename=".env")


def dockerfile_artifact(eff: EffectiveConfig) -> Rendered:
    """`dockerfile`: the image build command."""
    words = build_words(eff)
    b = eff.recipe.engine.build
    return Rendered(
        "dockerfile",
        shell_of(words) + "\n",
        argv=argv_of(words, eff),
        shell=shell_of(words),
        filename="build.sh",
        note=b.note if b else "",
    )


# --------------------------------------------------------------------------- the interface


class Backend:
    """One target. Subclasses map artifact names to render functions."""

    name: str = ""
    renderers: dict[str, Callable[[Any], Rendered]] = {}

    def artifacts(self) -> list[str]:
        return list(self.renderers)

    def default_artifact(self) -> str:
        return "launch"

    def render(self, effective: EffectiveConfig, artifact: Optional[str] = None) -> Rendered:

        artifact = artifact or self.default_artifact()
        fn = self.renderers.get(artifact)
        if fn is None:
            raise RecipekitError(
                code="artifact-not-available",
                message=f"the {self.name} backend has no '{artifact}' artifact",
                hint=did_you_mean(artifact, self.renderers) or f"artifacts: {', '.join(self.renderers)}",
            )

        for name, value in effective.exported_env():  # refused at render time, whatever the artifact
            inert.check_name(name, name)
            inert.check_value(name, value)
        out = fn(effective)
        if out.argv is not None:
            inert.check_argv(artifact, out.argv)
        return out

    def steps(self, deployment: Deployment, kit: StepKit) -> list[Step]:
        """The apply plan's steps for a deployment (its effective config, server address, state
        folder), from backends/<name>/steps.py, built with the application's shared steps (`kit`,
        recipekit/apply/kit.py)."""

        return importlib.import_module(f"recipekit.backends.{self.name}.steps").steps(deployment, kit)

    def host_requirements(self, effective: EffectiveConfig) -> list[HostRequirement]:
        """What the host must provide for this effective config (the doctor checks them)."""
        r = effective.recipe
        hw = r.hardware
        reqs: list[HostRequirement] = []
        if hw.count:
            reqs.append(HostRequirement("accelerator-count", f"{hw.count}x {hw.accelerator}", hw.count))
        if hw.min_memory_mib_per_device:
            reqs.append(HostRequirement("device-memory-mib", "memory per device (MiB)", hw.min_memory_mib_per_device))
        if hw.compute_capability:
            reqs.append(HostRequirement("compute-capability", "compute capability", hw.compute_capability))
        lay = r.layouts.get(effective.layout) if effective.layout else None
        width = lay.pcie_width_min if lay and lay.pcie_width_min else hw.pcie_width_min
        if width:
            reqs.append(HostRequirement("pcie-width-min", "PCIe link width (lanes)", width))
        p2p = lay.p2p if lay else hw.p2p
        if p2p == "required":
            reqs.append(HostRequirement("p2p", "working peer-to-peer between every device pair", True))
        if hw.host_ram_gib_min:
            reqs.append(HostRequirement("host-ram-gib", "host RAM (GiB)", hw.host_ram_gib_min))
        if hw.disk_gib_min:
            reqs.append(HostRequirement("disk-gib", "free disk for models (GiB)", hw.disk_gib_min))
        if hw.cpu_cores_min:
            reqs.append(HostRequirement("cpu-cores", "CPU cores", hw.cpu_cores_min))
        for c in r.constraints:
            if c.scope == "host":
                reqs.append(HostRequirement(c.id, c.reason, c.require, c.reason, constraint=c.id))
        return reqs
