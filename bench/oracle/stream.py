"""Stream a checkpoint's tensors onto a device at I/O speed: large preads into a ring of host
buffers on a reader thread, asynchronous host -> device copies on a copy stream, decode on the device.

- `plan_regions` turns a list of tensor names into a few large file ranges per shard (tensors that
  follow each other in the file are read with one pread per chunk, never one small read per tensor).
- `Pipeline` reads each region in `buffer_bytes` chunks into `n_buffers` host buffers (pinned on
  CUDA) on one thread; each chunk is copied into the region's device buffer on the copy stream while
  the thread already reads the next chunk. A host buffer is reused only after its copy has finished
  (its event), so host memory is bounded by n_buffers x buffer_bytes, and at most `depth` regions
  wait on the device. The consumer's stream waits on the region's last copy before it decodes.
- `stream_decoded` yields (name, fp32 tensor on the device) in the order asked, decoding FP8 e4m3 +
  32x32 E8M0, MXFP4 + E8M0 and Engram FP8 rows + per-row-per-32 E8M0 with the `Decoders` it is handed
  (decoders.py; default: decode.py's torch ops; the application hands it the sm_80 Triton kernels on
  CUDA), BF16/F32 by a view and a widening cast (bit-identical to the CPU decoders;
  tests/unit/test_oracle_stream.py, tests/unit/test_oracle_decoders.py).

The same code runs with a CPU "device" (plain host buffers, synchronous copies): that is how the
pipeline's order, buffer reuse, bounds and errors are tested without a GPU.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from recipekit.bench.oracle import decode
from recipekit.bench.oracle.decoders import TORCH, Decoders
from recipekit.checkpoint import codecs, dsv41
from recipekit.checkpoint.safetensors_io import Checkpoint
from recipekit.errors import ExitCode, RecipekitError

BUFFER_BYTES = 64 * 1024 * 1024
N_BUFFERS = 3
REGION_BYTES = 256 * 1024 * 1024
DEPTH = 2
MAX_GAP = 1024 * 1024  # a hole this small between two wanted tensors is read through rather than split


@dataclass(frozen=True)
class Span:
    """One tensor inside a region: its bytes are region[start : start + nbytes]."""

    name: str
    start: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Region:
    """One contiguous byte range of one shard, read with large preads."""

    path: str
    offset: int
    nbytes: int
    spans: tuple[Span, ...]


def plan_regions(ckpt: Checkpoint, names: Iterable[str], region_bytes: int = REGION_BYTES) -> list[Region]:
    """The regions that cover `names`, in file order per shard (shards in the order first asked).
    A tensor larger than `region_bytes` is a region of its own."""
    by_shard: dict[str, list[tuple[int, int, str, Any]]] = {}
    for n in names:
        f = ckpt.tensor_file(n)
        t = f.info(n)
        by_shard.setdefault(str(f.path), []).append((f.data_start + t.begin, t.nbytes, n, t))
    out: list[Region] = []
    for path, items in by_shard.items():
        items.sort(key=lambda x: x[0])
        groups: list[list[tuple[int, int, str, Any]]] = []
        end = 0
        for it in items:
            if groups and it[0] - end <= MAX_GAP and it[0] + it[1] - groups[-1][0][0] <= region_bytes:
                groups[-1].append(it)
            else:
                groups.append([it])
            end = max(end, it[0] + it[1]) if len(groups[-1]) > 1 else it[0] + it[1]
        for grp in groups:
            r0 = grp[0][0]
            r1 = max(o + nb for o, nb, _, _ in grp)
            spans = tuple(Span(n, o - r0, nb, t.dtype, tuple(t.shape)) for o, nb, n, t in grp)
            out.append(Region(path, r0, r1 - r0, spans))
    return out


class Transfer:
    """Host buffers, device buffers and copies for one torch device ("cpu" or "cuda[:i]")."""

    def __init__(self, device: Any = "cpu"):
        import torch  # lazy: pulls torch

        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.copy_stream = torch.cuda.Stream(self.device) if self.cuda else None

    def host_buffer(self, nbytes: int) -> Any:
        return self.torch.empty(nbytes, dtype=self.torch.uint8, pin_memory=self.cuda)

    def device_buffer(self, nbytes: int) -> Any:
        buf = self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.device)
        if self.copy_stream is not None:
            # the block may be one the consumer just freed while its kernels (on the current stream)
            # still read it: the copies into it start only after them
            self.copy_stream.wait_stream(self.torch.cuda.current_stream(self.device))
        return buf

    def copy(self, dst: Any, src: Any) -> Any:
        """dst <- src; on CUDA asynchronous on the copy stream, returning the event that marks its end."""
        if not self.cuda:
            dst.copy_(src)
            return None
        with self.torch.cuda.stream(self.copy_stream):
            dst.copy_(src, non_blocking=True)
            ev = self.torch.cuda.Event()
            ev.record(self.copy_stream)
        return ev

    @staticmethod
    def host_wait(ev: Any) -> None:
        """Block this thread until the copy that read a host buffer is done (the buffer may be reused)."""
        if ev is not None:
            ev.synchronize()

    def consumer_wait(self, ev: Any) -> None:
        """Make the consumer's current stream wait for a region's last copy (no host block)."""
        if ev is not None:
            self.torch.cuda.current_stream(self.device).wait_event(ev)


@dataclass
class PipelineStats:
    bytes_read: int = 0
    preads: int = 0
    regions: int = 0
    buffers_used: int = 0  # distinct host buffers ever filled
    host_bytes: int = 0  # n_buffers x buffer_bytes, allocated once


class Pipeline:
    """Reads `regions` on a thread into a ring of host buffers and copies them to device buffers;
    iterating yields (region, device uint8 tensor of region.nbytes) in order, ready for the consumer's stream."""

    def __init__(
        self,
        regions: list[Region],
        transfer: Transfer,
        buffer_bytes: int = BUFFER_BYTES,
        n_buffers: int = N_BUFFERS,
        depth: int = DEPTH,
    ):
        if buffer_bytes <= 0 or n_buffers < 1 or depth < 1:
            raise ValueError("buffer_bytes, n_buffers and depth must be positive")
        self.regions = regions
        self.t = transfer
        self.buffer_bytes = buffer_bytes
        self.n_buffers = n_buffers
        self.stats = PipelineStats(host_bytes=n_buffers * buffer_bytes)
        self.order: list[tuple[int, int, int]] = []  # (region index, chunk offset, host buffer index), as read
        self._ready: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()

    def _pread_into(self, fd: int, path: str, view: memoryview, offset: int) -> None:
        got = 0
        while got < len(view):
            n = os.preadv(fd, [view[got:]], offset + got)
            if n <= 0:  # the reader's own error for a shard shorter than its header says
                raise RecipekitError(
                    code="safetensors-truncated",
                    message=f"short read at offset {offset + got}",
                    location=path,
                    exit_code=ExitCode.INVALID_INPUT,
                )
            got += n
            self.stats.preads += 1

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        fds: dict[str, int] = {}
        try:
            bufs = [self.t.host_buffer(self.buffer_bytes) for _ in range(self.n_buffers)]
            views = [memoryview(b.numpy()) for b in bufs]
            pending: list[Any] = [None] * self.n_buffers
            used: set[int] = set()
            slot = 0
            for ri, reg in enumerate(self.regions):
                if self._stop.is_set():
                    return
                fd = fds.get(reg.path)
                if fd is None:
                    fd = fds[reg.path] = os.open(reg.path, os.O_RDONLY)
                dev = self.t.device_buffer(reg.nbytes)
                last = None
                for off in range(0, reg.nbytes, self.buffer_bytes):
                    n = min(self.buffer_bytes, reg.nbytes - off)
                    self.t.host_wait(pending[slot])  # its previous copy has read it: reuse
                    self._pread_into(fd, reg.path, views[slot][:n], reg.offset + off)
                    last = pending[slot] = self.t.copy(dev[off : off + n], bufs[slot][:n])
                    self.order.append((ri, off, slot))
                    used.add(slot)
                    self.stats.bytes_read += n
                    slot = (slot + 1) % self.n_buffers
                self.stats.regions += 1
                self.stats.buffers_used = len(used)
                if not self._put((reg, dev, last)):
                    return
            for ev in pending:  # the host buffers outlive their last copies
                self.t.host_wait(ev)
            self._put(None)
        except BaseException as e:  # handed to the consumer, raised there
            self._put(e)
        finally:
            for fd in fds.values():
                os.close(fd)

    def __iter__(self) -> Iterator[tuple[Region, Any]]:
        th = threading.Thread(target=self._run, name="oracle-stream-reader", daemon=True)
        th.start()
        try:
            while True:
                item = self._ready.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                reg, dev, last = item
                self.t.consumer_wait(last)
                yield reg, dev
        finally:
            self._stop.set()
            th.join()


