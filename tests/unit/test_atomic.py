"""recipekit.atomic: the one atomic-write implementation every module uses."""

from __future__ import annotations

import os
import stat

import pytest

from recipekit import atomic


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_write_replaces_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "f.json"
    atomic.atomic_write_text(target, "one\n")
    atomic.atomic_write_text(target, "two ü\n")
    assert target.read_bytes() == "two ü\n".encode("utf-8")
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.json"]
    assert _mode(target) == 0o600  # a mkstemp temp keeps its 0o600


def test_explicit_mode_and_pid_temp(tmp_path):
    a = tmp_path / "a.bin"
    atomic.atomic_write_bytes(a, b"x", mode=0o640)
    assert _mode(a) == 0o640
    b = tmp_path / "b.bin"
    umask = os.umask(0o022)
    try:
        atomic.atomic_write_bytes(b, b"y", temp=atomic.pid_temp_name(b), sync_dir="ignore")
    finally:
        os.umask(umask)
    assert b.read_bytes() == b"y" and _mode(b) == 0o644


def test_keep_mode_keeps_the_replaced_files_bits(tmp_path):
    new = tmp_path / "new.py"
    atomic.atomic_write_bytes(new, b"1", keep_mode=True)
    assert _mode(new) == 0o644  # a new file: 0o644, not mkstemp's 0o600
    os.chmod(new, 0o751)
    atomic.atomic_write_bytes(new, b"2", keep_mode=True)
    assert new.read_bytes() == b"2" and _mode(new) == 0o751
    atomic.atomic_write_bytes(new, b"3", keep_mode=True, mode=0o600)  # an explicit mode wins
    assert _mode(new) == 0o600


def test_text_is_utf8_whatever_the_locale(tmp_path, monkeypatch):
    import locale

    monkeypatch.setattr(locale, "getpreferredencoding", lambda *a: "ascii")
    target = tmp_path / "t.txt"
    atomic.atomic_write_text(target, "π\n")
    assert target.read_bytes() == "π\n".encode("utf-8")


def test_no_module_wraps_atomic_writes():
    """Every caller uses recipekit.atomic itself: no module defines its own atomic-write helper."""
    import re
    from pathlib import Path

    root = Path(atomic.__file__).resolve().parent.parent
    found = []
    for folder in ("recipekit", "backends", "patches", "hybrid", "bench", "tools"):
        for py in (root / folder).rglob("*.py"):
            if py.name == "atomic.py":
                continue
            for m in re.finditer(r"^\s*def (_?atomic_\w*)\(", py.read_text(), re.M):
                found.append(f"{py.relative_to(root)}:{m.group(1)}")
    assert found == []


def test_failure_keeps_old_file_and_removes_temp(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    for kw in ({}, {"temp": atomic.pid_temp_name(target)}, {"prefix": "f.txt.", "suffix": ""}):
        with pytest.raises(RuntimeError, match="boom"):
            with atomic.atomic_open(target, **kw) as f:
                f.write(b"half")
                raise RuntimeError("boom")
        assert target.read_text() == "old"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


def test_temp_names(tmp_path, monkeypatch):
    seen = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (seen.append(os.path.basename(src)), real(src, dst)))
    target = tmp_path / "m.json"
    atomic.atomic_write_bytes(target, b"1")
    atomic.atomic_write_bytes(target, b"2", prefix="m.json.", suffix="")
    atomic.atomic_write_bytes(target, b"3", temp=atomic.pid_temp_name(target))
    assert seen[0].startswith(".m.json.") and seen[0].endswith(".tmp")
    assert seen[1].startswith("m.json.") and not seen[1].endswith(".tmp")
    assert seen[2] == f".m.json.tmp-{os.getpid()}"


def test_fsync_dir_error_rules(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError):
        atomic.fsync_dir(missing)
    atomic.fsync_dir(missing, "skip-unopenable")
    atomic.fsync_dir(missing, "ignore")
    atomic.fsync_dir(tmp_path)


def test_remove_stale_temps(tmp_path):
    (tmp_path / ".a.tmp-123").write_bytes(b"")
    (tmp_path / "keep.tmp-1").write_bytes(b"")
    (tmp_path / "b").write_bytes(b"")
    assert atomic.remove_stale_temps(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "keep.tmp-1"]


def test_build_dir_replaces_whole_folder_or_nothing(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic.build_dir(out) as tmp:
            assert tmp.name == ".model.tmp-build" and tmp.is_dir()
            (tmp / "new.txt").write_text("half")
            raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    (tmp_path / ".model.tmp-build").mkdir()
    (tmp_path / ".model.tmp-build" / "stale").write_text("x")  # an interrupted build's leftover
    with atomic.build_dir(out) as tmp:
        assert list(tmp.iterdir()) == []
        (tmp / "new.txt").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert [p.name for p in out.iterdir()] == ["new.txt"]


def test_replace_dir_swaps_whole_folders_and_keeps_the_old_on_failure(tmp_path, monkeypatch):
    out, new = tmp_path / "site", tmp_path / ".site.tmp-x"
    atomic.replace_dir(_tree(new, "one"), out)  # no old folder: a plain rename
    assert (out / "f").read_text() == "one" and sorted(p.name for p in tmp_path.iterdir()) == ["site"]
    atomic.replace_dir(_tree(new, "two"), out)
    assert (out / "f").read_text() == "two" and sorted(p.name for p in tmp_path.iterdir()) == ["site"]
    real = os.rename
    calls = []

    def fail_second(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(os, "rename", fail_second)
    with pytest.raises(OSError):
        atomic.replace_dir(_tree(new, "three"), out)
    monkeypatch.setattr(os, "rename", real)
    assert (out / "f").read_text() == "two"  # the old folder was put back


def _tree(folder, text):
    folder.mkdir()
    (folder / "f").write_text(text)
    return folder
