"""The Engram row store: page-aligned per-rank row files, batched lookups, LRU cache, prefetch.

Layout (research/engram-store.md): a row is 256 e4m3 bytes + 8 E8M0 scale bytes = 264 B; 15 rows
are packed per 4 KiB page (3,960 B used), so every row is one aligned read and never straddles
two pages (other head_dims, e.g. tiny checkpoints', pack as many whole rows as fit a page). Each rank owns complete hash-column buckets (contiguous columns, ceil(cols / ranks) per
rank, the same split as vLLM's head sharding) and gets one file per Engram layer:
`engram-l<layer>-r<rank>of<N>.bin`. `engram-store.json` records bucket ranges, row size, sizes
and sha256 of every file; packing is resumable file by file (temp name, fsync, rename).

Lookups dedupe and sort the requested rows, coalesce consecutive rows into one `os.preadv`
(scattering straight into the output, page tails into a scratch buffer), and spread the reads
over a thread pool (queue depth = threads; the GIL is released inside the syscall).
"""
from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from recipekit.errors import ExitCode, RecipekitError

STORE_FORMAT = "recipekit-engram-store/1"
MANIFEST_NAME = "engram-store.json"
PAGE_BYTES = 4096
HEAD_DIM = 256
SCALE_COLS = HEAD_DIM // 32
ROW_BYTES = HEAD_DIM + SCALE_COLS            # 264
ROWS_PER_PAGE = PAGE_BYTES // ROW_BYTES      # 15
PAGE_TAIL = PAGE_BYTES - ROWS_PER_PAGE * ROW_BYTES  # 136 unused bytes per page
MIN_ROWS_PER_TASK = 8       # small decode batches still spread over every I/O thread
MAX_RUN_ROWS = 256
MAPPED_MIN_FRACTION = 0.5   # serve a batch's cached rows through the mapping only if most are cached


def row_file_name(layer_id: int, rank: int, ranks: int) -> str:
    return f"engram-l{layer_id}-r{rank}of{ranks}.bin"


