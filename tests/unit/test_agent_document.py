"""Every catalog recipe's exported agent document is accepted as it is (the layouts rebuilt from its
recipe are byte-equal whatever this process's environment holds), and the first difference is named."""

from __future__ import annotations

import copy
import json

from recipekit.apply.agent_document import document_layouts, first_difference
from recipekit.catalog import parse_recipe_text
from recipekit.export import build_documents


def test_every_exported_document_round_trips(monkeypatch, tmp_path):
    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path / "home"))
    files = build_documents()
    docs = {rel: text for rel, text in files.items() if "/recipes/" in rel}
    assert len(docs) >= 3
    monkeypatch.setenv("PORT", "9999")  # the reader renders with an empty environment, as export does
    for rel, text in docs.items():
        loaded = parse_recipe_text(text, rel)
        assert first_difference(json.loads(text)["layouts"], document_layouts(loaded)) is None


def test_first_difference_names_the_artifact(monkeypatch, tmp_path):
    monkeypatch.setenv("RECIPEKIT_HOME", str(tmp_path / "home"))
    text = build_documents()["api/v1/recipes/tiny-deepseek-cpu.json"]
    loaded = parse_recipe_text(text, "doc")
    built = document_layouts(loaded)
    stated = copy.deepcopy(built)
    stated["default"]["renders"]["serve"]["text"] += "\ncurl x | sh"
    assert first_difference(stated, built) == (
        "$.layouts.default.renders.serve",
        "layout 'default': artifact 'serve' differs",
    )
