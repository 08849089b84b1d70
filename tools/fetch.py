"""Verified, resumable downloads of a recipe's checkpoint sources from the Hugging Face Hub.

For each source with a `repo`: the pinned revision (a 40-hex commit; a published prefix is
resolved against the repo's history once and recorded), the recipe's file selection
(include/exclude globs, explicit files), a total-size and free-disk check before any byte
moves, then each file streamed to `<local_dir>/.recipekit-partial/<path>.part` with HTTP Range
resume, verified by size and sha256 (LFS files; the git blob sha1 for small non-LFS files)
against the hub's listing and file metadata (HEAD: X-Repo-Commit, X-Linked-Etag/-Size), and
only then renamed into place. A corrupt or short file is re-fetched from zero; a broken
transfer resumes where it stopped (also in a later run).

What was verified is recorded in `<local_dir>/.recipekit-fetch.json`: a re-run whose sources
are all recorded complete (same revision, same selection, files unchanged by size and mtime)
makes no network call at all. `dry_run` lists each selection with the sizes the recipe
declares, and the hub's when it answers, without writing anything.

huggingface_hub provides the endpoint, auth headers, listings and file metadata; the byte
transfer is our own because hf_hub_download restarts interrupted files from zero.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from recipekit import atomic, confine
from recipekit.checkpoint.fetch_record import load_manifest, manifest_path, source_dir
from recipekit.errors import ExitCode, RecipekitError

if TYPE_CHECKING:
    from recipekit.config import EffectiveConfig

PARTIAL_DIR = ".recipekit-partial"
CHUNK = 1 << 20
HEX40 = re.compile(r"^[0-9a-f]{40}$")
HEXPREFIX = re.compile(r"^[0-9a-f]{7,39}$")

ProgressFn = Callable[[str, int, int], None]  # (relative path, bytes done, bytes total)


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None  # LFS files
    git_sha1: str | None  # the git blob id (verifies small non-LFS files)


@dataclass
class SourcePlan:
    id: str
    repo: str
    declared_revision: str | None
    include: list[str]
    exclude: list[str]
    files: list[str]  # explicit file names
    declared: dict[str, dict]  # name -> {size_bytes, sha256} as the recipe states
    declared_bytes: int | None  # sum of declared file sizes, else size_gb
    local_dir: str
    revision: str | None = None  # the full commit, once known
    remote: list[RemoteFile] | None = None
    note: str = ""

    def selection(self) -> dict:
        return {"include": sorted(self.include), "exclude": sorted(self.exclude), "files": sorted(self.files)}

    def selection_key(self) -> str:
        return hashlib.sha256(json.dumps(self.selection(), sort_keys=True).encode()).hexdigest()


@dataclass
class FileResult:
    path: str
    size: int
    status: str  # verified-offline | already-verified | downloaded | adopted
    attempts: int = 0
    resumed_from: int = 0  # bytes already on disk when the last attempt started
    refetched: int = 0  # attempts that failed verification and started over


@dataclass
class SourceResult:
    id: str
    repo: str
    revision: str | None
    local_dir: str
    offline: bool
    files: list[FileResult] = field(default_factory=list)
    bytes_total: int = 0
    bytes_downloaded: int = 0


@dataclass
class FetchReport:
    recipe: str
    dry_run: bool
    sources: list[Any]  # SourceResult (fetch) or dicts (dry run)
    network: bool  # was the hub contacted
    free_bytes: int | None = None
    needed_bytes: int | None = None

    def to_dict(self) -> dict:
        return {
            "recipe": self.recipe,
            "dry_run": self.dry_run,
            "network": self.network,
            "free_bytes": self.free_bytes,
            "needed_bytes": self.needed_bytes,
            "sources": [s if isinstance(s, dict) else asdict(s) for s in self.sources],
        }


# --------------------------------------------------------------------------- the recipe side


def _recipe(eff: Any):
    r = getattr(eff, "recipe", eff)
    return getattr(r, "recipe", r)


def plan_sources(eff: EffectiveConfig, only: Iterable[str] = ()) -> list[SourcePlan]:
    """The recipe's downloadable sources (those with a repo), in recipe order."""
    recipe = _recipe(eff)
    only = set(only)
    out = []
    for s in recipe.checkpoint.sources:
        if not s.repo or s.generated_by or (only and s.id not in only):
            continue
        declared = {f.name: {"size_bytes": f.size_bytes, "sha256": f.sha256} for f in s.files.files}
        sizes = [f.size_bytes for f in s.files.files]
        declared_bytes = (
            sum(sizes) if sizes and all(x is not None for x in sizes) else (int(s.size_gb * 1e9) if s.size_gb else None)
        )
        out.append(
            SourcePlan(
                id=s.id,
                repo=s.repo,
                declared_revision=s.revision,
                include=list(s.files.include),
                exclude=list(s.files.exclude),
                files=[f.name for f in s.files.files],
                declared=declared,
                declared_bytes=declared_bytes,
                local_dir=str(source_dir(eff, s)),
                note=s.files.note,
            )
        )
    if only - {s.id for s in out}:
        missing = sorted(only - {s.id for s in out})
        raise RecipekitError(
            code="fetch-unknown-source",
            message=f"no downloadable source {missing} in {recipe.id}",
            hint="sources: " + ", ".join(s.id for s in recipe.checkpoint.sources if s.repo),
        )
    return out


