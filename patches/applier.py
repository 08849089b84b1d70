"""The patch applier: apply, check and revert a pack on a target, all or nothing.

apply  = recover an interrupted run → verify pins → classify every selected patch from the
         target's sha256 (applied / missing / drifted) → apply the missing ones with `git apply`
         (no fuzz) to scratch copies → verify every post-image → journal (backups, fsync) →
         write the files (temp, fsync, rename) → re-hash → stamp → drop the journal.
check  = the same classification, read-only, for every patch in the pack.
revert = restore every touched file byte for byte from the backups kept at apply time (or by
         reverse-applying the bodies when the patches were applied outside the applier).

A target is a site-packages folder (or the package folder inside it) or a git checkout; the
paths in a pack are relative to that root.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterable, Optional, Sequence

from recipekit import atomic
from recipekit.errors import ErrorList, ExitCode, RecipekitError, did_you_mean
from recipekit.patches.fsio import read_file, remove_file, sha256_bytes, sha256_file
from recipekit.patches.gitapply import apply_in_scratch, touched_paths
from recipekit.patches.journal import StateDir, default_state_dir, restore_link
from recipekit.patches.manifest import FileImage, LoadedPack, Pack, PatchEntry, load_pack
from recipekit.patches.pins import Pin, PinCheck, Where, raise_for_mismatch, verify_pins

# Test hook: after this many files are written to the target, mark `<state>/paused` and sleep,
# so a test can SIGKILL the apply mid-way and check recovery.
PAUSE_ENV = "RECIPEKIT_TEST_PAUSE_AFTER_WRITES"


# ------------------------------------------------------------------ report


@dataclass
class PatchStatus:
    id: str
    required: bool
    selected: bool
    status: str  # applied | missing | drifted | unavailable
    detail: str = ""
    reason: str = ""
    group: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class PackReport:
    action: str
    pack: str
    target: str
    state_dir: str
    patches: list[PatchStatus] = field(default_factory=list)
    pins: list[PinCheck] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    interrupted: bool = False
    noop: bool = False

    @property
    def exit_code(self) -> ExitCode:
        pins_bad = self.action == "check" and any(c.status == "mismatch" for c in self.pins)
        if self.interrupted or pins_bad or any(p.status == "drifted" for p in self.patches):
            return ExitCode.DRIFT
        if any(p.selected and p.status != "applied" for p in self.patches) and self.action == "check":
            return ExitCode.FAILURE
        return ExitCode.OK

    def to_dict(self) -> dict:
        return {
            "schema_version": 1,
            "action": self.action,
            "pack": self.pack,
            "target": self.target,
            "state_dir": self.state_dir,
            "noop": self.noop,
            "interrupted": self.interrupted,
            "recovered": self.recovered,
            "changed": self.changed,
            "pins": [c.to_dict() for c in self.pins],
            "patches": [p.to_dict() for p in self.patches],
            "exit_code": int(self.exit_code),
        }


# ------------------------------------------------------------------ target and selection


def resolve_root(pack: Pack, target_dir: str | Path) -> Path:
    """The folder the pack's paths are relative to; a package folder maps to its parent."""
    target = Path(target_dir).expanduser().resolve()
    if not target.is_dir():
        raise RecipekitError(
            code="target-not-found",
            message=f"target folder {target} does not exist",
            exit_code=ExitCode.NOT_FOUND,
            hint="pass a site-packages folder or a checkout",
        )
    firsts = {PurePosixPath(f.path).parts[0] for p in pack.patches for f in p.files}
    if firsts and not any((target / x).exists() for x in firsts) and target.name in firsts:
        return target.parent
    return target


