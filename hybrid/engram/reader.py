"""Read Engram rows by id from the safetensors regions of the shards, the way the sm_80 engine does.

    reader = ShardRowReader(model_dir)            # a folder with config.json + model.safetensors.index.json
    weight, scale = reader.rows(layer, ids)       # uint8 [n, head_dim] (e4m3 bytes), uint8 [n, head_dim/32] (E8M0)
    values = reader.dequantized(layer, ids)       # float32 [n, head_dim]: e4m3 x the engine's E8M0 scale per 32

The folder may be the served model (the hybrid checkpoint), the official checkpoint or the placed
Engram folder (`DSV41_ENGRAM_DIR`): the tables are found through the index and checked by the
engine's rules (`recipekit.hybrid.engram.rules`) before any read. Row r's weight bytes are at
`8 + header_len + data_offsets[0] + r*head_dim` and its scales in the separate scale region, so a
row costs two `os.pread` calls (row_store.cpp:107-108). Ids are any int array (in any order,
repeats allowed); rows come back in the order asked. `threads > 1` spreads the reads over a pool
in jobs of `job_rows` (the engine: 16 threads, 64-row jobs; smaller batches run inline).
Nothing is cached here: the page cache is the cache, as in the engine.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from recipekit.errors import RecipekitError
from recipekit.hybrid.engram.rules import ENGINE_SCALE_BLOCK, EngramTable, engine_scales, open_tables

ENGINE_THREADS = 16  # DSV41_ENGRAM_THREADS default (consumers.md §3)
ENGINE_JOB_ROWS = 64  # rows per pool job; batches of <= 64 rows run inline


class ShardRowReader:
    def __init__(self, model_dir: str | os.PathLike, threads: int = 1, job_rows: int = ENGINE_JOB_ROWS) -> None:
        self.folder = Path(model_dir)
        self.tables: dict[int, EngramTable] = open_tables(self.folder)
        self.job_rows = max(1, int(job_rows))
        self._fds: dict[int, int] = {}
        try:
            for L, t in self.tables.items():
                self._fds[L] = os.open(t.path, os.O_RDONLY)
        except OSError:
            self.close()
            raise
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="engram-rows") if threads > 1 else None

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> "ShardRowReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def table(self, layer: int) -> EngramTable:
        if layer not in self.tables:
            raise RecipekitError(
                code="engram-layer-unknown",
                message=f"layer {layer} has no Engram table",
                hint=f"Engram layers: {', '.join(map(str, sorted(self.tables)))}",
            )
        return self.tables[layer]

    def _read_job(self, fd: int, t: EngramTable, ids: Any, weight: Any, scale: Any, lo: int, hi: int) -> None:
        hd, sc = t.head_dim, t.scale_cols
        for i in range(lo, hi):
            r = int(ids[i])
            w = os.pread(fd, hd, t.weight_base + r * hd)
            s = os.pread(fd, sc, t.scale_base + r * sc)
            if len(w) != hd or len(s) != sc:
                raise RecipekitError(
                    code="engram-short-read",
                    location=str(t.path),
                    message=f"row {r} of layer {t.layer}: short read",
                    hint="the shard was truncated",
                )
            weight[i] = memoryview(w)
            scale[i] = memoryview(s)

    def rows(self, layer: int, ids: Any) -> tuple[Any, Any]:
        """(weight uint8 [n, head_dim], scale uint8 [n, head_dim/32]) for row ids of one layer."""
        import numpy as np  # lazy: pulls numpy

        t = self.table(layer)
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= t.rows):
            bad = int(ids[(ids < 0) | (ids >= t.rows)][0])
            raise RecipekitError(
                code="engram-row-out-of-range",
                message=f"row {bad} of layer {layer} is outside 0..{t.rows - 1}",
                hint="row ids come from `recipe engram rows`",
            )
        weight = np.empty((ids.size, t.head_dim), dtype=np.uint8)
        scale = np.empty((ids.size, t.scale_cols), dtype=np.uint8)
        fd = self._fds[layer]
        if self._pool is None or ids.size <= self.job_rows:
            self._read_job(fd, t, ids, weight, scale, 0, ids.size)
        else:
            jobs = [
                self._pool.submit(self._read_job, fd, t, ids, weight, scale, lo, min(lo + self.job_rows, ids.size))
                for lo in range(0, ids.size, self.job_rows)
            ]
            for j in jobs:
                j.result()
        return weight, scale

    def dequantized(self, layer: int, ids: Any) -> Any:
        """float32 [n, head_dim]: each e4m3 value times its 32-wide block's E8M0 scale, as the engine
        computes it before its bf16 store (`rules.ENGINE_E8M0`: code 0 gives 0, code 255 gives +-inf)."""
        import ml_dtypes  # lazy: pulls ml_dtypes, numpy
        import numpy as np  # lazy: pulls numpy

        weight, scale = self.rows(layer, ids)
        vals = weight.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf and 0 x inf = NaN, as in the engine
            return vals * np.repeat(engine_scales(scale), ENGINE_SCALE_BLOCK, axis=1)
