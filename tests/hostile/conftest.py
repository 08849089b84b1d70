"""The hostile-input corpus: helpers shared by every case.

Each case runs the real CLI entry (`recipekit.cli.main.main`) in-process inside a sandbox:
`<tmp>/parent/` holds the working folder `work/` (the cwd), the toolkit home `home/`
(RECIPEKIT_HOME) and a `victim.txt` that must survive. `refused()` asserts the exit code, the
error code, one-line errors and no traceback; `guard()` snapshots the whole parent folder before
and after and asserts that nothing outside the allowed folders changed and nothing was lost.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "local" / "tiny-deepseek-cpu.yaml"
ERROR_LINE = re.compile(r"^error\[[a-z0-9][a-z0-9.-]*\] [^\n]*$")
VICTIM = b"precious bytes\n"
BIG = 64 << 20


@dataclass
class Result:
    code: int
    out: str
    err: str


@dataclass
class Sandbox:
    parent: Path
    work: Path
    home: Path
    victim: Path
    capsys: pytest.CaptureFixture

    def cli(self, *args: str) -> Result:
        from recipekit.cli.main import main

        self.capsys.readouterr()
        code = main([str(a) for a in args])
        o = self.capsys.readouterr()
        return Result(code, o.out, o.err)

    def recipe(self, text: str, name: str = "hostile.yaml") -> Path:
        p = self.work / name
        p.write_text(text)
        return p

    def tiny(self, replace: dict[str, str] | None = None, append: str = "") -> Path:
        text = TINY.read_text()
        for a, b in (replace or {}).items():
            assert a in text, a
            text = text.replace(a, b, 1)
        return self.recipe(text + append, "tiny.yaml")


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry below `folder` (links not followed): kind, mode, and content hash or link text."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(folder))
            st = p.lstat()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", st.st_mode)
            elif p.is_file() and st.st_size > BIG:  # a huge (sparse) file: size and times
                out[rel] = ("file", st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            elif p.is_file():
                out[rel] = ("file", st.st_mode, hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                out[rel] = ("other", st.st_mode)
    return out


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Iterator[Sandbox]:
    parent = tmp_path / "parent"
    work, home = parent / "work", parent / "home"
    work.mkdir(parents=True)
    home.mkdir()
    victim = parent / "victim.txt"
    victim.write_bytes(VICTIM)
    monkeypatch.chdir(work)
    monkeypatch.setenv("RECIPEKIT_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("RECIPEKIT_DEBUG", raising=False)
    for k in ("LAYOUT", "PORT", "HOST"):
        monkeypatch.delenv(k, raising=False)
    yield Sandbox(parent, work, home, victim, capsys)
    for p in parent.rglob("*"):  # undo chattr/chmod a case left behind
        with contextlib.suppress(OSError):
            if not p.is_symlink():
                os.chmod(p, 0o755 if p.is_dir() else 0o644)
    shutil.rmtree(parent, ignore_errors=True)


@contextlib.contextmanager
def guard(sb: Sandbox, allowed: tuple[str, ...] = ()) -> Iterator[None]:
    """Nothing below sb.parent changes except under the `allowed` relative folders."""
    before = snapshot(sb.parent)
    yield
    after = snapshot(sb.parent)

    def outside(snap: dict) -> dict:
        return {k: v for k, v in snap.items() if not any(k == a or k.startswith(a + "/") for a in allowed)}

    assert outside(after) == outside(before), "something outside the intended folder changed"
    assert sb.victim.read_bytes() == VICTIM


def refused(res: Result, code: str, exit_code: int) -> None:
    """Exit code, error code, every error line one line of the documented form, no traceback."""
    text = res.out + res.err
    assert "Traceback" not in text, text
    assert res.code == exit_code, (res.code, text)
    lines = [ln for ln in res.err.splitlines() if ln.startswith("error[")]
    assert lines, res.err
    assert all(ERROR_LINE.match(ln) for ln in lines), lines
    assert any(ln.startswith(f"error[{code}]") for ln in lines), lines
    assert "\x1b" not in text and "\x00" not in text
