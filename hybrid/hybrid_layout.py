"""The EXL3+FP8 hybrid layout (`hybrid`, alias `exl3-fp8-hybrid`) for recipekit.checkpoint.layout.

An assembly links into several source roots, so its check is the assembly's own
(recipekit.hybrid.assemble.check_hybrid) rather than a list of expected tensors. Importing this
module registers both names.
"""

from __future__ import annotations

from pathlib import Path

from recipekit.checkpoint.layout import CheckpointFormat, LayoutReport, register_layout


def _check_hybrid(folder: Path, hash_sources: bool) -> LayoutReport:
    from recipekit.hybrid.assemble import check_hybrid  # lazy: registering the layout does not load the check

    rep = check_hybrid(folder, quick=not hash_sources)
    rep.sha256_checked = hash_sources
    return rep


for _name in ("hybrid", "exl3-fp8-hybrid"):
    register_layout(
        CheckpointFormat(
            _name,
            None,
            description="the EXL3+FP8 hybrid assembly: links into the official and EXL3 "
            "checkpoints, each tensor from exactly one source",
            check=_check_hybrid,
        )
    )
