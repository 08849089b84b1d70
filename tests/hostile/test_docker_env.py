"""Class 3, `docker --env-file`: the rendered `docker-env` artifact, read by docker's own rule
(recipekit/docker_envfile.py, docker CLI 28 pkg/kvfile/kvfile.go), yields the literal values with
marker payloads in every position, including the two a .env cannot carry; what docker cannot carry
is refused at render time and nothing is written. The .env stays the file for shells."""

from __future__ import annotations

import pytest

from recipekit.docker_envfile import MAX_LINE_BYTES, DockerEnvFileError, parse_docker_env_bytes
from tests.hostile.conftest import REPO, Sandbox, guard, refused
from tests.hostile.test_inert import PAYLOADS, UNREPRESENTABLE

CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"
GOLDEN = REPO / "tests" / "golden" / "render"
REGEX = r"^model-[0-9]+-of-000(43|39)\.safetensors$"


def _payload_sets() -> list[str]:
    return [x for i, v in enumerate(PAYLOADS) for x in ("--set", f"env.PAYLOAD_{i}={v}")]


def test_a_rendered_docker_env_gives_docker_the_literal_values(sandbox: Sandbox):
    out = sandbox.work / "docker.env"
    with guard(sandbox, allowed=("work",)):
        res = sandbox.cli("render", CMP, "--layout", "pp4", "--artifact", "docker-env", *_payload_sets(), "--out", out)
    assert res.code == 0, res
    pairs = dict(parse_docker_env_bytes(out.read_bytes()))
    assert [pairs[f"PAYLOAD_{i}"] for i in range(len(PAYLOADS))] == PAYLOADS
    # the values no .env quoting can carry are carried here
    assert all(v in pairs.values() for v in UNREPRESENTABLE)
    assert pairs["DSV41_EXPERTS_ONLY_FILES_RE"] == REGEX
    assert sorted(p.name for p in sandbox.work.iterdir()) == ["docker.env"], "a payload ran"


@pytest.mark.parametrize("layout", ["pp4", "tp4"])
def test_the_golden_docker_env_holds_the_docker_run_e_values_and_the_env_does_not_suit_docker(layout):
    from recipekit.backends.registry import render_artifact
    from recipekit.catalog import load_recipe
    from recipekit.config import effective_config
    from recipekit.envfile import parse_env_text

    eff = effective_config(load_recipe(CMP), layout=layout, environ={})
    argv = render_artifact(eff, "docker").argv
    assert argv is not None
    minus_e = [tuple(argv[i + 1].split("=", 1)) for i, t in enumerate(argv) if t == "-e"]
    golden = (GOLDEN / f"{CMP}-{layout}-docker-env.txt").read_bytes()
    assert parse_docker_env_bytes(golden) == minus_e
    # the .env (for shells and recipekit) read by docker's rule keeps the quotes: why docker-env exists
    dotenv = (GOLDEN / f"{CMP}-{layout}-env.txt").read_text()
    assert dict(parse_docker_env_bytes(dotenv.encode()))["DSV41_EXPERTS_ONLY_FILES_RE"] == f"'{REGEX}'"
    assert parse_env_text(dotenv)["DSV41_EXPERTS_ONLY_FILES_RE"][0] == REGEX


@pytest.mark.parametrize(
    "value,code",
    [
        ("x" * (MAX_LINE_BYTES + 1), "env-value-unrepresentable"),
        (" leading", "env-value-unrepresentable"),
        ("line\nbreak", "value-control-char"),
        ("cr\rx", "value-control-char"),
    ],
)
def test_what_docker_cannot_carry_is_refused_and_nothing_is_written(sandbox: Sandbox, value, code):
    out = sandbox.work / "docker.env"
    out.write_bytes(b"KEEP=1\n")
    with guard(sandbox, allowed=()):
        res = sandbox.cli(
            "render", CMP, "--layout", "pp4", "--artifact", "docker-env", "--set", f"env.P={value}", "--out", out
        )
    refused(res, code, 2)
    assert out.read_bytes() == b"KEEP=1\n"


def test_name_alone_takes_the_host_value_as_docker_does():
    from recipekit import inert

    line = inert.docker_env_line("HOSTVAR", None)
    assert line == "HOSTVAR"
    text = f"{line}\nSET=1\n".encode()
    assert parse_docker_env_bytes(text, {"HOSTVAR": "from-host"}.get) == [("HOSTVAR", "from-host"), ("SET", "1")]
    assert parse_docker_env_bytes(text, {}.get) == [("SET", "1")]


@pytest.mark.parametrize(
    "data,rule",
    [
        (b"A B=1\n", "name"),
        (b"=1\n", "name"),
        (b"A=\xff\n", "utf8"),
        (b"A=" + b"x" * (64 * 1024) + b"\n", "max-line"),
    ],
)
def test_the_docker_rule_reader_refuses_what_docker_refuses(data, rule):
    with pytest.raises(DockerEnvFileError) as ei:
        parse_docker_env_bytes(data)
    assert ei.value.rule == rule and "pkg/kvfile/kvfile.go" in str(ei.value)


def test_the_docker_rule_reader_keeps_what_docker_keeps():
    data = "\ufeff# c\n\n  \tA='q'\r\nB= x \nC=a=b\n #x\nD=\n".encode()
    assert parse_docker_env_bytes(data) == [("A", "'q'"), ("B", " x "), ("C", "a=b"), ("D", "")]


def test_a_backend_without_a_docker_runner_has_no_docker_env(sandbox: Sandbox):
    with guard(sandbox, allowed=("work/tiny.yaml",)):
        res = sandbox.cli("render", sandbox.tiny(), "--artifact", "docker-env")
    refused(res, "artifact-not-available", 2)


def test_docker_run_e_name_alone_is_written_as_name_alone(sandbox: Sandbox):
    """`-e NAME` in the recipe (the host's value, left out when unset) keeps that meaning in the file."""
    src = (REPO / "recipes" / "deepseek-ai" / "DeepSeek-V4.1-Flash-1017" / "cmp170hx-4x.yaml").read_text()
    anchor = "    entrypoint: vllm\n"
    assert anchor in src
    path = sandbox.recipe(src.replace(anchor, "    env: [HOST_ONLY, FIXED=a b]\n" + anchor, 1), "cmp.yaml")
    out = sandbox.work / "docker.env"
    with guard(sandbox, allowed=("work",)):
        res = sandbox.cli("render", path, "--layout", "pp4", "--artifact", "docker-env", "--out", out)
    assert res.code == 0, res
    lines = out.read_text().splitlines()
    assert lines[1:3] == ["HOST_ONLY", "FIXED=a b"]
    pairs = parse_docker_env_bytes(out.read_bytes(), {"HOST_ONLY": "h"}.get)
    assert pairs[:2] == [("HOST_ONLY", "h"), ("FIXED", "a b")]
    assert "HOST_ONLY" not in dict(parse_docker_env_bytes(out.read_bytes(), {}.get))
