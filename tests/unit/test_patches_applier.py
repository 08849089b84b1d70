"""The patch applier on real git checkouts and a real site-packages-shaped tree: clean apply,
re-apply no-op, drift refused with nothing changed, kill mid-apply recovered, post-image
mismatch detected, opt-in selection, revert byte-identical, external (unavailable) bodies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from recipekit.errors import ErrorList, RecipekitError
from recipekit.patches.applier import PAUSE_ENV, apply_pack, check_pack, revert_pack
from recipekit.patches.author import describe_patch
from recipekit.patches.fsio import sha256_file

FILES = {
    "pkg/__init__.py": "VERSION = '1.0'\n",
    "pkg/cli.py": "import sys\n\n\ndef main():\n    print(version('pkg'))\n    return 0\n",
    "pkg/util.py": "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(20)),
    "pkg/extra.py": "X = 1\n",
}


def git(cwd, *args):
    r = subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def make_tree(root: Path, files=FILES) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def diff_of(root: Path, edits: dict[str, str | None]) -> bytes:
    """A real `git diff` of `edits` made on a scratch copy of `root`'s files."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        work = Path(d) / "w"
        shutil.copytree(root, work, ignore=shutil.ignore_patterns(".git", ".recipekit-patches"))
        git(work, "init", "-q")
        git(work, "add", "-A")
        git(work, "commit", "-qm", "base")
        for rel, text in edits.items():
            if text is None:
                (work / rel).unlink()
            else:
                (work / rel).parent.mkdir(parents=True, exist_ok=True)
                (work / rel).write_text(text)
        git(work, "add", "-A")
        return subprocess.run(["git", "diff", "--cached", "--binary"], cwd=work, capture_output=True).stdout


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.parts and ".recipekit-patches" not in p.parts
    }


