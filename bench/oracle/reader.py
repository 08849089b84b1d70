"""One weight reader interface over the original DeepSeek-V4.1 layout and the Gaudi port layout.

Weights are read by name, one tensor at a time, straight from the shards (os.pread through
`SafetensorsFile`); nothing is cached, so memory holds only what the forward currently uses:
- `dense(name)`: a logical fp32 tensor. Original: FP8 e4m3 + 32x32 E8M0 scale dequantized on use
  (decode.py: torch's multi-threaded kernels, bit-identical to codecs.fp8_dequant_f32); BF16/F32
  widened. Gaudi: the port's BF16 (an exact image of
  the FP8 weight) widened, so both layouts give the same fp32 bits.
- `expert(prefix, e)`: (w1, w2, w3) of one routed expert, MXFP4 dequantized. Gaudi: row e of the
  stacked tensors, w13 de-interleaved (gate rows at 2j, up rows at 2j+1).
- `engram_rows(layer, ids)`: rows by id from the table's safetensors region (weight and scale
  rows), FP8 + per-row-per-32 E8M0 dequantized. Gaudi: the id maps to its hash bucket tensor.
`stats` counts bytes and tensors read. `fingerprint()` gives the checkpoint's hashes (config,
index and every shard header: cheap on the 510 GB checkpoint; tensor bytes are not hashed).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from recipekit import bounded
from recipekit.bench.oracle import decode
from recipekit.checkpoint import codecs, dsv41, gaudi_port
from recipekit.checkpoint.safetensors_io import Checkpoint
from recipekit.errors import ExitCode, RecipekitError


@dataclass
class ReadStats:
    bytes_read: int = 0
    tensors_read: int = 0
    experts_read: int = 0
    engram_rows_read: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, n: int) -> None:
        self.bytes_read += n
        self.by_kind[kind] = self.by_kind.get(kind, 0) + n


class WeightReader:
    """Base: a checkpoint folder, its config and geometry, and raw reads with byte accounting."""

    layout = "?"

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.config: dict[str, Any] = dsv41.load_config(self.folder)
        self.text: dict[str, Any] = self.config.get("text_config", self.config)
        self.geom = dsv41.Geometry.from_config(self.config, str(self.folder / "config.json"))
        self.ckpt = Checkpoint(self.folder)
        self.stats = ReadStats()
        try:
            self._check_shapes()
        except BaseException:
            self.ckpt.close()
            raise

    def _check_shapes(self) -> None:
        """config.json against the tensors' shapes, before any compute: the layout-independent tensors
        (embedding, head, norms, router) must have the shapes the config's geometry gives them."""
        g = self.geom
        want: dict[str, tuple[int, ...]] = {
            "embed.weight": (g.vocab, g.hidden),
            "head.weight": (g.vocab, g.hidden),
            "norm.weight": (g.hidden,),
        }
        for L in range(g.n_layers):
            want[f"layers.{L}.attn_norm.weight"] = (g.hidden,)
            want[f"layers.{L}.ffn_norm.weight"] = (g.hidden,)
            want[f"layers.{L}.ffn.gate.weight"] = (g.n_routed, g.hidden)
        for name, shape in want.items():
            if not self.has(name):
                raise RecipekitError(
                    code="oracle-config-mismatch",
                    location=str(self.folder / "config.json"),
                    message=f"the config's geometry needs {name}, which the checkpoint does not hold",
                    hint="the config belongs to another checkpoint (check it with `recipe checkpoint check`)",
                    exit_code=ExitCode.INVALID_INPUT,
                )
            got = tuple(self.ckpt.info(name).shape)
            if got != shape:
                raise RecipekitError(
                    code="oracle-config-mismatch",
                    location=str(self.folder / "config.json"),
                    message=f"{name} has shape {list(got)}, the config (vocab_size {g.vocab}, hidden_size "
                    f"{g.hidden}, n_routed_experts {g.n_routed}) gives {list(shape)}",
                    hint="the config belongs to another checkpoint (check it with `recipe checkpoint check`)",
                    exit_code=ExitCode.INVALID_INPUT,
                )

    def close(self) -> None:
        self.ckpt.close()

    def __enter__(self) -> WeightReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def has(self, name: str) -> bool:
        return name in self.ckpt.index.weight_map

    def _raw(self, name: str, kind: str = "dense") -> np.ndarray:
        f = self.ckpt.tensor_file(name)
        a = f.read_array(name)
        self.stats.add(kind, a.nbytes)
        self.stats.tensors_read += 1
        return a

    def _rows(self, name: str, r0: int, r1: int, kind: str) -> np.ndarray:
        a = self.ckpt.tensor_file(name).read_rows(name, r0, r1)
        self.stats.add(kind, a.nbytes)
        return a

    @staticmethod
    def _f32(a: np.ndarray):
        return decode.widen(a)

    def _plain(self, name: str):
        """A BF16 / F32 tensor widened to fp32 (exact)."""
        info = self.ckpt.info(name)
        if info.dtype not in ("BF16", "F32"):
            raise RecipekitError(
                code="oracle-unexpected-dtype",
                location=str(self.folder),
                message=f"{name} is {info.dtype}, expected BF16 or F32 in the {self.layout} layout",
                hint="check the folder with `recipe checkpoint check`",
                exit_code=ExitCode.INVALID_INPUT,
            )
        return self._f32(self._raw(name))

    # the interface the forward uses
    def dense(self, name: str):
        raise NotImplementedError

    def expert(self, prefix: str, e: int):
        raise NotImplementedError

    def engram_rows(self, layer: int, ids: np.ndarray):
        raise NotImplementedError

    def _dequant_rows(self, w: np.ndarray, s: np.ndarray) -> np.ndarray:
        return decode.fp8_dequant(w, s, codecs.ENGRAM_BLOCK).numpy()

    @staticmethod
    def _header_of(f: Any) -> dict[str, Any]:
        return {n: [t.dtype, list(t.shape), t.begin, t.end] for n, t in f.tensors.items()}

    def plain_rows(self, name: str, ids: np.ndarray):
        """Rows `ids` of a BF16/F32 matrix (the embedding) as fp32, without reading the other rows."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        uniq, inv = np.unique(ids, return_inverse=True)
        info = self.ckpt.info(name)
        if info.dtype not in ("BF16", "F32"):
            raise RecipekitError(
                code="oracle-unexpected-dtype",
                location=str(self.folder),
                message=f"{name} is {info.dtype}, expected BF16 or F32",
                exit_code=ExitCode.INVALID_INPUT,
            )
        vals = np.empty((len(uniq), *info.shape[1:]), dtype=np.float32)
        for k, r in enumerate(uniq):
            vals[k] = self._rows(name, int(r), int(r) + 1, "embed")[0].astype(np.float32)
        return self._f32(vals[inv])

    def plain_range(self, name: str, r0: int, r1: int):
        """Rows r0..r1 of a BF16/F32 matrix as fp32 (the head, one vocabulary chunk)."""
        return self._f32(self._rows(name, r0, r1, "head"))

    def stream_dense(
        self, prefix: str, device: Any, buffer_bytes: int = 16 * 1024 * 1024, decoders: Any = None
    ) -> Iterator[tuple[str, Any]]:
        """Every dense weight under `prefix` (one layer's: not its routed experts, not its Engram table)
        as fp32 on `device`, streamed (stream.py: region preads into pinned buffers, asynchronous copies,
        decoded on the device by `decoders`, default the torch ops; the same bits as `dense`). Host
        memory: 3 x `buffer_bytes`."""
        from recipekit.bench.oracle import stream  # lazy: pulls torch

        names = [
            n
            for n in self.ckpt.names()
            if n.startswith(prefix)
            and ".ffn.experts." not in n
            and ".engram.embed" not in n
            and not n.endswith(".scale")
        ]
        st = stream.PipelineStats()
        dec = decoders if decoders is not None else stream.TORCH
        for name, x in stream.stream_decoded(
            self.ckpt, names, device, buffer_bytes=buffer_bytes, stats=st, decoders=dec
        ):
            self.stats.tensors_read += 1
            yield name, x
        self.stats.add("dense", st.bytes_read)

    def fingerprint(self) -> dict[str, Any]:
        """sha256 of config.json, the index and each shard's header (name, dtype, shape, offsets)."""

        out: dict[str, Any] = {"layout": self.layout}
        for fn in ("config.json", "model.safetensors.index.json"):
            p = self.folder / fn
            if p.is_file():
                out[fn] = hashlib.sha256(bounded.read_bytes(p, fn, bounded.SIDE_FILE_MAX_BYTES)).hexdigest()
        h = hashlib.sha256()
        for rel in sorted(self.ckpt.index.shards()):
            f = self.ckpt.file(rel)
            h.update(rel.encode() + b"\0" + json.dumps(self._header_of(f), sort_keys=True).encode())
        out["shard_headers"] = h.hexdigest()
        manifest = self.folder / "recipekit-manifest.json"
        if manifest.is_file():
            out["manifest"] = hashlib.sha256(
                bounded.read_bytes(manifest, manifest.name, bounded.SIDE_FILE_MAX_BYTES)
            ).hexdigest()
        return out


class OriginalReader(WeightReader):
    """The public checkpoint: FP8 linears with 32x32 E8M0 scales, per-expert MXFP4, Engram tables."""

    layout = "original"

    def dense(self, name: str):
        info = self.ckpt.info(name)
        scale = name[: -len(".weight")] + ".scale" if name.endswith(".weight") else None
        if info.dtype == dsv41.FP8 and scale and self.has(scale):
            w = self._raw(name)
            s = self._raw(scale)
            return decode.fp8_dequant(w, s, codecs.FP8_BLOCK)
        return self._plain(name)

    def expert(self, prefix: str, e: int):
        out = []
        for w in ("w1", "w2", "w3"):
            base = f"{prefix}ffn.experts.{e}.{w}"
            q = self._raw(f"{base}.weight", "expert")
            s = self._raw(f"{base}.scale", "expert")
            out.append(decode.mxfp4_dequant(q, s))
        self.stats.experts_read += 1
        return tuple(out)

    def engram_rows(self, layer: int, ids: np.ndarray):
        return self._f32(self._table_rows(f"layers.{layer}.engram.embed", [(0, None)], ids))

    def _table_rows(self, base: str, buckets: Sequence[tuple[int, str | None]], ids: np.ndarray) -> np.ndarray:
        """Rows `ids` of a table stored as one tensor (buckets [(0, None)]) or one tensor per bucket
        [(start_row, tensor_base), ...]; consecutive ids are read with one pread."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        dim = self.geom.engram_head_dim
        out = np.empty((len(ids), dim), dtype=np.float32)
        if not len(ids):
            return out
        uniq, inv = np.unique(ids, return_inverse=True)
        starts = np.array([b[0] for b in buckets], dtype=np.int64)
        vals = np.empty((len(uniq), dim), dtype=np.float32)
        i = 0
        while i < len(uniq):
            j = i + 1
            bi = int(np.searchsorted(starts, uniq[i], side="right") - 1)
            bend = starts[bi + 1] if bi + 1 < len(starts) else None
            while j < len(uniq) and uniq[j] == uniq[j - 1] + 1 and (bend is None or uniq[j] < bend):
                j += 1
            r0 = int(uniq[i] - starts[bi])
            tb = buckets[bi][1] or base
            w = self._rows(f"{tb}.weight", r0, r0 + (j - i), "engram")
            s = self._rows(f"{tb}.scale", r0, r0 + (j - i), "engram")
            vals[i:j] = self._dequant_rows(w, s)
            i = j
        out[:] = vals[inv]
        self.stats.engram_rows_read += len(uniq)
        return out


class GaudiReader(OriginalReader):
    """The Gaudi port: BF16 linears, stacked experts with interleaved w13, Engram bucket tensors."""

    layout = "gaudi"

    def __init__(self, folder: str | Path):
        super().__init__(folder)
        marker = self.config.get(gaudi_port.GAUDI_LAYOUT_KEY) or {}
        if marker.get("format") != gaudi_port.GAUDI_LAYOUT_FORMAT:
            raise RecipekitError(
                code="oracle-not-gaudi-layout",
                location=str(self.folder / "config.json"),
                message=f"config has no {gaudi_port.GAUDI_LAYOUT_KEY}.format = {gaudi_port.GAUDI_LAYOUT_FORMAT!r}",
                hint="pass --checkpoint-format original for the public checkpoint",
                exit_code=ExitCode.INVALID_INPUT,
            )
        # bucket ranges from our own addressing (what vLLM computes), checked against the shards' shapes
        self.buckets = gaudi_port.engram_buckets(self.geom)
        for L, ranges in self.buckets.items():
            for bi, (r0, r1) in enumerate(ranges):
                name = f"layers.{L}.engram.embed.buckets.{bi}.weight"
                shape = self.ckpt.info(name).shape
                if shape[0] != r1 - r0:
                    raise RecipekitError(
                        code="oracle-bucket-mismatch",
                        location=str(self.folder),
                        message=f"{name} has {shape[0]} rows, the addressing gives bucket {bi} = {r1 - r0}",
                        hint="the conversion does not match this config",
                        exit_code=ExitCode.INVALID_INPUT,
                    )

    def dense(self, name: str):
        return self._plain(name)

    def expert(self, prefix: str, e: int):
        base = f"{prefix}ffn.experts."
        w13 = self._rows(f"{base}w13.weight", e, e + 1, "expert")[0].view(np.uint8)
        s13 = self._rows(f"{base}w13.scale", e, e + 1, "expert")[0]
        w2 = self._rows(f"{base}w2.weight", e, e + 1, "expert")[0].view(np.uint8)
        s2 = self._rows(f"{base}w2.scale", e, e + 1, "expert")[0]
        self.stats.experts_read += 1
        deq = decode.mxfp4_dequant
        return (deq(w13[0::2], s13[0::2]), deq(w2, s2), deq(w13[1::2], s13[1::2]))

    def engram_rows(self, layer: int, ids: np.ndarray):
        base = f"layers.{layer}.engram.embed.buckets"
        buckets = [(r0, f"{base}.{bi}") for bi, (r0, _r1) in enumerate(self.buckets[layer])]
        return self._f32(self._table_rows(base, buckets, ids))


LAYOUTS = {"original": OriginalReader, "gaudi": GaudiReader}


def detect_layout(folder: str | Path) -> str:
    cfg = dsv41.load_config(Path(folder))
    return (
        "gaudi"
        if (cfg.get(gaudi_port.GAUDI_LAYOUT_KEY) or {}).get("format") == gaudi_port.GAUDI_LAYOUT_FORMAT
        else "original"
    )


def open_reader(folder: str | Path, layout: str | None = None) -> WeightReader:
    """The reader for `folder` (`layout` None: the Gaudi marker in config.json decides)."""
    layout = layout or detect_layout(folder)
    if layout not in LAYOUTS:
        raise RecipekitError(
            code="unknown-layout", message=f"the oracle reads no layout {layout!r}", hint=f"known: {', '.join(LAYOUTS)}"
        )
    return LAYOUTS[layout](folder)
