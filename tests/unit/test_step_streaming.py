"""Long child steps (conversion, validation) stream their output: each line reaches the console
while the command still runs, and the must_print check and exit code still decide."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from recipekit.apply.docker_steps import run_commands
from recipekit.errors import RecipekitError

# prints a line, then waits (up to 20 s) for the file the test creates only once it saw that line
WAITER = (
    "import sys, time, os\n"
    "print('step 1 of 2 converted', flush=True)\n"
    "deadline = time.monotonic() + 20\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    if time.monotonic() > deadline:\n"
    "        print('nobody saw step 1 in time'); sys.exit(9)\n"
    "    time.sleep(0.02)\n"
    "print('VALIDATE_OK', flush=True)\n"
)


@pytest.mark.timeout(60)
def test_lines_reach_the_console_while_the_command_runs(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    said: list[str] = []

    def log(s: str) -> None:
        said.append(s)
        if "step 1 of 2" in s:
            seen.touch()

    argv = [sys.executable, "-c", WAITER, str(seen)]
    out = run_commands(SimpleNamespace(log=log), [argv], {tuple(argv): "VALIDATE_OK"})
    assert out == {"commands": [{"argv": argv, "rc": 0}]}
    assert said[1:] == ["    step 1 of 2 converted", "    VALIDATE_OK"]


def test_a_missing_marker_or_a_failing_command_stops(tmp_path: Path) -> None:
    quiet = [sys.executable, "-c", "print('done')"]
    with pytest.raises(RecipekitError) as e:
        run_commands(SimpleNamespace(log=lambda s: None), [quiet], {tuple(quiet): "VALIDATE_OK"})
    assert e.value.code == "step-check-failed" and "VALIDATE_OK" in e.value.message
    said: list[str] = []
    failing = [sys.executable, "-c", "import sys; print('bad shard 3'); sys.exit(4)"]
    with pytest.raises(RecipekitError) as e:
        run_commands(SimpleNamespace(log=said.append), [failing, quiet])
    assert e.value.code == "step-command-failed" and "exited with 4" in e.value.message
    assert "    bad shard 3" in said and not any("done" in s for s in said)  # the second one never ran