def write_pack(pack_dir: Path, root: Path, patches: list[dict], pins=(), engine="toy", profile="1.0") -> Path:
    """Each patch dict: id, edits (applied on top of the previous ones), required, reason."""
    import shutil
    import tempfile

    pack_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    with tempfile.TemporaryDirectory() as d:
        cur = Path(d) / "cur"
        shutil.copytree(root, cur, ignore=shutil.ignore_patterns(".git"))
        for i, p in enumerate(patches):
            body = diff_of(cur, p["edits"])
            fname = f"{i + 1:04d}-{p['id']}.patch"
            (pack_dir / fname).write_bytes(body)
            files = describe_patch(body, cur)
            if p.get("chain", True):
                for rel, text in p["edits"].items():
                    if text is None:
                        (cur / rel).unlink()
                    else:
                        (cur / rel).parent.mkdir(parents=True, exist_ok=True)
                        (cur / rel).write_text(text)
            entries.append(
                {
                    "id": p["id"],
                    "file": fname,
                    "required": p.get("required", True),
                    "reason": p.get("reason", "test"),
                    "files": files,
                }
            )
    manifest = {
        "schema_version": 1,
        "engine": engine,
        "profile": profile,
        "description": "test pack",
        "target": {"kind": "checkout"},
        "pins": list(pins),
        "patches": entries,
    }
    (pack_dir / "pack.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return pack_dir


CLI_FIX = (
    FILES["pkg/cli.py"]
    .replace("print(version('pkg'))", "print(VERSION)")
    .replace("import sys\n", "import sys\n\nfrom pkg import VERSION\n")
)
UTIL_FIX = FILES["pkg/util.py"].replace("    return 7\n", "    return 70\n")
NEW_FILE = "def added():\n    return 'new'\n"


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    make_tree(root)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return root


@pytest.fixture
def pack(tmp_path, repo):
    head = git(repo, "rev-parse", "HEAD").strip()
    return write_pack(
        tmp_path / "pack",
        repo,
        [
            {"id": "cli-version", "edits": {"pkg/cli.py": CLI_FIX, "pkg/new_mod.py": NEW_FILE}},
            {"id": "util-seven", "edits": {"pkg/util.py": UTIL_FIX}},
            {
                "id": "extra-opt",
                "edits": {"pkg/extra.py": "X = 2\n", "pkg/util.py": UTIL_FIX.replace("return 3\n", "return 30\n")},
                "required": False,
                "reason": "optional tweak",
            },
        ],
        pins=[{"name": "toy", "commit": head}],
    )


def test_clean_apply_then_reapply_is_noop(repo, pack):
    before = snapshot(repo)
    rep = apply_pack(pack, repo)
    assert [p.status for p in rep.patches] == ["applied", "applied"]
    assert sorted(rep.changed) == ["pkg/cli.py", "pkg/new_mod.py", "pkg/util.py"]
    assert (repo / "pkg/cli.py").read_text() == CLI_FIX
    assert (repo / "pkg/new_mod.py").read_text() == NEW_FILE
    assert (repo / "pkg/util.py").read_text() == UTIL_FIX
    assert (repo / "pkg/extra.py").read_bytes() == before["pkg/extra.py"]  # opt-in not selected
    assert rep.pins[0].status == "ok"
    # state lives inside .git for a checkout: the work tree shows only the patched files
    status = git(repo, "status", "--porcelain")
    assert ".recipekit" not in status and "pkg/new_mod.py" in status
    stat = {rel: os.stat(repo / rel).st_mtime_ns for rel in ("pkg/cli.py", "pkg/util.py")}
    rep2 = apply_pack(pack, repo)
    assert rep2.noop and rep2.changed == []
    assert {rel: os.stat(repo / rel).st_mtime_ns for rel in stat} == stat
    chk = check_pack(pack, repo)
    assert [(p.id, p.status) for p in chk.patches] == [
        ("cli-version", "applied"),
        ("util-seven", "applied"),
        ("extra-opt", "missing"),
    ]
    assert int(chk.exit_code) == 0


def test_drifted_base_is_refused_and_nothing_changes(repo, pack):
    (repo / "pkg/util.py").write_text(FILES["pkg/util.py"] + "# local edit\n")
    before = snapshot(repo)
    with pytest.raises(RecipekitError) as ei:
        apply_pack(pack, repo)
    e = ei.value
    assert e.code == "patch-base-drift" and int(e.exit_code) == 4
    expected = sha256_file(repo / "pkg/util.py")
    assert "pkg/util.py" in e.message and expected in e.message
    pre = yaml.safe_load((pack / "pack.yaml").read_text())["patches"][1]["files"][0]["pre_sha256"]
    assert pre in e.message
    assert snapshot(repo) == before  # the first (clean) patch was not applied either
    chk = check_pack(pack, repo)
    assert chk.patches[1].status == "drifted" and int(chk.exit_code) == 4


def test_pin_mismatch_refused(repo, pack):
    (repo / "pkg/extra.py").write_text("X = 1\n")
    git(repo, "commit", "-qm", "moved", "--allow-empty")
    before = snapshot(repo)
    with pytest.raises(RecipekitError) as ei:
        apply_pack(pack, repo)
    assert ei.value.code == "pin-mismatch" and int(ei.value.exit_code) == 4
    assert git(repo, "rev-parse", "HEAD").strip() in ei.value.message
    assert snapshot(repo) == before


def test_opt_in_selection_and_revert_byte_identical(repo, pack):
    original = snapshot(repo)
    with pytest.raises(RecipekitError) as ei:
        apply_pack(pack, repo, with_opt_in=["extra-op"])
    assert ei.value.code == "unknown-patch" and "extra-opt" in ei.value.hint
    rep = apply_pack(pack, repo, with_opt_in=["extra-opt"])
    assert [p.id for p in rep.patches] == ["cli-version", "util-seven", "extra-opt"]
    assert (repo / "pkg/extra.py").read_text() == "X = 2\n"
    assert "return 30" in (repo / "pkg/util.py").read_text() and "return 70" in (repo / "pkg/util.py").read_text()
    assert check_pack(pack, repo, with_opt_in=["extra-opt"]).exit_code == 0
    rev = revert_pack(pack, repo)
    assert not rev.noop
    assert snapshot(repo) == original
    assert not (repo / "pkg/new_mod.py").exists()
    assert all(p.status == "missing" for p in rev.patches)
    assert revert_pack(pack, repo).noop


def test_incremental_opt_in_after_required(repo, pack):
    original = snapshot(repo)
    apply_pack(pack, repo)
    rep = apply_pack(pack, repo, with_opt_in=["all"])
    assert rep.changed and sorted(rep.changed) == ["pkg/extra.py", "pkg/util.py"]
    revert_pack(pack, repo)
    assert snapshot(repo) == original


def test_post_image_mismatch_detected(repo, pack):
    # the body still applies cleanly but produces other bytes than the manifest's post-image
    body = (pack / "0001-cli-version.patch").read_text()
    assert "+    print(VERSION)" in body
    (pack / "0001-cli-version.patch").write_text(body.replace("+    print(VERSION)", "+    print(VERSION, 1)"))
    before = snapshot(repo)
    with pytest.raises(RecipekitError) as ei:
        apply_pack(pack, repo)
    assert ei.value.code == "patch-post-image-mismatch" and int(ei.value.exit_code) == 4
    post = yaml.safe_load((pack / "pack.yaml").read_text())["patches"][0]["files"][0]["post_sha256"]
    assert "pkg/cli.py" in ei.value.message and post in ei.value.message
    assert snapshot(repo) == before


def test_body_that_does_not_apply_is_refused_without_fuzz(repo, pack):
    # a body whose context is off by one line content: git must refuse rather than fuzz
    body = (pack / "0002-util-seven.patch").read_text()
    (pack / "0002-util-seven.patch").write_text(body.replace(" def f7():", " def f7( ):"))
    before = snapshot(repo)
    with pytest.raises(RecipekitError) as ei:
        apply_pack(pack, repo)
    assert ei.value.code == "patch-does-not-apply"
    assert snapshot(repo) == before


def _run_apply_subprocess(pack, target, env_extra):
    code = "import sys; from recipekit.patches.applier import apply_pack; apply_pack(sys.argv[1], sys.argv[2])"
    env = {**os.environ, **env_extra}
    return subprocess.Popen(
        [sys.executable, "-c", code, str(pack), str(target)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _kill_mid_apply(pack, target, state):
    proc = _run_apply_subprocess(pack, target, {PAUSE_ENV: "1"})
    marker = state / "paused"
    deadline = time.time() + 60
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.time() < deadline, "apply never reached the pause point"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    marker.unlink()
    return proc.returncode


def test_kill_mid_apply_is_recovered(repo, pack):
    original = snapshot(repo)
    state = repo / ".git" / "recipekit-patches" / "toy__1.0"
    assert _kill_mid_apply(pack, repo, state) == -signal.SIGKILL
    half = snapshot(repo)
    assert half != original  # exactly one file was written when it died
    changed = [k for k in set(half) | set(original) if half.get(k) != original.get(k)]
    assert len(changed) == 1
    chk = check_pack(pack, repo)
    assert chk.interrupted and int(chk.exit_code) == 4
    # revert after a crash: the journal restores the target byte for byte
    rev = revert_pack(pack, repo)
    assert rev.recovered == changed
    assert snapshot(repo) == original
    # and a crash followed by a plain re-run ends fully applied
    assert _kill_mid_apply(pack, repo, state) == -signal.SIGKILL
    rep = apply_pack(pack, repo)
    assert len(rep.recovered) == 1
    assert (repo / "pkg/cli.py").read_text() == CLI_FIX and (repo / "pkg/util.py").read_text() == UTIL_FIX
    assert not (state / "journal.json").exists()
    revert_pack(pack, repo)
    assert snapshot(repo) == original


def test_site_packages_tree_and_package_dir_target(tmp_path):
    """A real pip-installed layout: dist-info with METADATA; target given as the package folder."""
    sp = tmp_path / "site-packages"
    make_tree(sp)
    di = sp / "pkg-1.0.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n")
    pack = write_pack(
        tmp_path / "pack",
        sp,
        [{"id": "cli-version", "edits": {"pkg/cli.py": CLI_FIX}}],
        pins=[{"name": "pkg", "dist": "pkg", "version": "1.0"}],
    )
    original = snapshot(sp)
    rep = apply_pack(pack, sp / "pkg")  # the package folder maps to site-packages
    assert rep.target == str(sp.resolve()) and rep.changed == ["pkg/cli.py"]
    assert (sp / ".recipekit-patches" / "toy__1.0" / "stamp.json").is_file()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.1\n")
    with pytest.raises(RecipekitError) as ei:
        revert_pack(pack, sp) if False else apply_pack(pack, sp)
    assert ei.value.code == "pin-mismatch" and "expected 1.0, actual 1.1" in ei.value.message
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n")
    revert_pack(pack, sp)
    assert {k: v for k, v in snapshot(sp).items()} == original


def test_external_bodies_are_unavailable_until_a_source_is_given(tmp_path, repo):
    src = tmp_path / "port"
    src.mkdir()
    body = diff_of(repo, {"pkg/cli.py": CLI_FIX})
    files = describe_patch(body, repo)
    from recipekit.patches.fsio import sha256_bytes

    m = {
        "engine": "toy",
        "profile": "ext",
        "description": "external bodies",
        "patches": [
            {
                "id": "ext-fix",
                "source": {"repo": "example/port", "path": "fixes/ext-fix.patch", "sha256": sha256_bytes(body)},
                "files": files,
                "reason": "r",
            },
            {
                "id": "unknown-fix",
                "source": {"repo": "example/port"},
                "reason": "r",
                "unknown": ["commit", "path", "sha256", "files"],
            },
        ],
    }
    (tmp_path / "pk").mkdir()
    (tmp_path / "pk/pack.yaml").write_text(yaml.safe_dump(m))
    chk = check_pack(tmp_path / "pk", repo)
    assert [(p.id, p.status) for p in chk.patches] == [("ext-fix", "unavailable"), ("unknown-fix", "unavailable")]
    assert "--source" in chk.patches[0].detail and "not published: commit, path, sha256, files" in chk.patches[1].detail
    assert int(chk.exit_code) == 1
    with pytest.raises(RecipekitError) as ei:
        apply_pack(tmp_path / "pk", repo, source_dirs=[src])
    assert ei.value.code == "patch-unavailable" and "unknown-fix" in ei.value.message
    # once the body is in the source checkout, the verifiable one applies
    (src / "fixes").mkdir()
    (src / "fixes/ext-fix.patch").write_bytes(body)
    m["patches"] = m["patches"][:1]
    (tmp_path / "pk/pack.yaml").write_text(yaml.safe_dump(m))
    assert check_pack(tmp_path / "pk", repo, source_dirs=[src]).patches[0].status == "missing"
    apply_pack(tmp_path / "pk", repo, source_dirs=[src])
    assert (repo / "pkg/cli.py").read_text() == CLI_FIX
    # a tampered body in the source is refused by its sha256
    (src / "fixes/ext-fix.patch").write_bytes(body + b"\n")
    revert_pack(tmp_path / "pk", repo)
    chk = check_pack(tmp_path / "pk", repo, source_dirs=[src])
    assert chk.patches[0].status == "unavailable" and "sha256" in chk.patches[0].detail


def test_invalid_manifest_errors_have_locations(tmp_path):
    (tmp_path / "pack.yaml").write_text(
        yaml.safe_dump(
            {
                "engine": "e",
                "profile": "p",
                "description": "d",
                "patches": [{"id": "Bad_Id", "file": "../x.patch", "reason": "r", "files": []}],
            }
        )
    )
    with pytest.raises(ErrorList) as ei:
        from recipekit.patches.manifest import load_pack

        load_pack(tmp_path)
    lines = ei.value.lines()
    assert any("$.patches[0].id" in ln and "kebab-case" in ln for ln in lines)
    assert any("$.patches[0].file" in ln for ln in lines)
    assert all(ln.startswith("error[pack-invalid]") for ln in lines)


@pytest.mark.parametrize(
    "text, code, line",
    [
        ("engine: e\nprofile: p\nengine: f\npatches: []\n", "duplicate-key", 3),
        ("engine: !!python/object:os.system e\nprofile: p\n", "yaml-unsafe-tag", 1),
        ("engine: &e x\nprofile: *e\n", "yaml-alias", 1),  # reported at the anchored value
        ("engine: e\nprofile: [p\n", "yaml-syntax", None),
    ],
)
def test_pack_yaml_is_read_by_the_recipe_yaml_loader(tmp_path, text, code, line):
    """pack.yaml goes through the same safe loader as recipes: duplicate keys, tags and aliases refused."""
    from recipekit.patches.manifest import load_pack

    (tmp_path / "pack.yaml").write_text(text)
    with pytest.raises(RecipekitError) as ei:
        load_pack(tmp_path)
    assert ei.value.code == code
    assert ei.value.location == (f"{tmp_path / 'pack.yaml'}:{line}" if line else ei.value.location)
    assert str(tmp_path / "pack.yaml") in ei.value.location


def test_revert_without_stamp_reverses_the_bodies(repo, pack):
    """Patched outside the applier (or the state was lost): revert reverse-applies and checks hashes."""
    import shutil

    original = snapshot(repo)
    apply_pack(pack, repo)
    shutil.rmtree(repo / ".git" / "recipekit-patches")
    assert [p.status for p in check_pack(pack, repo).patches][:2] == ["applied", "applied"]
    rev = revert_pack(pack, repo)
    assert sorted(rev.changed) == ["pkg/cli.py", "pkg/new_mod.py", "pkg/util.py"]
    assert snapshot(repo) == original


def test_cli_apply_check_revert_exit_codes(run_cli, repo, pack):
    code, out, err = run_cli("patches", "apply", "--pack", str(pack), "--engine-dir", str(repo), "--dry-run")
    assert code == 0 and (repo / "pkg/cli.py").read_text() == FILES["pkg/cli.py"]
    code, out, err = run_cli("patches", "check", "--pack", str(pack), "--engine-dir", str(repo))
    assert code == 1 and "missing" in out
    code, out, err = run_cli("patches", "apply", "--pack", str(pack), "--engine-dir", str(repo), "-f", "json")
    assert code == 0
    import json

    data = json.loads(out)
    assert data["noop"] is False and sorted(data["changed"]) == ["pkg/cli.py", "pkg/new_mod.py", "pkg/util.py"]
    code, out, err = run_cli("patches", "apply", "--pack", str(pack), "--engine-dir", str(repo))
    assert code == 0 and "nothing to do" in out
    (repo / "pkg/cli.py").write_text("edited\n")
    code, out, err = run_cli("patches", "check", "--pack", str(pack), "--engine-dir", str(repo))
    assert code == 4 and "drifted" in out and "pkg/cli.py" in out
    code, out, err = run_cli("patches", "revert", "--pack", str(pack), "--engine-dir", str(repo))
    assert code == 4 and err.startswith("error[patch-base-drift]") and "pkg/cli.py" in err
    assert (repo / "pkg/cli.py").read_text() == "edited\n"  # refused: nothing reverted
    code, out, err = run_cli("patches", "revert", "--pack", str(pack), "--engine-dir", str(repo), "--force")
    assert code == 0 and (repo / "pkg/cli.py").read_text() == FILES["pkg/cli.py"]
    code, out, err = run_cli("patches", "apply", "--pack", str(pack), "--engine-dir", str(repo), "--with", "nope")
    assert code == 2 and "error[unknown-patch]" in err and "extra-opt" in err


def test_a_second_apply_is_refused_while_one_holds_the_lock(repo, pack):
    from filelock import FileLock

    state = repo / ".git" / "recipekit-patches" / "toy__1.0"
    state.mkdir(parents=True)
    before = snapshot(repo)
    with FileLock(str(state / "lock")):
        with pytest.raises(RecipekitError) as ei:
            apply_pack(pack, repo)
    assert ei.value.code == "patch-busy" and int(ei.value.exit_code) == 7
    assert snapshot(repo) == before


def _sp_with_pack(tmp_path):
    sp = tmp_path / "site-packages"
    make_tree(sp)
    pack = write_pack(
        tmp_path / "pack",
        sp,
        [
            {"id": "cli-version", "edits": {"pkg/cli.py": CLI_FIX}},
            {"id": "util-seven", "edits": {"pkg/util.py": UTIL_FIX}},
        ],
    )
    return sp, pack


def test_failed_apply_or_revert_leaves_no_lock_folder_but_keeps_real_state(tmp_path, monkeypatch):
    import recipekit.patches.applier as ap

    sp, pack = _sp_with_pack(tmp_path)
    original = snapshot(sp)
    # refused before any write (drift)
    (sp / "pkg/cli.py").write_text("edited\n")
    with pytest.raises(RecipekitError) as ei:
        apply_pack(pack, sp)
    assert ei.value.code == "patch-base-drift"
    assert sorted(p.name for p in sp.iterdir()) == ["pkg"]
    (sp / "pkg/cli.py").write_text(FILES["pkg/cli.py"])
    # failed after writing (journal recovery restores the files, then the folder goes)
    real = ap._write_target

    def write_then_fail(ctx, writes, rep):
        real(ctx, writes, rep)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ap, "_write_target", write_then_fail)
    with pytest.raises(OSError):
        apply_pack(pack, sp)
    assert snapshot(sp) == original and sorted(p.name for p in sp.iterdir()) == ["pkg"]
    # with a stamp to keep, a failed revert keeps the state (stamp and backups) ...
    monkeypatch.setattr(ap, "_write_target", real)
    apply_pack(pack, sp)
    patched = snapshot(sp)
    state = sp / ".recipekit-patches" / "toy__1.0"
    monkeypatch.setattr(ap, "_write_target", write_then_fail)
    with pytest.raises(OSError):
        revert_pack(pack, sp)
    assert snapshot(sp) == patched and (state / "stamp.json").is_file() and any((state / "blobs").iterdir())
    # ... which a later revert uses, and then nothing is left
    monkeypatch.setattr(ap, "_write_target", real)
    revert_pack(pack, sp)
    assert snapshot(sp) == original and sorted(p.name for p in sp.iterdir()) == ["pkg"]


def test_lock_taken_on_a_removed_lock_file_is_retried(tmp_path, monkeypatch):
    """A waiter that opened the lock file just before the holder removed it must not count the
    flock on that orphaned file as the lock."""
    import fcntl

    from filelock import FileLock, Timeout

    from recipekit.patches.journal import StateDir

    sd = StateDir(tmp_path / ".recipekit-patches" / "toy__1.0", tmp_path)
    real_flock = fcntl.flock
    calls = []

    def flock_after_removal(fd, op):
        if not calls:  # the previous holder cleans up between our open and flock
            os.unlink(sd.lock_path)
        calls.append(op)
        return real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock_after_removal)
    with sd.locked():
        monkeypatch.setattr(fcntl, "flock", real_flock)
        assert len(calls) == 2  # the first flock was on the removed file: retried
        with pytest.raises(Timeout):
            FileLock(str(sd.lock_path)).acquire(timeout=0)  # the path's lock file is the one held
        with pytest.raises(RecipekitError) as ei:
            with sd.locked():
                pass
        assert ei.value.code == "patch-busy"
    assert not (tmp_path / ".recipekit-patches").exists()
