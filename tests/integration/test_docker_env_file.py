"""The rendered `docker-env` artifact fed to the real `docker run --env-file` (docker CLI against
a dockerd started by the test, the local busybox image, no network): the container's environment
holds every value literally, marker payloads included, `NAME` alone takes the host's value, and
no payload ran inside the container."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from recipekit.docker_envfile import parse_docker_env_bytes
from tests.hostile.test_inert import PAYLOADS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"


def _render(tmp_path: Path) -> Path:
    out = tmp_path / "docker.env"
    sets = [x for i, v in enumerate(PAYLOADS) for x in ("--set", f"env.PAYLOAD_{i}={v}")]
    env = {**os.environ, "RECIPEKIT_HOME": str(tmp_path / "home")}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "recipekit",
            "render",
            CMP,
            "--layout",
            "pp4",
            "-a",
            "docker-env",
            *sets,
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    return out


def test_docker_run_env_file_gives_the_container_the_literal_values(dockerd, busybox_image, tmp_path):
    docker = shutil.which("docker")
    if docker is None:
        pytest.fail("the docker CLI is not installed (./start.sh test installs Debian's docker.io)")
    f = _render(tmp_path)
    with f.open("a") as fh:
        fh.write("RK_FROM_HOST\nRK_UNSET_ON_HOST\n")
    env = {k: v for k, v in os.environ.items() if k != "RK_UNSET_ON_HOST"}
    env.update(DOCKER_HOST=dockerd, RK_FROM_HOST="host value $(touch M0)")
    # env -0: NUL-separated, so the values come back whatever they hold; then any marker in / or /tmp
    script = 'env -0; printf "\\036"; ls -A / /tmp | grep "^M[0-9]" || true'
    r = subprocess.run(
        [docker, "run", "--rm", "--network", "none", "--env-file", str(f), busybox_image, "sh", "-c", script],
        capture_output=True,
        timeout=180,
        env=env,
    )
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    envout, _, markers = r.stdout.partition(b"\x1e")
    got = dict(item.split("=", 1) for item in envout.decode().split("\0") if item)
    assert [got[f"PAYLOAD_{i}"] for i in range(len(PAYLOADS))] == PAYLOADS
    assert got["DSV41_EXPERTS_ONLY_FILES_RE"] == r"^model-[0-9]+-of-000(43|39)\.safetensors$"
    assert got["RK_FROM_HOST"] == "host value $(touch M0)"
    assert "RK_UNSET_ON_HOST" not in got
    assert markers.strip() == b"", markers
    # recipekit's reading of docker's rule agrees with docker, value for value
    lookup = {"RK_FROM_HOST": env["RK_FROM_HOST"]}.get
    for name, value in parse_docker_env_bytes(f.read_bytes(), lookup):
        assert got[name] == value, name
