"""Serial split-K (fp8_gemm's SERIAL field): the last program of a row block sums the splits. Under Triton's CPU
interpreter the sum has split_sum_kernel's bits (signed zeros included) and leaves the counters at zero; a grid
missing one split writes nothing and leaves the count; the counters' slots cycle; the sweep adds SERIAL to the
table's entries that split."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

from recipekit.backends.cuda_sm80.kernels import fp8_gemm  # noqa: E402

_SCRIPT = """
import torch, triton, triton.language as tl
from recipekit.backends.cuda_sm80.kernels import fp8_gemm

@triton.jit
def demo(p_ptr, yb_ptr, cnt_ptr, M, N, stride_ym, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, SPLIT: tl.constexpr):
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    fp8_gemm._serial_split_sum(p_ptr, yb_ptr, cnt_ptr, rn, rn < N, M, N, stride_ym, BLOCK_N, BLOCK_M, SPLIT)

g = torch.Generator().manual_seed(1)
split, m, n, bn = 4, 3, 100, 16
p = torch.randn((split, m, n), generator=g) * torch.randint(0, 2, (split, m, n), generator=g)
p[:, 0, :5] = -0.0  # all-negative-zero columns: a sum started from a partial would keep -0.0
p[1, 1, 7] = float("inf")
blocks = triton.cdiv(n, bn)
ref = torch.empty((m, n), dtype=torch.bfloat16)
fp8_gemm.split_sum_kernel[(triton.cdiv(m * n, 1024),)](p, ref, m * n, SPLIT=split, BLOCK=1024)
for call in range(2):  # the second call finds the counters the first set back to zero
    y = torch.full((m, n), 7.0, dtype=torch.bfloat16)
    cnt = torch.zeros(blocks, dtype=torch.int32) if call == 0 else cnt
    demo[(blocks, split)](p, y, cnt, m, n, y.stride(0), BLOCK_N=bn, BLOCK_M=4, SPLIT=split)
    print("same", call, torch.equal(y.view(torch.int16), ref.view(torch.int16)), cnt.tolist() == [0] * blocks)
y = torch.full((m, n), 7.0, dtype=torch.bfloat16)
demo[(blocks, split - 1)](p, y, cnt, m, n, y.stride(0), BLOCK_N=bn, BLOCK_M=4, SPLIT=split)
print("short", bool((y == 7.0).all()), cnt.tolist() == [split - 1] * blocks)
"""


def test_serial_sum_has_split_sums_bits_under_the_interpreter() -> None:
    r = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True,
        timeout=240, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert lines == ["same 0 True True", "same 1 True True", "short True True"], lines


def test_counter_slots_cycle_and_refuse_what_they_cannot_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from recipekit.backends.cuda_sm80.kernels import serial

    monkeypatch.setattr(serial, "_serial_state", {})
    dev = torch.device("cpu")
    views = [serial.serial_counters(dev, 100) for _ in range(serial.SERIAL_SLOTS + 1)]
    starts = [v.data_ptr() for v in views]
    assert len(set(starts[:-1])) == serial.SERIAL_SLOTS and starts[-1] == starts[0]
    assert all(v.numel() == 100 and v.dtype == torch.int32 and int(v.abs().sum()) == 0 for v in views)
    assert serial.serial_counters(dev, serial.SERIAL_WIDTH + 1) is None
    assert fp8_gemm.serial_counters is serial.serial_counters  # the kernels take their slots from the one module


def test_the_sweep_adds_serial_only_where_the_entry_splits() -> None:
    from recipekit.cli.kernels_fp8_sweep import SERIAL_MMA, with_serial

    assert with_serial("gemv", (16, 256, 4, 4, 3, 1, 3)) == (16, 256, 4, 4, 3, 1, 3, 0, 1)
    assert with_serial("gemv", (8, 1024, 4, 1, 3, 0, 3)) is None  # no split
    assert with_serial("gemv", (16, 512, 4, 2, 2, 0, 2)) is None  # not the register tile
    assert with_serial("mma", (64, 128, 2, 3, 4, 4, 1)) == (64, 128, 2, 3, 4, 4, 1, 0, 0, 1)
    assert with_serial("mma", (128, 128, 4, 3, 4, 4, 1, 0, 1)) == (128, 128, 4, 3, 4, 4, 1, 0, 1, 1)
    assert with_serial("mma", (32, 256, 4, 3, 4)) is None  # the first MMA kernel
    assert all(len(c) == 10 and c[4] > 1 and c[9] == 1 for c in SERIAL_MMA)
