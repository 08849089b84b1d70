"""What a recipe's effective config says about Engram on NVMe: where the model and the Engram folder
are on the host and in the container, the parallel layout, the storage mode and the opt-in engine
settings, and the published figures the disk must sustain. The apply commands that place and verify
the Engram folder are the recipe's own `engram` / `engram-verify` pipeline steps.

Recipe data read here: the checkpoint pipeline step `engram` (`produces`: the default host folder),
`checkpoint.output.path` (the served model folder), the settings `MODELS_DIR`, `TP`, `PP`,
`ENGRAM_DISK_DIR` (another disk: its bind mount is a `launch.docker.volumes` entry that renders
only when the setting is set), the env knobs `DSV41_ENGRAM_STORAGE`, `DSV41_ENGRAM_DIR`,
`DSV41_MODEL_DIR`, `DSV41_SKIP_WEIGHT_RE`, and the `prefill_tps_cold` / decode results.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from recipekit import templates

ENGRAM_PIPELINE_ID = "engram"
DISK_SETTING = "ENGRAM_DISK_DIR"
ROWS_PER_TOKEN_PER_LAYER = 24


def _setting(eff: Any, name: str, default: Any = None) -> Any:
    v = eff.setting(name, None)
    return default if v in (None, "") else v


def _env(eff: Any, name: str) -> Optional[str]:
    v = eff.env_value(name)
    return None if v in (None, "") else str(v)


@dataclass(frozen=True)
class EngramDeploy:
    model_dir: Optional[Path]  # host folder of the served model (hybrid checkpoint)
    engram_dir: Optional[Path]  # host folder the Engram shards are placed in
    container_engram_dir: Optional[str]
    storage: Optional[str]
    skip_re: Optional[str]
    model_dir_env: Optional[str]
    tp: int
    pp: int
    n_engram_layers: int
    published_prefill_tps: Optional[float]
    published_decode_tps: Optional[float]

    @property
    def rows_per_token(self) -> int:
        return ROWS_PER_TOKEN_PER_LAYER * self.n_engram_layers

    def tables_may_load_into_memory(self) -> Optional[str]:
        """Why the effective config may load the ~189 GiB of tables into memory, or None."""
        if self.storage != "ssd":
            return f"DSV41_ENGRAM_STORAGE={self.storage or '(unset)'}: the tables are loaded as weights"
        if not self.skip_re:
            return (
                "DSV41_SKIP_WEIGHT_RE is unset: the weight loader still reads the Engram tensors the "
                "served model's index maps (the engine's launcher sets it in SSD mode, run-dsv41-pp4.sh:91)"
            )
        return None


def _best_result(recipe: Any, metric: str, layout: Optional[str]) -> Optional[float]:
    vals = [
        r.value
        for r in (getattr(recipe, "results", None) or [])
        if getattr(r, "metric", None) == metric and getattr(r, "layout", None) in (None, layout)
    ]
    nums = [float(v) for v in vals if isinstance(v, (int, float))]  # "296/212/150"-style values are prose
    return max(nums) if nums else None


def from_effective(eff: Any) -> EngramDeploy:

    recipe = eff.recipe
    ck = getattr(recipe, "checkpoint", None)
    pipe = {p.id: p for p in (ck.pipeline if ck else [])}
    out = ck.output if ck else None
    model = Path(str(templates.substitute(out.path, eff.setting))) if out and out.path else None
    engram: Optional[Path] = None
    disk = _setting(eff, DISK_SETTING)
    if disk:
        engram = Path(str(disk))
    elif ENGRAM_PIPELINE_ID in pipe and pipe[ENGRAM_PIPELINE_ID].produces:
        engram = Path(str(templates.substitute(pipe[ENGRAM_PIPELINE_ID].produces, eff.setting)))
    return EngramDeploy(
        model_dir=model,
        engram_dir=engram,
        container_engram_dir=_env(eff, "DSV41_ENGRAM_DIR"),
        storage=_env(eff, "DSV41_ENGRAM_STORAGE"),
        skip_re=_env(eff, "DSV41_SKIP_WEIGHT_RE"),
        model_dir_env=_env(eff, "DSV41_MODEL_DIR"),
        tp=int(_setting(eff, "TP", 1)),
        pp=int(_setting(eff, "PP", 1)),
        n_engram_layers=2,
        published_prefill_tps=_best_result(recipe, "prefill_tps_cold", eff.layout),
        published_decode_tps=_best_result(recipe, "decode_tps_per_stream", eff.layout),
    )
