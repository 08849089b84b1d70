"""The record `recipe fetch` keeps of what it verified (`<local_dir>/.recipekit-fetch.json`), and
where a source's files land (`source_dir`).

tools/fetch.py writes it; checkpoint readers (the hybrid assembly) read the verified file sizes
and hashes from it. A missing record reads as empty. One that is there is read bounded (a regular
file, capped) and checked whole against the shape tools/fetch.py writes: anything else (not JSON,
another schema, wrong types, unknown fields) is refused with `fetch-record-invalid` rather than
half-trusted, since a re-run skips the files it lists as verified.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from recipekit import bounded, paths, templates
from recipekit.config import EffectiveConfig, setting_of
from recipekit.errors import ExitCode, RecipekitError

MANIFEST = ".recipekit-fetch.json"
SCHEMA = 1
# a full-size checkpoint lists ~150 files of ~250 bytes each; far above any real record
MAX_BYTES = 8 * 1024 * 1024
CODE = "fetch-record-invalid"


class _Strict(BaseModel):
    # strict: "12" where fetch writes 12 was not written by fetch
    model_config = ConfigDict(extra="forbid", strict=True)


class FileRecord(_Strict):
    """One verified file (tools/fetch.py `_record`); older writers and tests give size + sha256 only."""

    size: int = Field(ge=0)
    sha256: Optional[str] = Field(None, pattern=r"^[0-9a-f]{64}$")
    git_sha1: Optional[str] = Field(None, pattern=r"^[0-9a-f]{40}$")
    lfs: Optional[bool] = None
    mtime_ns: Optional[int] = None
    verified_at: Optional[str] = None


class Selection(_Strict):
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)


class SourceEntry(_Strict):
    """One source of the recipe (tools/fetch.py `_entry`)."""

    repo: Optional[str] = None
    declared_revision: Optional[str] = None
    revision: Optional[str] = None
    selection: Optional[Selection] = None
    selection_key: Optional[str] = None
    complete: bool = False
    files: dict[str, FileRecord] = Field(default_factory=dict)


class FetchRecord(_Strict):
    schema_: Literal[1] = Field(alias="schema")
    sources: dict[str, SourceEntry]


def manifest_path(local_dir: str | Path) -> Path:
    return Path(local_dir) / MANIFEST


def load_manifest(local_dir: str | Path) -> dict:
    """The record as tools/fetch.py wrote it (a dict it updates in place); empty when there is none."""

    path = manifest_path(local_dir)
    try:
        text = bounded.read_text(path, "fetch record", MAX_BYTES, code=CODE)
    except FileNotFoundError:
        return {"schema": SCHEMA, "sources": {}}
    data: Any = bounded.loads_json(text, "fetch record", str(path), code=CODE)
    schema = data.get("schema") if isinstance(data, dict) else None
    if type(schema) is int and schema > SCHEMA:
        raise RecipekitError(
            code=CODE,
            location=str(path),
            message=f"the fetch record has schema {schema}; this recipekit reads schema {SCHEMA}",
            hint="upgrade recipekit (a newer one wrote it)",
        )
    try:
        FetchRecord.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "$"
        raise RecipekitError(
            code=CODE,
            exit_code=ExitCode.INVALID_INPUT,
            location=str(path),
            message=f"the fetch record has the wrong shape ({e.error_count()} problem(s), first: {where}: "
            f"{first['msg'][:120]})",
            hint=_HINT,
        ) from None
    return data


_HINT = (
    "it was not written by this recipekit or is damaged: delete it and re-run `recipe fetch` "
    "(files already there are hashed and adopted, not downloaded again)"
)


def source_dir(eff: EffectiveConfig, source: Any) -> Path:
    """Where a source's files (and this record) land: its `local_dir` template, else
    <MODELS_DIR>/<repo name>. Fetch writes there; checkpoint pipelines read from there."""
    if source.local_dir:
        if not hasattr(eff, "recipe"):
            raise RecipekitError(
                code="fetch-needs-effective-config",
                exit_code=ExitCode.FAILURE,
                message=f"source {source.id}: local_dir is a template; resolve an effective config first",
            )
        return Path(str(templates.substitute(source.local_dir, eff.setting))).expanduser()
    base = setting_of(eff, "MODELS_DIR") or paths.models_dir()
    return Path(str(base)).expanduser() / source.repo.rstrip("/").split("/")[-1]
