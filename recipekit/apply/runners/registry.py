"""The runners by kind; the record's `runner` field picks the one that reads it."""

from __future__ import annotations

from typing import Any

from recipekit.apply.runners.base import Runner
from recipekit.apply.runners.docker import DockerRunner
from recipekit.apply.runners.native import NativeRunner
from recipekit.apply.server import ServerRecord
from recipekit.errors import RecipekitError

RUNNERS: dict[str, Runner[Any]] = {r.kind: r for r in (NativeRunner(), DockerRunner())}


def get_runner(kind: str) -> Runner[Any]:
    try:
        return RUNNERS[kind]
    except KeyError:
        raise RecipekitError(
            code="unknown-runner", message=f"no runner '{kind}'", hint=f"runners: {', '.join(sorted(RUNNERS))}"
        ) from None


def runner_for(rec: ServerRecord) -> Runner[Any]:
    return get_runner(rec.runner)
