"""`.env` files parsed as KEY=VALUE data, never sourced.

Accepted per line: blank lines, `# comments`, `KEY=VALUE`, an optional `export ` prefix, and
one layer of matching single or double quotes around the value (taken literally: no
escapes, no `$VAR` expansion, no command substitution). A trailing ` # comment` after an
unquoted value is dropped. Anything else is an error naming file:line; all problems of a
file are reported together (ErrorList).
"""

from __future__ import annotations

import re
from pathlib import Path

from recipekit import bounded
from recipekit.errors import ErrorList, RecipekitError

KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
MAX_BYTES = 1024 * 1024


def parse_env_text(text: str, origin: str = ".env") -> dict[str, tuple[str, int]]:
    """Parse .env text into {KEY: (value, line)}; raises ErrorList on any bad line."""
    out: dict[str, tuple[str, int]] = {}
    errors: list[RecipekitError] = []

    def bad(n: int, code: str, msg: str, hint: str) -> None:
        errors.append(RecipekitError(code=code, message=msg, hint=hint, location=f"{origin}:{n}"))

    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export ") or line.startswith("export\t"):
            line = line[len("export") :].lstrip()
        if "=" not in line:
            bad(
                n,
                "env-line-invalid",
                f"not KEY=VALUE: {raw.strip()[:60]!r}",
                "write KEY=VALUE (the file is read as data, not run)",
            )
            continue
        key, value = line.split("=", 1)
        key = key.rstrip()
        if not KEY_RE.match(key):
            bad(n, "env-key-invalid", f"invalid key {key[:40]!r}", "keys are letters, digits and _ (e.g. LAYOUT=pp4)")
            continue
        value = value.strip()
        if value[:1] in ("'", '"'):
            q = value[0]
            end = value.find(q, 1)
            if end < 0:
                bad(
                    n,
                    "env-unterminated-quote",
                    f"{key}: the {q} quote is not closed",
                    "close the quote on the same line",
                )
                continue
            rest = value[end + 1 :].strip()
            if rest and not rest.startswith("#"):
                bad(
                    n,
                    "env-line-invalid",
                    f"{key}: text after the closing quote: {rest[:40]!r}",
                    "one quoted value per line",
                )
                continue
            value = value[1:end]
        else:
            m = re.search(r"\s+#", value)
            if m:
                value = value[: m.start()]
            if re.search(r"[\s'\"`]|\$\(", value):
                bad(
                    n,
                    "env-value-unquoted",
                    f"{key}: unquoted value with spaces, quotes or $(...)",
                    "quote the value; it is taken literally either way",
                )
                continue
        if "\x00" in value:
            bad(n, "env-value-invalid", f"{key}: NUL byte in value", "remove it")
            continue
        if key in out:
            bad(n, "env-duplicate-key", f"{key} set twice (first at line {out[key][1]})", "keep one")
            continue
        out[key] = (value, n)
    if errors:
        raise ErrorList(errors)
    return out


def read_env_file(path: str | Path) -> dict[str, tuple[str, int]]:

    p = Path(path)
    text = bounded.read_text(
        p,
        ".env file",
        MAX_BYTES,
        code="env-file-unreadable",
        missing_code="env-file-not-found",
        too_large_code="env-file-too-large",
        not_text_code="env-file-not-text",
    )
    return parse_env_text(text, str(p))
