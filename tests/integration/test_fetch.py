"""`recipe fetch` against a hub on loopback (recipekit/rehearse/hub.py, via HF_ENDPOINT): pinned
revisions, selections, size+sha256 verification, a truncated transfer, a corrupted byte, an
interrupted run resumed, offline reuse with no network, the disk check, dry runs."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from recipekit.checkpoint.fetch_record import MANIFEST
from recipekit.errors import RecipekitError
from recipekit.rehearse.hub import FakeHub, Repo
from recipekit.tools import fetch as F

pytestmark = pytest.mark.integration

OFFICIAL = "deepseek-ai/Tiny-Official"
PACK = "LibertAIDAI/Tiny-EXL3"
C1 = "1bae0e10" + "a" * 32
C2 = "0be63c3337efbb2a0061d5b8bb4006fa186d433f"
MIB = 1 << 20


def _bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _repos() -> dict[str, Repo]:
    official = {
        "config.json": b'{"model_type": "tiny"}\n',
        "tokenizer.json": b'{"tok": 1}\n' * 50,
        "model-00001-of-00002.safetensors": _bytes(3 * MIB + 17, 1),
        "model-00002-of-00002.safetensors": _bytes(MIB + 5, 2),
        "README.md": b"not selected\n",
        "original/consolidated.safetensors": _bytes(2 * MIB, 3),
    }
    pack = {
        "config.json": b'{"quant": "exl3"}\n',
        "experts-00001.safetensors": _bytes(2 * MIB + 3, 4),
        "experts-00002.safetensors": _bytes(123457, 5),
    }
    return {
        OFFICIAL: Repo(C1, official, {p for p in official if p.endswith(".safetensors")}),
        PACK: Repo(C2, pack, {p for p in pack if p.endswith(".safetensors")}),
    }


def _recipe(official_rev="1bae0e10", declared_size=None):
    from recipekit.catalog import load_recipe
    from recipekit.schema import Checkpoint, CheckpointSource, FileEntry, FileSelection

    base = load_recipe("tiny-deepseek-cpu").recipe
    sources = [
        CheckpointSource(
            id="official",
            repo=OFFICIAL,
            revision=official_rev,
            files=FileSelection(include=["*.json", "*.safetensors"], exclude=["original/*"]),
        ),
        CheckpointSource(
            id="exl3-experts",
            repo=PACK,
            revision=C2,
            local_dir="${MODELS_DIR}/pack",
            files=FileSelection(
                files=[
                    FileEntry(name="experts-00001.safetensors", size_bytes=declared_size or 2 * MIB + 3),
                    FileEntry(
                        name="experts-00002.safetensors",
                        size_bytes=123457,
                        sha256=hashlib.sha256(_bytes(123457, 5)).hexdigest(),
                    ),
                ]
            ),
        ),
    ]
    return base.model_copy(update={"checkpoint": Checkpoint(sources=sources)})


def _eff(models: Path, **kw):
    from recipekit.config import effective_config

    return effective_config(_recipe(**kw), environ={}, host_paths=True, sets=[f"MODELS_DIR={models}"])


@pytest.fixture
def hub(monkeypatch):
    with FakeHub(_repos()) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield h


def _assert_tree(models: Path):
    repos = _repos()
    off = models / "Tiny-Official"
    assert sorted(str(p.relative_to(off)) for p in off.rglob("*") if p.is_file() and not p.name.startswith(".")) == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "tokenizer.json",
    ]
    for rel in (
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "tokenizer.json",
    ):
        assert (off / rel).read_bytes() == repos[OFFICIAL].files[rel]
    for rel in ("experts-00001.safetensors", "experts-00002.safetensors"):
        assert (models / "pack" / rel).read_bytes() == repos[PACK].files[rel]
    assert not (models / "pack" / "config.json").exists()  # not in the explicit file list
    assert not (off / F.PARTIAL_DIR).exists() and not (models / "pack" / F.PARTIAL_DIR).exists()


def test_fetch_selects_verifies_records(hub, tmp_path):
    rep = F.fetch(_eff(tmp_path))
    assert rep.network and [s.id for s in rep.sources] == ["official", "exl3-experts"]
    off, pack = rep.sources
    assert off.revision == C1  # the published prefix, resolved
    assert {f.status for f in off.files + pack.files} == {"downloaded"}
    assert off.bytes_total == off.bytes_downloaded == sum(len(_repos()[OFFICIAL].files[f.path]) for f in off.files)
    _assert_tree(tmp_path)
    m = json.loads((tmp_path / "Tiny-Official" / MANIFEST).read_text())["sources"]["official"]
    assert m["complete"] and m["revision"] == C1
    rec = m["files"]["model-00001-of-00002.safetensors"]
    assert rec["sha256"] == hashlib.sha256(_repos()[OFFICIAL].files["model-00001-of-00002.safetensors"]).hexdigest()
    assert rec["lfs"] and not m["files"]["config.json"]["lfs"]
    # the hub's HEAD metadata was checked for every file
    heads = [p for meth, p, _ in hub.log if meth == "HEAD" and "/resolve/" in p]
    assert len(heads) == 6
    assert F.verified_bytes(_eff(tmp_path)) == off.bytes_total + pack.bytes_total
    assert F.verify(_eff(tmp_path))
    (tmp_path / "pack" / "experts-00002.safetensors").unlink()
    assert not F.verify(_eff(tmp_path))


def test_truncated_transfer_resumes_with_range(hub, tmp_path):
    name = "model-00001-of-00002.safetensors"
    hub.faults[name] = ["truncate:1500000"]
    rep = F.fetch(_eff(tmp_path))
    fr = next(f for f in rep.sources[0].files if f.path == name)
    assert fr.attempts == 2 and fr.resumed_from == 1500000 and fr.refetched == 0
    assert hub.gets(name) == [None, "bytes=1500000-"]
    _assert_tree(tmp_path)


def test_server_ignoring_range_restarts_cleanly(hub, tmp_path):
    name = "model-00001-of-00002.safetensors"
    hub.faults[name] = ["truncate:700000", "ignore-range"]
    rep = F.fetch(_eff(tmp_path))
    fr = next(f for f in rep.sources[0].files if f.path == name)
    assert fr.attempts == 2 and fr.resumed_from == 0
    _assert_tree(tmp_path)


def test_corrupted_byte_is_refetched(hub, tmp_path):
    name = "experts-00001.safetensors"
    hub.faults[name] = ["corrupt"]
    rep = F.fetch(_eff(tmp_path))
    fr = next(f for f in rep.sources[1].files if f.path == name)
    assert fr.refetched == 1 and fr.attempts == 2
    assert hub.gets(name) == [None, None]  # started over, never resumed bad bytes
    _assert_tree(tmp_path)


def test_corrupt_every_time_fails_and_leaves_nothing_half_written(hub, tmp_path):
    name = "tokenizer.json"  # a small non-LFS file (git blob sha1), fetched last
    hub.faults[name] = ["corrupt"] * 3
    with pytest.raises(RecipekitError) as e:
        F.fetch(_eff(tmp_path), max_attempts=3, only=["official"])
    assert e.value.code == "fetch-verify-failed" and int(e.value.exit_code) == 1 and name in e.value.message
    off = tmp_path / "Tiny-Official"
    assert not (off / name).exists() and not list(off.glob(F.PARTIAL_DIR + "/**/*.part"))
    m = json.loads((off / MANIFEST).read_text())["sources"]["official"]
    assert not m["complete"] and name not in m["files"]
    # the next run fetches it
    rep = F.fetch(_eff(tmp_path), only=["official"])
    st = {f.path: f.status for f in rep.sources[0].files}
    assert st[name] == "downloaded" and st["model-00001-of-00002.safetensors"] == "already-verified"


def test_interrupted_run_resumes_in_the_next_run(hub, tmp_path):
    name = "model-00001-of-00002.safetensors"
    seen = []

    def interrupt(path, done, total):
        seen.append((path, done))
        if path == name and done >= MIB:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        F.fetch(_eff(tmp_path), progress=interrupt)
    off = tmp_path / "Tiny-Official"
    part = off / F.PARTIAL_DIR / (name + ".part")
    assert part.exists() and part.stat().st_size >= MIB and not (off / name).exists()
    kept = part.stat().st_size
    assert part.read_bytes() == _repos()[OFFICIAL].files[name][:kept]
    rep = F.fetch(_eff(tmp_path))
    fr = next(f for f in rep.sources[0].files if f.path == name)
    assert fr.resumed_from == kept and hub.gets(name) == [None, f"bytes={kept}-"]
    st = {f.path: f.status for f in rep.sources[0].files}
    assert st["config.json"] == "already-verified"  # finished before the interrupt
    assert hub.gets("config.json") == [None]
    _assert_tree(tmp_path)


def test_transport_break_then_rerun(hub, tmp_path):
    name = "experts-00001.safetensors"
    hub.faults[name] = ["truncate:1000000"]
    with pytest.raises(RecipekitError) as e:
        F.fetch(_eff(tmp_path), max_attempts=1, only=["exl3-experts"])
    assert e.value.code == "fetch-transfer-failed" and "resume" in e.value.hint
    rep = F.fetch(_eff(tmp_path), only=["exl3-experts"])
    fr = next(f for f in rep.sources[0].files if f.path == name)
    assert fr.resumed_from == 1000000


def test_verified_files_are_used_offline_with_no_network(hub, tmp_path, monkeypatch):
    F.fetch(_eff(tmp_path))
    hub.stop()
    n = len(hub.log)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    rep = F.fetch(_eff(tmp_path))
    assert not rep.network and all(s.offline for s in rep.sources)
    assert {f.status for s in rep.sources for f in s.files} == {"verified-offline"}
    assert len(hub.log) == n
    # a changed file is no longer verified: offline, that is an error, not a silent pass
    p = tmp_path / "pack" / "experts-00002.safetensors"
    p.write_bytes(b"x" * p.stat().st_size)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RecipekitError) as e:
        F.fetch(_eff(tmp_path))
    assert e.value.code == "fetch-offline" and "exl3-experts" in e.value.message


def test_disk_space_is_checked_before_anything_starts(hub, tmp_path):
    with pytest.raises(RecipekitError) as e:
        F.fetch(_eff(tmp_path), free_bytes=lambda d: 1000)
    assert e.value.code == "fetch-disk-space" and int(e.value.exit_code) == 3
    assert not [p for m, p, _ in hub.log if m == "GET" and "/resolve/" in p]
    assert not (tmp_path / "Tiny-Official").exists()


def test_pins_and_declared_metadata(hub, tmp_path):
    with pytest.raises(RecipekitError) as e:
        F.fetch(_eff(tmp_path, official_rev="main"))
    assert e.value.code == "fetch-unpinned-revision" and int(e.value.exit_code) == 2
    with pytest.raises(RecipekitError) as e:
        F.fetch(_eff(tmp_path, official_rev="deadbeef"))
    assert e.value.code == "fetch-revision-not-found"
    with pytest.raises(RecipekitError) as e:
        F.fetch(_eff(tmp_path, declared_size=999))
    assert e.value.code == "fetch-metadata-mismatch" and int(e.value.exit_code) == 4


def test_dry_run_offline_and_online(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rep = F.fetch(_eff(tmp_path), dry_run=True)
    assert not rep.network and not any(tmp_path.iterdir())  # nothing written
    off, pack = rep.to_dict()["sources"]
    assert off["selection"] == {"include": ["*.json", "*.safetensors"], "exclude": ["original/*"], "files": []}
    assert off["hub"] is None and off["declared_bytes"] is None
    assert (
        pack["declared_bytes"] == 2 * MIB + 3 + 123457
        and pack["declared_files"]["experts-00002.safetensors"]["size_bytes"] == 123457
    )
    assert not [x for x in hub.log if "/resolve/" in x[1]]
    monkeypatch.delenv("HF_HUB_OFFLINE")
    rep = F.fetch(_eff(tmp_path), dry_run=True)
    off, pack = rep.to_dict()["sources"]
    assert rep.network and off["hub"]["revision"] == C1
    assert [f["path"] for f in off["hub"]["files"]] == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "tokenizer.json",
    ]
    assert rep.needed_bytes == off["hub"]["bytes"] + pack["hub"]["bytes"]
    assert not any(tmp_path.iterdir())


def test_cli_fetch(hub, tmp_path, run_cli):
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(_recipe().model_dump(mode="json", by_alias=True, exclude_none=True)))
    env = {"MODELS_DIR": str(tmp_path / "m")}
    code, out, err = run_cli("fetch", str(path), "--dry-run", "--format", "json", env=env)
    assert code == 0, err
    assert [s["id"] for s in json.loads(out)["sources"]] == ["official", "exl3-experts"]
    code, out, err = run_cli("fetch", str(path), env=env)
    assert code == 0, err
    assert "OK official" in out and "OK exl3-experts" in out
    _assert_tree(tmp_path / "m")
    code, out, err = run_cli("fetch", str(path), env={**env, "HF_ENDPOINT": "http://127.0.0.1:9"})
    assert code == 0 and out.count("verified offline (no network)") == 2
    code, out, err = run_cli("fetch", str(path), "--source", "nope", env=env)
    assert code == 2 and "fetch-unknown-source" in err


@pytest.mark.timeout(300)
def test_ctrl_c_during_a_download_prints_one_line_and_the_rerun_resumes(hub, tmp_path):
    """A real SIGINT to `recipe fetch` (stderr not a terminal): progress lines with bytes, rate and
    elapsed time came first; then one line naming the file, what is kept and that a re-run resumes;
    the re-run asks the hub only for the rest of that file (a Range from where it stopped)."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(_recipe().model_dump(mode="json", by_alias=True, exclude_none=True)))
    name = "model-00001-of-00002.safetensors"
    hub.faults[name] = [f"slow:{256 * 1024}"]  # 3 MiB at 256 KiB/s: ~12 s, time for a progress line
    env = {**os.environ, "HF_ENDPOINT": hub.url, "MODELS_DIR": str(tmp_path / "m")}
    env.pop("HF_HUB_OFFLINE", None)
    argv = [sys.executable, "-m", "recipekit", "fetch", str(path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith(f"fetch {name}: "):
            break
    pat = rf"fetch {name}: [\d.]+ [KM]iB/3.0 MiB \(\d+%\), [\d.]+ KiB/s, \d+ s elapsed"
    assert seen and re.match(pat, seen[-1]), seen
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    err = "".join(seen) + rest
    assert proc.returncode == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last == (
        f"interrupted: downloading {name}; verified files are kept, the partial download stays in "
        ".recipekit-partial/; `recipe fetch` again resumes it"
    ), err[-2000:]
    again = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert again.returncode == 0, again.stderr[-2000:]
    rng = hub.gets(name)[-1]
    assert rng is not None and int(re.match(r"bytes=(\d+)-", rng).group(1)) > 0  # resumed, not restarted
    _assert_tree(tmp_path / "m")
