"""A small Hugging Face Hub on 127.0.0.1, the rehearsal's hub stand-in and the tests' hub: the
endpoints huggingface_hub and recipekit.tools.fetch use (tree listing, paths-info, commits, resolve with HEAD metadata and
Range), with faults to inject per file: a truncated transfer, a corrupted byte, a server that
ignores Range. Every request is logged."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from recipekit.bounded import read_bytes

# a paths-info form lists a few file names; a larger body is cut, not buffered
MAX_FORM_BYTES = 1 << 20
# the tiny checkpoints' files are at most a few hundred MB
MAX_FILE_BYTES = 1 << 30
# stored in LFS on the hub (the rest are plain git blobs), as on the real repositories
LFS_SUFFIXES = (".safetensors", ".bin", ".pt")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    commit: str  # 40 hex
    files: dict[str, bytes]
    lfs: set[str] = field(default_factory=set)  # paths stored in LFS

    def entry(self, path: str) -> dict:
        data = self.files[path]
        if path in self.lfs:
            sha = hashlib.sha256(data).hexdigest()
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {len(data)}\n".encode()
            return {
                "type": "file",
                "oid": git_blob_sha1(pointer),
                "size": len(data),
                "path": path,
                "lfs": {"oid": sha, "size": len(data), "pointerSize": len(pointer)},
            }
        return {"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": path}


class FakeHub:
    def __init__(self, repos: dict[str, Repo]):
        self.repos = repos
        self.faults: dict[str, list[str]] = {}  # path -> faults consumed one per GET
        self.log: list[tuple[str, str, str | None]] = []
        self.served_bytes = 0  # body bytes of every resolve GET (header-only readers are judged by it)
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def gets(self, path: str) -> list[str | None]:
        """The Range header of every GET of a file (None: no Range)."""
        return [rng for m, p, rng in self.log if m == "GET" and p.endswith("/" + path) and "/resolve/" in p]

    def _handler(hub):
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _json(self, obj, status=200, headers=None):
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def _hub_err(self, status, name):
                self._json({"error": name}, status, {"X-Error-Code": name})

            def _repo(self, repo_id, rev):
                repo = hub.repos.get(repo_id)
                if repo is None:
                    self._hub_err(404, "RepoNotFound")
                    return None
                if rev not in (repo.commit, "main"):
                    self._hub_err(404, "RevisionNotFound")
                    return None
                return repo

            def _record(self):
                with hub._lock:
                    hub.log.append((self.command, unquote(urlparse(self.path).path), self.headers.get("Range")))

            def do_HEAD(self):
                self._record()
                path = unquote(urlparse(self.path).path)
                if path == "/api/models":
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self._resolve(path, head=True)

            def do_POST(self):
                self._record()
                path = unquote(urlparse(self.path).path)
                m = re.match(r"^/api/models/([^/]+/[^/]+)/paths-info/(.+)$", path)
                if not m:
                    return self._hub_err(404, "EntryNotFound")
                repo = self._repo(m.group(1), m.group(2))
                if repo is None:
                    return
                n = min(int(self.headers.get("Content-Length") or 0), MAX_FORM_BYTES)
                form = parse_qs(self.rfile.read(n).decode())
                self._json([repo.entry(p) for p in form.get("paths", []) if p in repo.files])

            def do_GET(self):
                self._record()
                u = urlparse(self.path)
                path = unquote(u.path)
                m = re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(/.*)?$", path)
                if m:
                    repo = self._repo(m.group(1), m.group(2))
                    if repo is not None:
                        self._json([repo.entry(p) for p in sorted(repo.files)])
                    return
                m = re.match(r"^/api/models/([^/]+/[^/]+)/commits/(.+)$", path)
                if m:
                    repo = self._repo(m.group(1), m.group(2))
                    if repo is not None:
                        self._json(
                            [
                                {
                                    "id": repo.commit,
                                    "title": "pinned",
                                    "message": "",
                                    "authors": [],
                                    "date": "2026-11-30T00:00:00.000Z",
                                },
                                {
                                    "id": "f" * 40,
                                    "title": "older",
                                    "message": "",
                                    "authors": [],
                                    "date": "2026-11-01T00:00:00.000Z",
                                },
                            ]
                        )
                    return
                self._resolve(path, head=False)

            def _resolve(self, path, head):
                m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
                if not m:
                    return self._hub_err(404, "EntryNotFound")
                repo = self._repo(m.group(1), m.group(2))
                if repo is None:
                    return
                name = m.group(3)
                if name not in repo.files:
                    return self._hub_err(404, "EntryNotFound")
                data = repo.files[name]
                entry = repo.entry(name)
                etag = entry["lfs"]["oid"] if "lfs" in entry else entry["oid"]
                fault = ""
                if not head:
                    with hub._lock:
                        queue = hub.faults.get(name) or []
                        fault = queue.pop(0) if queue else ""
                start, end = 0, len(data) - 1
                rng = self.headers.get("Range")
                ranged = bool(rng) and fault != "ignore-range"
                if ranged:
                    m_rng = re.match(r"bytes=(\d+)-(\d*)", rng)
                    start = int(m_rng.group(1))
                    end = min(end, int(m_rng.group(2))) if m_rng.group(2) else end
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                body = data[start : end + 1]
                if fault == "corrupt":
                    mid = len(body) // 2
                    body = body[:mid] + bytes([body[mid] ^ 0x01]) + body[mid + 1 :]
                self.send_response(206 if ranged and (start or end < len(data) - 1) else 200)
                self.send_header("X-Repo-Commit", repo.commit)
                self.send_header("ETag", f'"{etag}"')
                if "lfs" in entry:
                    self.send_header("X-Linked-Etag", f'"{etag}"')
                    self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(len(body)))
                if ranged and (start or end < len(data) - 1):
                    self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
                self.end_headers()
                if head:
                    return
                with hub._lock:
                    hub.served_bytes += len(body)
                if fault.startswith("truncate:"):
                    keep = int(fault.split(":")[1])
                    self.wfile.write(body[:keep])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if fault.startswith("slow:"):  # N bytes per second, in small writes (a slow link)
                    rate, step = int(fault.split(":")[1]), 16384
                    for i in range(0, len(body), step):
                        self.wfile.write(body[i : i + step])
                        self.wfile.flush()
                        time.sleep(step / rate)
                    return
                self.wfile.write(body)

        return H


def repo_from_dir(folder: Path, commit: str) -> Repo:
    """A hub repository at `commit` holding every file under `folder` (weights in LFS)."""
    files = {}
    for f in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        rel = f.relative_to(folder).as_posix()
        if rel.startswith(".") or "/." in rel:
            continue  # the generators' own stamps are not part of the checkpoint
        files[rel] = read_bytes(f, "stand-in checkpoint file", MAX_FILE_BYTES)
    return Repo(commit=commit, files=files, lfs={p for p in files if p.endswith(LFS_SUFFIXES)})
