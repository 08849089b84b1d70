"""The docker runner (docker-py): build the rendered Dockerfile, run the rendered `docker run`,
check health, stop and remove.

The rendered `docker run` argv (backends' `docker` artifact) is parsed into docker-py's
arguments, so the container runs with exactly the rendered flags; a flag the parser does not
know is refused rather than dropped. Every container gets the label `recipekit.recipe=<id>`;
stop() acts only on the container id we recorded, and only while it still carries that label.
Builds use the classic builder (what docker-py speaks; platform.md: DOCKER_BUILDKIT=0) and
never pull: the base image must already be local.
"""

from __future__ import annotations

import csv
import os
import re
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Optional

from recipekit.apply.runners.base import LaunchRequest, tail
from recipekit.apply.server import DockerServer
from recipekit.errors import ExitCode, RecipekitError

LABEL = "recipekit.recipe"
_BUILT = re.compile(r"Successfully built ([0-9a-f]+)$")  # the classic builder's last line

# flags of `docker run` -> docker-py containers.run kwargs
_TRUE = {
    "-d": "detach",
    "--detach": "detach",
    "--rm": "auto_remove",
    "--privileged": "privileged",
    "--init": "init",
}  # bare flag -> kwarg=True
_SCALAR = {
    "--name": "name",
    "--ipc": "ipc_mode",
    "--entrypoint": "entrypoint",
    "--runtime": "runtime",
    "--network": "network",
    "--shm-size": "shm_size",
    "--user": "user",
    "-u": "user",
    "--workdir": "working_dir",
    "-w": "working_dir",
}  # value -> kwarg=value
_APPEND = {
    "--cap-add": "cap_add",
    "-v": "volumes",
    "--volume": "volumes",
    "--device": "devices",
    "--security-opt": "security_opt",
}  # value appended to a list
_KEYVAL = {"-e": "environment", "--env": "environment", "--label": "labels", "-l": "labels"}  # K=V into a dict
_VALUE_FLAGS = set(_SCALAR) | set(_APPEND) | set(_KEYVAL) | {"--gpus", "--ulimit", "-p", "--publish"}
_BARE_FLAGS = set(_TRUE) | {"-it", "-i", "-t"}


def client(base_url: Optional[str] = None, timeout: int = 120):
    import docker  # lazy: docker-py only where a container is built or run

    try:
        c = docker.DockerClient(base_url=base_url, timeout=timeout) if base_url else docker.from_env(timeout=timeout)
        c.ping()
        # what reaches this daemon again later (docker-py rewrites unix:// URLs internally)
        c.recipekit_url = base_url or os.environ.get("DOCKER_HOST")
        return c
    except Exception as e:  # docker.errors.DockerException and connection errors
        raise RecipekitError(
            code="docker-unavailable",
            exit_code=ExitCode.HOST_CHECK_FAILED,
            message=f"cannot reach the docker daemon{f' at {base_url}' if base_url else ''}: {e}",
            hint="start dockerd (or set DOCKER_HOST) and re-run",
        ) from None


def parse_run_argv(argv: list[str], cwd: Optional[Path] = None) -> tuple[str, dict]:
    """`docker run ...` argv -> (image, docker-py containers.run kwargs without `image`); a
    relative `-v` source is taken from `cwd` (the launch's working folder; default the current)."""
    from docker.types import Ulimit  # lazy: docker-py only where a container is built or run

    args = list(argv)
    if args[:2] == ["docker", "run"]:
        args = args[2:]
    kw: dict[str, Any] = {
        "detach": True,
        "environment": {},
        "volumes": [],
        "ports": {},
        "cap_add": [],
        "ulimits": [],
        "labels": {},
        "devices": [],
        "security_opt": [],
    }
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-"):
            break
        if "=" in a and a.startswith("--"):
            flag, val = a.split("=", 1)
        elif a in _BARE_FLAGS:
            flag, val = a, None
        elif a in _VALUE_FLAGS:
            if i + 1 >= len(args):
                raise RecipekitError(code="docker-arg-missing", message=f"`docker run {a}` needs a value")
            flag, val = a, args[i + 1]
            i += 1
        else:
            raise RecipekitError(
                code="docker-arg-unsupported",
                message=f"the docker runner does not know `{a}`",
                hint="add it to recipekit/apply/runners/docker.py's mapping",
            )
        i += 1
        if flag in _TRUE:
            kw[_TRUE[flag]] = True
        elif flag in ("-it", "-i", "-t"):
            kw["stdin_open"] = "i" in flag
            kw["tty"] = "t" in flag
        elif val is None:  # a bare flag that none of the above takes
            raise RecipekitError(code="docker-arg-unsupported", message=f"the docker runner does not know `{flag}`")
        elif flag in _SCALAR:
            kw[_SCALAR[flag]] = val
        elif flag in ("-v", "--volume"):
            kw["volumes"].append(absolute_volume_source(val, cwd))
        elif flag in _APPEND:
            kw[_APPEND[flag]].append(val)
        elif flag in _KEYVAL:
            k, eq, v = val.partition("=")
            if eq or _KEYVAL[flag] != "environment":
                kw[_KEYVAL[flag]][k] = v
            elif k in os.environ:  # docker: `-e NAME` passes the host's value, or nothing
                kw["environment"][k] = os.environ[k]
        elif flag == "--gpus":
            kw["device_requests"] = [parse_gpus(val)]
        elif flag == "--ulimit":
            name, lim = val.split("=", 1)
            soft, _, hard = lim.partition(":")
            kw["ulimits"].append(Ulimit(name=name, soft=int(soft), hard=int(hard or soft)))
        elif flag in ("-p", "--publish"):
            parts = val.split(":")
            if len(parts) == 3:
                ip, hport, cport = parts
                kw["ports"][_cport(cport)] = (ip, int(hport))
            elif len(parts) == 2:
                kw["ports"][_cport(parts[1])] = int(parts[0])
            else:
                kw["ports"][_cport(parts[0])] = None
        else:
            raise RecipekitError(code="docker-arg-unsupported", message=f"the docker runner does not know `{flag}`")
    if i >= len(args):
        raise RecipekitError(code="docker-run-no-image", message="the rendered `docker run` names no image")
    image, command = args[i], args[i + 1 :]
    if command:
        kw["command"] = command
    return image, {k: v for k, v in kw.items() if v not in ({}, [])}