def _raw(dev: Any, sp: Span) -> Any:
    return dev[sp.start : sp.start + sp.nbytes]


def _scale_of(name: str) -> str | None:
    return name[: -len(".weight")] + ".scale" if name.endswith(".weight") else None


def decode_pair(name: str, w: Any, w_span: Span, s: Any | None, s_span: Span | None, decoders: Decoders = TORCH) -> Any:
    """One tensor's fp32 from its raw bytes on the device (and its E8M0 scale's, when it has one)."""
    if s is not None and s_span is not None:
        sc = s.view(s_span.shape)
        if w_span.dtype == dsv41.FP8:
            block = codecs.ENGRAM_BLOCK if ".engram.embed" in name else codecs.FP8_BLOCK
            return decoders.fp8_dequant(w.view(w_span.shape), sc, block)
        if w_span.dtype == dsv41.I8:  # MXFP4, stacked ([E, rows, k/2]) or not
            half = w_span.shape[-1]
            out = decoders.mxfp4_dequant(w.view(-1, half), sc.reshape(-1, sc.shape[-1]))
            return out.view(*w_span.shape[:-1], 2 * half)
    if w_span.dtype in ("BF16", "F32"):
        return decode.widen_t(w, w_span.dtype).view(w_span.shape)
    return w.view(w_span.shape)  # codes and other raw dtypes: their bytes


