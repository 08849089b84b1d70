"""The Gaudi port layout's `quantization_config`, read from data (data/port_quantization_config.json,
which states its source); written by the converter, required by the validator."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files
from typing import Any

DATA = "port_quantization_config.json"


@lru_cache(maxsize=1)
def _load() -> str:
    return (files("recipekit.backends.gaudi") / "data" / DATA).read_text(encoding="utf-8")


def quantization_config() -> dict[str, Any]:
    """A fresh copy of the port's quantization_config."""
    return dict(json.loads(_load())["quantization_config"])