def absolute_volume_source(spec: str, cwd: Optional[Path] = None) -> str:
    """`-v SRC:DST[:OPTS]` with a relative SRC (`.`, `./x`, `../x`) made absolute against `cwd`
    (default the current folder), as the docker CLI does before it calls the API (docker/cli, since 23.0:
    "relative source paths are supported"); the API itself takes the text as a volume name and
    refuses it. A named volume (no `/`, not starting with `.`) is left as it is."""
    src, sep, rest = spec.partition(":")
    if sep and (src in (".", "..") or src.startswith(("./", "../"))):
        return f"{os.path.abspath(os.path.join(cwd or os.getcwd(), src))}:{rest}"
    return spec


def check_bind_sources(volumes: list[str]) -> list[Path]:
    """Every bind mount's host folder before the container is created. dockerd makes a missing
    bind source as an empty root-owned folder (moby daemon/volume/mounts: the legacy `-v` Binds
    create the host path), so an engine whose model or index mount was mistyped starts on an
    empty folder and fails far from the cause. A read-only mount is the recipe's input (a model,
    an index): missing, it is refused here. A writable one is the recipe's own cache: it is
    created here, as the user, instead of by dockerd as root. Returns the folders created."""
    made = []
    for spec in volumes:
        src, sep, rest = spec.partition(":")
        if not sep or not src.startswith("/"):
            continue  # a named volume: dockerd's to create
        host = Path(src)
        if host.exists():
            continue
        dst, _, opts = rest.partition(":")
        if "ro" in opts.split(","):
            raise RecipekitError(
                code="mount-source-missing",
                exit_code=ExitCode.NOT_FOUND,
                message=f"the read-only mount {src} -> {dst} has no host folder {src}",
                hint="create or fill it (the step that writes it, or the setting that names it), then re-run;"
                " dockerd would mount an empty root-owned folder in its place",
            )
        host.mkdir(parents=True, exist_ok=True)
        made.append(host)
    return made


def _local_daemon(cli: Any) -> bool:
    """A daemon on this machine (a unix socket): its bind sources are this machine's paths."""
    url = str(getattr(getattr(cli, "api", None), "base_url", "") or "")
    return (
        url == "http+docker://localhost"
    )  # docker-py (api/client.py) names a unix socket so; ssh is http+docker://ssh


