"""start.sh's with_ticker (around the toolkit's pip install, silent for minutes otherwise): a line
every 5 s with the elapsed time, the command's own exit status, and one line on an interrupt."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

START = Path(__file__).resolve().parents[2] / "start.sh"


def _script(tmp_path: Path, body: str) -> Path:
    text = START.read_text(encoding="utf-8")
    fn = re.search(r"^with_ticker\(\) \{\n.*?^\}\n", text, re.M | re.S)
    assert fn, "start.sh has no with_ticker function"
    p = tmp_path / "t.sh"
    p.write_text(
        "set -euo pipefail\nlog() { printf '[start.sh] %s\\n' \"$*\" >&2; }\n" + fn.group(0) + body, encoding="utf-8"
    )
    return p


def test_ticks_with_elapsed_time_and_keeps_the_exit_status(tmp_path):
    p = _script(tmp_path, 'with_ticker "toolkit install" sleep 6\nwith_ticker "x" sh -c "exit 3" || echo "rc=$?"\n')
    r = subprocess.run(["bash", str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "rc=3\n"
    assert r.stderr.splitlines() == ["[start.sh]   ... toolkit install: 5 s elapsed"]


def test_an_interrupt_stops_the_command_and_says_so(tmp_path):
    marker = tmp_path / "still-running"
    p = _script(tmp_path, f'with_ticker "toolkit install" sh -c "sleep 4; touch {marker}"\necho after\n')
    proc = subprocess.Popen(["bash", str(p)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and out == ""
    assert err.strip().splitlines()[-1] == "[start.sh] interrupted: toolkit install; a re-run installs again"
    time.sleep(5)  # past the point where the command would have written its marker
    assert not marker.exists()  # the command was stopped: its shell never reached the touch


def _install_script(tmp_path: Path, fail: str) -> tuple[Path, Path]:
    """start.sh's install_toolkit with a .venv whose python records each call and fails the calls
    whose arguments contain `fail` (the paths start.sh takes are real; only the venv is made up)."""
    text = START.read_text(encoding="utf-8")
    fns = [re.search(rf"^{name}\(\) \{{\n.*?^\}}\n", text, re.M | re.S) for name in ("with_ticker", "install_toolkit")]
    assert all(fns), "start.sh lacks with_ticker or install_toolkit"
    calls = tmp_path / "calls"
    py = tmp_path / "venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {calls}\n'
        f'case "$*" in *"{fail}"*) exit 1;; esac\n'
        'case "$*" in *installer.py*) printf -- "--find-links\\n/w\\n";; esac\n'
    )
    py.chmod(0o755)
    p = tmp_path / "t.sh"
    p.write_text(
        "set -euo pipefail\nlog() { printf '[start.sh] %s\\n' \"$*\" >&2; }\n"
        f"VENV={tmp_path / 'venv'}\n" + "".join(f.group(0) for f in fns if f) + 'install_toolkit ".[test]"\n',
        encoding="utf-8",
    )
    return p, calls


def test_the_toolkit_installs_with_uv_bootstrapped_by_pip_and_given_pips_sources(tmp_path):
    p, calls = _install_script(tmp_path, fail="import uv")
    r = subprocess.run(["bash", str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    py = tmp_path / "venv" / "bin" / "python"
    assert calls.read_text().splitlines() == [
        "-c import uv",
        "-m pip install -q --disable-pip-version-check uv",
        "backends/cpu/installer.py",
        f"-m uv pip install --quiet --python {py} --find-links /w -e .[test]",
    ]
    assert "installing the toolkit into .venv with uv (with the sources pip uses: --find-links /w)" in r.stderr


def test_pip_installs_the_toolkit_when_uv_fails(tmp_path):
    p, calls = _install_script(tmp_path, fail="-m uv pip install")
    r = subprocess.run(["bash", str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert calls.read_text().splitlines()[-1] == "-m pip install -q --disable-pip-version-check -e .[test]"
    assert "uv could not install the toolkit (above); installing with pip" in r.stderr
