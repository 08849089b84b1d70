"""What a backend package declares about itself (its `BACKEND` constant), read by discovery.

A leaf module (imports nothing of recipekit) so that the schema can ask which backends and
accelerator kinds exist without importing any backend's code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class CheckpointTools:
    """The checkpoint conversion a backend offers `recipe checkpoint convert|validate|bench`,
    each a "module:function" relative to the backend's package (imported only when used)."""

    convert: str  # (src, dst, parts, progress=) -> report (shards_written, shards_skipped, tensors, ...)
    validate: str  # (src, dst, parts) -> report (ok, checked, mismatches)
    bench: str = ""  # (size_gib, workdir=, keep=, validate=, log=) -> dict
    render_bench: str = ""  # (dict) -> None, the human form of bench


@dataclass(frozen=True)
class BackendSpec:
    """A backend, as its package's `__init__.py` declares it (`BACKEND = BackendSpec(...)`).

    entry          "module:Class" of its Backend, the module relative to the package ("render:GaudiBackend")
    accelerator    the `host.accelerator` kind its recipes match ("none" = any host, no accelerator)
    device_vendor  the vendor the doctor's facts report for that kind's cards (Accelerator.vendor,
                   "nvidia" from nvidia-smi, "habana" from hl-smi); None when no card is needed
    summary        one line for listings
    checkpoint     its checkpoint conversion (CheckpointTools), or None
    layouts        modules whose import registers its checkpoint layouts with
                   recipekit.checkpoint.layout.register_layout (for `recipe checkpoint check`),
                   imported by backends/registry.py load_layouts only when a checkpoint is
                   checked; ".layout" is relative to the backend's package, a dotted name absolute
    """

    entry: str
    accelerator: str = "none"
    device_vendor: Optional[str] = None
    summary: str = ""
    checkpoint: Optional[CheckpointTools] = None
    layouts: tuple[str, ...] = ()
