"""Path confinement: a path named by outside data (a hub listing, a journal, a stamp, a side file)
stays inside the folder it belongs to.

One rule for every caller:
- `check_relpath` refuses the forms that name another place: empty, absolute, `..` or `.`
  segments, empty segments, a backslash (a separator on Windows-made listings), NUL and other
  control characters.
- `confined(root, rel)` applies it, then walks every existing component below `root`: a symlink
  whose resolved target leaves `root` is refused (never followed), one that stays inside is allowed
  unless `allow_links=False`.
- `refuse_link_outside(root, path)` is the same walk for a path already built (side files).
- `glob_match` matches a selection glob segment by segment: `*`, `?` and `[...]` never cross `/`;
  a whole `**` segment matches any number of segments.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path, PurePosixPath

from recipekit.errors import ExitCode, RecipekitError


def _bad_form(rel: object) -> str | None:
    """Why `rel` is not a plain relative POSIX path, or None."""
    if not isinstance(rel, str):
        return f"is a {type(rel).__name__}, not a string"
    if not rel:
        return "is empty"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in rel):
        return "contains a control character (NUL, newline, ...)"
    if "\\" in rel:
        return "contains a backslash"
    if rel.startswith("/"):
        return "is absolute"
    for seg in rel.split("/"):
        if seg in ("", ".", ".."):
            return f"has a {seg!r} segment" if seg else "has an empty segment"
    return None


def check_relpath(
    rel: object,
    what: str,
    *,
    code: str = "path-outside",
    exit_code: ExitCode = ExitCode.INVALID_INPUT,
    location: str | None = None,
) -> str:
    """`rel` when it is a plain relative path (see the module docstring), else a RecipekitError."""
    why = _bad_form(rel)
    if why:
        raise RecipekitError(
            code=code,
            exit_code=exit_code,
            location=location,
            message=f"{what} {_show(rel)} {why}",
            hint="only plain relative paths inside the folder are accepted; nothing was written",
        )
    return str(rel)


def _show(v: object) -> str:
    return ascii(v)[:200]


def within(root: Path, path: Path) -> bool:
    """`path` (already resolved) is `root` (resolved) or below it."""
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def refuse_link_outside(
    root: Path,
    path: Path,
    what: str,
    *,
    allow_links: bool = True,
    code: str = "path-outside",
    exit_code: ExitCode = ExitCode.INVALID_INPUT,
) -> None:
    """Refuse when a component of `path` below `root` is a symlink leading outside `root`
    (or any symlink when `allow_links` is False). Missing components end the walk."""
    real_root = Path(os.path.realpath(root))
    try:
        parts = Path(path).relative_to(root).parts
    except ValueError:
        raise RecipekitError(
            code=code,
            exit_code=exit_code,
            location=str(path),
            message=f"{what} is not below {root}",
            hint="nothing was written",
        ) from None
    cur = Path(root)
    for seg in parts:
        cur = cur / seg
        if not cur.is_symlink():
            if not os.path.lexists(cur):
                return
            continue
        target = Path(os.path.realpath(cur))
        if not allow_links or not within(real_root, target):
            where = "leads outside" if not within(real_root, target) else "is a symlink inside"
            raise RecipekitError(
                code=code,
                exit_code=exit_code,
                location=str(cur),
                message=f"{what}: {cur} is a symlink that {where} {root} (-> {os.readlink(cur)})",
                hint="symlinks are never followed out of their folder; replace it with a regular file or remove it",
            )


def confined(
    root: Path,
    rel: object,
    what: str,
    *,
    allow_links: bool = True,
    code: str = "path-outside",
    exit_code: ExitCode = ExitCode.INVALID_INPUT,
    location: str | None = None,
) -> Path:
    """`root / rel` after both checks of the module docstring."""
    rel = check_relpath(rel, what, code=code, exit_code=exit_code, location=location)
    path = Path(root) / rel
    refuse_link_outside(Path(root), path, what, allow_links=allow_links, code=code, exit_code=exit_code)
    return path


def glob_match(path: str, pattern: str) -> bool:
    """Segment-wise glob match (see the module docstring)."""
    return _match(PurePosixPath(path).parts if path else (), tuple(pattern.split("/")))


def _match(parts: tuple[str, ...], pats: tuple[str, ...]) -> bool:
    if not pats:
        return not parts
    if pats[0] == "**":
        return any(_match(parts[i:], pats[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pats[0]) and _match(parts[1:], pats[1:])
