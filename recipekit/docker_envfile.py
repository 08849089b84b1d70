"""How `docker run --env-file FILE` reads FILE, as data with its source, and a reader that follows it.

Consumer: the docker CLI, version 28 (the CLI the integration tests run is 28.2.2), file
docker/cli pkg/kvfile/kvfile.go, function parseKeyValueFile (lines 81-130 of the copy read,
commit 3d41bbac; docker/cli opts/file.go parseKeyValueFile had the same rules before the move).
The format has no quoting and no escapes: what follows the first `=` is the value, verbatim.
`recipekit.inert.docker_env_line` writes lines by these rules; `parse_docker_env_text` reads them
back the way the CLI does (the tests compare the two, and real `docker run --env-file` where a
dockerd is there).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class EnvFileRule:
    id: str
    source: str  # file:line in the consumer's code
    text: str  # what the consumer does


CONSUMER = "docker CLI"
VERSION = "28"
FILE = "docker/cli pkg/kvfile/kvfile.go"

RULES: dict[str, EnvFileRule] = {
    r.id: r
    for r in (
        EnvFileRule("lines", f"{FILE}:83-85", "bufio.Scanner with ScanLines: split at \\n, one trailing \\r dropped"),
        EnvFileRule(
            "max-line", f"{FILE}:14,83", "a line longer than bufio.MaxScanTokenSize (64 KiB) fails the whole file"
        ),
        EnvFileRule("utf8", f"{FILE}:87-89", "a line that is not valid UTF-8 fails the whole file"),
        EnvFileRule("bom", f"{FILE}:91-93", "a UTF-8 BOM is dropped from the first line"),
        EnvFileRule("leading-space", f"{FILE}:96", "leading Unicode whitespace of a line is dropped"),
        EnvFileRule("comment", f"{FILE}:98-101", "an empty line or one starting with # (after the trim) is skipped"),
        EnvFileRule("split", f"{FILE}:103", "the name ends at the first =; the rest is the value"),
        EnvFileRule("name", f"{FILE}:104-113", "an empty name or one holding a space or tab fails the whole file"),
        EnvFileRule("verbatim", f"{FILE}:18-20,115-118", "the value is kept as is: no quotes, escapes or expansion"),
        EnvFileRule("host-value", f"{FILE}:121-126", "a line NAME alone takes the host's NAME, left out when unset"),
    )
}

# bufio.MaxScanTokenSize: the scanner's buffer holds the line and its \n
MAX_SCAN_TOKEN = 64 * 1024
MAX_LINE_BYTES = MAX_SCAN_TOKEN - 1
BOM = "\ufeff"


class DockerEnvFileError(ValueError):
    """The docker CLI would refuse the file (`invalid env file`)."""

    def __init__(self, rule: str, line: int, message: str) -> None:
        r = RULES[rule]
        super().__init__(f"line {line}: {message} (rule {rule}: {CONSUMER} {VERSION} {r.source})")
        self.rule = rule
        self.line = line


def _lines(data: bytes) -> list[bytes]:
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":  # a final \n ends the last line, it starts none
        parts.pop()
    return [p[:-1] if p.endswith(b"\r") else p for p in parts]


def parse_docker_env_bytes(
    data: bytes, lookup: Optional[Callable[[str], Optional[str]]] = None
) -> list[tuple[str, str]]:
    """(name, value) pairs in file order, as `docker run --env-file` passes them to the container."""
    out: list[tuple[str, str]] = []
    for n, raw in enumerate(_lines(data), start=1):
        if len(raw) + 1 > MAX_SCAN_TOKEN:
            raise DockerEnvFileError("max-line", n, f"{len(raw)} bytes, more than the scanner holds")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DockerEnvFileError("utf8", n, "invalid UTF-8") from None
        if n == 1 and line.startswith(BOM):
            line = line[1:]
        line = _trim_left_unicode_space(line)
        if not line or line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        if not name:
            raise DockerEnvFileError("name", n, "no variable name")
        if " " in name or "\t" in name:
            raise DockerEnvFileError("name", n, f"variable {name!r} contains whitespaces")
        if eq:
            out.append((name, value))
        elif lookup is not None:
            host = lookup(name)
            if host is not None:
                out.append((name, host))
    return out


def parse_docker_env_text(text: str, lookup: Optional[Callable[[str], Optional[str]]] = None) -> list[tuple[str, str]]:
    return parse_docker_env_bytes(text.encode("utf-8", "surrogatepass"), lookup)


def _trim_left_unicode_space(s: str) -> str:
    # Go's unicode.IsSpace: \t \n \v \f \r, space, U+0085, U+00A0 and the Unicode White_Space (Zs, Zl, Zp) runes
    i = 0
    while i < len(s) and (s[i] in "\t\n\v\f\r \x85\xa0" or unicodedata.category(s[i]) in ("Zs", "Zl", "Zp")):
        i += 1
    return s[i:]
