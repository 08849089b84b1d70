"""The recipe catalog: find, load and validate recipes by id, path, JSON file or URL.

`load_recipe(ref)` returns a `LoadedRecipe` (the validated `Recipe`, where it came from,
a JSON-path -> line map for error locations, and a content hash). `list_recipes()` scans
the catalog folder (recipes/**.yaml). Which recipe `auto` means on this host is the
application's question (recipekit/apply/auto.py: it asks the doctor what the host has).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional

from recipekit import bounded, textsafe
from recipekit.errors import ErrorList, ExitCode, RecipekitError, did_you_mean
from recipekit.paths import catalog_dir

if TYPE_CHECKING:  # pydantic loads only where a recipe is validated (keeps `recipe --help` fast)
    from recipekit.schema import Recipe

LOCAL_DEFAULT_ID = "tiny-deepseek-cpu"
URL_PREFIXES = ("http://", "https://")


@dataclass
class LoadedRecipe:
    recipe: Recipe
    origin: str  # path or URL it was read from
    lines: dict[str, int] = field(default_factory=dict)
    content_hash: str = ""
    raw: Any = None  # the parsed document (plain data)
    notes: list[str] = field(default_factory=list)  # what loading chose to ignore, said to the user
    # an agent document's rendered layouts, as it states them: the application (apply/auto.py) rebuilds
    # them from the recipe and refuses a document whose renders differ (rendering is above the core)
    stated_layouts: Any = None

    @property
    def id(self) -> str:
        return self.recipe.id

    def where(self, json_path: str) -> str:
        """'file:line $.json.path' (line when known; a parent's line otherwise)."""
        p = json_path
        while p and p not in self.lines:
            cut = max(p.rfind("."), p.rfind("["))
            p = p[:cut] if cut > 0 else ""
        line = self.lines.get(p) if p else None
        return f"{self.origin}:{line} {json_path}" if line else f"{self.origin} {json_path}"


def content_hash(recipe: Recipe) -> str:
    """sha256 of the recipe's canonical JSON (sorted keys, no whitespace): 'sha256:<hex>'."""
    data = recipe.model_dump(mode="json", by_alias=True)
    canon = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canon.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- validation errors


def _json_path(loc: Iterable[Any]) -> str:
    out = "$"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _model_at(loc: tuple) -> Any:
    """The pydantic model class at a validation location (for did-you-mean on fields)."""

    from pydantic import BaseModel  # lazy: pulls pydantic

    from recipekit.schema import Recipe  # lazy: pulls pydantic, pydantic_core

    cur: Any = Recipe
    for part in loc:
        if isinstance(cur, type) and issubclass(cur, BaseModel):
            f = cur.model_fields.get(part)
            if f is None:
                alias = {fi.alias: fi for fi in cur.model_fields.values() if fi.alias}
                f = alias.get(part)
            if f is None:
                return None
            cur = f.annotation
        else:
            args = [a for a in typing.get_args(cur) if a is not type(None)]
            origin = typing.get_origin(cur)
            if origin in (list, tuple, set) and args:
                cur = args[0]
            elif origin is dict and len(args) == 2:
                cur = args[1]
            else:
                return None
        # unwrap Optional[...]
        args = [a for a in typing.get_args(cur) if a is not type(None)]
        if typing.get_origin(cur) is typing.Union and len(args) == 1:
            cur = args[0]
    return cur if isinstance(cur, type) else None


def validation_errors(exc, loaded_where) -> list[RecipekitError]:
    """Map a pydantic ValidationError to one RecipekitError per problem."""
    from pydantic import BaseModel  # lazy: pulls pydantic

    errors: list[RecipekitError] = []
    for e in exc.errors(include_url=False):
        loc = tuple(e["loc"])
        path = _json_path(loc)
        etype = e["type"]
        msg = e["msg"]
        hint = None
        if etype == "extra_forbidden":
            parent = _model_at(loc[:-1])
            names: list[str] = []
            if isinstance(parent, type) and issubclass(parent, BaseModel):
                names = [fi.alias or n for n, fi in parent.model_fields.items()]
            hint = did_you_mean(str(loc[-1]), names) or (f"known fields: {', '.join(names)}" if names else None)
            code, msg = "unknown-field", f"unknown field '{loc[-1]}'"
        elif etype == "unknown_threshold":  # recipekit.gate_thresholds: a key the gate does not read
            ctx = e.get("ctx") or {}
            code, hint = "unknown-threshold", ctx.get("hint")
        elif etype == "missing":
            code, msg = "missing-field", f"required field '{loc[-1]}' is missing"
        elif etype == "literal_error":
            expected = e.get("ctx", {}).get("expected", "")
            choices = [c.strip().strip("'") for c in expected.replace(" or ", ",").split(",") if c.strip()]
            code = "invalid-value"
            msg = f"{e.get('input')!r} is not allowed here (expected {expected})"
            hint = did_you_mean(str(e.get("input")), choices) or f"use one of: {expected}"
        elif (
            etype in ("string_pattern_mismatch", "value_error")
            and loc
            and loc[-1] in ("commit", "commit_prefix", "image_digest")
        ):
            code = "bad-pin"
            msg = (
                f"{loc[-1]} {e.get('input')!r} is not "
                + {
                    "commit": "a full 40-hex commit",
                    "commit_prefix": "7-39 lowercase hex",
                    "image_digest": "sha256:<64 hex>",
                }[loc[-1]]
            )
            hint = "write the full 40-hex commit (or commit_prefix for an abbreviated one)"
        elif etype == "string_pattern_mismatch":
            code, msg = "invalid-format", f"{e.get('input')!r} does not match {e.get('ctx', {}).get('pattern')}"
        elif etype in ("value_error", "assertion_error"):
            code, msg = "invalid-value", msg.removeprefix("Value error, ")
        elif etype.endswith("_type") or etype.endswith("_parsing") or etype in ("model_type", "dict_type", "list_type"):
            code = "wrong-type"
            msg = f"{msg} (got {type(e.get('input')).__name__} {str(e.get('input'))[:60]!r})"
        else:
            code = "invalid-value"
        if hint is None and etype in _BOUND_ERRORS:
            hint = _field_description(loc)  # a bound's reason lives in the field's description
        errors.append(RecipekitError(code=code, message=msg, hint=hint, location=loaded_where(path)))
    return errors


_BOUND_ERRORS = ("less_than_equal", "less_than", "greater_than_equal", "greater_than", "string_pattern_mismatch")


def _field_description(loc: tuple) -> str | None:
    from pydantic import BaseModel  # lazy: pulls pydantic

    parent = _model_at(loc[:-1])
    if isinstance(parent, type) and issubclass(parent, BaseModel) and isinstance(loc[-1], str):
        fi = parent.model_fields.get(loc[-1])
        return fi.description if fi is not None else None
    return None


# --------------------------------------------------------------------------- loading


def _read_url(url: str) -> str:
    import httpx  # lazy: pulls httpx

    from recipekit.recipe_yaml import MAX_BYTES  # lazy: pulls yaml

    try:
        with httpx.Client(timeout=20.0, follow_redirects=True) as client:
            with client.stream("GET", url) as resp:
                if resp.status_code != 200:
                    raise RecipekitError(
                        code="fetch-not-found",
                        message=f"GET {url} answered {resp.status_code}",
                        exit_code=ExitCode.NOT_FOUND,
                    )
                buf = bytearray()
                for chunk in resp.iter_bytes():
                    buf += chunk
                    if len(buf) > MAX_BYTES:
                        raise RecipekitError(code="file-too-large", message=f"{url} is larger than {MAX_BYTES} bytes")
                return buf.decode("utf-8")
    except httpx.HTTPError as e:
        raise RecipekitError(
            code="fetch-failed",
            message=f"cannot fetch {url}: {e}",
            hint="check the URL and the network",
            exit_code=ExitCode.FAILURE,
        ) from None
    except UnicodeDecodeError:
        raise RecipekitError(code="not-text", message=f"{url} is not UTF-8 text") from None


# the top-level fields of an agent document (recipekit/export.py recipe_document)
DOCUMENT_FIELDS = ("schema_version", "id", "content_hash", "recipe", "default_layout", "layouts")


def _check_document(doc: dict, loaded: LoadedRecipe) -> str:
    """An exported agent document validated as a whole; returns the content hash it states.

    Known top-level fields only; a schema version this recipekit understands (a newer one asks
    for an upgrade); a content hash (compared with the recipe's by the caller); id and
    default_layout agreeing with the recipe. Its rendered `layouts` are compared with what the
    recipe renders to by the caller, once the recipe is validated (`agent_document`)."""
    from recipekit.schema import SCHEMA_VERSION  # lazy: pulls pydantic, pydantic_core

    unknown = sorted(set(doc) - set(DOCUMENT_FIELDS))
    if unknown:
        raise RecipekitError(
            code="document-unknown-field",
            location=f"{loaded.origin} $.{unknown[0]}",
            message=f"the document has field(s) no recipekit document has: {textsafe.shown(', '.join(unknown))[:200]}",
            hint="fetch the document again from its API",
        )
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecipekitError(
            code="document-schema-version",
            location=f"{loaded.origin} $.schema_version",
            message=f"schema_version {textsafe.shown(repr(version))[:40]} is not a version number",
        )
    if version > SCHEMA_VERSION:
        raise RecipekitError(
            code="document-schema-newer",
            location=f"{loaded.origin} $.schema_version",
            message=f"the document has schema version {version}; this recipekit reads {SCHEMA_VERSION}",
            hint="upgrade recipekit",
        )
    stated = doc.get("content_hash")
    if not isinstance(stated, str):
        raise RecipekitError(
            code="document-no-content-hash",
            location=f"{loaded.origin} $.content_hash",
            message="the document states no content_hash",
            hint="fetch the document again",
        )
    rec = doc["recipe"]
    for key, rkey in (("id", "id"), ("default_layout", "default_layout")):
        if key in doc and doc[key] != rec.get(rkey):
            raise RecipekitError(
                code="document-inconsistent",
                location=f"{loaded.origin} $.{key}",
                message=f"the document's {key} {textsafe.shown(repr(doc[key]))[:80]} is not its "
                f"recipe's {textsafe.shown(repr(rec.get(rkey)))[:80]}",
                hint="the file was changed or damaged; fetch it again",
            )
    return stated


def parse_recipe_text(text: str, origin: str) -> LoadedRecipe:
    """Validate recipe text (YAML or JSON). Raises ErrorList with one error per problem."""
    from pydantic import ValidationError  # lazy: pulls pydantic

    from recipekit.recipe_yaml import parse_document  # lazy: pulls yaml
    from recipekit.schema import Recipe  # lazy: pulls pydantic, pydantic_core

    data, lines = parse_document(text, origin)
    loaded = LoadedRecipe(recipe=None, origin=origin, lines=lines, raw=data)  # type: ignore[arg-type]  # set below once valid
    if not isinstance(data, dict):
        raise RecipekitError(
            code="not-a-mapping", message="a recipe must be a mapping at the top level", location=loaded.where("$")
        )
    # An exported document (api/v1/recipes/<id>.json) wraps the recipe and states its hash.
    stated_hash = None
    document: dict | None = None
    if isinstance(data.get("recipe"), dict) and "schema_version" in data["recipe"]:
        stated_hash = _check_document(data, loaded)
        document, data = data, data["recipe"]
        loaded.lines = {}
    try:
        loaded.recipe = Recipe.model_validate(data)
    except ValidationError as e:
        raise ErrorList(validation_errors(e, loaded.where)) from None
    loaded.content_hash = content_hash(loaded.recipe)
    if stated_hash is not None and stated_hash != loaded.content_hash:
        raise RecipekitError(
            code="content-hash-mismatch",
            location=loaded.where("$.content_hash"),
            message=f"the document states {stated_hash} but its recipe hashes to {loaded.content_hash}",
            hint="the file was changed or damaged; fetch it again",
        )
    if document is not None and "layouts" in document:
        loaded.stated_layouts = document["layouts"]
    return loaded


def load_path(path: Path) -> LoadedRecipe:
    from recipekit.recipe_yaml import MAX_BYTES  # lazy: pulls yaml

    text = bounded.read_text(
        path,
        "recipe",
        MAX_BYTES,
        code="unreadable",
        missing_code="recipe-not-found",
        too_large_code="file-too-large",
        not_text_code="not-text",
    )
    return parse_recipe_text(text, str(path))


def catalog_files(root: Optional[Path] = None) -> list[Path]:
    root = root or catalog_dir()
    return sorted(p for p in root.rglob("*.yaml") if not any(part.startswith(".") for part in p.parts))


def _id_index(root: Optional[Path] = None) -> dict[str, Path]:
    """Recipe id -> file, read cheaply from the top-level `id:` line (no full validation)."""

    index: dict[str, Path] = {}
    from recipekit.recipe_yaml import MAX_BYTES  # lazy: pulls yaml

    for p in catalog_files(root):
        try:
            head = bounded.read_text(p, "recipe", MAX_BYTES)
        except (OSError, RecipekitError):
            continue  # load_path gives the error when this file is asked for
        m = re.search(r"^id:\s*['\"]?([a-z0-9][a-z0-9.\-]*)['\"]?\s*$", head, re.M)
        if m:
            index[m.group(1)] = p
    return index


def load_recipe(ref: str) -> LoadedRecipe:
    """Load by catalog id, path to a YAML/JSON file, or http(s) URL ('auto': recipekit.apply.auto)."""
    if ref == "auto":
        raise RecipekitError(
            code="auto-unresolved",
            message="'auto' names no recipe until the host is matched",
            hint="the command resolves 'auto' first (recipekit.apply.auto.load_recipe)",
            exit_code=ExitCode.FAILURE,
        )
    if ref.startswith(URL_PREFIXES):
        return parse_recipe_text(_read_url(ref), ref)
    p = Path(ref).expanduser()
    if p.suffix in (".yaml", ".yml", ".json") or os.sep in ref or p.exists():
        if p.is_dir():
            raise RecipekitError(code="not-a-file", message=f"{ref} is a folder", hint="give a recipe file or id")
        return load_path(p)
    index = _id_index()
    if ref in index:
        return load_path(index[ref])
    partial = [i for i in index if ref.lower() in i]
    hint = did_you_mean(ref, index) or (f"did you mean '{partial[0]}'?" if len(partial) == 1 else None)
    raise RecipekitError(
        code="recipe-not-found",
        message=f"no recipe with id '{ref}'",
        hint=hint or f"known ids: {', '.join(sorted(index))}",
        exit_code=ExitCode.NOT_FOUND,
    )


def list_recipes(root: Optional[Path] = None) -> list[LoadedRecipe]:
    """Every catalog recipe, validated, sorted by id. Invalid files raise (run `recipe lint`)."""
    loaded = [load_path(p) for p in catalog_files(root)]
    return sorted(loaded, key=lambda r: r.id)
