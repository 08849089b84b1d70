"""Honest kernel timing: every call reads HBM, and no host launch gap is inside the timer.

- No gap: LAUNCHES back-to-back calls are captured into one CUDA graph, the graph is replayed
  REPLAYS times between two CUDA events, and the figure is the median replay time / LAUNCHES.
  The host issues one graph launch per replay, so Python's per-launch cost (~10-20 us for a Triton
  launch) is outside; what remains between two kernels is the GPU's own launch latency.
- Never from L2: the calls cycle over several copies of their weights, enough that the copies
  together hold at least L2_FACTOR x the card's L2 (H200: 50 MB), so each call finds its weights
  evicted by the calls between (L2 is not big enough to keep any of them).
The copy baseline is timed the same way (copies of a buffer pair cycled in one graph), so every
fraction of copy bandwidth compares like with like.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

LAUNCHES = 64  # calls per graph
REPLAYS = 7  # timed replays of the graph (median)
L2_FACTOR = 4  # the rotated copies together hold at least this many L2 sizes
MAX_COPIES = 64
METHOD = (
    f"{LAUNCHES} back-to-back calls captured in one CUDA graph, median of {REPLAYS} replays between CUDA events / "
    f"{LAUNCHES}; the calls cycle over copies of their weights holding >= {L2_FACTOR}x the L2 size together, "
    "so every call reads its weights from HBM; the copy baseline timed the same way"
)


def l2_bytes(device: int = 0) -> int:
    import torch  # lazy: pulls torch

    props = torch.cuda.get_device_properties(device)
    return int(getattr(props, "L2_cache_size", 0) or 50 << 20)


def copies_needed(bytes_per_call: int, device: int = 0) -> int:
    """How many copies of a call's weights to rotate over so that they exceed L2_FACTOR x L2."""
    need = -(-L2_FACTOR * l2_bytes(device) // max(1, bytes_per_call))
    return max(1, min(MAX_COPIES, need))


def per_call_seconds(calls: Sequence[Callable[[], Any]], launches: int = LAUNCHES, replays: int = REPLAYS) -> float:
    """Median seconds per call of `calls` (cycled, each on its own weight copy) replayed from one CUDA graph."""
    import torch  # lazy: pulls torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile + warm up outside the capture (graph capture wants a side stream)
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(launches):
            calls[i % len(calls)]()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3 / launches)
    del graph
    return float(statistics.median(times))


def _copy_pairs_seconds(nbytes: int) -> tuple[float, int]:
    """Seconds per device-to-device copy_ of an `nbytes` buffer, pairs cycled as the kernels' weights, and the pairs."""
    import torch  # lazy: pulls torch

    n = copies_needed(2 * nbytes)
    pairs = [
        (
            torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1),
            torch.empty(nbytes, dtype=torch.uint8, device="cuda"),
        )
        for _ in range(n)
    ]
    return per_call_seconds([partial(d.copy_, s) for s, d in pairs]), n


def copy_seconds(moved: int) -> float:
    """Seconds of a device copy moving `moved` bytes (half read, half written), timed as copy_bandwidth: the
    baseline of a kernel of that size, whose launch and ramp a 256 MiB copy hides. The buffers are rounded down to
    a multiple of 4 KiB: torch's copy kernel runs unvectorized on a size that is not a multiple of 16 bytes (session
    37's first run: 17.3 against 12.0 us for 42 MB, at sizes a few bytes apart)."""
    return _copy_pairs_seconds(max(4096, moved // 2 // 4096 * 4096))[0]


def copy_bandwidth(nbytes: int = 256 << 20) -> dict[str, Any]:
    """Device-to-device copy of `nbytes` buffers, pairs cycled as the kernels' weights: bytes read + written / time."""
    t, n = _copy_pairs_seconds(nbytes)
    return {
        "bytes": 2 * nbytes,
        "seconds": t,
        "gb_s": 2 * nbytes / t / 1e9,
        "how": f"device-to-device copy_ of {nbytes >> 20} MiB over {n} buffer pairs, bytes read + written; {METHOD}",
    }
