"""Streaming, bounds-checked safetensors I/O: header parsing, tensor-by-tensor reads,
an atomic streaming shard writer, and `model.safetensors.index.json` read/write.

Why our own parser/writer: the `safetensors` library reads whole files and cannot write a
shard tensor by tensor, nor report hostile inputs in our error format. Files written here
are plain safetensors (tests read them back with the `safetensors` library).

Checks on every file read (a hostile or truncated file is refused with a one-line error):
header length bound, UTF-8 JSON object without duplicate keys, known dtype, non-negative
integer shape, dtype x shape = byte length, offsets in bounds, sorted tensors contiguous
from 0 with no gap or overlap, and the data section ending exactly at the end of the file.
Index entries must name files inside the checkpoint folder (no `..`, no absolute path, no
symlink escaping it).
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import json
import math
import operator
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

from recipekit import bounded, textsafe
from recipekit.atomic import atomic_write_text, fsync_dir, pid_temp_name
from recipekit.checkpoint.header_columns import read_columns
from recipekit.errors import ExitCode, RecipekitError

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors reference limit
INDEX_NAME = "model.safetensors.index.json"
DEFAULT_CHUNK = 64 * 1024 * 1024

# dtype name -> bytes per element
DTYPE_SIZES: dict[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


def numpy_dtype(dtype: str):
    """The numpy dtype used to view a tensor's bytes. F8_E8M0 is read as uint8 codes."""
    import ml_dtypes  # lazy: pulls ml_dtypes
    import numpy as np  # lazy: pulls numpy

    table = {
        "BOOL": np.bool_,
        "U8": np.uint8,
        "I8": np.int8,
        "F8_E4M3": ml_dtypes.float8_e4m3fn,
        "F8_E5M2": ml_dtypes.float8_e5m2,
        "F8_E8M0": np.uint8,
        "I16": np.int16,
        "U16": np.uint16,
        "F16": np.float16,
        "BF16": ml_dtypes.bfloat16,
        "I32": np.int32,
        "U32": np.uint32,
        "F32": np.float32,
        "I64": np.int64,
        "U64": np.uint64,
        "F64": np.float64,
    }
    return np.dtype(table[dtype])


def dtype_of_array(arr) -> str:
    """The safetensors dtype name of a numpy array (uint8 maps to U8; pass dtype= for E8M0)."""
    import ml_dtypes  # lazy: pulls ml_dtypes
    import numpy as np  # lazy: pulls numpy

    d = arr.dtype
    for name in ("BF16", "F8_E4M3", "F8_E5M2"):
        if d == numpy_dtype(name):
            return name
    if d == np.dtype(ml_dtypes.float8_e8m0fnu):
        return "F8_E8M0"
    table = {
        np.dtype(np.bool_): "BOOL",
        np.dtype(np.uint8): "U8",
        np.dtype(np.int8): "I8",
        np.dtype(np.int16): "I16",
        np.dtype(np.uint16): "U16",
        np.dtype(np.float16): "F16",
        np.dtype(np.int32): "I32",
        np.dtype(np.uint32): "U32",
        np.dtype(np.float32): "F32",
        np.dtype(np.int64): "I64",
        np.dtype(np.uint64): "U64",
        np.dtype(np.float64): "F64",
    }
    if d not in table:
        raise RecipekitError(code="safetensors-bad-dtype", message=f"no safetensors dtype for numpy {d}")
    return table[d]


def _err(code: str, path: Path | str, message: str, hint: str | None = None) -> RecipekitError:
    return RecipekitError(code=code, message=message, location=str(path), hint=hint, exit_code=ExitCode.INVALID_INPUT)


