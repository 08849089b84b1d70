"""The driver version a device run's provenance records (recipekit.cli.kernels_device_run, kernels_fp8_sweep):
the doctor's reader, else nvidia-smi's own answer (said as such)."""

from __future__ import annotations

import subprocess

from recipekit.cli.kernels import driver_version


def driver() -> str | None:
    """The doctor's driver version; None (said in the output) where the device image lacks a package
    the doctor's collector needs: the result is still worth its figures."""
    try:
        return driver_version()
    except ImportError as e:  # the device image has no pydantic: nvidia-smi's own answer, said as such
        print(f"the doctor's collector cannot run here ({e}): driver version from nvidia-smi", flush=True)
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = proc.stdout.split()
    return f"{lines[0]} (nvidia-smi)" if proc.returncode == 0 and lines else None
