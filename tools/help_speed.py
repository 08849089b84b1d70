"""How fast `recipe --help` answers: the median wall time over N runs, next to the median of a
bare `python -c pass` measured in the same run (interleaved, so host load hits both alike).

    python -m recipekit.tools.help_speed [--runs N] [--format json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.150  # the goal: `recipe --help` answers in under 150 ms (median)


def recipe_argv() -> list[str]:
    """The installed `recipe` script beside this python, else `python -m recipekit`."""
    beside = Path(sys.executable).with_name("recipe")
    found = str(beside) if beside.is_file() else shutil.which("recipe")
    return [found] if found else [sys.executable, "-m", "recipekit"]


def wall_s(argv: list[str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "100"})
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited with {r.returncode}: {r.stderr.decode(errors='replace')[-500:]}")
    return dt


def measure(runs: int) -> dict:
    help_argv = [*recipe_argv(), "--help"]
    base_argv = [sys.executable, "-c", "pass"]
    wall_s(help_argv)  # warm the page cache and the bytecode cache once, not counted
    helps, bases = [], []
    for _ in range(runs):
        bases.append(wall_s(base_argv))
        helps.append(wall_s(help_argv))
    h, b = statistics.median(helps), statistics.median(bases)
    return {
        "command": " ".join(help_argv),
        "runs": runs,
        "help_median_s": round(h, 4),
        "python_pass_median_s": round(b, 4),
        "ratio": round(h / b, 2),
        "target_s": TARGET_S,
        "under_target": h < TARGET_S,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m recipekit.tools.help_speed", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21, help="runs of each command (default 21)")
    ap.add_argument("--format", choices=["human", "json"], default="human")
    args = ap.parse_args(argv)
    res = measure(max(1, args.runs))
    if args.format == "json":
        print(json.dumps(res, indent=2))
    else:
        print(f"{res['command']}: median {res['help_median_s'] * 1000:.1f} ms over {res['runs']} runs")
        print(f"python -c pass: median {res['python_pass_median_s'] * 1000:.1f} ms (same run, interleaved)")
        print(
            f"ratio: {res['ratio']:.2f}x; target {TARGET_S * 1000:.0f} ms: "
            f"{'met' if res['under_target'] else 'NOT met'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
