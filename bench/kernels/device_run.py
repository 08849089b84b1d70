"""One command per device run (GPU time is scarce): `python -m recipekit.bench.kernels.device_run
check OUT` runs the parity harness on the Triton kernels at every M and the sm_80 validity compile;
`... bench OUT` runs the roofline bench. Each writes its JSON into OUT (committed beside this
script under bench/kernels/results/)."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any


def check(out: Path) -> dict[str, Any]:
    from recipekit.backends.cuda_sm80 import kernels
    from recipekit.bench.kernels import parity, roofline, validity

    doc: dict[str, Any] = {"provenance": roofline.provenance()}
    impls = {name: kernels.load(spec) for name, spec in kernels.ENTRIES.items()}
    res = parity.run(impls, "cuda")
    for r in res:
        print(r.line(), flush=True)
    doc["parity"] = [r.to_dict() for r in res]
    doc["validity"] = validity.run()
    for v in doc["validity"]:
        print(v, flush=True)
    (out / "check.json").write_text(json.dumps(doc, indent=1))
    return doc


def bench(out: Path) -> dict[str, Any]:
    from recipekit.bench.kernels import roofline

    doc = roofline.run()
    (out / "bench.json").write_text(json.dumps(doc, indent=1))
    return doc


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    try:
        {"check": check, "bench": bench}[mode](folder)
    except Exception:
        traceback.print_exc()
        raise
