"""Recipe string templates: `${NAME}` (a setting), `${env:NAME}` / `${env:NAME%%PAT}` (a runtime
environment variable), `$${` (a literal `${`). Everything else is literal text.

Settings are substituted at render time as data. Runtime env references stay references in
the shell form (`"$NAME"`, `"${NAME%%PAT}"`) and are resolved from the effective env in
argv. Nothing a user supplies is ever parsed as a template: only recipe text is.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

from recipekit.errors import RecipekitError

_REF = re.compile(r"\$\$\{|\$\{(env:)?([A-Za-z_][A-Za-z0-9_]*)(%%([A-Za-z0-9_.,*/\-]*))?\}")
_ANY_REF = re.compile(r"\$\{[^}]*\}")


@dataclass(frozen=True)
class EnvRef:
    name: str
    strip_suffix: Optional[str] = None  # the PATTERN of ${NAME%%PATTERN}


Part = Union[str, EnvRef]


def setting_refs(text: str) -> list[str]:
    """Names of the settings a template refers to."""
    return [m.group(2) for m in _REF.finditer(text) if m.group(0) != "$${" and not m.group(1)]


def env_refs(text: str) -> list[str]:
    return [m.group(2) for m in _REF.finditer(text) if m.group(0) != "$${" and m.group(1)]


def check_template(text: str) -> Optional[str]:
    """An error message when the template has a malformed ${...}, else None."""
    cleaned = _REF.sub("", text)
    bad = _ANY_REF.search(cleaned)
    if bad:
        return f"malformed reference {bad.group(0)!r} (use ${{NAME}}, ${{env:NAME}} or ${{env:NAME%%PATTERN}})"
    return None


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(_fmt(v) for v in value)
    return str(value)


def substitute(text: str, lookup: Callable[[str], Any], typed: bool = False) -> Any:
    """Replace setting references; keep env references as ${env:...} text.

    With typed=True and the whole text being one `${NAME}`, return the setting's typed value
    (a list stays a list inside JSON values).
    """
    if typed:
        m = _REF.fullmatch(text)
        if m and m.group(0) != "$${" and not m.group(1):
            return lookup(m.group(2))

    def repl(m: re.Match) -> str:
        if m.group(0) == "$${" or m.group(1):
            return m.group(0)
        return _escape_literal(_fmt(lookup(m.group(2))))

    return re.sub(_REF, repl, text)


def _escape_literal(s: str) -> str:
    # A substituted value is data: protect any '${' it contains from later parsing.
    return s.replace("${", "$${")


def parts(text: str) -> list[Part]:
    """Split a settings-substituted template into literal text and runtime env references."""
    out: list[Part] = []
    pos = 0
    buf = ""
    for m in _REF.finditer(text):
        buf += text[pos : m.start()]
        pos = m.end()
        if m.group(0) == "$${":
            buf += "${"
            continue
        if not m.group(1):  # unresolved setting reference: should not happen after substitute
            raise RecipekitError(code="template-unresolved", message=f"setting reference {m.group(0)} left unresolved")
        if buf:
            out.append(buf)
            buf = ""
        out.append(EnvRef(m.group(2), m.group(4) if m.group(3) else None))
    buf += text[pos:]
    if buf or not out:
        out.append(buf)
    return out


def _strip_longest_suffix(value: str, pattern: str) -> str:
    for i in range(len(value) + 1):
        if fnmatch.fnmatchcase(value[i:], pattern):
            return value[:i]
    return value


def to_argv_word(ps: list[Part], env: Mapping[str, Optional[str]]) -> str:
    out = ""
    for p in ps:
        if isinstance(p, EnvRef):
            v = env.get(p.name) or ""
            out += _strip_longest_suffix(v, p.strip_suffix) if p.strip_suffix is not None else v
        else:
            out += p
    return out


def _dq(s: str) -> str:
    return re.sub(r'([\\"$`])', r"\\\1", s)


def to_shell_word(ps: list[Part]) -> str:
    """One shell word: shlex-quoted literal, or a double-quoted word around env references."""
    if not any(isinstance(p, EnvRef) for p in ps):
        return shlex.quote("".join(p for p in ps if isinstance(p, str)))
    out = '"'
    for i, p in enumerate(ps):
        if isinstance(p, EnvRef):
            nxt = ps[i + 1] if i + 1 < len(ps) else ""
            if p.strip_suffix is not None:
                out += "${" + p.name + "%%" + p.strip_suffix + "}"
            elif isinstance(nxt, str) and nxt[:1] and (nxt[0].isalnum() or nxt[0] == "_"):
                out += "${" + p.name + "}"
            else:
                out += "$" + p.name
        else:
            out += _dq(p)
    return out + '"'
