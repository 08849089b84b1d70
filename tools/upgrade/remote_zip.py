"""A published wheel read over HTTP Range requests: the zip's central directory and the members asked for.

A vLLM wheel is ~500 MB, almost all of it compiled kernels; the catalog needs a few hundred KiB of
Python. `RemoteFile` is a seekable read-only file whose reads become Range requests (in aligned blocks,
cached), so the standard library's `zipfile` reads the directory and the members it is asked for and
nothing else. A server that answers a Range request with the whole body (200 instead of 206) is used
as a plain download instead: the bytes are kept and every later read comes from them.
"""

from __future__ import annotations

import io
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from recipekit.errors import ExitCode, RecipekitError

BLOCK = 256 * 1024
TIMEOUT_S = 60.0
PREFETCH_WORKERS = 8
# the largest wheel we accept to download whole when Range is refused
FULL_DOWNLOAD_MAX = 2 * 1024 * 1024 * 1024


def _error(url: str, why: str) -> RecipekitError:
    return RecipekitError(
        code="upgrade-wheel-unreadable",
        location=url,
        message=f"cannot read the wheel: {why}",
        exit_code=ExitCode.NOT_FOUND,
    )


class RemoteFile(io.RawIOBase):
    """Seekable, read-only view of the bytes at `url`; `downloaded` counts the bytes received."""

    def __init__(self, url: str, size: Optional[int] = None) -> None:
        super().__init__()
        self.url = url
        self.downloaded = 0
        self.requests = 0
        self.range_refused = False
        self._pos = 0
        self._blocks: dict[int, bytes] = {}
        self._whole: Optional[bytes] = None
        self._lock = threading.Lock()
        self.size = size if size is not None else self._probe_size()

    def _get(self, start: int, end: int) -> tuple[int, bytes]:
        """(HTTP status, body) of bytes start..end inclusive."""
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={start}-{end}"})
        with self._lock:
            self.requests += 1
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310 (https URL from pip)
                status = resp.status
                want = end - start + 1 if status == 206 else FULL_DOWNLOAD_MAX
                body = resp.read(want + 1)
        except OSError as e:
            raise _error(self.url, str(e)) from None
        with self._lock:
            self.downloaded += len(body)
        if status == 206 and len(body) != end - start + 1:
            raise _error(self.url, f"asked bytes {start}-{end}, got {len(body)} bytes")
        if status == 200 and len(body) > FULL_DOWNLOAD_MAX:
            raise _error(self.url, f"larger than {FULL_DOWNLOAD_MAX} bytes")
        return status, body

    def _probe_size(self) -> int:
        req = urllib.request.Request(self.url, headers={"Range": "bytes=0-0"})
        self.requests += 1
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310
                status = resp.status
                crange = resp.headers.get("Content-Range", "")
                if status == 206 and "/" in crange:
                    body = resp.read(2)
                    self.downloaded += len(body)
                    return int(crange.rsplit("/", 1)[1])
                body = resp.read(FULL_DOWNLOAD_MAX + 1)
        except (OSError, ValueError) as e:
            raise _error(self.url, str(e)) from None
        self.downloaded += len(body)
        self.range_refused = True
        self._whole = body
        return len(body)

    def _block(self, index: int) -> bytes:
        if self._whole is not None:
            return self._whole[index * BLOCK : (index + 1) * BLOCK]
        if index not in self._blocks:
            start = index * BLOCK
            end = min(self.size, start + BLOCK) - 1
            status, body = self._get(start, end)
            if status == 200:  # Range refused mid-way: keep the whole body
                self.range_refused = True
                self._whole = body
                return self._block(index)
            self._blocks[index] = body
        return self._blocks[index]

    def prefetch(self, spans: list[tuple[int, int]], workers: int = PREFETCH_WORKERS) -> None:
        """Fetch the blocks covering byte spans (start, end exclusive) concurrently: the members a
        caller is about to read, so that their reads need no sequential round trips."""
        if self._whole is not None:
            return
        wanted = sorted(
            {i for a, b in spans for i in range(a // BLOCK, (min(b, self.size) - 1) // BLOCK + 1)} - set(self._blocks)
        )
        if not wanted:
            return
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(self._block, wanted))

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, n: Optional[int] = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self._pos
        n = max(0, min(n, self.size - self._pos))
        out = bytearray()
        while len(out) < n:
            index, skip = divmod(self._pos, BLOCK)
            chunk = self._block(index)[skip : skip + n - len(out)]
            if not chunk:
                break
            out += chunk
            self._pos += len(chunk)
        return bytes(out)

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)
