"""Class 3: rendered artifacts are inert: the .env and the launch script's exports, sourced for real
by bash, dash and busybox sh (`set -a; . file`), yield the literal values with marker payloads in
every position, and no marker file appears; control characters are refused at render time."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.hostile.conftest import Sandbox, guard, refused

SHELLS = [s for s in (["bash"], ["dash"], ["busybox", "sh"]) if shutil.which(s[0])]

# every way a shell could be made to run `touch M<n>`, in every position of a value
PAYLOADS = [
    "$(touch M1)",
    "`touch M2`",
    ";touch M3",
    "a;touch M4;b",
    "x|touch M5",
    "&touch M6",
    "$(touch M7)tail",
    "head`touch M8`",
    "'$(touch M9)'",
    '"$(touch M10)"',
    "\\$(touch M11)",
    "a b $(touch M12) c",
    "${IFS}touch M13",
    "~/x",
    "*",
    "?",
    "[a]",
    "a=b",
    "#hash",
    "x #$(touch M14)",
    "(touch M15)",
    "{a,b}",
    "!",
    "$HOME",
    "%s%n",
    "it's `touch M16`",
    'say "hi"',
    "tab\\there",
    "-e",
    "--flag=$(touch M17)",
]


def test_shells_are_there():
    assert len(SHELLS) == 3, "apt-get install -y dash busybox-static (./start.sh test does)"


# the two payloads no .env quoting can carry (a single quote and something double quotes expand)
UNREPRESENTABLE = ["'$(touch M9)'", "it's `touch M16`"]


def _sets() -> list[str]:
    out = []
    for i, v in enumerate(PAYLOADS):
        out += ["--set", f"env.PAYLOAD_{i}={v}"]
    return out


def _source(shell: list[str], file: Path, cwd: Path) -> list[str]:
    script = 'set -a; . "$1"; ' + "; ".join(f'printf "%s\\036" "$PAYLOAD_{i}"' for i in range(len(PAYLOADS)))
    r = subprocess.run([*shell, "-c", script, "sh", str(file)], cwd=cwd, capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\x1e")[:-1]


def test_a_rendered_env_is_literal_in_every_shell_and_runs_nothing(sandbox: Sandbox):
    from recipekit.envfile import read_env_file

    run = sandbox.work / "run"
    run.mkdir()
    ok = [v for v in PAYLOADS if v not in UNREPRESENTABLE]
    with guard(sandbox, allowed=("work",)):
        sets = [x for i, v in enumerate(PAYLOADS) if v in ok for x in ("--set", f"env.PAYLOAD_{i}={v}")]
        sets += [x for i, v in enumerate(PAYLOADS) if v not in ok for x in ("--set", f"env.PAYLOAD_{i}=")]
        res = sandbox.cli("render", sandbox.tiny(), "--artifact", "env", *sets, "--out", sandbox.work / "out.env")
        assert res.code == 0, res
        f = sandbox.work / "out.env"
        parsed = read_env_file(f)
        assert [parsed[f"PAYLOAD_{i}"][0] for i, v in enumerate(PAYLOADS) if v in ok] == ok
        for shell in SHELLS:
            got = _source(shell, f, run)
            assert [g for g, v in zip(got, PAYLOADS) if v in ok] == ok, (shell, f.read_text())
        assert list(run.iterdir()) == [], "a payload ran"


@pytest.mark.parametrize("value", UNREPRESENTABLE)
def test_a_value_no_env_quoting_carries_is_refused(sandbox: Sandbox, value):
    out = sandbox.work / "out.env"
    with guard(sandbox, allowed=("work/tiny.yaml",)):
        res = sandbox.cli("render", sandbox.tiny(), "--artifact", "env", "--set", f"env.P={value}", "--out", out)
    refused(res, "env-value-unrepresentable", 2)
    assert not out.exists()


def test_launch_exports_are_literal_in_every_shell_and_run_nothing(sandbox: Sandbox):
    run = sandbox.work / "run"
    run.mkdir()
    with guard(sandbox, allowed=("work",)):
        res = sandbox.cli("render", sandbox.tiny(), "--artifact", "launch", *_sets())
        assert res.code == 0, res
        exports = [ln for ln in res.out.splitlines() if ln.startswith("export ")]
        p = sandbox.work / "exports.sh"
        p.write_text("\n".join(exports) + "\n")
        for shell in SHELLS:
            assert _source(shell, p, run) == PAYLOADS, (shell, p.read_text())
        assert list(run.iterdir()) == [], "a payload ran"


@pytest.mark.parametrize("value", ["a\x00b", "line1\nline2", "esc\x1b[2J", "cr\rx", "bell\x07", "del\x7f"])
def test_control_characters_are_refused_at_render_time(sandbox: Sandbox, value):
    path = sandbox.tiny()
    env = sandbox.work / ".env.hostile"
    for artifact in ("env", "launch", "serve"):
        with guard(sandbox, allowed=("work/tiny.yaml",)):
            res = sandbox.cli(
                "render",
                path,
                "--artifact",
                artifact,
                "--set",
                f"env.PAYLOAD={value}",
                "--out",
                sandbox.work / "out.txt",
            )
        if "\x00" in value:
            assert res.code != 0
            continue
        refused(res, "value-control-char", 2)
        assert not (sandbox.work / "out.txt").exists()
    del env


def test_docker_env_file_lines_carry_values_verbatim_or_are_refused():
    from recipekit import inert
    from recipekit.errors import RecipekitError

    for value in PAYLOADS:
        assert inert.docker_env_line("K", value) == f"K={value}"
    for bad in ("a\nb", " leading", "x\x00"):
        with pytest.raises(RecipekitError) as ei:
            inert.docker_env_line("K", bad)
        assert ei.value.code in ("value-control-char", "env-value-unrepresentable")
    with pytest.raises(RecipekitError):
        inert.docker_env_line("BAD NAME", "x")


def test_a_value_no_env_file_quoting_can_carry_is_refused():
    from recipekit import inert
    from recipekit.errors import RecipekitError

    with pytest.raises(RecipekitError) as ei:
        inert.dotenv_line("K", "it's $(x)")
    assert ei.value.code == "env-value-unrepresentable"
