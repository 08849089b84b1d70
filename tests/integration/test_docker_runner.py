"""The docker runner against a real dockerd started by the test: build a Dockerfile FROM a
local busybox base (no pulls), run it with a rendered `docker run` argv through the apply
launch path, wait for health, refuse a foreign container's name, stop and remove; a container
that dies during start-up fails readiness with its log lines."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from recipekit.apply.launch import load_server, stop_server
from recipekit.apply.ready import wait_ready
from recipekit.apply.runners import docker as dk
from recipekit.apply.server import DockerServer
from recipekit.apply.steps import ApplyContext
from recipekit.errors import RecipekitError
from tests.integration.conftest import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DOCKERFILE = """FROM {base}
ARG GREETING=unset
RUN mkdir -p /www/v1 && echo ok > /www/health && echo "$GREETING" > /www/greeting \\
 && echo '{{"object": "list", "data": [{{"id": "busybox"}}]}}' > /www/v1/models
CMD ["busybox", "httpd", "-f", "-p", "127.0.0.1:8000", "-h", "/www"]
"""


def _ctx(tmp_path: Path, dockerd: str, rid: str = "docker-runner-test") -> ApplyContext:
    state = tmp_path / "state"
    state.mkdir(parents=True, exist_ok=True)
    eff = SimpleNamespace(recipe=SimpleNamespace(id=rid))
    return ApplyContext(eff=eff, loaded=None, state=state, log=lambda s: None, docker_host=dockerd)


@pytest.fixture(scope="module")
def built_image(dockerd, busybox_image, tmp_path_factory) -> str:
    ctxdir = tmp_path_factory.mktemp("build")
    (ctxdir / "Dockerfile.rendered").write_text(DOCKERFILE.format(base=busybox_image))
    cli = dk.client(dockerd)
    iid = dk.build(cli, ctxdir, "rk-test-engine:1", dockerfile="Dockerfile.rendered", buildargs={"GREETING": "hi"})
    assert iid.startswith("sha256:") and cli.images.get("rk-test-engine:1").id == iid
    return "rk-test-engine:1"


def test_build_run_health_stop_remove(dockerd, built_image, tmp_path):
    from recipekit.apply.docker_steps import launch_container

    cli = dk.client(dockerd)
    port = free_port()
    argv = [
        "docker",
        "run",
        "-d",
        "--name",
        "rk-engine",
        "--network=host",
        "-e",
        "RK_MODE=test",
        "--ulimit",
        "nofile=1024:2048",
        built_image,
        "busybox",
        "httpd",
        "-f",
        "-p",
        f"127.0.0.1:{port}",
        "-h",
        "/www",
    ]
    ctx = _ctx(tmp_path, dockerd)
    out = launch_container(ctx, argv, "127.0.0.1", port)
    assert out["reused"] is False
    rec = load_server(ctx.state)
    assert rec.runner == "docker" and rec.container_id == out["container_id"] and rec.docker_host == dockerd
    c = cli.containers.get(rec.container_id)
    assert c.labels[dk.LABEL] == "docker-runner-test" and c.attrs["Config"]["Env"].count("RK_MODE=test") == 1
    assert c.attrs["HostConfig"]["Ulimits"] == [{"Name": "nofile", "Soft": 1024, "Hard": 2048}]

    res = wait_ready(ctx, f"http://127.0.0.1:{port}", "/v1/models", timeout_s=60, served_name="busybox")
    assert res["server_id"] == f"docker:{rec.container_id}"
    import httpx

    assert httpx.get(f"http://127.0.0.1:{port}/greeting").text.strip() == "hi"  # the build arg landed

    # same inputs again: reused, not restarted
    assert launch_container(ctx, argv, "127.0.0.1", port) == {"reused": True, "container_id": rec.container_id}

    # the port is ours now; another recipe's launch on it is refused
    other = _ctx(tmp_path / "other", dockerd, rid="other")
    with pytest.raises(RecipekitError) as e:
        launch_container(other, [*argv[:4], "rk-other", *argv[5:]], "127.0.0.1", port)
    assert e.value.code == "port-taken"

    what = stop_server(ctx.state, rec, timeout_s=2)  # busybox httpd as PID 1 ignores SIGINT/SIGTERM
    assert what == "stopped and removed"
    assert [x.id for x in cli.containers.list(all=True) if x.id == rec.container_id] == []
    assert load_server(ctx.state) is None
    assert (ctx.state / "server.log").exists()  # the container's output, kept after removal


def test_a_foreign_container_name_is_not_touched(dockerd, built_image, tmp_path):
    cli = dk.client(dockerd)
    foreign = cli.containers.run(built_image, ["busybox", "sleep", "300"], name="someone-elses", detach=True)
    try:
        with pytest.raises(RecipekitError) as e:
            dk.start(
                cli, ["docker", "run", "-d", "--name", "someone-elses", built_image, "busybox", "sleep", "1"], "rk"
            )
        assert e.value.code == "container-name-taken"
        foreign.reload()
        assert foreign.status == "running"
        # a record pointing at it (wrong label) is not ours: stop leaves it alone
        assert dk.stop(cli, DockerServer(container_id=foreign.id, recipe="rk")) == "not running"
        foreign.reload()
        assert foreign.status == "running"
    finally:
        foreign.remove(force=True)


def test_a_container_dying_during_startup_fails_with_its_log(dockerd, built_image, tmp_path):
    from recipekit.apply.docker_steps import launch_container

    port = free_port()
    argv = [
        "docker",
        "run",
        "-d",
        "--name",
        "rk-dies",
        "--network=host",
        built_image,
        "sh",
        "-c",
        "echo engine: cannot load the checkpoint >&2; exit 3",
    ]
    ctx = _ctx(tmp_path, dockerd, rid="dies")
    launch_container(ctx, argv, "127.0.0.1", port)
    with pytest.raises(RecipekitError) as e:
        wait_ready(ctx, f"http://127.0.0.1:{port}", "/v1/models", timeout_s=60, served_name="busybox")
    assert e.value.code == "server-died"
    # no engine error line to lift into the message: this run's log lines follow it, as lines
    assert "| engine: cannot load the checkpoint" in e.value.details
    rec = load_server(ctx.state)
    assert stop_server(ctx.state, rec) == "stopped and removed"


# PID 1 of the container (sh) traps the signals and writes down which ones arrived
_GRACEFUL = (
    "trap 'echo INT >> /out/signal; exit 0' INT; trap 'echo TERM >> /out/signal; exit 0' TERM; "
    "echo up > /out/up; while true; do sleep 0.1; done"
)
_STUBBORN = (
    "trap 'echo INT-ignored >> /out/signal' INT; trap '' TERM; echo up > /out/up; while true; do sleep 0.1; done"
)


@pytest.mark.parametrize("script, want", [(_GRACEFUL, "SIGINT"), (_STUBBORN, "SIGKILL")], ids=["graceful", "stubborn"])
def test_stop_sends_sigint_first_then_docker_stop(dockerd, built_image, tmp_path, script, want):
    import os
    import time

    cli = dk.client(dockerd)
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, 0o777)
    rec = dk.start(
        cli,
        [
            "docker",
            "run",
            "-d",
            "--name",
            f"rk-sig-{want.lower()}",
            "-v",
            f"{out}:/out",
            built_image,
            "sh",
            "-c",
            script,
        ],
        "rk-sig",
        log_path=tmp_path / "server.log",
    )
    deadline = time.monotonic() + 30
    while not (out / "up").exists():
        assert time.monotonic() < deadline, "the container did not start"
        time.sleep(0.1)
    said = []
    t0 = time.monotonic()
    assert dk.stop(cli, rec, timeout_s=2, log=said.append) == "stopped and removed"
    took = time.monotonic() - t0
    assert said[0].startswith("sent SIGINT to container") and said[-1].endswith(f"({want})")
    if want == "SIGINT":
        assert (out / "signal").read_text() == "INT\n" and took < 2  # no SIGTERM was needed
    else:
        # SIGINT arrived (the trap ran) but did not stop it; docker stop then killed it
        assert (out / "signal").read_text() == "INT-ignored\n" and took >= 2
        assert any("docker stop" in s for s in said)
    assert [c.id for c in cli.containers.list(all=True) if c.id == rec.container_id] == []
