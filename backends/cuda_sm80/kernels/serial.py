"""Serial split-K's counters, shared by the kernels whose last program of a row block sums the K splits (fp8_gemm,
fp8_gemv_mma, mxfp4_moe's down launch): one module, so that those kernels need not import each other for them."""

from __future__ import annotations

from typing import Any

import torch

# serial split-K's counters: per device, SERIAL_SLOTS slots of SERIAL_WIDTH int32 zeros, a launch taking the next slot
# (each launch sets the counters it used back to 0). Launches on one stream run in order; launches on two streams
# share a slot only SERIAL_SLOTS launches apart. A graph replays the slots it captured: two replays of one graph may
# not run at once (on two streams).
SERIAL_SLOTS = 64
SERIAL_WIDTH = 8192  # row blocks per launch (cdiv(N, BLOCK_N)): DSV4.1's widest, 24576 rows in blocks of 4, is 6144
_serial_state: dict[Any, list[Any]] = {}


def serial_counters(device: Any, blocks: int) -> Any | None:
    """The next slot of `device`'s counters (a view of `blocks` int32 zeros), or None where there is none to give:
    more row blocks than SERIAL_WIDTH, or none allocated yet while a CUDA graph is being captured (torch.zeros there
    would only zero them at replay); the caller then sums with split_sum_kernel."""
    state = _serial_state.get(device)
    if state is None:
        if blocks > SERIAL_WIDTH or (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
            return None
        state = _serial_state[device] = [torch.zeros(SERIAL_SLOTS * SERIAL_WIDTH, dtype=torch.int32, device=device), 0]
    if blocks > SERIAL_WIDTH:
        return None
    buf, slot = state
    state[1] = (slot + 1) % SERIAL_SLOTS
    return buf[slot * SERIAL_WIDTH : slot * SERIAL_WIDTH + blocks]
