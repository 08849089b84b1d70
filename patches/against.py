"""A pack's patches judged against another release's files (an engine upgrade), never fuzzily.

Per patch, from the new files' bytes:
- `applies`: every file is byte-for-byte the pre-image the pack pins (sha256): the patch applies as is;
- `upstream`: every file already equals the post-image, or every hunk's new side is already there
  and no old side is (the change is upstream: the patch is no longer needed);
- `drift`: a file differs from the pinned pre-image; each hunk is listed as `moved` (its old side,
  context included, is found whole at another line) or `changed` (not found: the target text changed).
  When every hunk moved, the whole patch is applied with `git apply` (no fuzz) to copies of the new
  files and the new pre/post sha256 are proposed; otherwise a human re-authors the changed hunks;
- `broken`: a file the patch edits is absent from the new release, or the body is not a diff.
A hunk is located by exact line match of its old side (context + removed lines), git apply's rule
without fuzz; it must occur exactly once.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from typing import Optional

from recipekit import bounded
from recipekit.errors import RecipekitError
from recipekit.patches.gitapply import apply_in_scratch
from recipekit.patches.manifest import LoadedPack, PatchEntry

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


@dataclass
class Hunk:
    path: str
    old_start: int
    old: list[str]
    new: list[str]


@dataclass
class HunkVerdict:
    path: str
    stated_line: int
    state: str  # exact | moved | upstream | changed
    found_line: Optional[int] = None


@dataclass
class PatchVerdict:
    id: str
    status: str  # applies | upstream | drift | broken
    detail: str
    hunks: list[HunkVerdict] = field(default_factory=list)
    proposed_files: list[dict[str, Optional[str]]] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def parse_hunks(body: bytes) -> list[Hunk]:
    hunks: list[Hunk] = []
    path = ""
    cur: Optional[Hunk] = None
    for raw in body.decode("utf-8").splitlines(keepends=True):
        if raw.startswith("+++ "):
            path = raw[4:].strip().removeprefix("b/")
            cur = None
            continue
        if raw.startswith(("diff --git", "index ", "--- ")):
            cur = None
            continue
        m = _HUNK.match(raw)
        if m:
            cur = Hunk(path, int(m.group(1)), [], [])
            hunks.append(cur)
            continue
        if cur is None or raw.startswith("\\"):
            continue
        tag, text = raw[:1], raw[1:]
        if tag in (" ", "\n"):
            cur.old.append(text if tag == " " else "\n")
            cur.new.append(text if tag == " " else "\n")
        elif tag == "-":
            cur.old.append(text)
        elif tag == "+":
            cur.new.append(text)
    return hunks


def _find(lines: list[str], block: list[str]) -> list[int]:
    """1-based lines where `block` occurs whole."""
    n = len(block)
    return [i + 1 for i in range(len(lines) - n + 1) if lines[i : i + n] == block] if n else []


def _sha(data: Optional[bytes]) -> Optional[str]:
    return None if data is None else hashlib.sha256(data).hexdigest()


def judge_patch(p: PatchEntry, body: bytes, files: dict[str, Optional[bytes]]) -> PatchVerdict:
    """`files`: path -> the new release's bytes (None = the release has no such file)."""
    current = {f.path: _sha(files.get(f.path)) for f in p.files}
    missing = [f.path for f in p.files if f.pre_sha256 is not None and files.get(f.path) is None]
    if missing:
        return PatchVerdict(p.id, "broken", f"the new release has no {', '.join(missing)}")
    if all(current[f.path] == f.pre_sha256 for f in p.files):
        return PatchVerdict(p.id, "applies", "every file is the pinned pre-image (sha256): applies byte-for-byte")
    if all(current[f.path] == f.post_sha256 for f in p.files):
        return PatchVerdict(p.id, "upstream", "every file already equals the patch's post-image: no longer needed")
    try:
        hunks = parse_hunks(body)
    except UnicodeDecodeError:
        return PatchVerdict(p.id, "broken", "the patch body is not UTF-8 text")
    if not hunks:
        return PatchVerdict(p.id, "broken", "the patch body has no hunks")
    verdicts: list[HunkVerdict] = []
    for h in hunks:
        lines = (files.get(h.path) or b"").decode("utf-8", errors="replace").splitlines(keepends=True)
        fwd, back = _find(lines, h.old), _find(lines, h.new)
        if len(fwd) == 1 and not back:
            state = "exact" if fwd[0] == h.old_start else "moved"
            verdicts.append(HunkVerdict(h.path, h.old_start, state, fwd[0]))
        elif back and not fwd:
            verdicts.append(HunkVerdict(h.path, h.old_start, "upstream", back[0]))
        else:
            verdicts.append(HunkVerdict(h.path, h.old_start, "changed"))
    if all(v.state == "upstream" for v in verdicts):
        return PatchVerdict(
            p.id, "upstream", "every hunk's new text is already in the release: no longer needed", verdicts
        )
    changed = [f"{v.path}@{v.stated_line}" for v in verdicts if v.state in ("changed", "upstream")]
    if changed:
        return PatchVerdict(
            p.id, "drift", f"hunks whose target text changed: {', '.join(changed)} (re-author them)", verdicts
        )
    try:
        out = apply_in_scratch(body, {f.path: files.get(f.path) for f in p.files}, patch_id=p.id)
    except RecipekitError as e:
        return PatchVerdict(p.id, "drift", f"hunks located but git apply refused: {e.message}", verdicts)
    proposed = [{"path": f.path, "pre_sha256": current[f.path], "post_sha256": _sha(out.get(f.path))} for f in p.files]
    moved = [f"{v.path}@{v.stated_line}->{v.found_line}" for v in verdicts if v.state == "moved"]
    detail = "the base changed; every hunk applies unfuzzed" + (f" (moved: {', '.join(moved)})" if moved else "")
    return PatchVerdict(p.id, "drift", detail + ": re-pin the pre/post sha256", verdicts, proposed)


def judge_pack(lp: LoadedPack, files: dict[str, Optional[bytes]]) -> list[PatchVerdict]:
    """Every diff patch of the pack with its body in the pack folder; others are said to be unjudged."""
    out = []
    for p in lp.pack.patches:
        if p.kind != "diff" or not p.file:
            out.append(PatchVerdict(p.id, "unjudged", f"a {p.kind} patch without a body in the pack: not judged"))
            continue
        body = bounded.read_bytes(lp.folder / p.file, "patch body", 16 << 20, code="pack-invalid")
        out.append(judge_patch(p, body, files))
    return out


def pack_paths(lp: LoadedPack) -> set[str]:
    return {f.path for p in lp.pack.patches for f in p.files}