def select(pack: Pack, with_opt_in: Iterable[str] = ()) -> list[PatchEntry]:
    wanted = list(with_opt_in)
    if "all" in wanted:
        wanted = [p.id for p in pack.patches if p.opt_in]
    ids = {p.id for p in pack.patches}
    bad = [w for w in wanted if w not in ids]
    if bad:
        raise RecipekitError(
            code="unknown-patch",
            message=f"--with {bad[0]}: no such patch in {pack.engine}/{pack.profile}",
            hint=did_you_mean(bad[0], ids)
            or "opt-in patches: " + (", ".join(p.id for p in pack.patches if p.opt_in) or "none"),
        )
    return [p for p in pack.patches if p.required or p.id in wanted]


def _chains(pack: Pack) -> dict[str, list[tuple[PatchEntry, FileImage]]]:
    chains: dict[str, list] = {}
    for p in pack.patches:
        for f in p.files:
            chains.setdefault(f.path, []).append((p, f))
    return chains


def classify(pack: Pack, p: PatchEntry, current: dict[str, Optional[str]]) -> tuple[str, str]:
    """(status, detail) of one verifiable patch given the current sha256 of each file.

    Files touched by several patches form a chain (original → post of 1st → post of 2nd ...);
    the position of the current hash in the chain says which of them are applied.
    """
    chains = _chains(pack)
    states, drift = [], []
    for f in p.files:
        chain = chains[f.path]
        i = next(k for k, (q, _) in enumerate(chain) if q.id == p.id)
        shas = [chain[0][1].pre_sha256] + [x[1].post_sha256 for x in chain]
        cur = current[f.path]
        positions = [k for k, s in enumerate(shas) if s == cur]
        if not positions:
            drift.append(
                f"{f.path}: expected sha256 {_s(f.pre_sha256)} (unpatched) or {_s(f.post_sha256)} "
                f"(patched), actual {_s(cur)}"
            )
            continue
        pos = positions[-1]
        states.append("applied" if pos > i else "missing")
    if drift:
        return "drifted", "; ".join(drift)
    if all(s == "applied" for s in states):
        return "applied", ""
    if all(s == "missing" for s in states):
        return "missing", ""
    return "drifted", "partially applied: " + ", ".join(f"{f.path}={s}" for f, s in zip(p.files, states))


def _s(sha: Optional[str]) -> str:
    return sha if sha is not None else "(absent)"


# ------------------------------------------------------------------ bodies


def read_body(lp: LoadedPack, p: PatchEntry, source_dirs: Sequence[Path] = ()) -> tuple[Optional[bytes], str]:
    """The patch body and '' or (None, why it is unavailable). Bodies are checked against their sha256."""
    if p.kind == "unknown":
        return None, "what this step does is not published"
    if p.kind != "diff":
        return None, f"a {p.kind} step (runs in the image build, not by this applier)"
    data: Optional[bytes]
    if p.file:
        data = read_file(lp.folder / p.file, "patch body")
        if p.sha256 and sha256_bytes(data) != p.sha256:
            raise RecipekitError(
                code="patch-body-mismatch",
                exit_code=ExitCode.DRIFT,
                location=str(lp.folder / p.file),
                message=f"{p.id}: body sha256 {sha256_bytes(data)} != manifest {p.sha256}",
                hint="the pack was edited; regenerate its manifest",
            )
        return data, ""
    src = p.source
    if src is None:
        return None, "no body"
    if not src.path:
        return None, f"source path in {src.repo} unknown"
    if not source_dirs:
        at = src.commit[:12] if src.commit else src.commit_prefix
        return None, f"body lives in {src.repo}" + (
            f"@{at}" if at else ""
        ) + f":{src.path}; pass --source <checkout of {src.repo}>"
    tried = []
    for d in source_dirs:
        d = Path(d)
        data = None
        if src.commit and (d / ".git").exists():
            r = subprocess.run(
                ["git", "-C", str(d), "show", f"{src.commit}:{src.path}"], capture_output=True, timeout=60
            )
            if r.returncode == 0:
                data = r.stdout
        if data is None and (d / src.path).is_file():
            data = read_file(d / src.path, "patch body")
        if data is None:
            tried.append(f"{d}: no {src.path}" + (f" at {src.commit[:12]}" if src.commit else ""))
            continue
        if src.sha256 is None:
            return None, f"{d / src.path} found but the manifest has no sha256 to verify it"
        if sha256_bytes(data) != src.sha256:
            tried.append(f"{d / src.path}: sha256 {sha256_bytes(data)[:16]}… != manifest {src.sha256[:16]}…")
            continue
        return data, ""
    return None, "; ".join(tried)