def select(names: Iterable[str], plan: SourcePlan) -> list[str]:
    """Paths a selection keeps: explicit files, plus include globs (all when none), minus exclude.
    Globs match per path segment (`*` never crosses `/`; a `**` segment matches any depth)."""
    explicit = set(plan.files)
    out = []
    for n in names:
        keep = (
            n in explicit
            or (plan.include and any(confine.glob_match(n, g) for g in plan.include))
            or (not plan.include and not explicit)
        )
        if keep and not any(confine.glob_match(n, g) for g in plan.exclude):
            out.append(n)
    return sorted(out)


# --------------------------------------------------------------------------- the manifest


def _entry(manifest: dict, plan: SourcePlan) -> dict:
    e = manifest["sources"].get(plan.id)
    if (
        not e
        or e.get("repo") != plan.repo
        or e.get("declared_revision") != plan.declared_revision
        or e.get("selection_key") != plan.selection_key()
    ):
        e = {
            "repo": plan.repo,
            "declared_revision": plan.declared_revision,
            "revision": None,
            "selection": plan.selection(),
            "selection_key": plan.selection_key(),
            "complete": False,
            "files": {},
        }
        manifest["sources"][plan.id] = e
    return e


def _unchanged(local_dir: Path, rel: str, rec: dict) -> bool:
    try:
        st = (local_dir / rel).stat()
    except OSError:
        return False
    return st.st_size == rec.get("size") and st.st_mtime_ns == rec.get("mtime_ns")


def offline_complete(plan: SourcePlan) -> dict | None:
    """The manifest entry when this source is recorded complete and untouched on disk."""
    e = load_manifest(plan.local_dir)["sources"].get(plan.id)
    if (
        not e
        or not e.get("complete")
        or e.get("repo") != plan.repo
        or e.get("declared_revision") != plan.declared_revision
        or e.get("selection_key") != plan.selection_key()
    ):
        return None
    ld = Path(plan.local_dir)
    if not e["files"] or not all(_unchanged(ld, rel, rec) for rel, rec in e["files"].items()):
        return None
    return e


def verify(eff: EffectiveConfig) -> bool:
    """True when every downloadable source is recorded complete and unchanged on disk (size and
    mtime of each verified file); the apply pipeline's re-run check. No network, no hashing."""
    return all(offline_complete(plan) is not None for plan in plan_sources(eff))


def verified_bytes(eff: EffectiveConfig) -> int:
    """Bytes of the recipe's sources already downloaded and verified (what the disk check may
    subtract). Reads manifests only; no network, no hashing."""
    total = 0
    for plan in plan_sources(eff):
        e = load_manifest(plan.local_dir)["sources"].get(plan.id) or {}
        ld = Path(plan.local_dir)
        total += sum(rec["size"] for rel, rec in e.get("files", {}).items() if _unchanged(ld, rel, rec))
    return total


# --------------------------------------------------------------------------- the hub side


def endpoint() -> str:
    from huggingface_hub import constants  # lazy: pulls huggingface_hub

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _api(token: str | bool | None):
    from huggingface_hub import HfApi  # lazy: pulls huggingface_hub

    return HfApi(endpoint=endpoint(), token=token)