class TensorInfo(NamedTuple):
    """One header entry (a tuple: a full-size pack holds 184,320 of them, so they stay small and
    out of the collector's way)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # offset inside the data section
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def _pairs_and_colons(v: Any) -> tuple[int, int]:
    """(key/value pairs in all objects of a parsed JSON value, ':' inside its strings); whole
    columns at C speed where a container holds only strings."""
    if type(v) is str:
        return 0, v.count(":")
    if type(v) is dict:
        pairs, colons = len(v), "".join(v).count(":")
        items: Iterable[Any] = v.values()
    elif type(v) is list:
        pairs, colons, items = 0, 0, v
    else:
        return 0, 0
    kinds = set(map(type, items))
    if kinds <= {str}:
        return pairs, colons + "".join(items).count(":")
    for x in items:
        p, c = _pairs_and_colons(x)
        pairs, colons = pairs + p, colons + c
    return pairs, colons


def _loads_unique_fast(text: str) -> Any | None:
    """json.loads(text) by the C parser alone when that provably kept every key (no object gave a
    key twice): every ':' outside a string separates one key from its value, so the text's ':'
    must number the parsed pairs plus the ':' inside the parsed strings (an escape could spell a
    ':', so a text with one is left to the checking parse). None: parse with no_duplicate_keys."""
    if "\\" in text:
        return None
    try:
        obj = json.loads(text)
        pairs, colons = _pairs_and_colons(obj)
    except (ValueError, RecursionError):
        return None
    return obj if text.count(":") == pairs + colons else None


def read_json_unique(
    path: str | os.PathLike, what: str, limit: int, *, code: str, too_large_code: str | None = None
) -> Any:
    """bounded.read_json(..., object_pairs_hook=no_duplicate_keys), the same answers and errors, by
    the C parser alone where a count proves that no key was given twice."""
    text = bounded.read_text(path, what, limit, code=code, too_large_code=too_large_code)
    obj = _loads_unique_fast(text)
    if obj is None:  # the checking parse: its errors (and a duplicate key's) are the file's errors
        obj = bounded.loads_json(text, what, str(path), code=code, object_pairs_hook=no_duplicate_keys)
    return obj


def no_duplicate_keys(pairs):
    """json object_pairs_hook that refuses a key given twice (the last one would silently win)."""
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


_CANONICAL_DTYPES = {k: k for k in DTYPE_SIZES}
_GET_DTYPE = operator.itemgetter("dtype")
_GET_SHAPE = operator.itemgetter("shape")
_GET_OFFSETS = operator.itemgetter("data_offsets")
_FIRST = operator.itemgetter(0)
_SECOND = operator.itemgetter(1)


def _valid_entries(obj: dict, data_len: int) -> dict[str, TensorInfo] | None:
    """The tensors of a valid header, checked column by column at C speed; None if any check fails
    (the per-entry checks then name the first problem). The same rules as the per-entry loop of
    _parse_header, in the same order of the result."""
    names = list(obj)
    ents = list(obj.values())
    if not names or "" in obj or set(map(type, ents)) != {dict} or set(map(len, ents)) != {3}:
        return None
    try:  # three keys each, these three present: exactly dtype, shape and data_offsets
        dtypes = list(map(_GET_DTYPE, ents))
        shapes = list(map(_GET_SHAPE, ents))
        offs = list(map(_GET_OFFSETS, ents))
    except KeyError:
        return None
    if set(map(type, dtypes)) != {str} or not set(dtypes) <= DTYPE_SIZES.keys():
        return None
    if set(map(type, shapes)) != {list}:
        return None
    dims = list(itertools.chain.from_iterable(shapes))
    if dims and (set(map(type, dims)) != {int} or min(dims) < 0):
        return None
    if set(map(type, offs)) != {list} or set(map(len, offs)) != {2}:
        return None
    begins = list(map(_FIRST, offs))
    ends = list(map(_SECOND, offs))
    if set(map(type, begins)) != {int} or set(map(type, ends)) != {int}:
        return None
    sizes = list(map(operator.mul, map(math.prod, shapes), map(DTYPE_SIZES.__getitem__, dtypes)))
    if sizes != list(map(operator.sub, ends, begins)):
        return None
    if all(map(operator.lt, begins, itertools.islice(begins, 1, None))):
        order = None  # already in offset order (as writers lay them out): no reordering
        b, e, ns = begins, ends, names
    else:
        order = sorted(range(len(names)), key=list(zip(begins, ends)).__getitem__)
        b = [begins[i] for i in order]
        e = [ends[i] for i in order]
        ns = [names[i] for i in order]
    # from 0, each tensor where the previous ends, the last at the end of the data section
    if b[0] != 0 or b[1:] != e[:-1] or e[-1] != data_len:
        return None
    # one object per distinct dtype and shape (JSON gives every entry its own: ~30 MB at full size)
    shape_cache: dict[tuple[int, ...], tuple[int, ...]] = {}
    tuples = list(map(tuple, shapes))
    tshapes = list(map(shape_cache.setdefault, tuples, tuples))
    tdtypes = list(map(_CANONICAL_DTYPES.__getitem__, dtypes))
    if order is not None:
        tshapes = [tshapes[i] for i in order]
        tdtypes = [tdtypes[i] for i in order]
    # tuple.__new__ builds the named tuples without a Python-level __new__ call per tensor
    infos = map(tuple.__new__, itertools.repeat(TensorInfo), zip(ns, tdtypes, tshapes, b, e))
    return dict(zip(ns, infos))


class _MaybeDuplicate(Exception):
    """The fast parse cannot rule out a key given twice: parse again with the checking hook."""


def parse_header(
    raw: bytes, data_len: int, path: Path | str = "<bytes>"
) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """Validate a header's JSON bytes against a data section of `data_len` bytes.

    A full-size header holds up to ~5,000 tensors (a pack shard) and a checkpoint ~100 of them, so
    the common case takes a fast path: a header in the writers' own form is read as columns
    (header_columns.read_columns: one regex call, no JSON object per tensor). Otherwise the C JSON parser without a Python hook per object, then a
    count that proves no key was given twice (every ':' outside a string separates one key from
    its value). Anything it cannot prove, and every invalid header, goes through the checking
    parse, so errors are those of the checking parse. The collector is paused while the header's
    objects are created (bounded: one header, at most MAX_HEADER_BYTES)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _err("safetensors-header-invalid", path, f"header is not UTF-8 ({e.reason} at byte {e.start})") from None
    if not text.lstrip().startswith("{"):
        raise _err(
            "safetensors-header-invalid", path, "header is not a JSON object", hint="is this a safetensors file?"
        )
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        cols = read_columns(raw, data_len, DTYPE_SIZES)
        if cols is not None:  # the writers' own form, fully accounted for: no JSON objects at all
            # tuple.__new__ builds the named tuples without a Python-level __new__ call per tensor
            rows = zip(cols.names, cols.dtypes, cols.shapes, cols.begins, cols.ends)
            return dict(zip(cols.names, map(tuple.__new__, itertools.repeat(TensorInfo), rows))), cols.metadata
        if "\\" not in text:  # an escape could spell ':' and spoil the count
            try:
                return _parse_header(text, data_len, path, fast=True)
            except (_MaybeDuplicate, RecipekitError):
                pass
        return _parse_header(text, data_len, path, fast=False)
    finally:
        if was_enabled:
            gc.enable()