# ------------------------------------------------------------------ the three operations


class _Ctx:
    def __init__(self, pack_dir, target_dir, profile, state_dir):
        self.lp = load_pack(pack_dir, profile)
        self.pack = self.lp.pack
        self.root = resolve_root(self.pack, target_dir)
        sd = Path(state_dir) if state_dir else default_state_dir(self.root, self.pack.engine, self.pack.profile)
        self.state = StateDir(sd, self.root)

    def report(self, action: str) -> PackReport:
        return PackReport(action=action, pack=self.lp.key, target=str(self.root), state_dir=str(self.state.path))

    def pin_checks(self) -> list[PinCheck]:
        if not self.pack.pins:
            return []
        checkouts = {}
        if (self.root / ".git").exists():
            for pin in self.pack.pins:
                if pin.commit and not pin.dist and not pin.module:
                    checkouts[pin.name] = self.root
        return verify_pins(
            [Pin.from_any(p) for p in self.pack.pins], Where(site_packages=[self.root], checkouts=checkouts)
        )

    def current(self, paths: Iterable[str]) -> dict[str, Optional[str]]:
        return {rel: sha256_file(self.state.target(rel)) for rel in paths}

    def all_paths(self, patches: Iterable[PatchEntry]) -> list[str]:
        seen: dict[str, None] = {}
        for p in patches:
            for f in p.files:
                seen.setdefault(f.path)
        return list(seen)


def _check_body_paths(p: PatchEntry, body: bytes) -> None:
    listed = {f.path for f in p.files}
    touched = set(touched_paths(body))
    if touched != listed:
        raise RecipekitError(
            code="pack-invalid",
            message=f"{p.id}: the body touches {sorted(touched)} but the manifest lists {sorted(listed)}",
            hint="regenerate the manifest entry",
        )