def _hub_error(e: Exception, plan: SourcePlan, what: str) -> RecipekitError:
    from huggingface_hub.utils import RepositoryNotFoundError, RevisionNotFoundError  # lazy: pulls huggingface_hub

    if isinstance(e, RevisionNotFoundError):
        return RecipekitError(
            code="fetch-revision-not-found",
            exit_code=ExitCode.NOT_FOUND,
            message=f"{plan.repo}: revision {plan.revision or plan.declared_revision} not found",
            hint="check the source's revision in the recipe",
        )
    if isinstance(e, RepositoryNotFoundError):
        return RecipekitError(
            code="fetch-repo-not-found",
            exit_code=ExitCode.NOT_FOUND,
            message=f"{plan.repo}: repository not found (or private)",
            hint="check the repo id; for a gated/private repo set HF_TOKEN",
        )
    return RecipekitError(
        code="fetch-network",
        exit_code=ExitCode.FAILURE,
        message=f"{plan.repo}: {what} failed: {type(e).__name__}: {str(e)[:200]}",
        hint=f"check the connection to {endpoint()} (HF_ENDPOINT); verified files are used offline",
    )


def resolve_revision(plan: SourcePlan, api) -> str:
    """The full commit of a source: pinned as is, a published prefix resolved once."""
    rev = (plan.declared_revision or "").strip().lower()
    if HEX40.match(rev):
        return rev
    if not HEXPREFIX.match(rev):
        raise RecipekitError(
            code="fetch-unpinned-revision",
            exit_code=ExitCode.INVALID_INPUT,
            message=f"source {plan.id} ({plan.repo}): revision {plan.declared_revision!r} is not a commit",
            hint="pin the source to a 40-hex commit (a branch or tag can move)",
        )
    try:
        commits = api.list_repo_commits(plan.repo)
    except Exception as e:  # huggingface_hub's HTTP/repo errors and requests' transport errors: _hub_error names each
        raise _hub_error(e, plan, "listing commits") from None
    hits = sorted({c.commit_id for c in commits if c.commit_id.startswith(rev)})
    if len(hits) != 1:
        raise RecipekitError(
            code="fetch-revision-not-found" if not hits else "fetch-revision-ambiguous",
            exit_code=ExitCode.NOT_FOUND if not hits else ExitCode.INVALID_INPUT,
            message=f"{plan.repo}: commit prefix {rev} matches {len(hits)} commit(s)",
            hint="pin the full 40-hex commit in the recipe",
        )
    return hits[0]


def list_remote(plan: SourcePlan, api) -> list[RemoteFile]:
    """The selected files with the hub's sizes and hashes at the pinned commit."""
    try:
        if plan.include or not plan.files:
            entries = [
                e
                for e in api.list_repo_tree(plan.repo, recursive=True, revision=plan.revision)
                if hasattr(e, "blob_id")
            ]
        else:
            entries = [
                e for e in api.get_paths_info(plan.repo, plan.files, revision=plan.revision) if hasattr(e, "blob_id")
            ]
    except RecipekitError:
        raise
    except Exception as e:  # huggingface_hub's HTTP/repo errors and requests' transport errors: _hub_error names each
        raise _hub_error(e, plan, "listing files") from None
    for ent in entries:  # a hub listing is outside data: every name must stay in local_dir
        confine.check_relpath(ent.path, f"{plan.repo}: the hub's file name", code="fetch-unsafe-path")
    by_path = {e.path: e for e in entries}
    missing = [f for f in plan.files if f not in by_path]
    if missing:
        raise RecipekitError(
            code="fetch-file-missing",
            exit_code=ExitCode.NOT_FOUND,
            message=f"{plan.repo}@{(plan.revision or '')[:10]}: {', '.join(missing[:5])} not in the repo",
            hint="fix the source's file list in the recipe",
        )
    keep = select(by_path, plan)
    if not keep:
        raise RecipekitError(
            code="fetch-empty-selection",
            exit_code=ExitCode.INVALID_INPUT,
            message=f"source {plan.id}: the selection matches none of {len(by_path)} files at {(plan.revision or '')[:10]}",
            hint="check include/exclude globs in the recipe",
        )
    out = []
    for p in keep:
        hub = by_path[p]
        lfs = getattr(hub, "lfs", None)
        out.append(RemoteFile(path=p, size=int(hub.size), sha256=(lfs.sha256 if lfs else None), git_sha1=hub.blob_id))
    for rf in out:
        d = plan.declared.get(rf.path)
        if d and (
            (d["size_bytes"] is not None and d["size_bytes"] != rf.size)
            or (d["sha256"] and rf.sha256 and d["sha256"].lower() != rf.sha256.lower())
        ):
            raise RecipekitError(
                code="fetch-metadata-mismatch",
                exit_code=ExitCode.DRIFT,
                message=f"{plan.repo}/{rf.path}: the recipe declares size {d['size_bytes']} sha256 "
                f"{d['sha256']}, the hub has {rf.size} {rf.sha256}",
                hint="the pinned files changed or the recipe is wrong; fix the recipe",
            )
    return out


