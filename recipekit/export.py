"""The static JSON API agents fetch: `recipe export --out DIR` writes

  api/v1/recipes.json                 index: id, title, model, hardware, backend, status, layouts, url
  api/v1/recipes/<id>.json            the full recipe, each layout's effective config with sources,
                                      and every rendered artifact (shell string, argv, text)
  api/v1/schema/recipe.schema.json    the JSON Schema of a recipe

Every document carries `schema_version` and a `content_hash`. Output is byte-identical across
runs: no timestamps, no host paths (effective configs use placeholders like <MODELS_DIR>, the
process environment is ignored), fixed key order. Everything is built and validated in memory
first; each file is then written to a temp name, fsynced and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Optional

from recipekit import atomic
from recipekit.apply.agent_document import document_layouts
from recipekit.catalog import list_recipes
from recipekit.errors import RecipekitError

API = "api/v1"


def _dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def _hash(obj: Any) -> str:
    canon = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canon.encode("utf-8")).hexdigest()


def recipe_document(loaded) -> dict:
    """The full export document of one recipe."""
    from recipekit.schema import SCHEMA_VERSION  # lazy: pulls pydantic, pydantic_core

    r = loaded.recipe
    return {
        "schema_version": SCHEMA_VERSION,
        "id": r.id,
        "content_hash": loaded.content_hash,
        "recipe": r.model_dump(mode="json", by_alias=True),
        "default_layout": r.default_layout,
        "layouts": document_layouts(loaded),
    }


def index_entry(loaded) -> dict:
    r = loaded.recipe
    hw = r.hardware
    return {
        "id": r.id,
        "title": r.title,
        "model": r.model.hf_id,
        "hardware": f"{hw.count}x {hw.accelerator}" if hw.count else hw.accelerator,
        "backend": r.backend,
        "status": r.status,
        "layouts": list(r.layouts),
        "default_layout": r.default_layout,
        "tags": list(r.tags),
        "content_hash": loaded.content_hash,
        "url": f"recipes/{r.id}.json",
    }


def build_documents(recipes: Optional[list] = None) -> dict[str, str]:
    """Relative path -> file text for the whole API (nothing written)."""
    from recipekit.schema import SCHEMA_VERSION, json_schema  # lazy: pulls pydantic, pydantic_core

    recipes = recipes if recipes is not None else list_recipes()
    files: dict[str, str] = {}
    entries = []
    for lr in sorted(recipes, key=lambda x: x.id):
        doc = recipe_document(lr)
        files[f"{API}/recipes/{lr.id}.json"] = _dumps(doc)
        entries.append(index_entry(lr))
    index = {
        "schema_version": SCHEMA_VERSION,
        "content_hash": _hash(entries),
        "count": len(entries),
        "recipes": entries,
    }
    files[f"{API}/recipes.json"] = _dumps(index)
    schema = json_schema()
    schema_doc = {"schema_version": SCHEMA_VERSION, "content_hash": _hash(schema), **schema}
    files[f"{API}/schema/recipe.schema.json"] = _dumps(schema_doc)
    return dict(sorted(files.items()))


def export(out_dir: str | Path, recipes: Optional[list] = None) -> list[str]:
    """Write the API under out_dir; returns the relative paths written."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise RecipekitError(
            code="out-not-a-folder", message=f"{out} exists and is not a folder", hint="give a folder for --out"
        )
    files = build_documents(recipes)  # everything validated and rendered before any write
    for rel, text in files.items():
        # the folder is fsynced once, below, after every file is in place; 0644 so a web server
        # (or the site) can serve the documents
        atomic.atomic_write_text(out / rel, text, sync_dir=None, mode=0o644)
    atomic.fsync_dir(out)
    return list(files)
