"""Pack manifests as data: `patches/packs/<engine>/<profile>/pack.yaml`.

A pack lists ordered patches. Each patch names its body (a file in the pack, or an external
source: repo + commit + path + sha256 read from a checkout the user points to), the files it
touches with their pre-image and post-image sha256, whether it is required or opt-in, why,
its upstream reference and when it can be dropped. Where the seeds do not say something
(a hash, a commit), the manifest says so in `unknown` instead of inventing a value.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from recipekit import bounded
from recipekit.errors import ErrorList, ExitCode, RecipekitError, did_you_mean
from recipekit.recipe_yaml import parse_yaml

MANIFEST_NAME = "pack.yaml"
PACKS_DIR = Path(__file__).resolve().parent / "packs"

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_ID = re.compile(r"^[a-z0-9][a-z0-9.-]*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_relpath(v: str) -> str:
    p = PurePosixPath(v)
    if not v or p.is_absolute() or ".." in p.parts or "\\" in v or v.startswith("./"):
        raise ValueError(f"must be a relative path inside the target without '..': {v!r}")
    return v


def _check_sha(v: Optional[str]) -> Optional[str]:
    if v is not None and not _HEX64.match(v):
        raise ValueError(f"must be 64 lowercase hex characters (sha256): {v!r}")
    return v


def _check_commit(v: Optional[str]) -> Optional[str]:
    if v is not None and not _HEX40.match(v):
        raise ValueError(f"must be a full 40-hex commit: {v!r}")
    return v


class PinSpec(_Model):
    """An upstream the pack was made against. Only the fields that are known are given."""

    name: str
    repo: Optional[str] = None
    commit: Optional[str] = None  # 40-hex git commit
    commit_prefix: Optional[str] = None  # when only an abbreviated commit is published
    version: Optional[str] = None
    dist: Optional[str] = None  # pip distribution name (dist-info in site-packages)
    module: Optional[str] = None  # importable package whose version file is read (no import)
    image: Optional[str] = None  # image reference
    image_digest: Optional[str] = None  # sha256:<hex>
    note: Optional[str] = None

    _c = field_validator("commit")(classmethod(lambda cls, v: _check_commit(v)))


class FileImage(_Model):
    """One file a patch touches; None as pre-image = created by the patch, as post-image = deleted."""

    path: str
    pre_sha256: Optional[str]
    post_sha256: Optional[str]

    _p = field_validator("path")(classmethod(lambda cls, v: _check_relpath(v)))
    _s = field_validator("pre_sha256", "post_sha256")(classmethod(lambda cls, v: _check_sha(v)))

    @model_validator(mode="after")
    def _changes(self):
        if self.pre_sha256 == self.post_sha256:
            raise ValueError(f"{self.path}: pre-image and post-image are the same")
        return self


class ExternalSource(_Model):
    """A patch body kept in another repository (a pinned port repo)."""

    repo: str
    commit: Optional[str] = None
    commit_prefix: Optional[str] = None  # what the seed publishes when the full commit is unknown
    path: Optional[str] = None
    sha256: Optional[str] = None

    _s = field_validator("sha256")(classmethod(lambda cls, v: _check_sha(v)))

    _c = field_validator("commit")(classmethod(lambda cls, v: _check_commit(v)))


class PatchEntry(_Model):
    id: str
    kind: Literal["diff", "script", "build", "unknown"] = "diff"
    file: Optional[str] = None  # unified diff inside the pack folder
    sha256: Optional[str] = None  # of `file`
    source: Optional[ExternalSource] = None
    target: Optional[str] = None  # which target (package/checkout) it applies to
    files: list[FileImage] = Field(default_factory=list)
    required: bool = True
    group: Optional[str] = None  # e.g. plugin-required, rows, robustness
    enforced_by: Optional[str] = None  # who refuses to run without it
    since: Optional[str] = None  # release of the pack's source that added it
    reason: str
    upstream: Optional[str] = None
    drop_when: Optional[str] = None
    unknown: list[str] = Field(default_factory=list)  # what the manifest cannot say yet, and why
    note: Optional[str] = None

    _s = field_validator("sha256")(classmethod(lambda cls, v: _check_sha(v)))

    @field_validator("id")
    @classmethod
    def _id(cls, v):
        if not _ID.match(v):
            raise ValueError(f"patch id must be kebab-case: {v!r}")
        return v

    @field_validator("file")
    @classmethod
    def _file(cls, v):
        return None if v is None else _check_relpath(v)

    @model_validator(mode="after")
    def _body(self):
        if self.file and self.source:
            raise ValueError("give either 'file' or 'source', not both")
        if self.kind == "diff" and not (self.file or self.source):
            raise ValueError("a diff patch needs 'file' or 'source'")
        if self.file and not self.files:
            raise ValueError("a patch shipped in the pack must list its files with pre/post sha256")
        paths = [f.path for f in self.files]
        if len(paths) != len(set(paths)):
            raise ValueError("a file is listed twice")
        return self

    @property
    def opt_in(self) -> bool:
        return not self.required

    @property
    def verifiable(self) -> bool:
        """Its effect on the target can be checked from hashes alone."""
        return self.kind == "diff" and bool(self.files)


class TargetSpec(_Model):
    kind: Literal["site-packages", "checkout", "image"] = "site-packages"
    package: Optional[str] = None  # top-level package (site-packages) or checkout name
    note: Optional[str] = None


class Pack(_Model):
    schema_version: Literal[1] = 1
    engine: str
    profile: str
    description: str
    target: TargetSpec = TargetSpec()
    pins: list[PinSpec] = Field(default_factory=list)
    patches: list[PatchEntry]
    provenance: Optional[str] = None
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self):
        ids = [p.id for p in self.patches]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"duplicate patch ids: {dup}")
        # Patches touching the same file must chain: each pre-image is the previous post-image,
        # and no required patch may build on an opt-in one (it would not apply without it).
        last: dict[str, PatchEntry] = {}
        for p in self.patches:
            for f in p.files:
                prev = last.get(f.path)
                if prev is not None:
                    prev_post = next(x.post_sha256 for x in prev.files if x.path == f.path)
                    if prev_post != f.pre_sha256:
                        raise ValueError(f"{p.id}: pre-image of {f.path} is not the post-image of {prev.id}")
                    if prev.opt_in and p.required:
                        raise ValueError(f"required patch {p.id} builds on opt-in patch {prev.id} ({f.path})")
                last[f.path] = p
        return self

    def patch(self, pid: str) -> PatchEntry:
        for p in self.patches:
            if p.id == pid:
                return p

        raise RecipekitError(
            code="unknown-patch",
            message=f"no patch '{pid}' in pack {self.engine}/{self.profile}",
            hint=did_you_mean(pid, [p.id for p in self.patches])
            or "opt-in patches: " + ", ".join(p.id for p in self.patches if p.opt_in),
            exit_code=ExitCode.INVALID_INPUT,
        )


class LoadedPack:
    """A validated manifest and the folder it came from."""

    def __init__(self, pack: Pack, folder: Path):
        self.pack = pack
        self.folder = folder

    @property
    def manifest_path(self) -> Path:
        return self.folder / MANIFEST_NAME

    @property
    def key(self) -> str:
        return f"{self.pack.engine}/{self.pack.profile}"


def resolve_pack_dir(pack: str | Path, profile: str | None = None) -> Path:
    """A pack folder from a path, or a short name `<engine>/<profile>` of a built-in pack;
    with `profile`, `pack` may be the engine folder holding one folder per profile."""
    if profile == "default":  # recipes say `profile: default` for "the pack's own"
        profile = None
    cands = [Path(pack)]
    if not Path(pack).is_absolute():
        rel = str(pack).removeprefix("patches/packs/")  # a recipe's repo-relative `fixes.pack`
        cands.append(PACKS_DIR / rel)
    for c in cands:
        if (c / MANIFEST_NAME).is_file():
            return c
        if profile and (c / profile / MANIFEST_NAME).is_file():
            return c / profile
    known = sorted(str(p.parent.relative_to(PACKS_DIR)) for p in PACKS_DIR.glob(f"*/*/{MANIFEST_NAME}"))

    hint = did_you_mean(str(pack), known) or ("built-in packs: " + ", ".join(known))
    raise RecipekitError(
        code="pack-not-found",
        message=f"no {MANIFEST_NAME} in {pack}" + (f" (profile {profile})" if profile else ""),
        hint=hint,
        exit_code=ExitCode.NOT_FOUND,
    )


def load_pack(pack: str | Path, profile: str | None = None) -> LoadedPack:
    folder = resolve_pack_dir(pack, profile)
    path = folder / MANIFEST_NAME

    text = bounded.read_text(path, "patch pack manifest", 4 << 20, code="pack-invalid", missing_code="pack-not-found")
    data, _lines = parse_yaml(text, str(path), what="patch pack")
    if not isinstance(data, dict):
        raise RecipekitError(code="pack-invalid", message="the manifest must be a mapping", location=str(path))
    try:
        validated = Pack.model_validate(data)
    except ValidationError as e:
        errs = []
        for err in e.errors():
            jp = "$" + "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in err["loc"])
            errs.append(
                RecipekitError(
                    code="pack-invalid",
                    message=err["msg"],
                    location=f"{path} {jp}",
                    hint="see patches/README.md for the manifest fields",
                )
            )
        raise ErrorList(errs) from None
    if profile and profile != "default" and validated.profile != profile:
        raise RecipekitError(
            code="pack-profile-mismatch",
            location=str(path),
            message=f"pack is profile {validated.profile!r}, asked for {profile!r}",
        )
    lp = LoadedPack(validated, folder)
    for i, p in enumerate(validated.patches):
        if p.file and not (folder / p.file).is_file():
            raise RecipekitError(
                code="pack-file-missing",
                location=f"{path} $.patches[{i}].file",
                message=f"patch body {p.file} is not in the pack folder",
                exit_code=ExitCode.INVALID_INPUT,
            )
    return lp