def check_file_metadata(plan: SourcePlan, rf: RemoteFile, token) -> None:
    """Cross-check one file with the hub's HEAD metadata: commit, etag (sha256 or blob id), size."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url  # lazy: pulls huggingface_hub

    url = hf_hub_url(plan.repo, rf.path, revision=plan.revision, endpoint=endpoint())
    try:
        meta = get_hf_file_metadata(url, token=token)
    except Exception as e:  # huggingface_hub's HTTP/repo errors and requests' transport errors: _hub_error names each
        raise _hub_error(e, plan, f"metadata of {rf.path}") from None
    want_etag = rf.sha256 or rf.git_sha1
    problems = []
    if meta.commit_hash and meta.commit_hash != plan.revision:
        problems.append(f"commit {meta.commit_hash} != {plan.revision}")
    if meta.etag and want_etag and meta.etag.lower() != want_etag.lower():
        problems.append(f"etag {meta.etag} != {want_etag}")
    if meta.size is not None and meta.size != rf.size:
        problems.append(f"size {meta.size} != {rf.size}")
    if problems:
        raise RecipekitError(
            code="fetch-metadata-mismatch",
            exit_code=ExitCode.DRIFT,
            message=f"{plan.repo}/{rf.path}: file metadata disagrees with the listing: {'; '.join(problems)}",
            hint="the hub answered inconsistently; retry later",
        )


# --------------------------------------------------------------------------- bytes


class _Hashes:
    """sha256 of the content and the git blob sha1 ('blob <size>\\0' + content)."""

    def __init__(self, size: int):
        self.sha256 = hashlib.sha256()
        self.sha1 = hashlib.sha1(f"blob {size}\0".encode())
        self.n = 0

    def update(self, b: bytes) -> None:
        self.sha256.update(b)
        self.sha1.update(b)
        self.n += len(b)


def _hash_file(path: Path, size: int, hashes: _Hashes | None = None, progress=None) -> _Hashes:
    h = hashes or _Hashes(size)
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
            if progress:
                progress(h.n)
    return h


def _verified(h: _Hashes, rf: RemoteFile) -> bool:
    if h.n != rf.size:
        return False
    if rf.sha256:
        return h.sha256.hexdigest() == rf.sha256.lower()
    return rf.git_sha1 is not None and h.sha1.hexdigest() == rf.git_sha1.lower()


class TransferError(Exception):
    pass


def _download(
    plan: SourcePlan, rf: RemoteFile, part: Path, token, progress: ProgressFn | None, client
) -> tuple[_Hashes, int]:
    """Stream rf into `part`, resuming from its current size. Returns (hashes, resumed_from).
    A network break raises TransferError with the partial file kept."""
    import httpx  # lazy: pulls httpx
    from huggingface_hub import hf_hub_url  # lazy: pulls huggingface_hub
    from huggingface_hub.utils import build_hf_headers  # lazy: pulls huggingface_hub

    part.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.exists() else 0
    if have > rf.size:
        part.unlink()
        have = 0
    h = _Hashes(rf.size)
    if have:
        _hash_file(part, rf.size, h)
    if have == rf.size:
        return h, have
    url = hf_hub_url(plan.repo, rf.path, revision=plan.revision, endpoint=endpoint())
    headers = build_hf_headers(token=token)
    headers["Accept-Encoding"] = "identity"
    if have:
        headers["Range"] = f"bytes={have}-"
    resumed_from = have
    try:
        with client.stream("GET", url, headers=headers) as r:
            if r.status_code == 416:  # nothing left to send: the partial is all there is
                return h, have
            if r.status_code >= 400:
                raise TransferError(f"HTTP {r.status_code} for {rf.path}")
            if have and r.status_code == 206:
                start = _content_range_start(r.headers.get("Content-Range"))
                if start != have:
                    raise TransferError(f"server resumed at {start}, asked for {have}")
                mode = "ab"
            else:  # 200: the server sent the whole file
                h, have, resumed_from, mode = _Hashes(rf.size), 0, 0, "wb"
            with open(part, mode) as fh:
                shown = h.n
                for chunk in r.iter_bytes():  # as received: a break loses nothing that arrived
                    fh.write(chunk)
                    h.update(chunk)
                    if progress and (h.n - shown >= CHUNK or h.n >= rf.size):
                        shown = h.n
                        progress(rf.path, h.n, rf.size)
                    if h.n > rf.size:
                        break
                fh.flush()
                os.fsync(fh.fileno())
    except (httpx.TransportError, httpx.StreamError) as e:
        raise TransferError(f"{type(e).__name__}: {e}") from None
    return h, resumed_from


def _content_range_start(value: str | None) -> int | None:
    m = re.match(r"bytes (\d+)-", value or "")
    return int(m.group(1)) if m else None


def _fetch_file(
    plan: SourcePlan,
    rf: RemoteFile,
    entry: dict,
    manifest_write: Callable[[], None],
    token,
    progress: ProgressFn | None,
    client,
    max_attempts: int,
) -> FileResult:
    local = Path(plan.local_dir)
    final = confine.confined(local, rf.path, f"{plan.repo}: file", code="fetch-unsafe-path")
    rec = entry["files"].get(rf.path)
    if rec and _matches(rec, rf) and _unchanged(local, rf.path, rec):
        return FileResult(rf.path, rf.size, "already-verified")
    if final.is_file() and final.stat().st_size == rf.size:
        # a file from an earlier tool or a manifest lost: adopt it when it verifies
        h = _hash_file(final, rf.size)
        if _verified(h, rf):
            _record(entry, rf, final, h)
            manifest_write()
            return FileResult(rf.path, rf.size, "adopted")
    part = confine.confined(
        local, f"{PARTIAL_DIR}/{rf.path}.part", f"{plan.repo}: partial file", code="fetch-unsafe-path"
    )
    result = FileResult(rf.path, rf.size, "downloaded")
    last_error = ""
    while result.attempts < max_attempts:
        result.attempts += 1
        try:
            h, result.resumed_from = _download(plan, rf, part, token, progress, client)
        except TransferError as e:
            last_error = str(e)
            continue  # resume from what landed
        if h.n < rf.size:
            last_error = f"short transfer: {h.n} of {rf.size} bytes"
            continue  # the server closed early: resume
        if not _verified(h, rf):
            result.refetched += 1
            last_error = (
                f"verification failed: got {h.n} bytes sha256 {h.sha256.hexdigest()[:16]}..., "
                f"want {rf.size} bytes {(rf.sha256 or rf.git_sha1 or '')[:16]}..."
            )
            part.unlink(missing_ok=True)  # wrong bytes: start over, never resume them
            continue
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, final)
        atomic.fsync_dir(final.parent, "skip-unopenable")
        _record(entry, rf, final, h)
        manifest_write()
        return result
    corrupt = result.refetched and "verification failed" in last_error
    raise RecipekitError(
        code="fetch-verify-failed" if corrupt else "fetch-transfer-failed",
        exit_code=ExitCode.FAILURE,
        message=f"{plan.repo}/{rf.path}: {last_error} (after {result.attempts} attempt(s))",
        hint="re-run `recipe fetch` to " + ("fetch it again" if corrupt else "resume from the partial download"),
        location=str(part) if part.exists() else None,
    )


def _matches(rec: dict, rf: RemoteFile) -> bool:
    """A manifest record is for the same content as the hub's file (LFS: sha256; else blob id)."""
    if rec.get("size") != rf.size:
        return False
    if rf.sha256:
        return rec.get("sha256") == rf.sha256.lower()
    return rec.get("git_sha1") == (rf.git_sha1 or "").lower()


