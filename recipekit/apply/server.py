"""The record of the server an apply started (state/server.json): one typed model per runner.

A record is loaded whole or refused: a file that is not JSON, names an unknown runner, lacks
the fields its runner identifies the server by, or carries keys no runner writes raises
`server-record-invalid` instead of being half-trusted (stop acts on what the record says).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from recipekit import bounded
from recipekit.apply.state import write_json
from recipekit.errors import ExitCode, RecipekitError

SERVER_FILE = "server.json"


class _ServerBase(BaseModel):
    """What every runner records: where the server listens and what it was launched with."""

    # strict: a record holding "1" where apply writes 1 was not written by apply; refuse it
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    recipe: Optional[str] = None
    log: Optional[str] = None  # the file the server's output goes to (or is kept in)
    started_at: Optional[float] = None  # time.time() at start
    host: Optional[str] = None
    port: Optional[int] = None
    launch_key: Optional[str] = None  # stamps.inputs_key of the launch inputs
    base_url: Optional[str] = None


class NativeServer(_ServerBase):
    """A process in its own session: identified by pid, process group, start time and cmdline."""

    runner: Literal["native"] = "native"
    pid: int
    pgid: int
    start_time: Optional[int] = None  # /proc/<pid>/stat field 22 (clock ticks after boot)
    cmdline: list[str]
    argv: list[str] = Field(default_factory=list)

    @property
    def handle(self) -> dict[str, int]:
        return {"pid": self.pid}

    @property
    def label(self) -> str:
        return f"pid {self.pid}"

    @property
    def started_note(self) -> str:
        return f"pid {self.pid} (log: {self.log})"


class DockerServer(_ServerBase):
    """A container: identified by its id and the recipekit.recipe label it carries."""

    runner: Literal["docker"] = "docker"
    container_id: str
    name: Optional[str] = None
    image: Optional[str] = None
    docker_host: Optional[str] = None  # None: DOCKER_HOST or the default socket

    @property
    def handle(self) -> dict[str, str]:
        return {"container_id": self.container_id}

    @property
    def label(self) -> str:
        return f"container {self.container_id[:12]}"

    @property
    def started_note(self) -> str:
        return f"container {self.container_id[:12]} ({self.name})"


ServerRecord = Annotated[Union[NativeServer, DockerServer], Field(discriminator="runner")]
# the one spelling of "a server record": every module names this alias, never the union again
_RECORD: TypeAdapter[ServerRecord] = TypeAdapter(ServerRecord)


def load(path: Path) -> Optional[ServerRecord]:
    """The record in `path`; None when there is none; an error when it is there but wrong."""

    if not os.path.lexists(path):
        return None
    text = bounded.read_text(path, "server record", 1024 * 1024, code="server-record-invalid")
    try:
        return _RECORD.validate_python(json.loads(text))
    except ValueError as e:  # json.JSONDecodeError and pydantic's ValidationError
        raise _invalid(path, _why(e)) from None


def save(path: Path, rec: ServerRecord) -> None:
    write_json(path, rec.model_dump(mode="json"))


def _why(e: ValueError) -> str:
    if isinstance(e, ValidationError):
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "$"
        return f"has the wrong shape ({e.error_count()} problem(s), first: {where}: {first['msg']})"
    return f"is not JSON ({e})"


def _invalid(path: Path, why: str) -> RecipekitError:
    return RecipekitError(
        code="server-record-invalid",
        exit_code=ExitCode.INVALID_INPUT,
        location=str(path),
        message=f"the server record {why}",
        hint="check that no server of this recipe is running (ps, docker ps), then delete the file",
    )
