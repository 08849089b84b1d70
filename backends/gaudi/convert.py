"""Lossless conversion of a DeepSeek-V4.1 checkpoint into the Gaudi port layout.

- Routed experts: per block, w1 (gate) and w3 (up) are fused into one stacked tensor
  `ffn.experts.w13.weight` [E, 2I, K/2] with gate row j at 2j and up row j at 2j+1 (the
  E8M0 scale rows move with their rows); w2 is stacked unchanged. MXFP4 bytes are never
  re-quantized.
- FP8 linears (e4m3 + 32x32 E8M0) become bf16 exactly (scale codes outside 3..246 are
  refused before anything is written).
- Engram tables become one tensor pair per hash bucket, byte for byte.
- Everything else (and vision) is copied byte for byte.

Streaming with bounded memory: tensors move in chunks through a small pool of reusable
buffers; a writer thread writes and hashes while the next chunk is read. Output shards are
written atomically and stamped (.recipekit-convert/<shard>.json); an interrupted run resumes
by skipping stamped shards. A manifest (recipekit-manifest.json) holds the sha256 of every
output tensor; config.json gains the `hpu_layout` block describing the port layout.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from recipekit import atomic, bounded, confine
from recipekit.atomic import atomic_write_text, fsync_dir, pid_temp_name, remove_stale_temps
from recipekit.backends.gaudi import port_quant
from recipekit.checkpoint import dsv41, gaudi_port
from recipekit.checkpoint.layout import require_layout
from recipekit.checkpoint.manifest import MANIFEST_NAME, Manifest, TensorEntry, read_stamp, sha256_json, write_stamp
from recipekit.checkpoint.safetensors_io import (
    DTYPE_SIZES,
    INDEX_NAME,
    Checkpoint,
    SafetensorsFile,
    ShardWriter,
    TensorSpec,
    write_index,
)
from recipekit.errors import RecipekitError
from recipekit.interrupt import PendingInterrupt, deferred_sigint
from recipekit.progress import Ticker

CONVERTER_VERSION = 1
STAMP_DIR = ".recipekit-convert"
CHUNK = 16 * 1024 * 1024
POOL = 6
SKIP_FILES = {"config.json", INDEX_NAME, MANIFEST_NAME}


@dataclass(frozen=True)
class OutTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    op: str  # copy | bf16 | w13 | stack | rows
    src: tuple  # names (and row ranges) in the source checkpoint
    parts: frozenset[str]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_SIZES[self.dtype]


@dataclass
class OutShard:
    file: str
    group: str
    tensors: list[OutTensor] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


def _parts(name: str, spec: dsv41.Spec) -> frozenset[str]:
    return frozenset(dsv41._parts_of(name, spec))


def plan_gaudi(src: Checkpoint, config: dict[str, Any]) -> tuple[list[OutShard], dict[int, list[tuple[int, int]]]]:
    """Every output shard of the Gaudi layout with the recipe for each of its tensors."""
    geom = dsv41.Geometry.from_config(config)
    buckets = gaudi_port.engram_buckets(geom)
    orig = dsv41.original_tensors(geom)
    target = gaudi_port.gaudi_tensors(geom, buckets)
    lin = set(gaudi_port.fp8_linears(orig))
    out: dict[str, OutTensor] = {}
    for name, spec in target.items():
        parts = _parts(name, spec)
        if spec.kind == "expert":
            p, rest = name.split("ffn.experts.")
            E = spec.shape[0]
            w = rest.split(".")[0]  # w13 | w2
            leaf = rest.split(".")[1]  # weight | scale
            if w == "w13":
                src_names = tuple((f"{p}ffn.experts.{e}.w1.{leaf}", f"{p}ffn.experts.{e}.w3.{leaf}") for e in range(E))
                out[name] = OutTensor(name, spec.dtype, spec.shape, "w13", src_names, parts)
            else:
                out[name] = OutTensor(
                    name,
                    spec.dtype,
                    spec.shape,
                    "stack",
                    tuple(f"{p}ffn.experts.{e}.w2.{leaf}" for e in range(E)),
                    parts,
                )
        elif spec.kind == "engram-table":
            p, rest = name.split("embed.buckets.")
            bi, leaf = rest.split(".")
            L = int(name.split(".")[1])
            r0, r1 = buckets[L][int(bi)]
            out[name] = OutTensor(name, spec.dtype, spec.shape, "rows", (f"{p}embed.{leaf}", r0, r1), parts)
        elif name.endswith(".weight") and name[:-7] in lin:
            out[name] = OutTensor(name, spec.dtype, spec.shape, "bf16", (name, name[:-7] + ".scale"), parts)
        else:
            out[name] = OutTensor(name, spec.dtype, spec.shape, "copy", (name,), parts)
    # vision and anything else the layout passes through: copied into the vision shard
    vis = dsv41.Spec("BF16", (), "vision", "dense")
    for name in src.names():
        if dsv41.is_vision(name):
            info = src.info(name)
            out[name] = OutTensor(name, info.dtype, info.shape, "copy", (name,), _parts(name, vis))
            target[name] = dsv41.Spec(info.dtype, info.shape, "vision", "dense")
    groups = dsv41.group_order({s.group for s in target.values()})
    files = dsv41.shard_names(groups)
    shards = {g: OutShard(files[g], g) for g in groups}
    for name, t in out.items():
        shards[target[name].group].tensors.append(t)
    return [shards[g] for g in groups], buckets


# ----------------------------------------------------------------------------- data movement


class _Pipe:
    """Two worker threads, hasher then writer, that take chunks while the caller prepares the next.

    Chunks live in a small pool of reusable buffers (bounded memory, no page faults on fresh
    allocations). hashlib and file writes release the GIL, so reading/transforming, hashing
    and writing overlap. One pipe serves the whole conversion, shard after shard.
    """

    def __init__(self, bufsize: int, nbuf: int = POOL, interrupt: PendingInterrupt | None = None):
        import numpy as np  # lazy: pulls numpy

        self.interrupt = interrupt  # a deferred Ctrl-C is raised in buffer()/put(), never inside a queue call

        self.free: queue.Queue = queue.Queue()
        for _ in range(nbuf):
            self.free.put(np.empty(bufsize, dtype=np.uint8))
        self.bufsize = bufsize
        self.hq: queue.Queue = queue.Queue(maxsize=nbuf - 2)
        self.wq: queue.Queue = queue.Queue(maxsize=nbuf)  # bounded too: dequantized chunks are not pooled
        self.error: BaseException | None = None
        self.writer: ShardWriter | None = None
        self.hashes: dict[str, Any] = {}
        self.threads = [
            threading.Thread(target=self._hash, daemon=True),
            threading.Thread(target=self._write, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _hash(self) -> None:
        while True:
            item = self.hq.get()
            try:
                if item is None:
                    self.wq.put(None)
                    return
                hashes, _, name, data, _ = item
                if self.error is None:
                    h = hashes.get(name)
                    if h is None:
                        h = hashes[name] = hashlib.sha256()
                    h.update(data)
                self.wq.put(item)
            except BaseException as e:  # surfaced to the producer on its next call
                self.error = e
                self.wq.put(item)
            finally:
                self.hq.task_done()

    def _write(self) -> None:
        while True:
            item = self.wq.get()
            try:
                if item is None:
                    return
                _, writer, name, data, buf = item
                try:
                    if self.error is None:
                        writer.write(data, name)
                except BaseException as e:
                    self.error = e
                finally:
                    if buf is not None:
                        self.free.put(buf)
            finally:
                self.wq.task_done()

    def start_shard(self, writer: ShardWriter) -> None:
        self.writer = writer
        self.hashes = {}

    def buffer(self):
        self._check()
        return self.free.get()

    def release(self, buf) -> None:
        self.free.put(buf)

    def put(self, name: str, data, buf=None) -> None:
        self._check()
        mv = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else memoryview(data)
        self.hq.put((self.hashes, self.writer, name, mv, buf))

    def _check(self) -> None:
        if self.interrupt is not None:
            self.interrupt.check()
        if self.error is not None:
            raise self.error

    def drain(self) -> None:
        """Wait until every queued chunk is hashed and written; re-raise a worker error."""
        self.hq.join()
        self.wq.join()
        self._check()

    def sha256(self, name: str) -> str:
        h = self.hashes.get(name)
        return (h or hashlib.sha256()).hexdigest()

    def close(self) -> None:
        self.hq.put(None)
        for t in self.threads:
            t.join()


class _Syncer:
    """fsyncs finished shards and then writes their stamps, off the critical path.

    A shard is renamed into place first and stamped only after its fsync returned, so a
    crash leaves either a durable stamped shard or an unstamped one that the next run redoes.
    """

    def __init__(self, depth: int = 4):
        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            path, stamp_path, data = item
            try:
                if self.error is None:
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    write_stamp(stamp_path, data, fsync=False)
            except BaseException as e:
                self.error = e

    def submit(self, path: Path, stamp_path: Path, data: dict) -> None:
        if self.error is not None:
            raise self.error
        self.q.put((path, stamp_path, data))

    def close(self) -> None:
        self.q.put(None)
        self.t.join()
        if self.error is not None:
            raise self.error


def _read_into(f: SafetensorsFile, name: str, buf, start: int = 0, length: int | None = None):
    """pread a tensor byte range into the front of a pool buffer; returns that view."""
    t = f.info(name)
    if length is None:
        length = t.nbytes - start
    view = memoryview(buf)[:length]
    got = 0
    off = f.data_start + t.begin + start
    while got < length:
        n = os.preadv(f._fd, [view[got:]], off + got)
        if n <= 0:
            raise RecipekitError(code="safetensors-truncated", message=f"short read of '{name}'", location=str(f.path))
        got += n
    return buf[:length]


def _emit(src: Checkpoint, t: OutTensor, pipe: _Pipe) -> None:
    import numpy as np  # lazy: pulls numpy

    from recipekit.checkpoint import codecs  # lazy: pulls ml_dtypes, numpy

    B = pipe.bufsize
    if t.op == "copy":
        f = src.tensor_file(t.src[0])
        n = f.info(t.src[0]).nbytes
        for pos in range(0, n, B):
            buf = pipe.buffer()
            pipe.put(t.name, _read_into(f, t.src[0], buf, pos, min(B, n - pos)), buf)
    elif t.op == "rows":
        sname, r0, r1 = t.src
        f = src.tensor_file(sname)
        info = f.info(sname)
        row = info.nbytes // info.shape[0]
        n = (r1 - r0) * row
        for pos in range(0, n, B):
            buf = pipe.buffer()
            pipe.put(t.name, _read_into(f, sname, buf, r0 * row + pos, min(B, n - pos)), buf)
    elif t.op == "stack":
        for sname in t.src:
            f = src.tensor_file(sname)
            n = f.info(sname).nbytes
            for pos in range(0, n, B):
                buf = pipe.buffer()
                pipe.put(t.name, _read_into(f, sname, buf, pos, min(B, n - pos)), buf)
    elif t.op == "w13":
        for gate, up in t.src:
            fg, fu = src.tensor_file(gate), src.tensor_file(up)
            ig = fg.info(gate)
            rows, n = ig.shape[0], ig.nbytes
            a = pipe.buffer()
            b = pipe.buffer()
            try:
                ga = _read_into(fg, gate, a).reshape(rows, -1)
                ua = _read_into(fu, up, b).reshape(rows, -1)
                out = pipe.buffer()
                o = out[: 2 * n].reshape(2 * rows, -1)
                o[0::2] = ga  # gate row j -> 2j
                o[1::2] = ua  # up row j -> 2j + 1
            finally:
                pipe.release(a)
                pipe.release(b)
            pipe.put(t.name, out[: 2 * n], out)
    elif t.op == "bf16":
        wname, sname = t.src
        fw, fs = src.tensor_file(wname), src.tensor_file(sname)
        rows, cols = fw.info(wname).shape
        scale = fs.read_array(sname)
        step = max(32, (B // max(1, cols * 2)) // 32 * 32)
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            w = fw.read_rows(wname, r0, r1)
            bf = codecs.fp8_to_bf16(w, scale[r0 // 32 : -(-r1 // 32)], wname)
            pipe.put(t.name, np.ascontiguousarray(bf).view(np.uint8).reshape(-1))
    else:  # pragma: no cover - plan and emit are written together
        raise ValueError(t.op)


# ----------------------------------------------------------------------------- driver


@dataclass
class ConvertReport:
    dst: str
    parts: list[str]
    shards_written: list[str] = field(default_factory=list)
    shards_skipped: list[str] = field(default_factory=list)
    tensors: int = 0
    bytes_written: int = 0
    bytes_read: int = 0
    complete: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {
            "dst": self.dst,
            "parts": self.parts,
            "shards_written": len(self.shards_written),
            "shards_skipped": len(self.shards_skipped),
            "tensors": self.tensors,
            "bytes_written": self.bytes_written,
            "bytes_read": self.bytes_read,
            "complete": self.complete,
            "seconds": round(self.seconds, 3),
        }


def _shard_plan_hash(shard: OutShard, names: list[str], src: Checkpoint) -> str:
    files = sorted({src.shard_of(s) for t in shard.tensors if t.name in names for s in _src_names(t)})
    ident = []
    for rel in files:
        f = src.file(rel)
        ident.append([rel, f.file_size, f.header_len, f.data_start])
    return sha256_json(
        {
            "v": CONVERTER_VERSION,
            "file": shard.file,
            "tensors": [[t.name, t.dtype, list(t.shape), t.op] for t in shard.tensors if t.name in names],
            "src": ident,
        }
    )


def _src_names(t: OutTensor) -> list[str]:
    if t.op == "w13":
        return [n for pair in t.src for n in pair]
    if t.op == "rows":
        return [t.src[0]]
    return list(t.src)


def _stamp_valid(dst: Path, shard: OutShard) -> dict | None:
    st = read_stamp(dst / STAMP_DIR / f"{shard.file}.json")
    if not st:
        return None
    p = dst / shard.file
    try:
        s = p.stat()
    except FileNotFoundError:
        return None
    if s.st_size != st.get("size") or s.st_mtime_ns != st.get("mtime_ns"):
        return None
    return st


def _check_scales(src: Checkpoint, todo: Iterable[OutTensor]) -> None:
    """Refuse inexact FP8 scale codes before any output is written."""
    from recipekit.checkpoint import codecs  # lazy: pulls ml_dtypes, numpy

    for t in todo:
        if t.op == "bf16":
            codecs.check_exact_scale_codes(src.tensor_file(t.src[1]).read_array(t.src[1]), t.src[0])


def port_config(config: dict, buckets: dict[int, list[tuple[int, int]]], src_index_sha: str) -> dict:
    cfg = json.loads(json.dumps(config))
    cfg["quantization_config"] = port_quant.quantization_config()
    cfg[gaudi_port.GAUDI_LAYOUT_KEY] = {
        "format": gaudi_port.GAUDI_LAYOUT_FORMAT,
        "converter": f"recipekit {CONVERTER_VERSION}",
        "experts": {
            "stacked": True,
            "w13": "gate row j -> 2j, up row j -> 2j+1 (scale rows move with their rows)",
            "w2": "unchanged",
            "nibble_order": "low nibble = even index",
        },
        "dense": "FP8 e4m3 x E8M0 32x32 dequantized to bf16 exactly",
        "engram_buckets": {str(L): [[a, b] for a, b in r] for L, r in buckets.items()},
        "source_index_sha256": src_index_sha,
        "source_quantization_config": config.get("quantization_config"),
    }
    return cfg


def convert_to_gaudi(
    src_dir: str | Path,
    dst_dir: str | Path,
    parts: Iterable[str] = ("all",),
    progress: bool = False,
    check_source: bool = True,
    on_shard: Callable[[str], None] | None = None,
) -> ConvertReport:

    t0 = time.perf_counter()
    src_dir, dst = Path(src_dir), Path(dst_dir)
    parts = [dsv41.check_part(p) for p in parts] or ["all"]
    if src_dir.resolve() == dst.resolve():
        raise RecipekitError(
            code="convert-same-folder",
            message="--src and --dst are the same folder",
            hint="write the converted checkpoint to a new folder",
        )
    if check_source:
        require_layout(src_dir, "original")
    config = dsv41.load_config(src_dir)
    for p in _side_files(src_dir):  # refused before anything is written
        confine.refuse_link_outside(src_dir, p, f"side file {p.name}", code="side-file-outside")
    report = ConvertReport(str(dst), list(parts))
    with Checkpoint(src_dir) as src:
        shards, buckets = plan_gaudi(src, config)
        sel = set(parts)
        wanted = {s.file: [t.name for t in s.tensors if t.parts & sel] for s in shards}
        if not any(wanted.values()):
            raise RecipekitError(
                code="part-empty",
                message=f"part(s) {', '.join(parts)} select no tensor",
                hint="layer:N must name an existing layer",
            )
        _check_scales(src, (t for s in shards for t in s.tensors if t.name in wanted[s.file]))
        dst.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(dst)
        (dst / STAMP_DIR).mkdir(exist_ok=True)
        todo: list[tuple[OutShard, list[str], str]] = []
        for s in shards:
            names = wanted[s.file]
            if not names:
                continue
            st = _stamp_valid(dst, s)
            if st:
                have = list(st.get("tensors", {}))
                union = set(have) | set(names)
                if set(have) >= set(names) and st.get("plan") == _shard_plan_hash(s, have, src):
                    report.shards_skipped.append(s.file)
                    continue
                names = [t.name for t in s.tensors if t.name in union]  # never drop what is there
            todo.append((s, names, _shard_plan_hash(s, names, src)))
        total = sum(sum(t.nbytes for t in s.tensors if t.name in n) for s, n, _ in todo)
        unit = max(
            [2 * src.info(t.src[0][0]).nbytes for s, n, _ in todo for t in s.tensors if t.op == "w13" and t.name in n]
            + [CHUNK]
        )
        bar = _progress(progress, total)
        # Ctrl-C is deferred to the pipe's checks between chunks: raised inside a queue call it
        # could leave a queue lock held and the cleanup below waiting forever
        with deferred_sigint() as interrupt:
            pipe = _Pipe(unit, interrupt=interrupt) if todo else None
            syncer = _Syncer()
            try:
                for s, names, plan_hash in todo:
                    assert pipe is not None  # made whenever there is a shard to write
                    interrupt.check()
                    _write_shard(src, dst, s, names, plan_hash, report, bar, pipe, syncer)
                    if on_shard:
                        on_shard(s.file)
            finally:
                if pipe:
                    pipe.close()
                syncer.close()  # finished shards get their fsync and stamp even on an interrupt
                if bar:
                    bar.close()
        _finish(src_dir, dst, shards, config, buckets, report)
    report.seconds = time.perf_counter() - t0
    return report


def _progress(enabled: bool, total: int):
    """Bytes converted with elapsed time: a bar on a terminal, else a line every few seconds from a
    heartbeat (also while one large tensor is being converted)."""
    return Ticker("convert", total=total, heartbeat=True) if enabled else None


def _write_shard(
    src: Checkpoint,
    dst: Path,
    shard: OutShard,
    names: list[str],
    plan_hash: str,
    report: ConvertReport,
    bar,
    pipe: "_Pipe",
    syncer: "_Syncer",
) -> None:
    tensors = [t for t in shard.tensors if t.name in set(names)]
    specs = [TensorSpec(t.name, t.dtype, t.shape) for t in tensors]
    # fsync happens in the syncer before the stamp; the folder is fsynced once at the end
    # (a stamp whose shard vanished in a crash is simply redone)
    writer = ShardWriter(
        dst / shard.file,
        specs,
        metadata={"format": "pt", "layout": gaudi_port.GAUDI_LAYOUT_FORMAT},
        fsync=False,
        hash=False,
    )
    pipe.start_shard(writer)
    try:
        if bar:
            bar.update(note=shard.file)
        for t in tensors:
            _emit(src, t, pipe)
            if bar:  # per tensor: a heartbeat ticker's update records a number, prints nothing
                bar.update(advance=t.nbytes)
        pipe.drain()
        writer.close()
    except BaseException:
        try:
            pipe.hq.join()
            pipe.wq.join()
        finally:
            writer.abort()
        raise
    st = (dst / shard.file).stat()
    with open(dst / shard.file, "rb") as fh:  # the header is covered by its own hash
        n = int.from_bytes(fh.read(8), "little")
        header_sha = hashlib.sha256(fh.read(n)).hexdigest()
    entries = {
        t.name: {"dtype": t.dtype, "shape": list(t.shape), "nbytes": t.nbytes, "sha256": pipe.sha256(t.name)}
        for t in tensors
    }
    syncer.submit(
        dst / shard.file,
        dst / STAMP_DIR / f"{shard.file}.json",
        {
            "plan": plan_hash,
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "header_sha256": header_sha,
            "tensors": entries,
        },
    )
    report.shards_written.append(shard.file)
    report.bytes_written += st.st_size
    report.bytes_read += sum(
        t.nbytes if t.op == "rows" else sum(src.info(n).nbytes for n in _src_names(t)) for t in tensors
    )


def _side_files(src_dir: Path) -> list[Path]:
    """The source's non-tensor files copied next to the output (tokenizer, generation config...)."""
    return [
        p
        for p in sorted(src_dir.iterdir())
        if p.is_file() and not p.name.startswith(".") and p.suffix != ".safetensors" and p.name not in SKIP_FILES
    ]