def _record(entry: dict, rf: RemoteFile, final: Path, h: _Hashes) -> None:
    entry["files"][rf.path] = {
        "size": rf.size,
        "sha256": h.sha256.hexdigest(),
        "git_sha1": h.sha1.hexdigest(),
        "lfs": rf.sha256 is not None,
        "mtime_ns": final.stat().st_mtime_ns,
        "verified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def free_bytes_at(path: str | Path) -> int:
    p = Path(path).expanduser().absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def _partial_size(plan: SourcePlan, rf: RemoteFile) -> int:
    part = Path(plan.local_dir) / PARTIAL_DIR / (rf.path + ".part")
    try:
        return min(part.stat().st_size, rf.size)
    except OSError:
        return 0


# --------------------------------------------------------------------------- entry points


def fetch(
    effective: EffectiveConfig,
    dry_run: bool = False,
    *,
    only: Iterable[str] = (),
    token: str | bool | None = None,
    progress: ProgressFn | None = None,
    max_attempts: int = 4,
    free_bytes: Callable[[str], int] = free_bytes_at,
    check_metadata: bool = True,
    timeout_s: float = 60.0,
) -> FetchReport:
    """Download and verify the recipe's checkpoint sources (see the module docstring)."""
    recipe_id = _recipe(effective).id
    plans = plan_sources(effective, only)
    if dry_run:
        hw = getattr(_recipe(effective), "hardware", None)
        disk_gib = getattr(hw, "disk_gib_min", None)
        return _dry_run(recipe_id, plans, token, int(disk_gib * (1 << 30)) if disk_gib else None)
    results: list[SourceResult] = []
    pending = []
    for plan in plans:
        e = offline_complete(plan)
        if e:
            results.append(
                SourceResult(
                    plan.id,
                    plan.repo,
                    e["revision"],
                    plan.local_dir,
                    offline=True,
                    files=[FileResult(p, r["size"], "verified-offline") for p, r in sorted(e["files"].items())],
                    bytes_total=sum(r["size"] for r in e["files"].values()),
                )
            )
        else:
            pending.append(plan)
    if not pending:
        return FetchReport(recipe_id, False, results, network=False)
    if hub_offline():
        raise RecipekitError(
            code="fetch-offline",
            exit_code=ExitCode.FAILURE,
            message=f"HF_HUB_OFFLINE is set and {', '.join(p.id for p in pending)} is not downloaded and verified yet",
            hint="unset HF_HUB_OFFLINE to download",
        )
    api = _api(token)
    for plan in pending:
        plan.revision = resolve_revision(plan, api)
        plan.remote = list_remote(plan, api)
    # the whole need, before anything starts
    needed_by_dir: dict[str, int] = {}
    for plan in pending:
        e = load_manifest(plan.local_dir)["sources"].get(plan.id) or {}
        for rf in plan.remote or []:  # listed above for every pending source
            rec = (e.get("files") or {}).get(rf.path)
            if rec and _matches(rec, rf) and _unchanged(Path(plan.local_dir), rf.path, rec):
                continue
            needed_by_dir[plan.local_dir] = needed_by_dir.get(plan.local_dir, 0) + rf.size - _partial_size(plan, rf)
    needed = sum(needed_by_dir.values())
    free = min((free_bytes(d) for d in needed_by_dir), default=None)
    for d, n in needed_by_dir.items():
        have = free_bytes(d)
        if have < n:
            raise RecipekitError(
                code="fetch-disk-space",
                exit_code=ExitCode.HOST_CHECK_FAILED,
                message=f"{n / 2**30:.2f} GiB to download into {d}, {have / 2**30:.2f} GiB free there",
                hint="free space or point MODELS_DIR (or the source's local_dir) at a larger disk",
            )
    import httpx  # lazy: pulls httpx

    with httpx.Client(follow_redirects=True, timeout=httpx.Timeout(timeout_s, connect=15.0)) as client:
        for plan in pending:
            results.append(_fetch_source(plan, token, progress, client, max_attempts, check_metadata))
    return FetchReport(recipe_id, False, results, network=True, free_bytes=free, needed_bytes=needed)


def _fetch_source(plan: SourcePlan, token, progress, client, max_attempts: int, check_metadata: bool) -> SourceResult:
    local = Path(plan.local_dir)
    local.mkdir(parents=True, exist_ok=True)
    manifest = load_manifest(local)
    entry = _entry(manifest, plan)
    if entry.get("revision") not in (None, plan.revision):
        entry["files"], entry["complete"] = {}, False  # another commit: nothing recorded still holds
    entry["revision"] = plan.revision
    entry["complete"] = False
    selected = {rf.path for rf in plan.remote or []}  # listed by the caller
    entry["files"] = {p: r for p, r in entry["files"].items() if p in selected}

    def write() -> None:
        atomic.atomic_write_text(
            manifest_path(local), json.dumps(manifest, indent=1, sort_keys=True), sync_dir="skip-unopenable"
        )

    write()
    res = SourceResult(plan.id, plan.repo, plan.revision, plan.local_dir, offline=False)
    for rf in plan.remote or []:
        rec = entry["files"].get(rf.path)
        if check_metadata and not (rec and _matches(rec, rf) and _unchanged(local, rf.path, rec)):
            check_file_metadata(plan, rf, token)
        fr = _fetch_file(plan, rf, entry, write, token, progress, client, max_attempts)
        res.files.append(fr)
        res.bytes_total += rf.size
        if fr.status == "downloaded":
            res.bytes_downloaded += rf.size - fr.resumed_from
    entry["complete"] = True
    write()
    partial = local / PARTIAL_DIR
    if partial.is_dir() and not any(partial.rglob("*")):
        shutil.rmtree(partial, ignore_errors=True)
    return res


def _dry_run(recipe_id: str, plans: list[SourcePlan], token, recipe_disk_bytes: int | None = None) -> FetchReport:
    """Each source's selection with the recipe's declared sizes; the hub's when it answers; the
    recipe's disk requirement (hardware.disk_gib_min, what doctor checks) when neither says. Writes nothing."""
    reachable = not hub_offline() and _reachable()
    out = []
    for plan in plans:
        e = load_manifest(plan.local_dir)["sources"].get(plan.id) or {}
        d: dict[str, Any] = {
            "id": plan.id,
            "repo": plan.repo,
            "revision": plan.declared_revision,
            "local_dir": plan.local_dir,
            "selection": plan.selection(),
            "declared_files": plan.declared,
            "declared_bytes": plan.declared_bytes,
            "verified_bytes": sum(
                r["size"] for p, r in (e.get("files") or {}).items() if _unchanged(Path(plan.local_dir), p, r)
            ),
            "complete": offline_complete(plan) is not None,
            "hub": None,
            "recipe_disk_bytes": recipe_disk_bytes,
        }
        if reachable:
            try:
                api = _api(token)
                plan.revision = resolve_revision(plan, api)
                plan.remote = list_remote(plan, api)
                d["hub"] = {
                    "revision": plan.revision,
                    "files": [asdict(r) for r in plan.remote],
                    "bytes": sum(r.size for r in plan.remote),
                }
            except RecipekitError as err:
                d["hub"] = {"error": err.one_line()}
        out.append(d)
    free = min((free_bytes_at(p.local_dir) for p in plans), default=None)
    need = None
    if plans and all(d["hub"] and "bytes" in d["hub"] for d in out):
        need = sum(d["hub"]["bytes"] - d["verified_bytes"] for d in out)
    elif plans and all(d["declared_bytes"] is not None for d in out):
        need = sum(d["declared_bytes"] - d["verified_bytes"] for d in out)
    elif plans and recipe_disk_bytes is not None:
        need = max(0, recipe_disk_bytes - sum(d["verified_bytes"] for d in out))
    return FetchReport(recipe_id, True, out, network=reachable, free_bytes=free, needed_bytes=need)


def _reachable(timeout_s: float = 3.0) -> bool:
    """One quick request to the endpoint: a dry run must not sit through retries offline."""
    import httpx  # lazy: pulls httpx

    try:
        httpx.head(endpoint() + "/api/models", timeout=timeout_s)
        return True
    except httpx.HTTPError:
        return False
