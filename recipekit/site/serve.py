"""Preview server for a built site: the standard library's http.server on loopback only."""
from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

from recipekit.errors import ExitCode, RecipekitError

LOOPBACK = "127.0.0.1"


class _Handler(http.server.SimpleHTTPRequestHandler):
    # JSON API documents must come back as JSON, with the exact bytes on disk.
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".json": "application/json",
        ".js": "text/javascript",
        ".css": "text/css",
        ".png": "image/png",
    }

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        if getattr(self.server, "quiet", False):
            return
        super().log_message(format, *args)

    def end_headers(self) -> None:
        # A preview must show what was just built, never a cached page.
        self.send_header("Cache-Control", "no-store")
        super().end_headers()


class SiteServer:
    """A threaded HTTP server for DIR on 127.0.0.1; port 0 picks a free port."""

    def __init__(self, directory: Path | str, port: int = 0, quiet: bool = False):
        directory = Path(directory)
        if not (directory / "index.html").is_file():
            raise RecipekitError(
                code="site-not-built", message=f"{directory} has no index.html",
                hint="build it first: recipe site --out DIR", exit_code=ExitCode.NOT_FOUND)
        handler = functools.partial(_Handler, directory=str(directory.resolve()))
        try:
            self.httpd = http.server.ThreadingHTTPServer((LOOPBACK, port), handler)
        except OSError as exc:
            raise RecipekitError(
                code="port-in-use", message=f"cannot listen on {LOOPBACK}:{port}: {exc.strerror}",
                hint="pick another --port, or 0 for a free one", exit_code=ExitCode.BUSY) from exc
        self.httpd.daemon_threads = True
        self.httpd.quiet = quiet  # type: ignore[attr-defined]  # read by _Handler.log_message
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/"

    def start(self) -> "SiteServer":
        """Serve in a background thread (tests, embedding)."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="recipekit-site", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted."""
        try:
            self.httpd.serve_forever()
        finally:
            self.httpd.server_close()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "SiteServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
