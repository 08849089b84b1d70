"""Step stamps: a finished step records the sha256 of the inputs that matter and what it
produced. On a re-run a step is skipped only when the stamp's key equals the current inputs'
key AND the step's verification of what it produced passes; otherwise it runs again."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Optional

from recipekit.apply.state import read_json, remove, write_json


def inputs_key(inputs: Any) -> str:
    canon = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


def stamp_path(state: Path, step_id: str) -> Path:
    return state / "stamps" / f"{step_id}.json"


def read_stamp(state: Path, step_id: str) -> Optional[dict]:
    data = read_json(stamp_path(state, step_id))
    if not isinstance(data, dict) or "key" not in data:
        return None
    return data


def write_stamp(state: Path, step_id: str, inputs: Any, outputs: dict) -> dict:
    data = {
        "step": step_id,
        "key": inputs_key(inputs),
        "inputs": inputs,
        "outputs": outputs,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(stamp_path(state, step_id), data)
    return data


def clear_stamp(state: Path, step_id: str) -> None:
    remove(stamp_path(state, step_id))


def matches(stamp: Optional[dict], inputs: Any) -> bool:
    return stamp is not None and stamp.get("key") == inputs_key(inputs)