def parse_gpus(value: str):
    """`--gpus VALUE` as docker's CLI reads it (docker/cli opts/gpus.go, GpuOpts.Set): one CSV
    record of `all` | N | count=N|all | device=ID[,ID] (quoted in the CSV) | driver=X |
    capabilities=A[,B]; each key once; no count and no devices means count 1."""

    from docker.types import DeviceRequest  # lazy: pulls docker

    try:
        fields = next(csv.reader([value]))
    except (csv.Error, StopIteration):
        fields = None
    if not fields:
        raise RecipekitError(code="docker-arg-invalid", message=f"--gpus {value!r} is not a CSV record")
    req: dict[str, Any] = {"driver": "", "count": 0, "device_ids": None, "capabilities": [["gpu"]]}
    seen: set[str] = set()

    def count(v: str) -> int:
        if v == "all":
            return -1
        if not v.isdigit():
            raise RecipekitError(code="docker-arg-invalid", message=f"--gpus: count {v!r} is not a number or 'all'")
        return int(v)

    for f in fields:
        key, eq, val = f.partition("=")
        if key in seen:
            raise RecipekitError(code="docker-arg-invalid", message=f"--gpus: key {key!r} given twice in {value!r}")
        seen.add(key)
        if not eq:
            seen.add("count")
            req["count"] = count(key)
        elif key == "count":
            req["count"] = count(val)
        elif key == "device":
            req["device_ids"] = val.split(",")
        elif key == "driver":
            req["driver"] = val
        elif key == "capabilities":
            req["capabilities"] = [val.split(",") + ["gpu"]]
        else:
            raise RecipekitError(
                code="docker-arg-invalid",
                message=f"--gpus: unexpected key {key!r} in {value!r}",
                hint="docker accepts all, N, count=, device=, driver=, capabilities=",
            )
    if "count" not in seen and req["device_ids"] is None:
        req["count"] = 1
    return DeviceRequest(**req)


def _cport(c: str) -> str:
    return c if "/" in c else f"{c}/tcp"


def build(
    cli: Any,
    context: Path,
    tag: str,
    dockerfile: Optional[str] = None,
    buildargs: Optional[dict] = None,
    log: Callable[[str], None] = lambda s: None,
) -> str:
    """Build an image from a local context (no pull), passing each line of the build's output
    to `log` as the daemon sends it; returns the image id."""
    import docker  # lazy: docker-py only where a container is built or run

    last: deque[str] = deque(maxlen=10)
    image_id: Optional[str] = None
    try:
        stream = cli.api.build(
            path=str(context),
            dockerfile=dockerfile,
            tag=tag,
            buildargs=buildargs or {},
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
        )
        for chunk in stream:
            if not isinstance(chunk, dict):
                continue
            if "error" in chunk:
                raise RecipekitError(
                    code="docker-build-failed",
                    exit_code=ExitCode.FAILURE,
                    message=f"docker build of {tag} failed: {chunk['error'].strip()}\n" + "\n".join(last),
                    hint="a base image must exist locally (no pulls); see the build log above",
                )
            for line in chunk.get("stream", "").splitlines():
                if line.strip():
                    log(line.rstrip())
                    last.append(line.rstrip())
                    built = _BUILT.match(line.strip())
                    image_id = built.group(1) if built else image_id
            image_id = (chunk.get("aux") or {}).get("ID") or image_id
    except docker.errors.APIError as e:
        raise RecipekitError(
            code="docker-build-failed",
            exit_code=ExitCode.FAILURE,
            message=f"docker build of {tag} failed: {e.explanation or e}",
        ) from None
    if image_id is None:
        raise RecipekitError(
            code="docker-build-failed",
            exit_code=ExitCode.FAILURE,
            message=f"docker build of {tag} ended without naming the image it built\n" + "\n".join(last),
        )
    return cli.images.get(image_id).id


def start(
    cli: Any, run_argv: list[str], recipe_id: str, log_path: Optional[Path] = None, cwd: Optional[Path] = None
) -> DockerServer:
    import docker  # lazy: docker-py only where a container is built or run

    image, kw = parse_run_argv(run_argv, cwd)
    if _local_daemon(cli):
        check_bind_sources(kw.get("volumes", []))
    kw.setdefault("labels", {})[LABEL] = recipe_id
    kw["detach"] = True
    name = kw.get("name")
    if name:
        try:
            old = cli.containers.get(name)
        except docker.errors.NotFound:
            old = None
        if old is not None:
            if old.labels.get(LABEL) != recipe_id:
                raise RecipekitError(
                    code="container-name-taken",
                    exit_code=ExitCode.HOST_CHECK_FAILED,
                    message=f"a container named {name} exists and was not started by this recipe",
                    hint=f"remove it (docker rm -f {name}) or rename ours with --set",
                )
            old.remove(force=True)
    try:
        c = cli.containers.run(image, **kw)
    except docker.errors.ImageNotFound:
        raise RecipekitError(
            code="docker-image-missing",
            exit_code=ExitCode.HOST_CHECK_FAILED,
            message=f"image {image} is not present locally",
            hint="run the install-engine step (image build) first",
        ) from None
    except docker.errors.APIError as e:
        raise RecipekitError(
            code="docker-run-failed",
            exit_code=ExitCode.FAILURE,
            message=f"docker run {image} failed: {e.explanation or e}",
        ) from None
    except docker.errors.InvalidArgument as e:  # docker-py refuses it before any request (e.g. --network=host with -p)
        raise RecipekitError(
            code="docker-arg-invalid",
            exit_code=ExitCode.INVALID_INPUT,
            message=f"docker run {image}: {e}",
            hint="the rendered `docker run` combines options docker refuses together: fix the recipe's docker flags",
        ) from None
    return DockerServer(
        container_id=c.id,
        name=c.name,
        image=image,
        recipe=recipe_id,
        docker_host=getattr(cli, "recipekit_url", None),
        log=str(log_path) if log_path else None,
        started_at=time.time(),
    )


