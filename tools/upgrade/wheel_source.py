"""One vLLM release's Python sources, from its published wheel, cached per version with the wheel's sha256.

pip finds the wheel (`pip install --dry-run --no-deps --ignore-installed --report`): its report's
`download_info` gives the URL and sha256 from whatever index pip is configured with, so this module
names no index host. `RemoteFile` then reads only the zip's central directory and the members wanted
(the catalog's sources and the files the patches and consumer rules touch). The cache folder holds
`<package>-<version>-<sha256[:16]>.json` (the members' texts) and a pointer `<package>-<version>.json`;
a cached read does no network except pip's resolution (skipped when the pointer exists).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from recipekit.atomic import atomic_write_text
from recipekit.bounded import read_bytes, read_json
from recipekit.errors import ExitCode, RecipekitError
from recipekit.tools.upgrade.remote_zip import RemoteFile

MEMBER_MAX_BYTES = 4 * 1024 * 1024
PIP_TIMEOUT_S = 180
CACHE_KEYS = {"url", "sha256", "names", "files", "skipped", "wheel_bytes", "range_refused"}


@dataclass
class WheelSources:
    package: str
    version: str
    url: str
    sha256: str
    files: dict[str, str]
    names: list[str]  # every member of the wheel
    downloaded_bytes: int
    wheel_bytes: int
    seconds: float
    cached: bool
    range_refused: bool
    resolve_seconds: float = 0.0  # pip's resolution of the wheel's URL (part of `seconds`)


def resolve_wheel(package: str, version: str) -> tuple[str, str]:
    """(URL, sha256) of the wheel pip would install for package==version here."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "-q"]
        cmd += ["--report", str(report), f"{package}=={version}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc = None
        if proc is None or proc.returncode != 0 or not report.exists():
            last = (proc.stderr.strip().splitlines() or ["timed out"])[-1] if proc else "timed out"
            raise RecipekitError(
                code="upgrade-wheel-not-found",
                location=f"{package}=={version}",
                message=f"pip finds no wheel for {package}=={version}: {last}",
                hint="check the version (pip index versions PACKAGE) or pip's index configuration",
                exit_code=ExitCode.NOT_FOUND,
            )
        data = read_json(report, "pip report", 16 * 1024 * 1024)
    info = data["install"][0]["download_info"]
    sha = info.get("archive_info", {}).get("hashes", {}).get("sha256", "")
    if not info.get("url", "").endswith(".whl") or not sha:
        raise RecipekitError(
            code="upgrade-wheel-not-found",
            location=f"{package}=={version}",
            message=f"pip's pick for {package}=={version} is not a wheel with a sha256: {info.get('url')}",
            exit_code=ExitCode.NOT_FOUND,
        )
    return info["url"], sha


def _fetch(url: str, want: Callable[[str], bool]) -> tuple[dict[str, str], list[str], RemoteFile]:
    """The UTF-8 members of the wheel at `url` that `want` selects, and every member name."""
    remote = RemoteFile(url)
    files: dict[str, str] = {}
    with zipfile.ZipFile(remote) as z:
        all_names = z.namelist()
        infos = [z.getinfo(n) for n in all_names if want(n)]
        # a member is its local header (30 bytes + name + extra: wheels carry ~none; a longer one is read on demand) and its data
        remote.prefetch(
            [
                (i.header_offset, i.header_offset + 30 + len(i.orig_filename.encode()) + 1024 + i.compress_size)
                for i in infos
                if i.file_size <= MEMBER_MAX_BYTES
            ]
        )
        for info in infos:
            name = info.filename
            if info.file_size <= MEMBER_MAX_BYTES:
                try:
                    files[name] = z.read(info).decode("utf-8")
                except UnicodeDecodeError:
                    continue  # not a source file: nothing here reads it
    return files, all_names, remote


def read_wheel(
    package: str, version: str, want: Callable[[str], bool], cache_dir: Path, *, refresh: bool = False
) -> WheelSources:
    """The members of the wheel of package==version that `want` selects, as (strict UTF-8) text.

    The cache keeps every member read so far with the wheel's member list; a later call that wants
    members not yet cached reads just those (one more directory read) and adds them."""
    start = time.monotonic()
    pointer = cache_dir / f"{package}-{version}.json"
    record: Optional[dict[str, Any]] = None
    if pointer.exists() and not refresh:
        ptr = read_json(pointer, "upgrade cache pointer", 1024 * 1024)
        body = cache_dir / ptr["file"]
        if body.exists():
            record = read_json(body, "cached wheel sources", 512 * 1024 * 1024)
            if not isinstance(record, dict) or not CACHE_KEYS <= set(record):
                record = None  # written by an older layout: read the wheel again
    downloaded = 0
    resolve_s = 0.0
    if record is not None:
        missing = [n for n in record["names"] if want(n) and n not in record["files"] and n not in record["skipped"]]
        if not missing:
            files = {n: t for n, t in record["files"].items() if want(n)}
            return WheelSources(
                package, version, record["url"], record["sha256"], files, record["names"], 0,
                record["wheel_bytes"], time.monotonic() - start, True, record["range_refused"],
            )  # fmt: skip
        got, _, remote = _fetch(record["url"], set(missing).__contains__)
        record["files"].update(got)
        record["skipped"] = sorted(set(record["skipped"]) | (set(missing) - set(got)))
        downloaded = remote.downloaded
    else:
        t0 = time.monotonic()
        url, sha = resolve_wheel(package, version)
        resolve_s = time.monotonic() - t0
        got, names, remote = _fetch(url, want)
        downloaded = remote.downloaded
        record = {
            "url": url, "sha256": sha, "names": names, "files": got,
            "skipped": sorted({n for n in names if want(n)} - set(got)),
            "wheel_bytes": remote.size, "range_refused": remote.range_refused,
        }  # fmt: skip
    body_name = f"{package}-{version}-{record['sha256'][:16]}.json"
    cache_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(cache_dir / body_name, json.dumps(record))
    atomic_write_text(pointer, json.dumps({"file": body_name, "sha256": record["sha256"]}))
    files = {n: t for n, t in record["files"].items() if want(n)}
    return WheelSources(
        package, version, record["url"], record["sha256"], files, record["names"], downloaded,
        record["wheel_bytes"], time.monotonic() - start, False, record["range_refused"], resolve_s,
    )  # fmt: skip


def read_tree(root: Path, package: str, version: str, want: Callable[[str], bool]) -> WheelSources:
    """The same selection from a folder holding the package's sources (a checkout, or site-packages):
    an engine built from a commit rather than a published wheel. `sha256` identifies the content read
    (the sha256 of each member's path and bytes, in order), as the wheel's does its file."""
    start = time.monotonic()
    top = root / "vllm"
    if not top.is_dir():
        raise RecipekitError(
            code="upgrade-tree-invalid",
            location=str(root),
            message=f"{root} holds no vllm/ package folder",
            hint="pass the checkout's root or the site-packages folder that holds vllm/",
            exit_code=ExitCode.NOT_FOUND,
        )
    names = sorted(p.relative_to(root).as_posix() for p in top.rglob("*.py") if p.is_file())
    files: dict[str, str] = {}
    digest = hashlib.sha256()
    for name in names:
        if not want(name):
            continue
        data = read_bytes(root / name, "engine source file", MEMBER_MAX_BYTES, code="upgrade-tree-invalid")
        try:
            files[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return WheelSources(
        package, version, root.resolve().as_uri(), digest.hexdigest(), files, names, 0, 0,
        time.monotonic() - start, False, False,
    )  # fmt: skip
