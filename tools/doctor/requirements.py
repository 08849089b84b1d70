"""What a recipe needs from the host, read from its data (hardware, layout, engine, settings).

The doctor's checks compare these numbers with the facts; nothing model- or card-specific is
written in code. Works on an effective config (recipekit.config) or on a bare Recipe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipekit import backend_discovery as discovery
from recipekit import paths
from recipekit.config import EffectiveConfig, setting_of
from recipekit.deployment import LOOPBACK, server_address

GIB = 1 << 30


@dataclass(frozen=True)
class Requirements:
    recipe_id: str | None = None
    backend: str | None = None
    vendor: str | None = None  # "nvidia" | "habana" | None (no accelerator)
    count: int = 0
    models: tuple[str, ...] = ()  # accepted device names (substring match)
    accelerator: str | None = None  # the recipe's card, for messages
    min_memory_mib: int | None = None
    layout: str | None = None
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    pcie_width_min: int | None = None
    p2p: str = "n/a"  # required | optional | unused | n/a
    fallback_layouts: tuple[str, ...] = ()  # layouts that need neither P2P nor a wide link
    host_ram_bytes: int | None = None
    disk_bytes: int | None = None
    model_dir: str | None = None
    cpu_cores_min: int | None = None
    docker: bool = False
    docker_runtimes: tuple[str, ...] = ()
    ports: tuple[tuple[str, int], ...] = ()
    hardware_notes: tuple[str, ...] = field(default=())


def _recipe_of(obj: Any):
    r = getattr(obj, "recipe", obj)
    return getattr(r, "recipe", r)  # EffectiveConfig.recipe may be a LoadedRecipe


def _layout_name(eff: EffectiveConfig, recipe: Any) -> str | None:
    name = getattr(eff, "layout", None)
    if isinstance(name, str):
        return name
    name = getattr(name, "name", None)
    return name or getattr(recipe, "default_layout", None)


def requirements_from(eff: EffectiveConfig) -> Requirements:

    recipe = _recipe_of(eff)
    hw = recipe.hardware
    host = recipe.host
    lname = _layout_name(eff, recipe)
    layout = recipe.layouts.get(lname) if lname and recipe.layouts else None
    vendor = discovery.vendor_of(host.accelerator)
    count = hw.count or host.count
    min_mib = hw.min_memory_mib_per_device
    if min_mib is None and hw.memory_gib_per_device:
        min_mib = int(hw.memory_gib_per_device * 1024 * 0.9)  # what the tool shows is a bit below nominal
    tp = layout.tensor_parallel if layout else 1
    pp = layout.pipeline_parallel if layout else 1
    width = (
        layout.pcie_width_min
        if layout and layout.pcie_width_min is not None
        else (hw.pcie_width_min if not layout else None)
    )
    p2p = layout.p2p if layout and layout.p2p != "n/a" else (hw.p2p if not layout else "n/a")
    fallbacks = tuple(
        n
        for n, lo in (recipe.layouts or {}).items()
        if n != lname and lo.p2p in ("unused", "n/a", "optional") and (lo.pcie_width_min or 0) < (width or 1 << 30)
    )
    runner = recipe.engine.runner if recipe.engine else None
    docker = runner == "docker" or getattr(recipe.launch, "runner", None) == "docker"
    runtimes = set()
    if docker:
        soft = " ".join(hw.software).lower()
        if "nvidia container toolkit" in soft or "nvidia-container-toolkit" in soft:
            runtimes.add("nvidia")
        if "habana" in soft:
            runtimes.add("habana")
        run = getattr(recipe.launch, "docker", None)
        if run is not None and run.runtime:
            runtimes.add(run.runtime)
    model_dir = setting_of(eff, "MODELS_DIR") or setting_of(eff, "MODEL_DIR") or str(paths.models_dir())
    ports: tuple[tuple[str, int], ...] = ()
    if isinstance(eff, EffectiveConfig):
        a = server_address(eff)
        ports = ((a.local_host if a.local_host != "localhost" else LOOPBACK, a.port),)
    return Requirements(
        recipe_id=recipe.id,
        backend=recipe.backend,
        vendor=vendor,
        count=count,
        models=tuple(host.models),
        accelerator=hw.accelerator,
        min_memory_mib=min_mib,
        layout=lname,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        pcie_width_min=width,
        p2p=p2p,
        fallback_layouts=fallbacks,
        host_ram_bytes=int(hw.host_ram_gib_min * GIB) if hw.host_ram_gib_min else None,
        disk_bytes=int(hw.disk_gib_min * GIB) if hw.disk_gib_min else None,
        model_dir=str(Path(str(model_dir)).expanduser()),
        cpu_cores_min=hw.cpu_cores_min,
        docker=docker,
        docker_runtimes=tuple(sorted(runtimes)),
        ports=ports,
        hardware_notes=tuple(hw.notes),
    )