def _container(cli: Any, rec: DockerServer) -> Any:
    import docker  # lazy: docker-py only where a container is built or run

    try:
        c = cli.containers.get(rec.container_id)
    except docker.errors.NotFound:
        return None
    if c.id != rec.container_id or c.labels.get(LABEL) != rec.recipe:
        return None
    return c


def running_container(cli: Any, rec: DockerServer) -> Any:
    """The recorded container (fresh inspect data in `.attrs`) while it is ours and runs; else None."""
    c = _container(cli, rec)
    if c is None:
        return None
    c.reload()
    return c if c.status in ("running", "created", "restarting") else None


def is_ours(cli: Any, rec: DockerServer) -> bool:
    return running_container(cli, rec) is not None


def logs(cli: Any, rec: DockerServer, tail: int = 50) -> str:
    c = _container(cli, rec)
    if c is None:
        return ""
    return c.logs(tail=tail).decode(errors="replace")


def stop(cli: Any, rec: DockerServer, timeout_s: int = 20, log: Callable[[str], None] = lambda s: None) -> str:
    """SIGINT (vLLM's graceful shutdown, as the native runner), then after timeout_s `docker stop`
    (SIGTERM, SIGKILL after timeout_s / 2), then remove. Only our recorded container."""
    import docker  # lazy: docker-py only where a container is built or run

    c = _container(cli, rec)
    if c is None:
        return "not running"
    try:
        c.reload()
        if c.status in ("running", "restarting"):
            how = _stop_container(c, timeout_s, log)
            log(f"stopped container {c.short_id} ({how})")
        if rec.log:
            try:  # after the exit, so the engine's shutdown messages are kept too
                Path(rec.log).write_bytes(c.logs())
            except (OSError, docker.errors.APIError):
                pass
        c.remove(force=True)
    except docker.errors.NotFound:
        pass
    return "stopped and removed"


def _stop_container(c, timeout_s: int, log: Callable[[str], None]) -> str:
    import docker  # lazy: docker-py only where a container is built or run

    try:
        c.kill(signal="SIGINT")
        log(f"sent SIGINT to container {c.short_id}")
    except docker.errors.APIError:  # it exited in between (docker answers 409: not running)
        pass
    if _wait_exited(c, timeout_s):
        return "SIGINT"
    log(f"container {c.short_id} still running {timeout_s} s after SIGINT: docker stop (SIGTERM, then SIGKILL)")
    c.stop(timeout=max(1, timeout_s // 2))
    c.reload()
    code = c.attrs.get("State", {}).get("ExitCode")
    return "SIGKILL" if code == 137 else "SIGTERM"


def _wait_exited(c, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        c.reload()
        if c.status not in ("running", "restarting"):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


class DockerRunner:
    """The Runner for DockerServer records (each call reaches the daemon the record names)."""

    kind = "docker"

    def start(self, req: LaunchRequest) -> DockerServer:
        if req.env:  # the rendered `docker run` carries the container's environment as -e flags
            raise RecipekitError(
                code="docker-env-unsupported",
                exit_code=ExitCode.FAILURE,
                message=f"the docker runner takes the environment from -e flags, not {sorted(req.env)}",
            )
        return start(client(req.docker_host), req.argv, req.recipe_id, log_path=req.log_path, cwd=req.cwd)

    def identity(self, rec: DockerServer) -> str:
        return f"docker:{rec.container_id}"

    def alive(self, rec: DockerServer) -> bool:
        return is_ours(client(rec.docker_host), rec)

    def stop(self, rec: DockerServer, timeout_s: float, log: Callable[[str], None]) -> str:
        return stop(client(rec.docker_host), rec, timeout_s=int(timeout_s), log=log)

    def logs(self, rec: DockerServer, lines: int) -> list[str]:
        """The container's output while it exists; after stop, the copy kept in the log file."""
        try:
            cli = client(rec.docker_host)
        except RecipekitError:
            return tail(rec.log, lines)
        if _container(cli, rec) is None:
            return tail(rec.log, lines)
        return logs(cli, rec, tail=lines).splitlines()

    def live_log(self, rec: DockerServer) -> Optional[Path]:
        return None  # the daemon holds the output; the log file is written at stop

    def base_url(self, rec: DockerServer) -> Optional[str]:
        return rec.base_url
