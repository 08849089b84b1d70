"""The HAProxy configuration read back: what HAProxy would see, compared with what the layout implies.

`parse(text)` splits the text into sections and directives the way HAProxy's parser does for
the words we write (HAProxy 2.6 `src/cfgparse.c` `parse_line`: one directive a line, words
separated by spaces/tabs, `#` starts a comment; a line whose first word is a section keyword
starts a section, wherever it is indented). Quotes, backslashes and control characters are
refused outright: recipekit never writes them, and they change how HAProxy splits words.
`structure(parsed)` keeps what decides where traffic goes: each frontend's binds and backends,
each backend's servers, and every directive keyword per section. `haproxy -c` then checks the
text with HAProxy itself (`check_with_haproxy`).
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from recipekit.errors import ExitCode, RecipekitError

# HAProxy 2.6 configuration manual §2-§3, §4, §12: the keywords that open a section.
SECTION_KEYWORDS = frozenset(
    {
        "global", "defaults", "frontend", "backend", "listen", "resolvers", "peers", "userlist",
        "mailers", "program", "http-errors", "ring", "cache", "log-forward", "fcgi-app",
    }
)  # fmt: skip
_UNSAFE = re.compile(r"[\"'\\\x00-\x08\x0b-\x1f\x7f]")
TEST_NET = "192.0.2."  # RFC 5737 TEST-NET-1: stands in for names haproxy -c would have to resolve

Section = tuple[str, str, list[list[str]]]  # (keyword, name, directives as word lists)


def _mismatch(message: str) -> RecipekitError:
    return RecipekitError(
        code="lb-readback-mismatch",
        message=f"the generated HAProxy configuration does not hold what the layout implies: {message}",
        hint="a value of the layout or recipe changed the configuration's structure; check the balancer values",
    )


def parse(text: str) -> list[Section]:
    """Sections with their directives (comment lines and blank lines left out)."""
    sections: list[Section] = []
    for no, raw in enumerate(text.split("\n"), 1):
        if _UNSAFE.search(raw):
            raise _mismatch(f"line {no} holds a quote, backslash or control character")
        line = raw.split("#", 1)[0]
        words = line.split()
        if not words:
            continue
        if words[0] in SECTION_KEYWORDS:
            sections.append((words[0], " ".join(words[1:]), []))
        elif not sections:
            raise _mismatch(f"line {no}: directive {words[0]!r} before any section")
        else:
            sections[-1][2].append(words)
    return sections


def structure(sections: list[Section]) -> dict:
    """What routes traffic: per section its directive keywords, binds, backends and servers."""
    out: dict = {}
    for kw, name, directives in sections:
        key = f"{kw} {name}".strip()
        if key in out:
            raise _mismatch(f"section '{key}' appears twice")
        entry: dict = {"keywords": sorted({d[0] for d in directives})}
        if kw in ("frontend", "listen"):
            entry["binds"] = [d[1:] for d in directives if d[0] == "bind"]
            entry["backends"] = [d[1:] for d in directives if d[0] in ("default_backend", "use_backend")]
        if kw in ("backend", "listen"):
            entry["servers"] = [d[1:] for d in directives if d[0] == "server"]
        out[key] = entry
    return out


def compare(text: str, expected: dict) -> None:
    """Raise lb-readback-mismatch when the text's structure is not exactly `expected`."""
    got = structure(parse(text))
    if set(got) != set(expected):
        extra, missing = sorted(set(got) - set(expected)), sorted(set(expected) - set(got))
        raise _mismatch(f"sections {extra} not implied, {missing} missing")
    for key, want in expected.items():
        for field, value in want.items():
            if got[key].get(field) != value:
                raise _mismatch(f"{key}: {field} {got[key].get(field)} != {value}")


def _stand_in_addresses(sections: list[Section]) -> dict[str, str]:
    """server address -> a TEST-NET-1 stand-in, for every address that is not an IP literal."""

    subst: dict[str, str] = {}
    for _kw, _name, directives in sections:
        for d in directives:
            if d[0] == "server" and len(d) > 2:
                host = d[2].rpartition(":")[0]
                try:
                    ipaddress.ip_address(host.strip("[]"))
                except ValueError:
                    subst.setdefault(d[2], f"{TEST_NET}{len(subst) + 1}:{d[2].rpartition(':')[2]}")
    return subst


def check_with_haproxy(text: str, timeout_s: float = 60) -> str:
    """Run `haproxy -c` on the text; return a note saying what was checked (raise when HAProxy refuses)."""
    exe = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if exe is None:
        return "not checked with haproxy -c (HAProxy is not installed: Debian package haproxy)"
    subst = _stand_in_addresses(parse(text))
    checked = text
    for name, stand_in in subst.items():
        checked = re.sub(rf"(?m)^(\s*server \S+ ){re.escape(name)}( |$)", rf"\g<1>{stand_in}\2", checked)
    with tempfile.TemporaryDirectory(prefix="rk-haproxy.") as d:
        cfg = Path(d) / "haproxy.cfg"
        cfg.write_text(checked)
        try:
            r = subprocess.run([exe, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise RecipekitError(
                code="lb-check-timeout",
                message=f"haproxy -c did not finish in {timeout_s:g} s",
                hint="check the HAProxy installation",
                exit_code=ExitCode.FAILURE,
            ) from None
    if r.returncode != 0:
        alerts = [ln for ln in (r.stdout + r.stderr).splitlines() if "ALERT" in ln] or [r.stderr.strip()[-300:]]
        raise RecipekitError(
            code="lb-haproxy-refused",
            message=f"haproxy -c refuses the generated configuration: {alerts[0]}",
            hint="a balancer value of the layout is not valid for HAProxy",
        )
    note = "checked with haproxy -c"
    if subst:
        note += f" ({len(subst)} server name(s) stood in by TEST-NET-1 addresses: names resolve only where deployed)"
    return note