@dataclass(frozen=True)
class RowGeometry:
    """How rows of a `head_dim`-wide table sit in 4 KiB pages (256 -> 264-B rows, 15 per page)."""

    head_dim: int = HEAD_DIM

    def __post_init__(self):
        if self.head_dim <= 0 or self.head_dim % 32 or self.row_bytes > PAGE_BYTES:
            raise RecipekitError(code="engram-table-invalid", message=f"engram head_dim {self.head_dim}",
                                 hint="rows must be a multiple of 32 wide (one E8M0 scale per 32) and fit a page")

    @property
    def scale_cols(self) -> int:
        return self.head_dim // 32

    @property
    def row_bytes(self) -> int:
        return self.head_dim + self.head_dim // 32

    @property
    def rows_per_page(self) -> int:
        return PAGE_BYTES // self.row_bytes

    @property
    def page_tail(self) -> int:
        return PAGE_BYTES - self.rows_per_page * self.row_bytes

    def offset(self, local_row):
        """Byte offset of a rank-local row (int or numpy array)."""
        return (local_row // self.rows_per_page) * PAGE_BYTES + (local_row % self.rows_per_page) * self.row_bytes

    def file_bytes(self, rows: int) -> int:
        return -(-rows // self.rows_per_page) * PAGE_BYTES


DEFAULT_GEOMETRY = RowGeometry(HEAD_DIM)


def row_offset(local_row, geometry: RowGeometry = DEFAULT_GEOMETRY):
    return geometry.offset(local_row)


def io_tasks(rows: int, threads: int) -> int:
    """How many read tasks to split `rows` into: one per thread, at least MIN_ROWS_PER_TASK rows each."""
    return max(1, min(threads, rows // MIN_ROWS_PER_TASK))


def rank_columns(n_cols: int, ranks: int, rank: int) -> tuple[int, int]:
    """[first, last) hash columns owned by `rank` (contiguous, ceil(n_cols / ranks) each)."""
    if ranks < 1:
        raise RecipekitError(code="engram-ranks-invalid", message=f"--ranks {ranks}", hint="use 1 or more ranks")
    per = -(-n_cols // ranks)
    if (ranks - 1) * per >= n_cols:
        raise RecipekitError(
            code="engram-ranks-invalid",
            message=f"{n_cols} hash columns over {ranks} ranks leaves ranks without a bucket",
            hint=f"use at most {n_cols} ranks, e.g. a divisor of {n_cols}")
    return rank * per, min((rank + 1) * per, n_cols)


# ---------------------------------------------------------------------------------------------
# writing


def pack_pages(weight, scale, g: RowGeometry = DEFAULT_GEOMETRY):
    """Rows of weight bytes [n, head_dim] + scale codes [n, head_dim/32] -> pages (zero-padded)."""
    import numpy as np

    n = weight.shape[0]
    per, rb = g.rows_per_page, g.row_bytes
    pages = -(-n // per)
    rec = np.zeros((pages * per, rb), dtype=np.uint8)
    rec[:n, :g.head_dim] = np.asarray(weight).view(np.uint8).reshape(n, g.head_dim)
    rec[:n, g.head_dim:] = np.asarray(scale).view(np.uint8).reshape(n, g.scale_cols)
    buf = np.zeros((pages, PAGE_BYTES), dtype=np.uint8)
    buf[:, : per * rb] = rec.reshape(pages, per * rb)
    return buf


def write_row_file(path: Path, chunks: Iterable[tuple], progress: Callable[[int], None] | None = None,
                   g: RowGeometry = DEFAULT_GEOMETRY) -> dict:
    """Write (weight [n, head_dim], scale [n, head_dim/32]) chunks as a page-aligned row file, atomically.

    Every chunk but the last must hold a whole number of pages. Returns {"rows", "size", "sha256"}.
    """
    import hashlib

    from recipekit.atomic import atomic_open, pid_temp_name

    h = hashlib.sha256()
    rows = size = 0
    ragged = False
    with atomic_open(path, sync_dir="ignore", temp=pid_temp_name(Path(path))) as f:
        for weight, scale in chunks:
            if ragged:
                raise ValueError("only the last chunk may hold a partial page")
            n = weight.shape[0]
            ragged = n % g.rows_per_page != 0
            pages = pack_pages(weight, scale, g)
            data = memoryview(pages).cast("B")
            f.write(data)
            h.update(data)
            rows += n
            size += len(data)
            if progress:
                progress(n)
    return {"rows": rows, "size": size, "sha256": h.hexdigest()}


@dataclass(frozen=True)
class RankFile:
    layer: int
    rank: int
    ranks: int
    name: str
    cols: tuple[int, int]          # [first, last) hash columns
    row_start: int                 # first layer row id in this file
    row_end: int                   # one past the last
    size: int
    sha256: str

    @property
    def rows(self) -> int:
        return self.row_end - self.row_start

    def to_dict(self) -> dict:
        return {"layer": self.layer, "rank": self.rank, "ranks": self.ranks, "name": self.name,
                "cols": list(self.cols), "row_start": self.row_start, "row_end": self.row_end,
                "rows": self.rows, "size": self.size, "sha256": self.sha256}

    @classmethod
    def from_dict(cls, d: dict) -> "RankFile":
        return cls(int(d["layer"]), int(d["rank"]), int(d["ranks"]), str(d["name"]), tuple(d["cols"]),
                   int(d["row_start"]), int(d["row_end"]), int(d["size"]), str(d["sha256"]))


def _available_memory() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        return 8 << 30


def read_manifest(store_dir: Path | str) -> dict:
    path = Path(store_dir) / MANIFEST_NAME
    if not path.is_file():
        raise RecipekitError(code="engram-store-missing", location=str(path),
                             message="no engram-store.json in this folder",
                             hint="create it with `recipe engram pack CKPT --out DIR --ranks N`",
                             exit_code=ExitCode.NOT_FOUND)
    try:
        doc = json.loads(path.read_text())
    except ValueError as e:
        raise RecipekitError(code="engram-store-invalid", location=str(path),
                             message=f"manifest does not parse: {e}", hint="re-run `recipe engram pack`") from None
    hd = doc.get("head_dim")
    ok = doc.get("format") == STORE_FORMAT and isinstance(hd, int) and hd > 0 and hd % 32 == 0
    g = RowGeometry(hd) if ok and hd + hd // 32 <= PAGE_BYTES else None
    if g is None or doc.get("row_bytes") != g.row_bytes or doc.get("rows_per_page") != g.rows_per_page \
            or doc.get("page_bytes") != PAGE_BYTES or not isinstance(doc.get("files"), dict):
        raise RecipekitError(code="engram-store-invalid", location=str(path),
                             message=f"not a {STORE_FORMAT} manifest with consistent head_dim, row_bytes and rows_per_page",
                             hint="re-run `recipe engram pack`")
    return doc


def geometry_of(doc: dict) -> RowGeometry:
    return RowGeometry(int(doc["head_dim"]))


def write_manifest(store_dir: Path, doc: dict) -> None:
    from recipekit.atomic import atomic_write_text, pid_temp_name

    path = store_dir / MANIFEST_NAME
    atomic_write_text(path, json.dumps(doc, indent=1) + "\n", sync_dir="ignore", temp=pid_temp_name(path))


def new_manifest(ranks: int, layers: list[dict], extra: dict | None = None,
                 g: RowGeometry = DEFAULT_GEOMETRY) -> dict:
    doc = {"format": STORE_FORMAT, "row_bytes": g.row_bytes, "rows_per_page": g.rows_per_page,
           "page_bytes": PAGE_BYTES, "head_dim": g.head_dim, "scale_cols": g.scale_cols,
           "ranks": ranks, "layers": layers, "files": {}}
    doc.update(extra or {})
    return doc


def verify_store(store_dir: Path | str, full: bool = True) -> list[str]:
    """Problems with the row files (sizes always; sha256 when `full`): empty = intact."""
    from recipekit.checkpoint.manifest import sha256_file

    store_dir = Path(store_dir)
    doc = read_manifest(store_dir)
    g = geometry_of(doc)
    problems = []
    for name, ent in sorted(doc["files"].items()):
        rf = RankFile.from_dict(ent)
        p = store_dir / rf.name
        if not p.is_file():
            problems.append(f"{rf.name}: missing")
            continue
        size = p.stat().st_size
        if size != rf.size or rf.size != g.file_bytes(rf.rows):
            problems.append(f"{rf.name}: {size} bytes, the manifest says {rf.size} for {rf.rows} rows")
        elif full and sha256_file(p) != rf.sha256:
            problems.append(f"{rf.name}: sha256 differs from the manifest")
    return problems


# ---------------------------------------------------------------------------------------------
# reading


class RowCache:
    """A bounded LRU of packed 264-B rows keyed by (layer, row id)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._d: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._d)

    def get_many(self, keys: Sequence) -> list:
        with self._lock:
            out = []
            d = self._d
            for k in keys:
                v = d.get(k)
                if v is not None:
                    d.move_to_end(k)
                    self.hits += 1
                else:
                    self.misses += 1
                out.append(v)
            return out

    def put_many(self, items: Iterable[tuple]) -> None:
        with self._lock:
            d = self._d
            for k, v in items:
                d[k] = v
                d.move_to_end(k)
            while len(d) > self.capacity:
                d.popitem(last=False)


class RowStore:
    """Read access to one layer's row files (all ranks, or the ranks given)."""

    def __init__(self, store_dir: Path | str, layer_id: int, ranks: Sequence[int] | None = None,
                 threads: int = 8, cache_rows: int = 0, resident_hint: bool = True,
                 max_resident_pages: int | None = None):
        import mmap

        import numpy as np

        self.dir = Path(store_dir)
        self.doc = read_manifest(self.dir)
        self.g = g = geometry_of(self.doc)
        self.layer_id = layer_id
        files = [RankFile.from_dict(e) for e in self.doc["files"].values() if int(e["layer"]) == layer_id]
        if not files:
            known = sorted({int(e["layer"]) for e in self.doc["files"].values()})
            raise RecipekitError(code="engram-layer-unknown", location=str(self.dir / MANIFEST_NAME),
                                 message=f"the store has no rows for layer {layer_id}",
                                 hint=f"layers in this store: {', '.join(map(str, known)) or 'none'}",
                                 exit_code=ExitCode.NOT_FOUND)
        if ranks is not None:
            files = [f for f in files if f.rank in set(ranks)]
        self.files = sorted(files, key=lambda f: f.row_start)
        self._fds: list[int] = []
        self._maps: list = []
        self._views: list = []
        self._resident: list = []
        flags = os.O_RDONLY
        try:
            for f in self.files:
                p = self.dir / f.name
                try:
                    fd = os.open(p, flags)
                except FileNotFoundError:
                    raise RecipekitError(code="engram-store-corrupt", location=str(p),
                                         message="row file listed in the manifest is missing",
                                         hint="re-run `recipe engram pack` (it resumes)") from None
                self._fds.append(fd)
                size = os.fstat(fd).st_size
                if size != f.size or size != g.file_bytes(f.rows):
                    raise RecipekitError(code="engram-store-corrupt", location=str(p),
                                         message=f"{size} bytes, the manifest says {f.size} for {f.rows} rows",
                                         hint="re-run `recipe engram pack` to rewrite it")
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                pages = size // PAGE_BYTES
                if resident_hint and pages:
                    mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
                    if hasattr(mm, "madvise"):
                        mm.madvise(mmap.MADV_RANDOM)
                    self._maps.append(mm)
                    base = np.frombuffer(mm, dtype=np.uint8)
                    self._views.append(np.lib.stride_tricks.as_strided(
                        base, shape=(pages, g.rows_per_page, g.row_bytes), strides=(PAGE_BYTES, g.row_bytes, 1),
                        writeable=False))
                    self._resident.append(np.zeros(pages, dtype=bool))
        except BaseException:
            self.close()
            raise
        self._starts = np.array([f.row_start for f in self.files], dtype=np.int64)
        self._ends = np.array([f.row_end for f in self.files], dtype=np.int64)
        self.threads = max(1, int(threads))
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="engram-io") if self.threads > 1 else None
        self.cache = RowCache(cache_rows) if cache_rows > 0 else None
        self.rows_read = 0        # rows fetched from files (after dedupe and cache)
        self.syscalls = 0
        self.rows_mapped = 0      # of which served through the mapping (pages known to be cached)
        self.resident_hint = bool(self._views)
        if max_resident_pages is None:
            max_resident_pages = _available_memory() // (2 * PAGE_BYTES)
        self.max_resident_pages = max_resident_pages
        self._resident_count = 0

    # -- lifecycle
    def close(self) -> None:
        self._views = []
        for mm in getattr(self, "_maps", []):
            try:
                mm.close()
            except (BufferError, ValueError):
                pass
        self._maps = []
        for fd in getattr(self, "_fds", []):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> "RowStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def drop_page_cache(self) -> None:
        """Ask the kernel to forget this store's cached pages (cold-read measurements)."""
        import mmap

        for mm in self._maps:       # mapped pages are pinned in the cache: unmap them first
            if hasattr(mm, "madvise"):
                mm.madvise(mmap.MADV_DONTNEED)
        for fd in self._fds:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        self.forget_resident()

    def forget_resident(self) -> None:
        """Forget which pages were read (they may have left the page cache)."""
        for r in self._resident:
            r[:] = False
        self._resident_count = 0

    # -- reads
    def _locate(self, ids):
        import numpy as np

        fi = np.searchsorted(self._starts, ids, side="right") - 1
        ok = (fi >= 0) & (ids < self._ends[np.clip(fi, 0, None)])
        if not ok.all():
            bad = int(ids[~ok][0])
            raise RecipekitError(code="engram-row-not-local",
                                 message=f"row {bad} of layer {self.layer_id} is not in the opened row files",
                                 hint="this rank does not own that bucket; open the store with all ranks")
        return fi

    def _read_runs(self, fd: int, offs: list, counts: list, got, first: list) -> int:
        """Read runs of consecutive rows: run i = counts[i] rows at offs[i] into got rows first[i]...

        Single rows (the common case for random n-grams) take one os.pread each, joined in C;
        longer runs take one os.preadv that scatters rows into place and page tails into scratch.
        """
        import numpy as np

        g = self.g
        rb, per, tail_len = g.row_bytes, g.rows_per_page, g.page_tail
        singles = [i for i, c in enumerate(counts) if c == 1]
        if len(singles) == len(counts):
            single_offs, single_dst = offs, first
        else:
            single_offs = [offs[i] for i in singles]
            single_dst = [first[i] for i in singles]
        calls = 0
        if single_offs:
            pread = os.pread
            data = b"".join([pread(fd, rb, o) for o in single_offs])
            calls += len(single_offs)
            if len(data) != len(single_offs) * rb:
                raise RecipekitError(code="engram-store-short-read",
                                     message=f"short read ({len(data)} of {len(single_offs) * rb} bytes)",
                                     hint="a row file was truncated after opening; run `recipe engram verify`")
            got[single_dst] = np.frombuffer(data, dtype=np.uint8).reshape(-1, rb)
        if len(singles) == len(counts):
            return calls
        dst = memoryview(got).cast("B")
        tail = bytearray(tail_len)
        for off, cnt, row0 in zip(offs, counts, first):
            if cnt == 1:
                continue
            bufs: list[memoryview | bytearray] = []
            want = 0
            slot = (off % PAGE_BYTES) // rb
            for k in range(cnt):
                bufs.append(dst[(row0 + k) * rb:(row0 + k + 1) * rb])
                want += rb
                slot += 1
                if slot == per:
                    slot = 0
                    if k != cnt - 1 and tail_len:
                        bufs.append(tail)
                        want += tail_len
            got_n = os.preadv(fd, bufs, off)
            calls += 1
            if got_n != want:
                raise RecipekitError(code="engram-store-short-read",
                                     message=f"short read ({got_n} of {want} bytes at offset {off})",
                                     hint="a row file was truncated after opening; run `recipe engram verify`")
        return calls

    def read_records(self, row_ids):
        """Packed rows [n, row_bytes] (uint8) for layer row ids (any shape, flattened, in order).

        Not for concurrent calls on one store (use one Prefetcher, or one store per thread).
        """
        import numpy as np

        ids = np.asarray(row_ids, dtype=np.int64).reshape(-1)
        out = np.empty((ids.size, self.g.row_bytes), dtype=np.uint8)
        if ids.size == 0:
            return out
        uniq, inverse = np.unique(ids, return_inverse=True)
        got = np.empty((uniq.size, self.g.row_bytes), dtype=np.uint8)
        need = np.arange(uniq.size)
        if self.cache is not None:
            keys = uniq.tolist()
            cached = self.cache.get_many(keys)
            miss = [i for i, v in enumerate(cached) if v is None]
            for i, v in enumerate(cached):
                if v is not None:
                    got[i] = np.frombuffer(v, dtype=np.uint8)
            need = np.asarray(miss, dtype=np.int64)
        if need.size:
            self._fetch(uniq[need], got, need)
            if self.cache is not None:
                self.cache.put_many((int(uniq[i]), got[i].tobytes()) for i in need)
        out[:] = got[inverse.reshape(-1)]
        return out

    def _fetch(self, ids, got, slots) -> None:
        """Read sorted unique ids into got[slots] with coalesced preadv calls on the pool."""
        import numpy as np

        fi = self._locate(ids)
        local = ids - self._starts[fi]
        self.rows_read += int(ids.size)
        if self.resident_hint:
            # Rows on pages this store has already read are (very likely) in the page cache:
            # copy them through the mapping, no syscall. The rest goes to preadv below.
            page = local // self.g.rows_per_page
            mapped = np.zeros(ids.size, dtype=bool)
            for f in np.unique(fi):
                sel = fi == f
                mapped[sel] = self._resident[int(f)][page[sel]]
            if mapped.sum() < MAPPED_MIN_FRACTION * ids.size:
                mapped[:] = False       # a mostly cold batch: all through preadv (measured faster)
            for f in np.unique(fi[mapped]):
                m = mapped & (fi == f)
                got[slots[m]] = self._views[int(f)][page[m], local[m] % self.g.rows_per_page]
            n_mapped = int(mapped.sum())
            self.rows_mapped += n_mapped
            if n_mapped:
                keep = ~mapped
                ids, fi, local, slots, page = ids[keep], fi[keep], local[keep], slots[keep], page[keep]
            if ids.size:
                self._mark_resident(fi, page)
        if ids.size == 0:
            return
        # a run continues while the next row is the next row id of the same file
        brk = np.ones(ids.size, dtype=bool)
        brk[1:] = (fi[1:] != fi[:-1]) | (local[1:] != local[:-1] + 1) | (slots[1:] != slots[:-1] + 1)
        brk[::MAX_RUN_ROWS] = True      # stay far below IOV_MAX buffers per preadv
        starts = np.flatnonzero(brk)
        counts = np.diff(np.append(starts, ids.size))
        offs = self.g.offset(local[starts])
        run_file = fi[starts]
        first_slot = slots[starts]
        tasks = []
        for f in np.unique(run_file):
            sel = np.flatnonzero(run_file == f)
            fd = self._fds[int(f)]
            n_tasks = io_tasks(int(counts[sel].sum()), self.threads if self._pool is not None else 1)
            for part in np.array_split(sel, n_tasks):
                if part.size:
                    tasks.append((fd, part))
        args = [(fd, offs[s].tolist(), counts[s].tolist(), got, first_slot[s].tolist()) for fd, s in tasks]
        if self._pool is None or len(args) == 1:
            for a in args:
                self.syscalls += self._read_runs(*a)
        else:
            for n in self._pool.map(lambda a: self._read_runs(*a), args):
                self.syscalls += n

    def _mark_resident(self, fi, page) -> None:
        import numpy as np

        if self._resident_count + page.size > self.max_resident_pages:
            self.forget_resident()       # bounded: never trust more pages than half the RAM
        for f in np.unique(fi):
            r = self._resident[int(f)]
            p = page[fi == f]
            new = int((~r[p]).sum())
            r[p] = True
            self._resident_count += new

    def lookup(self, row_ids):
        """Dequantized rows float32 [..., 256] for layer row ids of any shape."""
        import numpy as np

        ids = np.asarray(row_ids, dtype=np.int64)
        rec = self.read_records(ids)
        return dequantize_records(rec, self.g).reshape(ids.shape + (self.g.head_dim,))


_E4M3_LUT = None


def dequantize_records(rec, g: RowGeometry):
    """Packed rows [n, row_bytes] -> float32 [n, head_dim]: e4m3 x 2^(e8m0 - 127) per 32 columns."""
    import numpy as np

    from recipekit.checkpoint.codecs import ENGRAM_BLOCK, e8m0_to_float, fp8_dequant_f32

    global _E4M3_LUT
    if _E4M3_LUT is None:
        # the codec's own e4m3 values (scale code 127 = 1.0), as a 256-entry table
        _E4M3_LUT = fp8_dequant_f32(np.arange(256, dtype=np.uint8).reshape(8, 32),
                                    np.full((8, 1), 127, dtype=np.uint8), ENGRAM_BLOCK).reshape(256)
    n, hd = rec.shape[0], g.head_dim
    vals = np.take(_E4M3_LUT, rec[:, :hd]).reshape(n, g.scale_cols, 32)
    vals *= e8m0_to_float(rec[:, hd:])[:, :, None]
    return vals.reshape(n, hd)


class Prefetcher:
    """Starts a step's row reads in the background as soon as its tokens are known.

    `start(row_ids)` returns at once; `result()` waits for (and returns) the dequantized rows of
    the most recent start. One step in flight at a time, as in a decode loop.
    """

    def __init__(self, store: RowStore, dequantize: bool = True):
        self.store = store
        self.dequantize = dequantize
        self._exec = ThreadPoolExecutor(1, thread_name_prefix="engram-prefetch")
        self._future: Future | None = None

    def start(self, row_ids) -> Future:
        fn = self.store.lookup if self.dequantize else self.store.read_records
        self._future = self._exec.submit(fn, row_ids)
        return self._future

    def result(self):
        if self._future is None:
            raise RuntimeError("no prefetch started")
        f, self._future = self._future, None
        return f.result()

    def close(self) -> None:
        self._exec.shutdown(wait=True)


# ---------------------------------------------------------------------------------------------
# packing a checkpoint's tables


def _source_tables(ckpt: Path, layer_id: int, g: RowGeometry):
    """(weight TensorInfo + file, scale TensorInfo + file) of a layer's Engram table, checked."""
    from recipekit.checkpoint.safetensors_io import Checkpoint

    c = Checkpoint(ckpt)
    wname, sname = f"layers.{layer_id}.engram.embed.weight", f"layers.{layer_id}.engram.embed.scale"
    wf, sf = c.tensor_file(wname), c.tensor_file(sname)
    w, s = wf.info(wname), sf.info(sname)
    if w.dtype != "F8_E4M3" or len(w.shape) != 2 or w.shape[1] != g.head_dim:
        raise RecipekitError(code="engram-table-invalid", location=str(wf.path),
                             message=f"{wname} is {w.dtype}{list(w.shape)}, expected F8_E4M3 [rows, {g.head_dim}]",
                             hint="only the DeepSeek-V4.1 Engram table layout is supported")
    if s.dtype != "F8_E8M0" or tuple(s.shape) != (w.shape[0], g.scale_cols):
        raise RecipekitError(code="engram-table-invalid", location=str(sf.path),
                             message=f"{sname} is {s.dtype}{list(s.shape)}, expected F8_E8M0 [{w.shape[0]}, {g.scale_cols}]",
                             hint="one E8M0 scale per row per 32 columns")
    return c, wname, sname, w.shape[0]


def pack_store(ckpt: Path | str, out: Path | str, ranks: int, layers: Sequence[int] | None = None,
               chunk_pages: int = 4096, verify_existing: bool = True,
               progress: Callable[[str, int, int], None] | None = None) -> dict:
    """Pack every Engram layer's table of `ckpt` into per-rank row files under `out` (resumable)."""
    from recipekit.atomic import remove_stale_temps
    from recipekit.hybrid.engram.addressing import (EngramAddresser, EngramConfig, EngramLayout,
                                                    multipliers_document)
    from recipekit.checkpoint.manifest import sha256_file

    ckpt, out = Path(ckpt), Path(out)
    cfg = EngramConfig.from_checkpoint(ckpt)
    g = RowGeometry(cfg.head_dim)
    chunk_rows = chunk_pages * g.rows_per_page
    layout = EngramLayout.build(cfg)
    addr = EngramAddresser.from_checkpoint(ckpt)
    want_layers = list(cfg.layer_ids) if layers is None else [int(x) for x in layers]
    for lid in want_layers:
        cfg.layer_index(lid)
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out)
    layer_docs = []
    for lid in cfg.layer_ids:
        layer_docs.append({"layer": lid, "rows": layout.rows(lid),
                           "buckets": [list(r) for r in layout.bucket_ranges(lid)]})
    extra = {"source": {"checkpoint": str(ckpt.resolve())},
             "engram": {"n_cols": cfg.n_cols, "n_heads": cfg.n_heads, "max_ngram_size": cfg.max_ngram_size,
                        "pad_token_id": cfg.pad_token_id, "vocab_size": cfg.vocab_size},
             "multipliers": multipliers_document(cfg, addr.compressed_vocab_size, addr.multipliers)}
    try:
        doc = read_manifest(out)
        if doc.get("ranks") != ranks or doc.get("layers") != layer_docs:
            raise RecipekitError(code="engram-store-mismatch", location=str(out / MANIFEST_NAME),
                                 message=f"the folder holds a store for {doc.get('ranks')} ranks or other buckets",
                                 hint="use another --out folder, or delete this one")
        doc.update(extra)
    except RecipekitError as e:
        if e.code != "engram-store-missing":
            raise
        doc = new_manifest(ranks, layer_docs, extra, g)
    report: dict[str, Any] = {"written": [], "skipped": [], "out": str(out)}
    c = None
    try:
        for lid in want_layers:
            c, wname, sname, nrows = _source_tables(ckpt, lid, g)
            if nrows != layout.rows(lid):
                raise RecipekitError(code="engram-layout-mismatch",
                                     message=f"layer {lid}: table has {nrows} rows, the config's buckets sum to {layout.rows(lid)}",
                                     hint="config.json and the Engram shards do not belong together")
            wf, sf = c.tensor_file(wname), c.tensor_file(sname)
            starts = [o for o in layout.offsets[cfg.layer_index(lid)]]
            primes = layout.primes[cfg.layer_index(lid)]
            for r in range(ranks):
                c0, c1 = rank_columns(cfg.n_cols, ranks, r)
                r0, r1 = starts[c0], starts[c1 - 1] + primes[c1 - 1]
                name = row_file_name(lid, r, ranks)
                prev = doc["files"].get(name)
                path = out / name
                if prev and path.is_file() and path.stat().st_size == prev["size"] \
                        and (not verify_existing or sha256_file(path) == prev["sha256"]):
                    report["skipped"].append(name)
                    continue

                def chunks(r0=r0, r1=r1, wf=wf, wname=wname, sf=sf, sname=sname):
                    for a in range(r0, r1, chunk_rows):
                        b = min(r1, a + chunk_rows)
                        yield wf.read_rows(wname, a, b), sf.read_rows(sname, a, b)

                cb = (lambda n, name=name, r0=r0, r1=r1: progress(name, n, r1 - r0)) if progress else None
                res = write_row_file(path, chunks(), cb, g)
                rf = RankFile(lid, r, ranks, name, (c0, c1), r0, r1, res["size"], res["sha256"])
                doc["files"][name] = rf.to_dict()
                write_manifest(out, doc)    # after every file: an interrupted pack resumes here
                report["written"].append(name)
            c.close()
            c = None
    finally:
        if c is not None:
            c.close()
    write_manifest(out, doc)
    report["files"] = len(doc["files"])
    return report