def _parse_header(
    text: str, data_len: int, path: Path | str, fast: bool
) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    try:
        obj = json.loads(text) if fast else json.loads(text, object_pairs_hook=no_duplicate_keys)
    except RecursionError:
        raise _err("safetensors-header-invalid", path, "header JSON nests too deeply") from None
    except ValueError as e:
        if fast:
            raise _MaybeDuplicate() from None
        raise _err("safetensors-header-invalid", path, f"header JSON does not parse: {str(e)[:200]}") from None
    if not isinstance(obj, dict):
        raise _err("safetensors-header-invalid", path, "header is not a JSON object")
    n_keys = len(obj)
    metadata = obj.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise _err("safetensors-header-invalid", path, "__metadata__ must map strings to strings")
    if fast:
        fast_tensors = _valid_entries(obj, data_len)
        if fast_tensors is None:
            raise _MaybeDuplicate()  # something is wrong: the checking parse says what
        # every pair was kept iff the ':' outside strings number the keys the dicts hold
        pairs = n_keys + len(metadata) + 3 * len(fast_tensors)
        in_strings = "".join(obj).count(":") + "".join(metadata).count(":") + "".join(metadata.values()).count(":")
        if text.count(":") != pairs + in_strings:
            raise _MaybeDuplicate()
        return fast_tensors, metadata
    tensors: list[TensorInfo] = []
    entry_keys = {"dtype", "shape", "data_offsets"}
    for name, ent in obj.items():
        if not name:
            raise _err("safetensors-header-invalid", path, "empty tensor name")
        if type(ent) is not dict or len(ent) != 3 or ent.keys() != entry_keys:
            raise _err(
                "safetensors-header-invalid",
                path,
                f"tensor '{name}': entry must have exactly dtype, shape and data_offsets",
            )
        dtype, shape, offs = ent["dtype"], ent["shape"], ent["data_offsets"]
        size = DTYPE_SIZES.get(dtype) if type(dtype) is str else None
        if size is None:
            raise _err(
                "safetensors-bad-dtype",
                path,
                f"tensor '{name}': unknown dtype {dtype!r}",
                hint=f"known: {', '.join(sorted(DTYPE_SIZES))}",
            )
        if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
            raise _err(
                "safetensors-bad-shape",
                path,
                f"tensor '{name}': shape {shape!r} is not a list of non-negative integers",
            )
        if (
            type(offs) is not list
            or len(offs) != 2
            or type(offs[0]) is not int
            or type(offs[1]) is not int
            or offs[0] < 0
            or offs[1] < offs[0]
        ):
            raise _err(
                "safetensors-bad-offsets",
                path,
                f"tensor '{name}': data_offsets {offs!r} are not [begin, end] with 0 <= begin <= end",
            )
        if offs[1] > data_len:
            raise _err(
                "safetensors-bad-offsets",
                path,
                f"tensor '{name}': data_offsets end {offs[1]} is past the data section ({data_len} bytes)",
                hint="the file is truncated or the header is corrupt",
            )
        want = math.prod(shape) * size
        if offs[1] - offs[0] != want:
            raise _err(
                "safetensors-size-mismatch",
                path,
                f"tensor '{name}': {dtype} x {shape} is {want} bytes but data_offsets span {offs[1] - offs[0]}",
            )
        tensors.append(TensorInfo(name, dtype, tuple(shape), offs[0], offs[1]))
    tensors.sort(key=lambda t: (t.begin, t.end))
    pos = 0
    prev = None
    for t in tensors:
        if t.begin < pos:
            raise _err(
                "safetensors-overlap",
                path,
                f"tensor '{t.name}' overlaps '{prev and prev.name}' (begins at {t.begin}, previous ends at {pos})",
            )
        if t.begin > pos:
            raise _err(
                "safetensors-gap",
                path,
                f"unindexed bytes {pos}..{t.begin} before tensor '{t.name}'",
                hint="safetensors requires the data section to be fully indexed, without holes",
            )
        pos, prev = t.end, t
    if pos != data_len:
        raise _err("safetensors-trailing-bytes", path, f"data section has {data_len - pos} unindexed trailing bytes")
    return {t.name: t for t in tensors}, metadata


