"""The probe's data, computed on the toolkit side (numpy) to judge what the worker reports.

The worker (worker.py, torch) generates the same bytes on the GPU; the toolkit never trusts the
worker's own comparison, it recomputes the expected sha256 here. Chunked so 32 MiB probes do
not need 256 MiB temporaries.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

MULT = 2654435761  # keep equal to worker.py
SEED_MULT = 40503
_CHUNK = 1 << 20

KIB = 1024
# Sizes straddling the 128 KiB and 512 KiB thresholds where copy paths switch, then larger.
COPY_SIZES = (
    128 * KIB - 1,
    128 * KIB,
    128 * KIB + 1,
    512 * KIB - 1,
    512 * KIB,
    512 * KIB + 1,
    1 << 20,
    8 << 20,
    32 << 20,
)
# float32 element counts whose byte sizes straddle the same thresholds (+-4 bytes).
ALLREDUCE_ELEMENTS = tuple(
    b // 4
    for b in (
        128 * KIB - 4,
        128 * KIB,
        128 * KIB + 4,
        512 * KIB - 4,
        512 * KIB,
        512 * KIB + 4,
        1 << 20,
        8 << 20,
        32 << 20,
    )
)


def copy_seed(size_index: int, src: int, dst: int) -> int:
    return 1 + size_index * 1000 + src * 32 + dst


@lru_cache(maxsize=256)
def expected_copy_sha256(n: int, seed: int) -> str:
    import numpy as np  # lazy: pulls numpy

    h = hashlib.sha256()
    for start in range(0, n, _CHUNK):
        x = np.arange(start, min(n, start + _CHUNK), dtype=np.int64) * MULT + seed * SEED_MULT
        h.update((((x >> 13) ^ x) & 0xFF).astype(np.uint8).tobytes())
    return h.hexdigest()


@lru_cache(maxsize=64)
def expected_allreduce_sha256(n: int, world: int) -> str:
    import numpy as np  # lazy: pulls numpy

    h = hashlib.sha256()
    for start in range(0, n, _CHUNK):
        i = np.arange(start, min(n, start + _CHUNK), dtype=np.int64)
        total = np.zeros(i.shape, dtype=np.float32)
        for r in range(world):
            total += ((i * 7 + r * 13) % 251 - 125).astype(np.float32)
        h.update(total.astype("<f4").tobytes())
    return h.hexdigest()