def _finish(src_dir: Path, dst: Path, shards: list[OutShard], config: dict, buckets, report: ConvertReport) -> None:
    """Index, manifest and config from every stamped shard; side files copied."""
    weight_map: dict[str, str] = {}
    manifest = Manifest(meta={"layout": gaudi_port.GAUDI_LAYOUT_FORMAT, "converter": CONVERTER_VERSION})
    total = 0
    all_names = 0
    for s in shards:
        all_names += len(s.tensors)
        st = _stamp_valid(dst, s)
        if not st:
            continue
        manifest.files[s.file] = {"size": st["size"], "header_sha256": st.get("header_sha256")}
        for t in s.tensors:  # plan order, so the index is deterministic
            e = st["tensors"].get(t.name)
            if e is None:
                continue
            weight_map[t.name] = s.file
            manifest.tensors[t.name] = TensorEntry(s.file, e["dtype"], e["shape"], e["nbytes"], e["sha256"])
            total += e["nbytes"]
    src_index_sha = (
        hashlib.sha256(_side_bytes(src_dir / INDEX_NAME)).hexdigest() if (src_dir / INDEX_NAME).is_file() else ""
    )
    manifest.meta["source_index_sha256"] = src_index_sha
    write_index(dst, weight_map, total, {"layout": gaudi_port.GAUDI_LAYOUT_FORMAT})
    atomic_write_text(
        dst / "config.json",
        json.dumps(port_config(config, buckets, src_index_sha), indent=2) + "\n",
        sync_dir="ignore",
        temp=pid_temp_name(dst / "config.json"),
    )
    side: dict[str, str] = {}
    for p in _side_files(src_dir):
        # a side file is copied only from inside the source: a link leading out is refused
        confine.refuse_link_outside(src_dir, p, f"side file {p.name}", code="side-file-outside")
        tgt, data = dst / p.name, _side_bytes(p)  # side files are small (config, tokenizer)
        if not (tgt.is_file() and _side_bytes(tgt) == data):
            # fsynced and renamed like every other output; a leftover temp is a `.*.tmp-*` name
            atomic.atomic_write_bytes(tgt, data, temp=dst / f".{p.name}.tmp-{os.getpid()}")
        side[p.name] = hashlib.sha256(data).hexdigest()
    # every output byte is covered: tensors and shard headers above, these files here
    manifest.meta["index_sha256"] = hashlib.sha256(_side_bytes(dst / INDEX_NAME)).hexdigest()
    manifest.meta["config_sha256"] = hashlib.sha256(_side_bytes(dst / "config.json")).hexdigest()
    manifest.meta["side_files"] = side
    manifest.write(dst / MANIFEST_NAME)
    fsync_dir(dst, "ignore")
    fsync_dir(dst / STAMP_DIR, "ignore")
    report.tensors = len(weight_map)
    report.complete = len(weight_map) == all_names


def _side_bytes(p: Path) -> bytes:
    """A side file's bytes (config, tokenizer, index): a regular file, capped (recipekit/bounded.py)."""
    return bounded.read_bytes(p, f"side file {p.name}", bounded.SIDE_FILE_MAX_BYTES, code="side-file-unreadable")
