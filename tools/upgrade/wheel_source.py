"""One vLLM release's Python sources, from its published wheel, cached per version with the wheel's sha256.

pip finds the wheel (`pip install --dry-run --no-deps --ignore-installed --report`): its report's
`download_info` gives the URL and sha256 from whatever index pip is configured with, so this module
names no index host. `RemoteFile` then reads only the zip's central directory and the members wanted
(the catalog's sources and the files the patches and consumer rules touch). The cache folder holds
`<package>-<version>-<sha256[:16]>.json` (the members' texts) and a pointer `<package>-<version>.json`;
a cached read does no network except pip's resolution (skipped when the pointer exists).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from recipekit.atomic import atomic_write_text
from recipekit.bounded import read_json
from recipekit.errors import ExitCode, RecipekitError
from recipekit.tools.upgrade.remote_zip import RemoteFile

MEMBER_MAX_BYTES = 4 * 1024 * 1024
PIP_TIMEOUT_S = 180


@dataclass
class WheelSources:
    package: str
    version: str
    url: str
    sha256: str
    files: dict[str, str]
    downloaded_bytes: int
    wheel_bytes: int
    seconds: float
    cached: bool
    range_refused: bool


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


def read_wheel(
    package: str, version: str, want: Callable[[str], bool], cache_dir: Path, *, refresh: bool = False
) -> WheelSources:
    """The members of the wheel of package==version that `want` selects, as text."""
    start = time.monotonic()
    pointer = cache_dir / f"{package}-{version}.json"
    if pointer.exists() and not refresh:
        ptr = read_json(pointer, "upgrade cache pointer", 1024 * 1024)
        body = cache_dir / ptr["file"]
        if body.exists():
            cached = read_json(body, "cached wheel sources", 256 * 1024 * 1024)
            return WheelSources(
                package, version, cached["url"], cached["sha256"], cached["files"], 0,
                cached["wheel_bytes"], time.monotonic() - start, True, cached["range_refused"],
            )  # fmt: skip
    url, sha = resolve_wheel(package, version)
    remote = RemoteFile(url)
    files: dict[str, str] = {}
    with zipfile.ZipFile(remote) as z:
        for info in z.infolist():
            if want(info.filename) and info.file_size <= MEMBER_MAX_BYTES:
                files[info.filename] = z.read(info).decode("utf-8", errors="replace")
    body_name = f"{package}-{version}-{sha[:16]}.json"
    record = {"url": url, "sha256": sha, "files": files, "wheel_bytes": remote.size, "range_refused": remote.range_refused}
    cache_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(cache_dir / body_name, json.dumps(record))
    atomic_write_text(pointer, json.dumps({"file": body_name, "sha256": sha}))
    return WheelSources(
        package, version, url, sha, files, remote.downloaded, remote.size,
        time.monotonic() - start, False, remote.range_refused,
    )  # fmt: skip
