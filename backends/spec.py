"""What a backend package declares about itself (its `BACKEND` constant), read by discovery.

A leaf module (imports nothing of recipekit) so that the schema can ask which backends and
accelerator kinds exist without importing any backend's code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class BackendSpec:
    """A backend, as its package's `__init__.py` declares it (`BACKEND = BackendSpec(...)`).

    entry          "module:Class" of its Backend, the module relative to the package ("render:GaudiBackend")
    accelerator    the `host.accelerator` kind its recipes match ("none" = any host, no accelerator)
    device_vendor  the vendor the doctor's facts report for that kind's cards (Accelerator.vendor,
                   "nvidia" from nvidia-smi, "habana" from hl-smi); None when no card is needed
    summary        one line for listings
    """
    entry: str
    accelerator: str = "none"
    device_vendor: Optional[str] = None
    summary: str = ""
