"""The proposed recipe variant: the recipe's own text with renamed flags rewritten, removed flags
dropped (each with its reason) and the engine pin moved; edited as text so comments and layout stay,
and every edit is a line the diff shows."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from recipekit.tools.upgrade.names import REMOVED, RENAMED, Finding


@dataclass
class Variant:
    text: str
    edits: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)

    def diff(self, old_text: str, old_name: str, new_name: str) -> str:
        return "".join(
            difflib.unified_diff(
                old_text.splitlines(keepends=True), self.text.splitlines(keepends=True), old_name, new_name
            )
        )


def _flag_re(flag: str) -> re.Pattern[str]:
    return re.compile(r"(flag:\s*['\"]?)" + re.escape(flag) + r"(?=['\"]?[\s,}]|$)")


def propose(text: str, findings: list[Finding], pin: tuple[str, str] | None) -> Variant:
    """`pin` = (old version, new version) of the engine's `version:` line, None to leave pins alone."""
    v = Variant(text)
    for f in findings:
        if f.kind != "flag":
            continue
        if f.status == RENAMED and f.replacement:
            repl = str(f.replacement)
            new, n = _flag_re(f.name).subn(r"\g<1>" + repl.replace("\\", "\\\\"), v.text)
            if n:
                v.text = new
                v.edits.append(f"{f.name} -> {f.replacement} ({n} place(s); {f.source})")
            else:
                v.blocked.append(
                    f"{f.name} is renamed to {f.replacement} but is not written as `flag: {f.name}`: edit by hand"
                )
        elif f.status == REMOVED:
            lines = v.text.splitlines(keepends=True)
            one_line = re.compile(r"^\s*- \{\s*flag:\s*['\"]?" + re.escape(f.name) + r"['\"]?\s*[,}]")
            kept = [ln for ln in lines if not one_line.match(ln)]
            if len(kept) < len(lines):
                v.text = "".join(kept)
                v.edits.append(f"dropped {f.name}: {f.detail}")
            else:
                v.blocked.append(f"{f.name} is removed ({f.detail}) and has no replacement: a human must decide")
    if pin is not None:
        old, new = pin
        pattern = re.compile(
            r"^(engine:\n(?:[ \t].*\n)*?[ \t]+version:\s*['\"]?)" + re.escape(old) + r"(['\"]?\s*$)", re.M
        )
        text, n = pattern.subn(lambda m: m.group(1) + new + m.group(2), v.text, count=1)
        if n:
            v.text = text
            v.edits.append(f"engine.version {old} -> {new}")
    return v
