"""Bounded reading of a file named by the user or found on disk: check its type, cap the read.

A FIFO would block `read()` forever, `/dev/zero` never ends, a directory raises, and a huge sparse
file exhausts memory. `read_bytes` opens without blocking, refuses anything that is not a regular
file, and reads at most `limit` bytes (one more to notice a file that grew). `read_text` adds the
UTF-8 check, `read_json` the parse, with the failures a hostile document causes (nesting thousands
deep, integers with thousands of digits) turned into one error.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Callable, Optional

from recipekit.errors import ExitCode, RecipekitError

# config.json, tokenizer files, the index: the largest real ones are tens of MiB
SIDE_FILE_MAX_BYTES = 256 * 1024 * 1024

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_bytes(
    path: str | os.PathLike,
    what: str,
    limit: int,
    *,
    code: str = "file-invalid",
    missing_code: Optional[str] = None,
    too_large_code: Optional[str] = None,
) -> bytes:
    """The bytes of regular file `path`, at most `limit` of them; a RecipekitError otherwise.

    `missing_code` names the error of a missing file (exit 6); FileNotFoundError is raised when None."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        if missing_code is None:
            raise
        raise RecipekitError(
            code=missing_code, location=str(p), message=f"no {what} at {p}", exit_code=ExitCode.NOT_FOUND
        ) from None
    except IsADirectoryError:
        raise _bad(p, what, code, "is a directory") from None
    except OSError as e:
        raise RecipekitError(
            code=code, location=str(p), message=f"cannot read the {what}: {e.strerror}", hint="check its permissions"
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _bad(p, what, code, f"is {_kind(st.st_mode)}")
        if st.st_size > limit:
            raise _bad(p, what, too_large_code or code, f"is {st.st_size} bytes, more than the {limit} accepted")
        chunks, n = [], 0
        while n <= limit:
            b = os.read(fd, min(1 << 20, limit + 1 - n))
            if not b:
                break
            chunks.append(b)
            n += len(b)
        if n > limit:
            raise _bad(p, what, too_large_code or code, f"holds more than the {limit} bytes accepted")
        return b"".join(chunks)
    except OSError as e:
        raise RecipekitError(code=code, location=str(p), message=f"cannot read the {what}: {e.strerror}") from None
    finally:
        os.close(fd)


def _bad(p: Path, what: str, code: str, why: str) -> RecipekitError:
    return RecipekitError(
        code=code, location=str(p), message=f"the {what} {why}", hint="give a regular file of a sensible size"
    )


def read_text(
    path: str | os.PathLike,
    what: str,
    limit: int,
    *,
    code: str = "file-invalid",
    missing_code: Optional[str] = None,
    too_large_code: Optional[str] = None,
    not_text_code: Optional[str] = None,
) -> str:
    data = read_bytes(path, what, limit, code=code, missing_code=missing_code, too_large_code=too_large_code)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecipekitError(
            code=not_text_code or code, location=str(path), message=f"the {what} is not UTF-8 text (byte {e.start})"
        ) from None


def loads_json(
    text: str | bytes,
    what: str,
    location: str,
    *,
    code: str = "file-invalid",
    object_pairs_hook: Optional[Callable[[list[tuple[str, Any]]], Any]] = None,
) -> Any:
    """json.loads with every failure of hostile text as one RecipekitError (exit 2)."""
    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook)
    except RecursionError:
        why = "nests too deeply"
    except json.JSONDecodeError as e:
        why = f"does not parse: {e.msg} (line {e.lineno} column {e.colno})"
    except (ValueError, UnicodeDecodeError) as e:  # integers over the digit limit, bad bytes
        if isinstance(e, RecipekitError):
            raise
        why = f"does not parse: {str(e)[:120]}"
    raise RecipekitError(
        code=code,
        location=location,
        message=f"the {what} {why}",
        hint=f"the {what} is damaged or was not written by recipekit",
    )


def read_json(
    path: str | os.PathLike,
    what: str,
    limit: int,
    *,
    code: str = "file-invalid",
    missing_code: Optional[str] = None,
    too_large_code: Optional[str] = None,
    object_pairs_hook: Optional[Callable[[list[tuple[str, Any]]], Any]] = None,
) -> Any:
    text = read_text(path, what, limit, code=code, missing_code=missing_code, too_large_code=too_large_code)
    return loads_json(text, what, str(path), code=code, object_pairs_hook=object_pairs_hook)


def read_tail(path: str | os.PathLike, what: str, nbytes: int, *, code: str = "file-invalid") -> bytes:
    """The last `nbytes` of regular file `path` (a log that may be any size): seek, never read it all."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise _bad(p, what, code, "is a directory") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _bad(p, what, code, f"is {_kind(st.st_mode)}")
        start = max(0, st.st_size - nbytes)
        return os.pread(fd, nbytes, start)
    finally:
        os.close(fd)