class SafetensorsFile:
    """A safetensors file opened for tensor-by-tensor reads (os.pread; nothing is kept in RAM)."""

    def __init__(self, path: str | os.PathLike, max_header: int = MAX_HEADER_BYTES):
        self.path = Path(path)
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise RecipekitError(
                code="safetensors-not-found", message=f"{self.path} does not exist", exit_code=ExitCode.NOT_FOUND
            ) from None
        try:
            self.file_size = os.fstat(self._fd).st_size
            if self.file_size < 8:
                raise _err(
                    "safetensors-too-small",
                    self.path,
                    f"file is {self.file_size} bytes, smaller than the 8-byte header length",
                )
            n = int.from_bytes(os.pread(self._fd, 8, 0), "little")
            if n > max_header:
                raise _err(
                    "safetensors-header-too-large",
                    self.path,
                    f"header length {n} exceeds the limit of {max_header} bytes",
                    hint="the file is corrupt or not a safetensors file",
                )
            if 8 + n > self.file_size:
                raise _err(
                    "safetensors-header-too-large",
                    self.path,
                    f"header length {n} runs past the end of the {self.file_size}-byte file",
                )
            self.header_len = n
            self.data_start = 8 + n
            raw = os.pread(self._fd, n, 8)
            self.tensors, self.metadata = parse_header(raw, self.file_size - self.data_start, self.path)
        except BaseException:
            os.close(self._fd)
            self._fd = -1  # so that __del__ never closes a reused descriptor number
            raise

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "SafetensorsFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # __del__ may run at interpreter exit, with modules half torn down: never raise
            pass

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise RecipekitError(
                code="tensor-not-found",
                message=f"no tensor '{name}' in {self.path.name}",
                location=str(self.path),
                exit_code=ExitCode.NOT_FOUND,
            ) from None

    def _pread_exact(self, length: int, offset: int) -> bytearray:
        buf = bytearray(length)
        view = memoryview(buf)
        got = 0
        while got < length:
            n = os.preadv(self._fd, [view[got:]], offset + got)
            if n <= 0:
                raise _err("safetensors-truncated", self.path, f"short read at offset {offset + got}")
            got += n
        return buf

    def read_bytes(self, name: str, start: int = 0, length: int | None = None) -> bytearray:
        """Raw bytes of a tensor (or of a byte range inside it)."""
        t = self.info(name)
        if length is None:
            length = t.nbytes - start
        if start < 0 or length < 0 or start + length > t.nbytes:
            raise ValueError(f"range {start}+{length} outside tensor '{name}' ({t.nbytes} bytes)")
        return self._pread_exact(length, self.data_start + t.begin + start)

    def iter_chunks(
        self, name: str, chunk_bytes: int = DEFAULT_CHUNK, start: int = 0, length: int | None = None
    ) -> Iterator[bytearray]:
        t = self.info(name)
        if length is None:
            length = t.nbytes - start
        pos = 0
        while pos < length:
            n = min(chunk_bytes, length - pos)
            yield self.read_bytes(name, start + pos, n)
            pos += n

    def read_array(self, name: str):
        """The tensor as a numpy array in its own dtype (F8_E8M0 as uint8 codes)."""
        import numpy as np  # lazy: pulls numpy

        t = self.info(name)
        return np.frombuffer(self.read_bytes(name), dtype=numpy_dtype(t.dtype)).reshape(t.shape)

    def read_rows(self, name: str, r0: int, r1: int):
        """Rows r0..r1 of a tensor (first axis), read without touching the other rows."""
        import numpy as np  # lazy: pulls numpy

        t = self.info(name)
        if not t.shape:
            raise ValueError(f"tensor '{name}' is a scalar")
        row = t.nbytes // t.shape[0] if t.shape[0] else 0
        raw = self.read_bytes(name, r0 * row, (r1 - r0) * row)
        return np.frombuffer(raw, dtype=numpy_dtype(t.dtype)).reshape((r1 - r0, *t.shape[1:]))

    def sha256(self, name: str, chunk_bytes: int = DEFAULT_CHUNK) -> str:
        h = hashlib.sha256()
        for c in self.iter_chunks(name, chunk_bytes):
            h.update(c)
        return h.hexdigest()


