"""The one interface the apply steps and the lifecycle commands use to run a server.

A runner starts a server from a launch request and answers, for the record it returned:
who it is (identity, what stamps compare), whether it is alive and still ours, how to stop
it, its last log lines and the URL it serves on. Records are the typed models of
recipekit.apply.server; each runner reads only its own kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Protocol, TypeVar

from recipekit import bounded
from recipekit.apply.server import _ServerBase
from recipekit.errors import RecipekitError

Rec = TypeVar("Rec", bound=_ServerBase)
Log = Callable[[str], None]


@dataclass(frozen=True)
class LaunchRequest:
    argv: list[str]
    recipe_id: str
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)  # added to the toolkit's environment (native)
    cwd: Optional[Path] = None
    docker_host: Optional[str] = None  # None: DOCKER_HOST or the default socket


class Runner(Protocol[Rec]):
    kind: str

    def start(self, req: LaunchRequest) -> Rec:
        """Start the server; the record identifies exactly what was started."""
        ...

    def identity(self, rec: Rec) -> str:
        """A string that changes whenever the server is another one (stamps compare it)."""
        ...

    def alive(self, rec: Rec) -> bool:
        """The recorded server runs and is still the one we started."""
        ...

    def stop(self, rec: Rec, timeout_s: float, log: Log) -> str:
        """Stop the recorded server (only if it is ours); says what happened."""
        ...

    def logs(self, rec: Rec, lines: int) -> list[str]:
        """The server's last `lines` lines of output."""
        ...

    def live_log(self, rec: Rec) -> Optional[Path]:
        """The file that grows while the server runs (what `logs --follow` reads), if any."""
        ...

    def base_url(self, rec: Rec) -> Optional[str]: ...


def tail(path: Optional[str | Path], n: int) -> list[str]:
    """The last n lines of a log file (the last 64 KiB are read); [] when there is none."""
    if path is None:
        return []

    try:
        data = bounded.read_tail(path, "server log", 65536)
    except (OSError, RecipekitError):
        return []
    return data.decode(errors="replace").splitlines()[-n:]
