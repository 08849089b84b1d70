"""Renders: the seeds' launch blocks reproduced exactly, golden files, shell quoting safety."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from recipekit.backends.registry import get_backend, render_artifact
from recipekit.catalog import load_recipe
from recipekit.config import effective_config

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"
SEEDS = REPO.parent / "shared" / "seeds"
GAUDI = "deepseek-v4.1-flash-1017-gaudi2-8x"
CMP = "deepseek-v4.1-flash-1017-cmp170hx-4x"
CPU = "tiny-deepseek-cpu"


def eff(rid, layout=None, sets=(), environ=None):
    return effective_config(load_recipe(rid), layout=layout, environ=environ or {}, sets=sets)


def split_shell(shell: str) -> list[str]:
    """shlex.split of a shell command written with ' \\' line continuations."""
    return shlex.split(shell.replace("\\\n", " "))


def seed_000_launch(text: str) -> list[str]:
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.strip() == "Shell")
    j = next(j for j, line in enumerate(lines) if line.startswith("Run inside a vllm-gaudi container"))
    return lines[i + 1 : j]


def seed_001_tokens(text: str) -> list[str]:
    """The page shows the docker run as shlex-quoted chunks; a chunk that is a flag followed by a
    JSON object is [flag, json], every other chunk is shell words."""
    line = text.strip()
    if "Launch command" in text:
        lines = text.splitlines()
        i = next(i for i, x in enumerate(lines) if x.strip() == "Launch command")
        line = next(x for x in lines[i + 1 :] if x.strip())
    tokens: list[str] = []
    for chunk in shlex.split(line):
        m = re.fullmatch(r"(--[a-z\-]+) (\{.*\})", chunk)
        tokens += [m.group(1), m.group(2)] if m else shlex.split(chunk)
    return tokens


def test_gaudi_launch_equals_seed_000_line_for_line():
    rendered = render_artifact(eff(GAUDI), "launch").text.splitlines()
    golden = (GOLDEN / "seed-000-launch.txt").read_text().splitlines()
    assert rendered == golden
    assert len(golden) == 61 and golden[0].startswith("export DSV41_CHECKPOINT=")


@pytest.mark.skipif(not SEEDS.is_dir(), reason="../shared/seeds not beside the checkout")
def test_golden_seed_copies_match_the_seed_pages():
    assert (
        seed_000_launch((SEEDS / "000_5e48bddbcadff64f.txt").read_text())
        == (GOLDEN / "seed-000-launch.txt").read_text().splitlines()
    )
    assert seed_001_tokens((SEEDS / "001_a63cfa0018f61d18.txt").read_text()) == seed_001_tokens(
        (GOLDEN / "seed-001-docker-run.txt").read_text()
    )


def test_cmp_docker_run_equals_seed_001_token_for_token():
    want = seed_001_tokens((GOLDEN / "seed-001-docker-run.txt").read_text())
    r = render_artifact(eff(CMP), "docker")
    assert r.argv == want
    # the shell string parses back to the same argv
    assert split_shell(r.shell) == want
    # every -e/-v/-p/--ulimit/--cap-add pair is there, in order
    for flag in ("-e", "-v", "-p", "--ulimit", "--cap-add"):
        pairs_want = [want[i + 1] for i, t in enumerate(want) if t == flag]
        pairs_got = [r.argv[i + 1] for i, t in enumerate(r.argv) if t == flag]
        assert pairs_got == pairs_want and pairs_want
    assert '{"method": "dspark", "num_speculative_tokens": 5}' in r.argv


def test_pp4_renders_the_pp4_variant():
    r = render_artifact(eff(CMP, layout="pp4"), "docker")
    argv = r.argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "1"
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "4"
    cc = argv[argv.index("--compilation-config") + 1]
    assert (
        cc
        == '{"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1, 2, 3, 4, 5, 6, 8, 12, 18, 24, 30, 36, 42, 48]}'
    )
    envs = [argv[i + 1] for i, t in enumerate(argv) if t == "-e"]
    assert not any(e.startswith("DSV41_DYNK=") for e in envs)
    assert "DSV41_VARIANTS=dsv41_topk_meta,dsv41_h2d_lean,dsv41_ragged_lean,dsv41_gate" in envs
    # LAYOUT from the process environment selects the same variant
    r2 = render_artifact(effective_config(load_recipe(CMP), environ={"LAYOUT": "pp4"}), "docker")
    assert r2.argv == argv


def _golden_cases():
    for rid, layouts in ((GAUDI, [None]), (CMP, ["tp4", "pp4"]), (CPU, [None])):
        backend = get_backend(load_recipe(rid).recipe.backend)
        for lay in layouts:
            for art in backend.artifacts():
                yield rid, lay, art


@pytest.mark.parametrize("rid,layout,artifact", list(_golden_cases()))
def test_render_goldens(rid, layout, artifact):
    r = render_artifact(eff(rid, layout), artifact)
    name = f"{rid}{'-' + layout if layout else ''}-{artifact}.txt"
    path = GOLDEN / "render" / name
    if os.environ.get("RECIPEKIT_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(r.text)
    assert r.text == path.read_text(), f"{name} differs from the golden file"
    if artifact not in ("env", "docker-env"):  # data files: docker-env is not shell syntax at all
        syntax = subprocess.run(["bash", "-n"], input=r.text, text=True, capture_output=True, timeout=10)
        assert syntax.returncode == 0, syntax.stderr
    if r.argv is not None:
        if "$" not in r.shell:  # runtime env references only resolve in argv
            assert split_shell(r.shell) == r.argv


def test_hostile_values_never_execute(tmp_path):
    marker = tmp_path / "pwned"
    evil = f"$(touch {marker})`touch {marker}`;touch {marker}"
    e = eff(CPU, sets=[f"MODEL_DIR={evil}", f"SERVED_MODEL_NAME={evil}", f"VLLM_CPU_KVCACHE_SPACE={evil}"])
    r = render_artifact(e, "launch")
    assert evil in r.argv
    assert split_shell(r.shell)[r.argv.index(evil)] == evil
    # bash parses the script; echoing the command words prints the value back, runs nothing
    script = tmp_path / "launch.sh"
    script.write_text(r.text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    out = subprocess.run(["bash", "-c", f"printf '%s\\n' {r.shell}"], capture_output=True, text=True, timeout=10)
    assert out.stdout.splitlines() == r.argv
    env_out = subprocess.run(
        ["bash", "-c", "\n".join(r.text.splitlines()[2:5]) + "\nprintf '%s' \"$VLLM_CPU_KVCACHE_SPACE\""],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert env_out.stdout == evil
    assert not marker.exists()


def test_gaudi_env_references_resolve_in_argv():
    e = eff(GAUDI, sets=["DSV41_CHECKPOINT=/data/x y"])
    r = render_artifact(e, "launch")
    assert r.argv[:3] == ["vllm", "serve", "/data/x y"]
    assert 'vllm serve "$DSV41_CHECKPOINT"' in r.text
    assert "export DSV41_CHECKPOINT='/data/x y'" in r.text


def test_unknown_artifact_refused():
    from recipekit.errors import RecipekitError

    with pytest.raises(RecipekitError) as ei:
        render_artifact(eff(CPU), "dockr")
    assert ei.value.code == "artifact-not-available"


@pytest.mark.parametrize("rid,layout", [(CMP, "tp4"), (CMP, "pp4"), (GAUDI, None), (CPU, None)])
def test_env_artifact_reads_back_to_the_same_env(tmp_path, rid, layout):
    e = eff(rid, layout)
    envf = tmp_path / ".env"
    envf.write_text(render_artifact(e, "env").text)
    back = effective_config(load_recipe(rid), env_file=envf, environ={})
    assert back.layout == e.layout
    assert back.exported_env() == e.exported_env()