def apply_pack(
    pack_dir,
    target_dir,
    profile: str | None = None,
    with_opt_in: Iterable[str] = (),
    *,
    source_dirs: Sequence[Path] = (),
    state_dir: Path | None = None,
    check_pins: bool = True,
    dry_run: bool = False,
) -> PackReport:
    ctx = _Ctx(pack_dir, target_dir, profile, state_dir)
    rep = ctx.report("apply")
    selected = select(ctx.pack, with_opt_in)
    with ctx.state.locked():
        rep.recovered = ctx.state.recover()
        rep.pins = ctx.pin_checks()
        if check_pins:
            raise_for_mismatch(rep.pins)
        selected_ids = {p.id for p in selected}
        unverifiable = [p for p in selected if not p.verifiable]
        if unverifiable:
            errs = []
            for p in unverifiable:
                _, why = read_body(ctx.lp, p, source_dirs)
                errs.append(
                    RecipekitError(
                        code="patch-unavailable",
                        exit_code=ExitCode.NOT_FOUND,
                        message=f"{p.id}: cannot be applied or verified: "
                        + (f"unknown {', '.join(p.unknown)}" if p.unknown else "no file hashes")
                        + (f"; {why}" if why else ""),
                        hint="fill in its source commit, path, sha256 and file hashes in the manifest",
                    )
                )
            raise ErrorList(errs) if len(errs) > 1 else errs[0]

        paths = ctx.all_paths(selected)
        shas = ctx.current(paths)
        content: dict[str, Optional[bytes]] = {}
        todo: list[PatchEntry] = []
        for p in selected:
            status, detail = classify(ctx.pack, p, shas)
            rep.patches.append(PatchStatus(p.id, p.required, True, status, detail, p.reason))
            if status == "drifted":
                f0 = detail.split(":", 1)[0]
                raise RecipekitError(
                    code="patch-base-drift",
                    exit_code=ExitCode.DRIFT,
                    location=str(ctx.root / f0) if "partially" not in detail else str(ctx.root),
                    message=f"{p.id}: {detail}",
                    hint="the installed files are not the ones this pack was made for; nothing was changed",
                )
            if status == "applied":
                continue
            # its files must now be at exactly this patch's pre-image (an earlier patch in a chain
            # may be an unselected opt-in)
            for f in p.files:
                if shas[f.path] != f.pre_sha256:
                    chain = [q.id for q, _ in _chains(ctx.pack)[f.path] if q.id != p.id]
                    raise RecipekitError(
                        code="patch-needs-earlier",
                        exit_code=ExitCode.INVALID_INPUT,
                        message=f"{p.id} needs an earlier patch on {f.path} applied first",
                        hint=f"also select one of: {', '.join(chain)}",
                    )
            body, why = read_body(ctx.lp, p, source_dirs)
            if body is None:
                raise RecipekitError(
                    code="patch-unavailable",
                    exit_code=ExitCode.NOT_FOUND,
                    message=f"{p.id}: {why}",
                    hint="nothing was changed",
                )
            _check_body_paths(p, body)
            before = {}
            for f in p.files:
                if f.path not in content:
                    try:
                        content[f.path] = read_file(ctx.state.target(f.path), "target file")
                    except FileNotFoundError:
                        content[f.path] = None
                before[f.path] = content[f.path]
            after = apply_in_scratch(body, before, patch_id=p.id)
            for f in p.files:
                got = sha256_bytes(a) if (a := after[f.path]) is not None else None
                if got != f.post_sha256:
                    raise RecipekitError(
                        code="patch-post-image-mismatch",
                        exit_code=ExitCode.DRIFT,
                        location=str(ctx.state.target(f.path)),
                        message=f"{p.id}: {f.path} after applying: expected sha256 "
                        f"{_s(f.post_sha256)}, actual {_s(got)}",
                        hint="the body and the manifest disagree; nothing was changed",
                    )
                shas[f.path] = got
            content.update(after)
            todo.append(p)
            rep.patches[-1].status = "applied" if not dry_run else "missing"

        stamp = ctx.state.read_stamp()
        wanted_applied = [p.id for p in ctx.pack.patches if p.id in selected_ids]
        prev_applied = set(stamp.get("applied", [])) if stamp else set()
        if not todo and stamp and prev_applied >= set(wanted_applied):
            rep.noop = True
            return rep
        if dry_run:
            rep.changed = ctx.all_paths(todo)
            return rep

        writes = {rel: content[rel] for rel in ctx.all_paths(todo)}
        # originals: the bytes before the first patch ever touched each file (kept for revert)
        files = dict(stamp.get("files", {})) if stamp else {}
        journal = ctx.state.begin(writes)
        try:
            for rel, sha in journal["files"].items():
                files.setdefault(
                    rel, {"original": sha, **({"link": journal["links"][rel]} if rel in journal["links"] else {})}
                )
            for rel in ctx.all_paths(p for p in selected if p not in todo):
                files.setdefault(rel, {"original": _original_sha(ctx.pack, rel)})
            _write_target(ctx, writes, rep)
            bad = {rel: sha256_file(ctx.state.target(rel)) for rel in writes}
            for rel, data in writes.items():
                want = sha256_bytes(data) if data is not None else None
                if bad[rel] != want:
                    raise RecipekitError(
                        code="patch-write-verify-failed",
                        exit_code=ExitCode.FAILURE,
                        location=str(ctx.state.target(rel)),
                        message=f"{rel} reads back as {_s(bad[rel])}, wrote {_s(want)}",
                        hint="the target changed under us; it was restored",
                    )
            for rel in files:
                files[rel]["current"] = sha256_file(ctx.state.target(rel))
            applied = [p.id for p in ctx.pack.patches if p.id in selected_ids or p.id in prev_applied]
            ctx.state.write_stamp(
                {
                    "schema_version": 1,
                    "engine": ctx.pack.engine,
                    "profile": ctx.pack.profile,
                    "manifest_sha256": sha256_file(ctx.lp.manifest_path),
                    "applied": applied,
                    "files": files,
                    "applied_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            )
            ctx.state.commit()
        except BaseException:
            ctx.state.recover()
            raise
        return rep


def _original_sha(pack: Pack, rel: str) -> Optional[str]:
    return _chains(pack)[rel][0][1].pre_sha256


def _write_target(ctx: _Ctx, writes: dict[str, Optional[bytes]], rep: PackReport) -> None:
    pause_after = int(os.environ.get(PAUSE_ENV, "0") or 0)
    for n, (rel, data) in enumerate(writes.items(), start=1):
        target = ctx.state.target(rel)
        if data is None:
            remove_file(target)
        else:
            atomic.atomic_write_bytes(target, data, keep_mode=True, sync_dir="skip-unopenable")
        rep.changed.append(rel)
        if pause_after and n == pause_after:
            (ctx.state.path / "paused").write_text(str(os.getpid()))
            time.sleep(600)


def check_pack(
    pack_dir,
    target_dir,
    profile: str | None = None,
    with_opt_in: Iterable[str] = (),
    *,
    source_dirs: Sequence[Path] = (),
    state_dir: Path | None = None,
) -> PackReport:
    """Read-only: every patch's status on the target; exit code 4 on drift, 1 if a selected one is not applied."""
    ctx = _Ctx(pack_dir, target_dir, profile, state_dir)
    rep = ctx.report("check")
    selected_ids = {p.id for p in select(ctx.pack, with_opt_in)}
    rep.interrupted = ctx.state.has_journal()
    rep.pins = ctx.pin_checks()
    verifiable = [p for p in ctx.pack.patches if p.verifiable]
    shas = ctx.current(ctx.all_paths(verifiable))
    for p in ctx.pack.patches:
        sel = p.id in selected_ids
        if not p.verifiable:
            if p.unknown:
                detail = f"not published: {', '.join(p.unknown)}"
            else:
                _, why = read_body(ctx.lp, p, source_dirs)
                detail = "; ".join(x for x in ("no file hashes in the manifest", why) if x)
            rep.patches.append(PatchStatus(p.id, p.required, sel, "unavailable", detail, p.reason, p.group))
            continue
        status, detail = classify(ctx.pack, p, shas)
        if status == "missing":
            body, why = read_body(ctx.lp, p, source_dirs)
            if body is None:
                status, detail = "unavailable", why
        rep.patches.append(PatchStatus(p.id, p.required, sel, status, detail, p.reason, p.group))
    if rep.interrupted:
        for ps in rep.patches:
            ps.detail = (ps.detail + "; " if ps.detail else "") + "an apply was interrupted (journal present)"
    return rep


def revert_pack(
    pack_dir,
    target_dir,
    profile: str | None = None,
    *,
    source_dirs: Sequence[Path] = (),
    state_dir: Path | None = None,
    force: bool = False,
) -> PackReport:
    """Restore every file the pack touched to its original bytes, verified by sha256."""
    ctx = _Ctx(pack_dir, target_dir, profile, state_dir)
    rep = ctx.report("revert")
    with ctx.state.locked():
        rep.recovered = ctx.state.recover()
        stamp = ctx.state.read_stamp()
        verifiable = [p for p in ctx.pack.patches if p.verifiable]
        paths = ctx.all_paths(verifiable)
        shas = ctx.current(paths)
        writes: dict[str, Optional[bytes]] = {}
        links: dict[str, str] = {}
        if stamp:
            for rel, rec in stamp.get("files", {}).items():
                target = ctx.state.target(rel, "stamped file")
                cur = sha256_file(target)
                if cur != rec.get("current") and not force:
                    raise RecipekitError(
                        code="patch-base-drift",
                        exit_code=ExitCode.DRIFT,
                        location=str(target),
                        message=f"{rel} changed since the apply: expected sha256 "
                        f"{_s(rec.get('current'))}, actual {_s(cur)}",
                        hint="nothing was reverted; --force restores the original anyway",
                    )
                orig = rec.get("original")
                if "link" in rec:  # the file was a symlink inside the target: put the link back
                    ctx.state.check_link(target, rec["link"])
                    links[rel] = rec["link"]
                    continue
                if cur == orig:
                    continue
                if orig is None:
                    writes[rel] = None
                    continue
                data = ctx.state.read_blob(orig)
                if data is None:
                    data = _reverse_to_original(ctx, rel, orig, source_dirs)
                writes[rel] = data
        else:
            applied = [p for p in verifiable if classify(ctx.pack, p, shas)[0] == "applied"]
            for p in reversed(applied):  # applied outside the applier: reverse the bodies
                body, why = read_body(ctx.lp, p, source_dirs)
                if body is None:
                    raise RecipekitError(
                        code="patch-unavailable",
                        exit_code=ExitCode.NOT_FOUND,
                        message=f"{p.id}: cannot reverse without its body: {why}",
                    )
                now = {f.path: writes[f.path] if f.path in writes else _read(ctx.state.target(f.path)) for f in p.files}
                writes.update(apply_in_scratch(body, now, reverse=True, patch_id=p.id))
            for p in applied:
                for f in p.files:
                    if f.path in writes:
                        orig = _original_sha(ctx.pack, f.path)
                        got = sha256_bytes(w) if (w := writes[f.path]) is not None else None
                        if got != orig:
                            raise RecipekitError(
                                code="patch-post-image-mismatch",
                                exit_code=ExitCode.DRIFT,
                                message=f"{f.path}: reverse gives {_s(got)}, original is {_s(orig)}",
                            )
        if not writes and not links and not stamp:
            rep.noop = True
            return rep
        ctx.state.begin([*writes, *links])
        try:
            _write_target(ctx, writes, rep)
            for rel, text in links.items():
                restore_link(ctx.state.target(rel), text)
                rep.changed.append(rel)
            ctx.state.write_stamp(None)
            ctx.state.commit()
        except BaseException:
            ctx.state.recover()
            raise
        for p in ctx.pack.patches:
            if p.verifiable:
                st, detail = classify(ctx.pack, p, ctx.current([f.path for f in p.files]))
                rep.patches.append(PatchStatus(p.id, p.required, False, st, detail, p.reason))
        return rep


def _read(path: Path) -> Optional[bytes]:
    try:
        return read_file(path)
    except FileNotFoundError:
        return None


def _reverse_to_original(ctx: _Ctx, rel: str, orig: str, source_dirs) -> bytes:
    """No backup (the file was patched before the applier saw it): reverse the bodies on its chain."""
    chain = [q for q, _ in _chains(ctx.pack)[rel]]
    data = _read(ctx.state.target(rel))
    for q in reversed(chain):
        if sha256_bytes(data) == orig if data is not None else orig is None:
            break
        body, why = read_body(ctx.lp, q, source_dirs)
        if body is None:
            raise RecipekitError(
                code="patch-backup-missing",
                exit_code=ExitCode.FAILURE,
                location=str(ctx.state.blob(orig)),
                message=f"no backup of the original {rel} and {q.id} cannot be reversed: {why}",
                hint="reinstall the package or `git checkout` the file",
            )
        inputs = {f.path: (data if f.path == rel else _read(ctx.state.target(f.path))) for f in q.files}
        data = apply_in_scratch(body, inputs, reverse=True, patch_id=q.id)[rel]
    if data is None or sha256_bytes(data) != orig:  # orig is a sha256, never None
        raise RecipekitError(
            code="patch-backup-missing",
            exit_code=ExitCode.FAILURE,
            message=f"could not rebuild the original {rel} ({orig})",
            hint="reinstall the package or `git checkout` the file",
        )
    return data