# ----------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_SIZES[self.dtype]


def build_header(specs: Sequence[TensorSpec], metadata: dict[str, str] | None = None) -> bytes:
    """The 8-byte length + JSON header (space-padded to 8 bytes) for tensors laid out in order."""
    obj: dict[str, Any] = {}
    if metadata:
        obj["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    pos = 0
    seen = set()
    for s in specs:
        if s.name in seen:
            raise RecipekitError(code="safetensors-duplicate-tensor", message=f"tensor '{s.name}' listed twice")
        if s.dtype not in DTYPE_SIZES:
            raise RecipekitError(code="safetensors-bad-dtype", message=f"tensor '{s.name}': unknown dtype {s.dtype!r}")
        seen.add(s.name)
        obj[s.name] = {"dtype": s.dtype, "shape": list(s.shape), "data_offsets": [pos, pos + s.nbytes]}
        pos += s.nbytes
    raw = json.dumps(obj, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw


class ShardWriter:
    """Write one safetensors shard tensor by tensor (or chunk by chunk), atomically.

    The tensor list is declared up front (the header precedes the data); then `write()`
    appends bytes to the current tensor in declaration order. `close()` checks that every
    tensor got exactly its byte length, fsyncs and renames the temp file onto `path`.
    With `hash=True` the sha256 of each tensor is computed on the way (`.sha256[name]`).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        specs: Sequence[TensorSpec],
        metadata: dict[str, str] | None = None,
        hash: bool = True,
        fsync: bool = True,
        fsync_dir: bool = True,
    ):
        self.path = Path(path)
        self.specs = list(specs)
        self.fsync = fsync
        self.fsync_dir = fsync and fsync_dir
        self.sha256: dict[str, str] = {}
        self._hash = hash
        header = build_header(self.specs, metadata)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = pid_temp_name(self.path)
        self._f = open(self.tmp, "wb")
        self._f.write(header)
        self.size = len(header) + sum(s.nbytes for s in self.specs)
        self._i = 0
        self._written = 0
        self._h = hashlib.sha256() if hash else None
        self._done = False
        self._advance()

    def _advance(self) -> None:
        # skip zero-byte tensors, closing their hashes
        while self._i < len(self.specs) and self._written == self.specs[self._i].nbytes:
            s = self.specs[self._i]
            if self._h is not None:
                self.sha256[s.name] = self._h.hexdigest()
                self._h = hashlib.sha256()
            self._i += 1
            self._written = 0

    @property
    def current(self) -> TensorSpec | None:
        return self.specs[self._i] if self._i < len(self.specs) else None

    def write(self, data, name: str | None = None) -> None:
        """Append bytes (bytes-like or a C-contiguous numpy array) to the current tensor."""
        mv = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else memoryview(data)
        while len(mv):
            cur = self.current
            if cur is None:
                raise RecipekitError(
                    code="safetensors-write-overflow", message=f"{self.path.name}: more data than declared tensors"
                )
            if name is not None and name != cur.name:
                raise RecipekitError(
                    code="safetensors-write-order",
                    message=f"{self.path.name}: got data for '{name}' while '{cur.name}' is incomplete",
                )
            n = min(len(mv), cur.nbytes - self._written)
            part = mv[:n]
            self._f.write(part)
            if self._h is not None:
                self._h.update(part)
            self._written += n
            mv = mv[n:]
            self._advance()

    def write_tensor(self, name: str, data) -> None:
        if memoryview(data).nbytes == 0 and any(s.name == name and s.nbytes == 0 for s in self.specs):
            return  # zero-byte tensors are complete as soon as they are declared
        cur = self.current
        if cur is None or cur.name != name or self._written:
            raise RecipekitError(
                code="safetensors-write-order",
                message=f"{self.path.name}: '{name}' written out of order (expected '{cur.name if cur else None}')",
            )
        if memoryview(data).nbytes != cur.nbytes:
            raise RecipekitError(
                code="safetensors-write-size",
                message=f"{self.path.name}: '{name}' got {memoryview(data).nbytes} bytes, declared {cur.nbytes}",
            )
        self.write(data, name)

    def close(self) -> None:
        if self._done:
            return
        self._advance()
        if self.current is not None:
            self.abort()
            raise RecipekitError(
                code="safetensors-write-incomplete",
                message=f"{self.path.name}: tensor '{self.current.name if self.current else '?'}' and later ones were not fully written",
            )
        self._f.flush()
        if self.fsync:
            os.fsync(self._f.fileno())
        self._f.close()
        os.replace(self.tmp, self.path)
        if self.fsync_dir:
            fsync_dir(self.path.parent, "ignore")
        self._done = True

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            self._f.close()
        finally:
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_file(
    path: str | os.PathLike,
    tensors: dict[str, Any],
    metadata: dict[str, str] | None = None,
    dtypes: dict[str, str] | None = None,
    fsync: bool = True,
) -> dict[str, str]:
    """Write numpy arrays as one safetensors file (atomically); returns sha256 per tensor.

    `dtypes` overrides the dtype name of some tensors (e.g. uint8 arrays stored as F8_E8M0).
    """
    import numpy as np  # lazy: pulls numpy

    dtypes = dtypes or {}
    specs = []
    arrays = {}
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        dt = dtypes.get(name) or dtype_of_array(arr)
        if DTYPE_SIZES[dt] != arr.dtype.itemsize:
            raise RecipekitError(
                code="safetensors-bad-dtype",
                message=f"tensor '{name}': {dt} needs {DTYPE_SIZES[dt]}-byte items, got {arr.dtype}",
            )
        specs.append(TensorSpec(name, dt, tuple(arr.shape)))
        arrays[name] = arr
    with ShardWriter(path, specs, metadata, fsync=fsync) as w:
        for s in specs:
            w.write_tensor(s.name, arrays[s.name].reshape(-1).view(np.uint8))
    return w.sha256


# ----------------------------------------------------------------------------- index

_SAFE_NAME = re.compile(r"^[^\x00/\\]+(/[^\x00/\\]+)*$")


def resolve_member(ckpt_dir: str | os.PathLike, rel: Any, where: str = "") -> Path:
    """The path of a file named by an index, refused if it could leave the checkpoint folder."""
    root = Path(ckpt_dir).resolve()
    loc = where or str(Path(ckpt_dir) / INDEX_NAME)
    if isinstance(rel, str) and (rel.startswith("/") or Path(rel).is_absolute()):
        raise _err(
            "index-path-escape",
            loc,
            f"shard '{rel}' is an absolute path",
            hint="index entries must name files inside the checkpoint folder",
        )
    if not isinstance(rel, str) or not rel or not _SAFE_NAME.match(rel):
        raise _err("index-bad-path", loc, f"shard name {rel!r} is not a relative file name")
    p = Path(rel)
    if any(part in ("..", ".") for part in p.parts):
        raise _err(
            "index-path-escape",
            loc,
            f"shard '{rel}' contains '..' or '.'",
            hint="index entries must name files inside the checkpoint folder",
        )
    full = root / p
    real = full.resolve()
    if real != root and root not in real.parents:
        raise _err(
            "index-path-escape",
            loc,
            f"shard '{rel}' resolves to {real}, outside {root}",
            hint="a symlink in the checkpoint points outside it",
        )
    return full


@dataclass
class CheckpointIndex:
    folder: Path
    weight_map: dict[str, str]  # tensor name -> shard file name
    metadata: dict[str, Any] = field(default_factory=dict)
    from_file: bool = True

    @property
    def total_size(self) -> int | None:
        v = self.metadata.get("total_size")
        return int(v) if isinstance(v, (int, str)) and str(v).isdigit() else None

    def shards(self) -> list[str]:
        """Shard file names in first-appearance order."""
        return list(dict.fromkeys(self.weight_map.values()))


def read_index(ckpt_dir: str | os.PathLike) -> CheckpointIndex:
    """Read and check `model.safetensors.index.json` (or fall back to a single model.safetensors)."""
    folder = Path(ckpt_dir)
    if not folder.is_dir():
        raise RecipekitError(
            code="checkpoint-not-found", message=f"{folder} is not a folder", exit_code=ExitCode.NOT_FOUND
        )
    ipath = folder / INDEX_NAME
    if not ipath.exists():
        single = folder / "model.safetensors"
        if single.is_file():
            resolve_member(folder, "model.safetensors")
            names = SafetensorsFile(single).tensors
            return CheckpointIndex(folder, {n: "model.safetensors" for n in names}, {}, from_file=False)
        raise RecipekitError(
            code="checkpoint-index-missing",
            message=f"no {INDEX_NAME} or model.safetensors in {folder}",
            hint="point at the checkpoint folder",
            exit_code=ExitCode.NOT_FOUND,
        )
    resolve_member(folder, INDEX_NAME, str(ipath))

    obj = read_json_unique(ipath, "index", MAX_HEADER_BYTES, code="index-invalid", too_large_code="index-too-large")
    if not isinstance(obj, dict) or not isinstance(obj.get("weight_map"), dict):
        raise _err("index-invalid", ipath, "index must be an object with a 'weight_map' object")
    meta = obj.get("metadata") or {}
    if not isinstance(meta, dict):
        raise _err("index-invalid", ipath, "'metadata' must be an object")
    wm = obj["weight_map"]
    files = set(wm.values()) if set(map(type, wm.values())) <= {str} else None
    if files is not None and "" not in files:
        # every value a non-empty file name: one check and one shared string per file, at C speed
        shared_files = {rel: rel for rel in files}
        try:
            for rel in files:
                resolve_member(folder, rel)
        except RecipekitError:
            pass  # the loop below names the first tensor that maps to a refused file
        else:
            return CheckpointIndex(folder, dict(zip(wm, map(shared_files.__getitem__, wm.values()))), meta)
    checked: dict[str, Path] = {}
    shared: dict[str, str] = {}  # one string per shard name (JSON gives each value its own copy)
    out: dict[str, str] = {}
    for name, rel in wm.items():
        if not isinstance(rel, str) or not rel:
            raise RecipekitError(
                code="index-bad-path",
                location=f"{ipath} $.weight_map['{textsafe.shown(name)[:120]}']",
                message=f"the shard of a tensor must be a file name (a non-empty string), not "
                f"{type(rel).__name__} {textsafe.shown(repr(rel))[:80]}",
                hint="each weight_map value names the .safetensors file holding the tensor; regenerate the index",
            )
        if rel not in checked:
            checked[rel] = resolve_member(folder, rel, f"{ipath} $.weight_map['{name}']")
        out[name] = shared.setdefault(rel, rel)
    return CheckpointIndex(folder, out, meta)


def write_index(
    ckpt_dir: str | os.PathLike,
    weight_map: dict[str, str],
    total_size: int,
    extra_metadata: dict[str, Any] | None = None,
) -> Path:
    folder = Path(ckpt_dir)
    for rel in set(weight_map.values()):
        resolve_member(folder, rel)
    meta = {"total_size": int(total_size)}
    meta.update(extra_metadata or {})
    path = folder / INDEX_NAME
    atomic_write_text(
        path,
        json.dumps({"metadata": meta, "weight_map": dict(weight_map)}, indent=2) + "\n",
        sync_dir="ignore",
        temp=pid_temp_name(path),
    )
    return path


class Checkpoint:
    """A checkpoint folder: its index and lazily opened shards."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.index = read_index(self.folder)
        self._files: dict[str, SafetensorsFile] = {}

    def file(self, rel: str) -> SafetensorsFile:
        if rel not in self._files:
            self._files[rel] = SafetensorsFile(resolve_member(self.folder, rel))
        return self._files[rel]

    def shard_of(self, name: str) -> str:
        try:
            return self.index.weight_map[name]
        except KeyError:
            raise RecipekitError(
                code="tensor-not-found",
                message=f"no tensor '{name}' in the index of {self.folder}",
                exit_code=ExitCode.NOT_FOUND,
            ) from None

    def tensor_file(self, name: str) -> SafetensorsFile:
        return self.file(self.shard_of(name))

    def info(self, name: str) -> TensorInfo:
        return self.tensor_file(name).info(name)

    def names(self) -> Iterable[str]:
        return self.index.weight_map.keys()

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
