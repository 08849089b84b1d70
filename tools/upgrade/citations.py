"""Consumer-rule citations (`file.py:line`) re-located in another release's sources.

A citation's meaning is the text of the lines it names in the release it was read from. Each cited
line (or range) is taken from the old release's file and looked for, whole and exact, in the new
release's file: found -> its new line (a proposed citation); the file is there but the text is not ->
`changed` (a human re-reads the rule); the file is gone -> `gone`. When the cited text occurs several
times, the k-th occurrence in the old file maps to the k-th in the new one (same count required).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Optional

_CITE = re.compile(r"((?:[\w.]+/)*[\w.]+\.py):(\d+(?:-\d+)?(?:[,/]\d+(?:-\d+)?)*)")


@dataclass
class LineMove:
    old: str  # "214" or "51-67"
    new: Optional[str]
    state: str  # same | moved | changed | ambiguous | blank-in-old (the citation names a blank line)


@dataclass
class Citation:
    rule: str
    cited: str  # the citation as written
    path: Optional[str]  # the wheel member it resolved to
    state: str  # same | moved | changed | gone | unresolved | cited-blank
    lines: list[LineMove] = field(default_factory=list)
    proposed: Optional[str] = None

    def to_json(self) -> dict:
        return asdict(self)


def _resolve(path: str, names: list[str], hint_dir: str) -> Optional[str]:
    cands = [n for n in names if n == path or n.endswith("/" + path)]
    if not cands and "/" in path:  # `deepseek_v41/x.py` naming a file in a sub-folder of deepseek_v41/
        top, base = path.split("/", 1)[0], path.rsplit("/", 1)[-1]
        cands = [n for n in names if n.endswith("/" + base) and f"/{top}/" in n]
    if len(cands) > 1 and hint_dir:
        near = [n for n in cands if n.startswith(hint_dir)]
        cands = near or cands
    return cands[0] if len(cands) == 1 else None


def _span(ref: str) -> tuple[int, int]:
    a, _, b = ref.partition("-")
    return int(a), int(b or a)


def _occurrences(lines: list[str], block: list[str]) -> list[int]:
    n = len(block)
    return [i + 1 for i in range(len(lines) - n + 1) if lines[i : i + n] == block]


def _move(ref: str, old_lines: list[str], new_lines: list[str]) -> LineMove:
    a, b = _span(ref)
    block = old_lines[a - 1 : b]
    if not block or len(block) != b - a + 1 or not "".join(block).strip():
        return LineMove(ref, None, "blank-in-old")
    # the cited lines with the least context that makes them unique in the old file
    for k in range(1, 6):
        ctx = old_lines[max(0, a - 1 - k) : b + k]
        if len(_occurrences(old_lines, ctx)) == 1:
            found = _occurrences(new_lines, ctx)
            if len(found) == 1:
                at = found[0] + (a - 1 - max(0, a - 1 - k))
                new_ref = str(at) if a == b else f"{at}-{at + b - a}"
                return LineMove(ref, new_ref, "same" if at == a else "moved")
            break
    olds, news = _occurrences(old_lines, block), _occurrences(new_lines, block)
    if not news:
        return LineMove(ref, None, "changed")
    if len(olds) != len(news):
        return LineMove(ref, None, "ambiguous")
    at = news[olds.index(a)]
    new_ref = str(at) if a == b else f"{at}-{at + b - a}"
    return LineMove(ref, new_ref, "same" if at == a else "moved")


def relocate(
    rule_id: str,
    source: str,
    old_files: dict[str, str],
    new_files: dict[str, str],
    old_names: list[str],
    new_names: list[str],
) -> list[Citation]:
    """Every `file.py:N` of `source` (one rule's citation string) re-located from old to new."""
    out: list[Citation] = []
    hint_dir = ""
    for m in _CITE.finditer(source):
        path, refs = m.group(1), m.group(2)
        member = _resolve(path, old_names, hint_dir)
        if member is None:
            out.append(Citation(rule_id, m.group(0), None, "unresolved"))
            continue
        hint_dir = member.rsplit("/", 2)[0] + "/" if member.count("/") >= 3 else hint_dir
        if member not in new_names:
            out.append(Citation(rule_id, m.group(0), member, "gone"))
            continue
        if member not in old_files or member not in new_files:
            out.append(Citation(rule_id, m.group(0), member, "unresolved"))
            continue
        old_lines = old_files[member].splitlines()
        new_lines = new_files[member].splitlines()
        seps = re.findall(r"[,/]", refs)
        moves = [_move(r, old_lines, new_lines) for r in re.split(r"[,/]", refs)]
        if any(mv.state == "blank-in-old" for mv in moves):
            state = "cited-blank"  # the citation names a blank line of the old release: it was already off
            proposed = None
        elif any(mv.new is None for mv in moves):
            state = "changed"
            proposed = None
        else:
            state = "same" if all(mv.state == "same" for mv in moves) else "moved"
            joined = "".join(str(mv.new) + (seps[i] if i < len(seps) else "") for i, mv in enumerate(moves))
            proposed = f"{path}:{joined}"
        out.append(Citation(rule_id, m.group(0), member, state, moves, proposed))
    return out


def cited_paths(sources: list[str]) -> list[str]:
    """The paths the citations name, as written (to select wheel members)."""
    return sorted({m.group(1) for s in sources for m in _CITE.finditer(s)})
