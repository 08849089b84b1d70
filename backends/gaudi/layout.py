"""The Gaudi port checkpoint layout check: the tensors of the format in
recipekit.checkpoint.gaudi_port, its config marker, and a hint when the folder is still the
original FP8 layout.

Importing this module registers the `gaudi` layout with recipekit.checkpoint.layout.
"""

from __future__ import annotations

from typing import Any

from recipekit.checkpoint.dsv41 import FP8, Geometry, Spec
from recipekit.checkpoint.gaudi_port import GAUDI_LAYOUT_FORMAT, GAUDI_LAYOUT_KEY, gaudi_tensors
from recipekit.checkpoint.layout import CheckpointFormat, register_layout

# ----------------------------------------------------------------------------- the layout check


def _gaudi_expected(config: dict[str, Any]) -> dict[str, Spec]:
    return gaudi_tensors(Geometry.from_config(config))


def _gaudi_extra(config: dict[str, Any], actual: dict[str, tuple[str, str, tuple[int, ...]]]) -> list[str]:
    marker = config.get(GAUDI_LAYOUT_KEY) or {}
    problems: list[str] = []
    fp8_scaled = [
        n
        for n, (_, dt, _) in actual.items()
        if dt == FP8 and n.endswith(".weight") and f"{n[:-7]}.scale" in actual and ".engram.embed" not in n
    ]
    per_expert = [n for n in actual if ".ffn.experts." in n and n.split(".ffn.experts.")[1].split(".")[0].isdigit()]
    if fp8_scaled or per_expert or (config.get("quantization_config") or {}).get("quant_method") == "fp8":
        problems.insert(
            0,
            "this is the original FP8 layout (FP8 linears with block scales"
            f"{', per-expert tensors' if per_expert else ''}), not the Gaudi port layout: "
            "convert it with `recipe checkpoint convert --target gaudi` first",
        )
    if marker.get("format") != GAUDI_LAYOUT_FORMAT:
        problems.append(f"config has no {GAUDI_LAYOUT_KEY}.format = {GAUDI_LAYOUT_FORMAT!r}")
    return problems


register_layout(
    CheckpointFormat(
        "gaudi",
        _gaudi_expected,
        _gaudi_extra,
        "the Gaudi port: bf16 linears, stacked MXFP4 experts with gate/up rows interleaved, Engram buckets",
        marker_key=GAUDI_LAYOUT_KEY,
        title="Gaudi port",
    )
)