Ready = tuple[str, Any, Span, Any, Any]  # name, weight bytes, its span, scale bytes or None, its span


def _batch_key(r: Ready) -> tuple[Any, ...] | None:
    """Tensors with the same key decode as one stacked call (rows never share a scale block across
    two tensors: row-wise codes, or 32x32 blocks on a multiple of 32 rows); None: decode alone."""
    name, _w, wsp, _s, ssp = r
    if ssp is None or len(wsp.shape) != 2:
        return None
    if wsp.dtype == dsv41.I8:
        return ("mxfp4", wsp.shape, ssp.shape)
    if wsp.dtype == dsv41.FP8:
        block = codecs.ENGRAM_BLOCK if ".engram.embed" in name else codecs.FP8_BLOCK
        if wsp.shape[0] % block[0] == 0:
            return ("fp8", block, wsp.shape, ssp.shape)
    return None


def decode_batched(ready: list[Ready], decoders: Decoders = TORCH) -> Iterator[tuple[str, Any]]:
    """decode_pair over `ready`, yielded in its order, with same-shape quantized tensors (a region's
    experts) stacked into one decode: the per-tensor launches, not the bytes, bound the decode of
    thousands of small experts. The same elementwise ops, so the same bits."""
    import torch  # lazy: pulls torch

    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, r in enumerate(ready):
        key = _batch_key(r)
        if key is not None:
            groups.setdefault(key, []).append(i)
    done: dict[int, Any] = {}
    for key, idx in groups.items():
        if len(idx) < 2:
            continue
        first = ready[idx[0]]
        wshape, sshape = first[2].shape, first[4].shape
        w = torch.stack([ready[i][1].view(wshape) for i in idx]).view(-1, wshape[-1])
        sc = torch.stack([ready[i][3].view(sshape) for i in idx]).view(-1, sshape[-1])
        if key[0] == "mxfp4":
            out = decoders.mxfp4_dequant(w, sc)
        else:
            out = decoders.fp8_dequant(w, sc, key[1])
        out = out.view(len(idx), wshape[0], -1)
        for j, i in enumerate(idx):
            done[i] = out[j]
    for i, r in enumerate(ready):
        yield r[0], done[i] if i in done else decode_pair(*r, decoders=decoders)


def stream_decoded(
    ckpt: Checkpoint,
    names: Iterable[str],
    device: Any = "cpu",
    buffer_bytes: int = BUFFER_BYTES,
    n_buffers: int = N_BUFFERS,
    region_bytes: int = REGION_BYTES,
    depth: int = DEPTH,
    stats: PipelineStats | None = None,
    decoders: Decoders = TORCH,
) -> Iterator[tuple[str, Any]]:
    """(name, fp32 on `device`) for each weight in `names` (a `.scale` beside a quantized weight is
    read with it and not yielded), in file order, quantized ones decoded by `decoders`; `stats` (if
    given) receives the pipeline's counts."""
    want = list(dict.fromkeys(names))
    paired = {_scale_of(n) for n in want if _scale_of(n) in ckpt.index.weight_map}
    paired.discard(None)
    quantized = {n for n in want if _scale_of(n) in paired and ckpt.info(n).dtype in (dsv41.FP8, dsv41.I8)}
    scales = {_scale_of(n) for n in quantized}
    read = list(dict.fromkeys(want + [s for s in scales if s is not None]))
    pipe = Pipeline(plan_regions(ckpt, read, region_bytes), Transfer(device), buffer_bytes, n_buffers, depth)
    held: dict[str, tuple[Any, Span]] = {}  # a weight or scale whose partner is in a later region
    ready: list[Ready] = []
    try:
        for reg, dev in pipe:
            for sp in reg.spans:
                held[sp.name] = (_raw(dev, sp), sp)
            for sp in reg.spans:
                n = sp.name
                if n in scales:
                    owner = n[: -len(".scale")] + ".weight"
                    if owner not in held or n not in held:
                        continue
                    n = owner
                if n not in held:
                    continue
                if n in quantized:
                    s_name = _scale_of(n)
                    if s_name not in held:
                        continue
                    w, wsp = held.pop(n)
                    s, ssp = held.pop(str(s_name))
                    ready.append((n, w, wsp, s, ssp))
                elif n in want:
                    w, wsp = held.pop(n)
                    ready.append((n, w, wsp, None, None))
            yield from decode_batched(ready, decoders)
            ready.clear()
    finally:
        if stats is not None:
            for k, v in vars(pipe.stats).items():
                setattr(stats, k, v)
