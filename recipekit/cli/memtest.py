"""`recipe doctor --memtest`: each card's real memory and copy bandwidth (recipekit.tools.fit.memtest judges the
worker's records); exit 3 when a card holds less than it reports, 0 otherwise."""

from __future__ import annotations

import subprocess
from dataclasses import asdict
from typing import Optional

from recipekit import paths
from recipekit.errors import ExitCode, RecipekitError
from recipekit.output import Output
from recipekit.tools.fit import memtest
from recipekit.tools.p2p.probe import find_torch_python

CHUNK_MIB, RESERVE_MIB = 1024, 512


def run_memtest(out: Output, python: Optional[str], timeout_s: float) -> int:
    py, info, tried = find_torch_python(python, paths.venvs_dir())
    if py is None or not (info and info.get("cuda")):
        raise RecipekitError(
            code="memtest-no-cuda",
            exit_code=ExitCode.HOST_CHECK_FAILED,
            message=f"no Python with torch that sees a CUDA card (tried {', '.join(tried) or 'none'})",
            hint="pass --python /path/to/python of an environment with torch + CUDA (the engine's venv)",
        )
    try:
        records, stderr = memtest.run(py, CHUNK_MIB, RESERVE_MIB, timeout_s)
    except subprocess.TimeoutExpired:
        raise RecipekitError(
            code="memtest-timeout",
            exit_code=ExitCode.HOST_CHECK_FAILED,
            message=f"the memory test did not finish in {timeout_s:.0f} s (+120 s start-up)",
            hint="a hung card or driver; check nvidia-smi, or raise --memtest-timeout",
        ) from None
    cards = [r for r in records if "reported_total_bytes" in r]
    if not cards:
        raise RecipekitError(
            code="memtest-no-result",
            exit_code=ExitCode.HOST_CHECK_FAILED,
            message=f"the memory test reported no card: {(stderr.strip().splitlines() or ['(no output)'])[-1][:200]}",
            hint=f"run {memtest.WORKER} with {py} by hand to see why",
        )
    verdicts = [memtest.judge(r, CHUNK_MIB << 20, RESERVE_MIB << 20) for r in cards]
    code = int(ExitCode.HOST_CHECK_FAILED) if any(v.status == "fail" for v in verdicts) else 0

    def human() -> None:
        for v in verdicts:
            bw = f", copy {v.copy_gbps:,.0f} GB/s" if v.copy_gbps else ""
            print(
                f"{v.status.upper():4s} card {v.index} {v.name}: {v.usable_gib:.1f} of {v.reported_gib:.1f} GiB usable{bw} — {v.why}"
            )

    out.result(
        {"python": py, "torch": info, "cards": [asdict(v) for v in verdicts], "records": cards, "exit_code": code},
        human=human,
    )
    return code
