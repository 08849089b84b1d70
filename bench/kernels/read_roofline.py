"""A pure read of N bytes as a roofline beside the copy (issue 26): what a kernel that only reads, as fast as
plain Triton can, reaches at DSV4.1's weight sizes. The copy baseline moves half its bytes each way; a GEMV only
reads, so this tells the two limits apart (launch and ramp included: timed as timing.per_call_seconds).

Each program reads STEPS x BLOCK consecutive int32 words (the steps unrolled, so every load of a program is in
flight at once) and stores their sum, so the loads are not dead code."""

from __future__ import annotations

from functools import partial
from typing import Any

import triton
import triton.language as tl

from recipekit.bench.kernels import timing

# (BLOCK words, STEPS, num_warps): the fastest is the figure (a roofline is the best a plain reader does)
CONFIGS = ((1024, 1, 4), (1024, 4, 4), (2048, 2, 8), (2048, 4, 8), (4096, 1, 8), (4096, 4, 8), (1024, 8, 4))


@triton.jit
def read_kernel(p_ptr, out_ptr, n_words, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * BLOCK * STEPS
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for i in tl.static_range(STEPS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(p_ptr + offs, mask=offs < n_words, other=0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def _read(buf: Any, out: Any, block: int, steps: int, warps: int) -> None:
    n = buf.numel()
    read_kernel[(triton.cdiv(n, block * steps),)](buf, out, n, BLOCK=block, STEPS=steps, num_warps=warps)


def read_seconds(nbytes: int) -> tuple[float, tuple[int, int, int]]:
    """The fastest CONFIGS' seconds per read of `nbytes` (rounded down to whole words), buffers rotated as the
    kernels' weights (timing.copies_needed), and that config."""
    import torch  # lazy: pulls torch

    words = max(1, nbytes // 4)
    bufs = [torch.ones(words, dtype=torch.int32, device="cuda") for _ in range(timing.copies_needed(4 * words))]
    best: tuple[float, tuple[int, int, int]] | None = None
    for cfg in CONFIGS:
        out = torch.empty(triton.cdiv(words, cfg[0] * cfg[1]), dtype=torch.int32, device="cuda")
        t = timing.per_call_seconds([partial(_read, b, out, *cfg) for b in bufs])
        if best is None or t < best[0]:
            best = (t, cfg)
    assert best is not None
    return best


@triton.jit
def empty_kernel(out_ptr):
    pid = tl.program_id(0)
    tl.store(out_ptr + pid, pid)


def empty_seconds(programs: int, warps: int) -> float:
    """Seconds per launch of a kernel of `programs` programs of `warps` warps that only stores its program id: the
    launch floor of a grid of that size (timed as the kernels)."""
    import torch  # lazy: pulls torch

    out = torch.empty(programs, dtype=torch.int32, device="cuda")
    return timing.per_call_seconds([lambda: empty_kernel[(programs,)](out, num_warps=warps)])
