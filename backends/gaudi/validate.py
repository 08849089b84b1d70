"""Independent validator for a Gaudi-layout conversion: decodes both sides with its own code.

This module deliberately shares no decoding or mapping code with the converter
(`backends/gaudi/convert.py`) or the codecs (`recipekit/checkpoint/codecs.py`): e4m3, e2m1 and E8M0 are
decoded here by ml_dtypes to float64, bucket primes are searched here, and the
expert/bucket/linear mapping is re-derived from the tensor names. Only file reading
(`recipekit/checkpoint/safetensors_io`) and the list of expected names (`recipekit/checkpoint/dsv41`,
`backends/gaudi/layout`) are shared.

For every selected output tensor it checks dtype and shape, compares it with the source
(bytes for copies, experts and buckets, which must also decode to the same values; exact
bf16 bits for dequantized FP8 linears), and checks the manifest's sha256. It also checks the
index, config.json (the port block and that nothing else changed) and the side files.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from recipekit import bounded, confine
from recipekit.backends.gaudi import port_quant
from recipekit.checkpoint import dsv41, gaudi_port
from recipekit.checkpoint.safetensors_io import INDEX_NAME, SafetensorsFile, read_index, resolve_member
from recipekit.errors import RecipekitError

MANIFEST_MAX_BYTES = 256 * 1024 * 1024  # per-tensor hashes of a full checkpoint: ~15 MiB

MANIFEST = "recipekit-manifest.json"
CHUNK = 8 * 1024 * 1024


@dataclass
class ValidateReport:
    checked: int = 0
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches and self.checked > 0

    def to_dict(self) -> dict:
        return {"ok": self.ok, "checked": self.checked, "mismatches": self.mismatches}


# ----------------------------------------------------------------------------- own decoders

# The three 8-bit/4-bit formats are decoded by ml_dtypes (the reference implementation of the
# OCP formats), not by a table of our own nor by the converter's encoders, which are what is checked.


def _e4m3_f64(b):
    """e4m3fn bytes -> float64 (NaN for S.1111.111)."""
    import ml_dtypes  # lazy: pulls ml_dtypes
    import numpy as np  # lazy: pulls numpy

    return np.ascontiguousarray(b, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)


def _e2m1_f64(codes):
    """e2m1fn codes (one per byte, low nibble) -> float64."""
    import ml_dtypes  # lazy: pulls ml_dtypes
    import numpy as np  # lazy: pulls numpy

    c = np.ascontiguousarray(codes, dtype=np.uint8) & 0xF
    return c.view(ml_dtypes.float4_e2m1fn).astype(np.float64)


def _scale_f64(codes):
    """E8M0 scale bytes -> float64 2**(c-127) (NaN for 255)."""
    import ml_dtypes  # lazy: pulls ml_dtypes
    import numpy as np  # lazy: pulls numpy

    return np.ascontiguousarray(codes, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)


def _fp4_rows_f64(packed, scales):
    """Packed MXFP4 rows [r, k/2] + scales [r, k/32] -> float64 [r, k]; low nibble = even index."""
    import numpy as np  # lazy: pulls numpy

    p = np.asarray(packed, dtype=np.uint8)
    r, half = p.shape
    codes = np.stack([p & 0xF, p >> 4], axis=-1).reshape(r, 2 * half)
    s = np.repeat(_scale_f64(scales), 32, axis=1)[:, : 2 * half]
    return _e2m1_f64(codes) * s


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _bucket_ranges(text: dict) -> dict[int, list[tuple[int, int]]]:
    """Own prime search: per layer, per n-gram order, heads take unused primes above vocab-1."""
    seen: set[int] = set()
    out = {}
    for layer in text["engram_layer_ids"]:
        rows, acc = [], 0
        for _order in range(text["engram_max_ngram_size"] - 1):
            cur = text["engram_vocab_size"] - 1
            for _h in range(text["engram_n_heads"]):
                c = cur + 1
                while c in seen or not _is_prime(c):
                    c += 1
                seen.add(c)
                rows.append((acc, acc + c))
                acc += c
                cur = c
        out[int(layer)] = rows
    return out


# ----------------------------------------------------------------------------- checks


class _Src:
    def __init__(self, folder: Path):
        self.folder = folder
        self.index = read_index(folder)
        self.files: dict[str, SafetensorsFile] = {}

    def f(self, name: str) -> SafetensorsFile:
        rel = self.index.weight_map[name]
        if rel not in self.files:
            self.files[rel] = SafetensorsFile(resolve_member(self.folder, rel))
        return self.files[rel]

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def _first_diff(a, b, base: int) -> str:
    import numpy as np  # lazy: pulls numpy

    x, y = np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)
    if x.size != y.size:
        return f"{x.size} vs {y.size} bytes"
    d = np.flatnonzero(x != y)
    return f"{d.size} byte(s) differ, first at byte {base + int(d[0])} of the tensor" if d.size else ""


def _cmp_bytes(src: _Src, sname: str, s0: int, dfile: SafetensorsFile, dname: str, d0: int, n: int) -> str:
    pos = 0
    while pos < n:
        k = min(CHUNK, n - pos)
        a = src.f(sname).read_bytes(sname, s0 + pos, k)
        b = dfile.read_bytes(dname, d0 + pos, k)
        if a != b:
            return f"differs from {sname}: {_first_diff(a, b, d0 + pos)}"
        pos += k
    return ""


def _check_linear(src: _Src, base: str, dfile: SafetensorsFile, dname: str) -> str:
    """bf16 output vs own float64 decode of the FP8 source, bit for bit."""
    import numpy as np  # lazy: pulls numpy

    wf, sf = src.f(base + ".weight"), src.f(base + ".scale")
    rows, cols = wf.info(base + ".weight").shape
    scale = np.frombuffer(sf.read_bytes(base + ".scale"), np.uint8).reshape(sf.info(base + ".scale").shape)
    step = max(32, (CHUNK // max(1, cols)) // 32 * 32)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        w = np.frombuffer(wf.read_bytes(base + ".weight", r0 * cols, (r1 - r0) * cols), np.uint8).reshape(r1 - r0, cols)
        sc = np.repeat(np.repeat(scale[r0 // 32 : -(-r1 // 32)], 32, axis=0)[: r1 - r0], 32, axis=1)[:, :cols]
        want = _e4m3_f64(w) * _scale_f64(sc)
        f32 = want.astype(np.float32)
        bits = f32.view(np.uint32)
        inexact = ~np.isnan(want) & ((f32.astype(np.float64) != want) | ((bits & 0xFFFF) != 0))
        if inexact.any():
            i = np.argwhere(inexact)[0]
            return f"source value at [{r0 + i[0]}, {i[1]}] is not exactly representable in bf16"
        got = np.frombuffer(dfile.read_bytes(dname, r0 * cols * 2, (r1 - r0) * cols * 2), np.uint16).reshape(
            r1 - r0, cols
        )
        exp = (bits >> 16).astype(np.uint16)
        nan = np.isnan(want)
        bad = (got != exp) & ~nan
        bad |= nan & ((got & 0x7F80) != 0x7F80)
        if bad.any():
            i = np.argwhere(bad)[0]
            return (
                f"{int(bad.sum())} value(s) differ from the decoded {base}.weight, first at "
                f"[{r0 + i[0]}, {i[1]}]: bf16 bits {int(got[tuple(i)]):#06x}, expected {int(exp[tuple(i)]):#06x}"
            )
    return ""


def _check_experts(src: _Src, prefix: str, which: str, leaf: str, dfile: SafetensorsFile, dname: str) -> str:
    """Stacked experts: w13 rows interleaved (gate 2j, up 2j+1), w2 stacked; bytes and values."""
    import numpy as np  # lazy: pulls numpy

    info = dfile.info(dname)
    E = info.shape[0]
    per = info.nbytes // E
    for e in range(E):
        got: np.ndarray = np.frombuffer(dfile.read_bytes(dname, e * per, per), np.uint8).reshape(info.shape[1:])
        if which == "w13":
            g = src.f(f"{prefix}ffn.experts.{e}.w1.{leaf}")
            u = src.f(f"{prefix}ffn.experts.{e}.w3.{leaf}")
            gate = np.frombuffer(g.read_bytes(f"{prefix}ffn.experts.{e}.w1.{leaf}"), np.uint8).reshape(-1, got.shape[1])
            up = np.frombuffer(u.read_bytes(f"{prefix}ffn.experts.{e}.w3.{leaf}"), np.uint8).reshape(-1, got.shape[1])
            if got.shape[0] != 2 * gate.shape[0]:
                return f"expert {e}: {got.shape[0]} rows, expected {2 * gate.shape[0]}"
            for half, ref, label in (
                (got[0::2], gate, "w1 (gate) at even rows"),
                (got[1::2], up, "w3 (up) at odd rows"),
            ):
                if not np.array_equal(half, ref):
                    r = int(np.argwhere(np.any(half != ref, axis=1))[0][0])
                    return f"expert {e}: {label} differ, first at source row {r}"
        else:
            w = src.f(f"{prefix}ffn.experts.{e}.w2.{leaf}")
            w2_ref = np.frombuffer(w.read_bytes(f"{prefix}ffn.experts.{e}.w2.{leaf}"), np.uint8).reshape(got.shape)
            if not np.array_equal(got, w2_ref):
                r = int(np.argwhere(np.any(got != w2_ref, axis=1))[0][0])
                return f"expert {e}: w2 differs, first at row {r}"
    return ""


def _check_expert_values(src: _Src, prefix: str, which: str, dfile: SafetensorsFile, sfile: SafetensorsFile) -> str:
    """Decode expert 0 of the fused/stacked tensor and of the source, compare the values."""
    import numpy as np  # lazy: pulls numpy

    wname, sname = f"{prefix}ffn.experts.{which}.weight", f"{prefix}ffn.experts.{which}.scale"
    wi, si = dfile.info(wname), sfile.info(sname)
    got_w: np.ndarray = np.frombuffer(dfile.read_bytes(wname, 0, wi.nbytes // wi.shape[0]), np.uint8).reshape(
        wi.shape[1:]
    )
    got_s: np.ndarray = np.frombuffer(sfile.read_bytes(sname, 0, si.nbytes // si.shape[0]), np.uint8).reshape(
        si.shape[1:]
    )
    got = _fp4_rows_f64(got_w, got_s)
    if which == "w13":
        parts = []
        for w in ("w1", "w3"):
            pw = np.frombuffer(
                src.f(f"{prefix}ffn.experts.0.{w}.weight").read_bytes(f"{prefix}ffn.experts.0.{w}.weight"), np.uint8
            )
            ps = np.frombuffer(
                src.f(f"{prefix}ffn.experts.0.{w}.scale").read_bytes(f"{prefix}ffn.experts.0.{w}.scale"), np.uint8
            )
            parts.append(_fp4_rows_f64(pw.reshape(-1, got_w.shape[1]), ps.reshape(-1, got_s.shape[1])))
        want = np.empty_like(got)
        want[0::2], want[1::2] = parts
    else:
        pw = np.frombuffer(
            src.f(f"{prefix}ffn.experts.0.w2.weight").read_bytes(f"{prefix}ffn.experts.0.w2.weight"), np.uint8
        )
        ps = np.frombuffer(
            src.f(f"{prefix}ffn.experts.0.w2.scale").read_bytes(f"{prefix}ffn.experts.0.w2.scale"), np.uint8
        )
        want = _fp4_rows_f64(pw.reshape(got_w.shape), ps.reshape(got_s.shape))
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    if not same.all() or not np.array_equal(np.signbit(got), np.signbit(want)):
        i = np.argwhere(~same)[0] if not same.all() else np.argwhere(np.signbit(got) != np.signbit(want))[0]
        return f"decoded values of expert 0 differ at {list(map(int, i))}"
    return ""


def _check_bucket_values(src: _Src, table: str, r0: int, dfile: SafetensorsFile, wname: str, sname: str) -> str:
    """Decode the first rows of a bucket on both sides (FP8 row x per-32 scales)."""
    import numpy as np  # lazy: pulls numpy

    wi = dfile.info(wname)
    n = min(wi.shape[0], 64)
    width = wi.shape[1]
    k = width // 32
    got = _e4m3_f64(np.frombuffer(dfile.read_bytes(wname, 0, n * width), np.uint8).reshape(n, width)) * np.repeat(
        _scale_f64(np.frombuffer(dfile.read_bytes(sname, 0, n * k), np.uint8).reshape(n, k)), 32, axis=1
    )
    sw, ss = src.f(table + ".weight"), src.f(table + ".scale")
    want = _e4m3_f64(
        np.frombuffer(sw.read_bytes(table + ".weight", r0 * width, n * width), np.uint8).reshape(n, width)
    ) * np.repeat(
        _scale_f64(np.frombuffer(ss.read_bytes(table + ".scale", r0 * k, n * k), np.uint8).reshape(n, k)), 32, axis=1
    )
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    return "" if same.all() else f"decoded rows differ from {table} rows {r0}..{r0 + n}"


def validate_gaudi(
    src_dir: str | Path, dst_dir: str | Path, parts: Iterable[str] = ("all",), progress=None
) -> ValidateReport:
    src_dir, dst_dir = Path(src_dir), Path(dst_dir)
    parts = {dsv41.check_part(p) for p in parts} or {"all"}
    rep = ValidateReport()
    bad = rep.mismatches
    src_cfg = dsv41.load_config(src_dir)
    try:
        dst_cfg = dsv41.load_config(dst_dir)
    except RecipekitError as e:
        bad.append(f"config.json: {e.message}")
        dst_cfg = {}
    text = src_cfg.get("text_config", src_cfg)
    buckets = _bucket_ranges(text)
    for L, rows in zip(text["engram_layer_ids"], text["engram_num_embeddings"]):
        if buckets[int(L)][-1][1] != rows:
            bad.append(f"config.json: engram buckets of layer {L} sum to {buckets[int(L)][-1][1]}, not {rows}")
    # config: the port block, and nothing else changed
    port = dst_cfg.get(gaudi_port.GAUDI_LAYOUT_KEY) or {}
    if port.get("format") != gaudi_port.GAUDI_LAYOUT_FORMAT:
        bad.append(f"config.json: {gaudi_port.GAUDI_LAYOUT_KEY}.format is {port.get('format')!r}")
    if {str(k): [list(r) for r in v] for k, v in buckets.items()} != port.get("engram_buckets"):
        bad.append("config.json: engram bucket table differs from the primes of the source config")
    rest_src = {k: v for k, v in src_cfg.items() if k != "quantization_config"}
    rest_dst = {k: v for k, v in dst_cfg.items() if k not in ("quantization_config", gaudi_port.GAUDI_LAYOUT_KEY)}
    if rest_src != rest_dst:
        keys = sorted(k for k in set(rest_src) | set(rest_dst) if rest_src.get(k) != rest_dst.get(k))
        bad.append(f"config.json: fields differ from the source: {', '.join(keys)}")
    if dst_cfg and dst_cfg.get("quantization_config") != port_quant.quantization_config():
        bad.append(
            "config.json: quantization_config is not the port's (backends/gaudi/data/port_quantization_config.json)"
        )
    if port.get("source_quantization_config") != src_cfg.get("quantization_config"):
        bad.append("config.json: source_quantization_config differs from the source's quantization_config")
    # side files
    for p in sorted(src_dir.iterdir()):
        if (
            p.is_file()
            and not p.name.startswith(".")
            and p.suffix != ".safetensors"
            and p.name not in ("config.json", INDEX_NAME, MANIFEST)
        ):
            q = dst_dir / p.name
            try:
                if not q.is_file() or _side_bytes(q) != _side_bytes(p):
                    bad.append(f"{p.name}: missing or different from the source")
            except RecipekitError as e:
                bad.append(f"{p.name}: {e.message}")
    # expected tensors
    try:
        geom = dsv41.Geometry.from_config(src_cfg)
        expected = gaudi_port.gaudi_tensors(geom, buckets)
    except RecipekitError as e:
        bad.append(f"config.json: {e.message}")
        return rep
    src = _Src(src_dir)
    for n in src.index.weight_map:
        if dsv41.is_vision(n):
            i = src.f(n).info(n)
            expected[n] = dsv41.Spec(i.dtype, i.shape, "vision", "dense")
    want = {n: s for n, s in expected.items() if dsv41.selected(n, s, parts)}
    try:
        dindex = read_index(dst_dir)
    except RecipekitError as e:
        bad.append(f"{INDEX_NAME}: {e.message}")
        src.close()
        return rep
    try:
        mdoc = bounded.read_json(dst_dir / MANIFEST, MANIFEST, MANIFEST_MAX_BYTES, code="gaudi-manifest-invalid")
        manifest, mfiles, mmeta = mdoc["tensors"], mdoc["files"], mdoc["meta"]
        if not all(isinstance(x, dict) for x in (manifest, mfiles, mmeta)):
            raise TypeError("tensors, files and meta must be JSON objects")
    except RecipekitError as e:
        bad.append(f"{MANIFEST}: {e.message}")
        mdoc, manifest, mfiles, mmeta = {}, {}, {}, {}
    except (OSError, ValueError, KeyError, TypeError) as e:
        bad.append(f"{MANIFEST}: unreadable ({e})")
        mdoc, manifest, mfiles, mmeta = {}, {}, {}, {}
    if mdoc:
        body = {k: v for k, v in mdoc.items() if k != "checksum"}
        canon = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        if hashlib.sha256(canon).hexdigest() != mdoc.get("checksum"):
            bad.append(f"{MANIFEST}: checksum does not match its content")
        if set(manifest) != set(dindex.weight_map) or set(mfiles) != set(dindex.shards()):
            bad.append(f"{MANIFEST}: lists other tensors or files than {INDEX_NAME}")
        for fname, key in (("config.json", "config_sha256"), (INDEX_NAME, "index_sha256")):
            try:
                if hashlib.sha256(_side_bytes(dst_dir / fname)).hexdigest() != mmeta.get(key):
                    bad.append(f"{fname}: sha256 differs from {MANIFEST}")
            except (OSError, RecipekitError) as e:
                bad.append(f"{fname}: unreadable ({e})")
        side = mmeta.get("side_files") or {}
        for fname, digest in side.items() if isinstance(side, dict) else ():
            try:  # a name from the manifest: confined to the output folder before it is read
                q = confine.confined(dst_dir, fname, f"{MANIFEST} side file", allow_links=False)
                if not q.is_file() or hashlib.sha256(_side_bytes(q)).hexdigest() != digest:
                    bad.append(f"{fname}: sha256 differs from {MANIFEST}")
            except RecipekitError as e:
                bad.append(f"{MANIFEST}: side file: {e.message}")
        src_index = src_dir / INDEX_NAME
        try:
            src_sha = hashlib.sha256(_side_bytes(src_index)).hexdigest() if src_index.is_file() else None
        except RecipekitError as e:
            bad.append(f"source {INDEX_NAME}: {e.message}")
            src_sha = None
        if src_sha is not None and src_sha != mmeta.get("source_index_sha256"):
            bad.append(f"{MANIFEST}: made from another source checkpoint (source index sha256 differs)")
    dfiles: dict[str, SafetensorsFile | None] = {}

    def dfile(rel: str) -> SafetensorsFile | None:
        if rel not in dfiles:
            try:
                dfiles[rel] = SafetensorsFile(resolve_member(dst_dir, rel))
            except RecipekitError as e:
                bad.append(f"{rel}: [{e.code}] {e.message}")
                dfiles[rel] = None
        return dfiles[rel]

    payload = 0
    rel: Optional[str]
    for rel in dindex.shards():
        f = dfile(rel)
        m = mfiles.get(rel) or {}
        try:
            with open(resolve_member(dst_dir, rel), "rb") as fh:
                hlen = int.from_bytes(fh.read(8), "little")
                header_sha = hashlib.sha256(fh.read(min(hlen, 1 << 27))).hexdigest()
                size = os.fstat(fh.fileno()).st_size
        except (OSError, RecipekitError) as e:
            bad.append(f"{rel}: unreadable ({e})")
            continue
        if m.get("size") != size or m.get("header_sha256") != header_sha:
            bad.append(f"{rel}: header or size differs from {MANIFEST}")
        if f is not None:
            payload += sum(t.nbytes for t in f.tensors.values())
            for n in f.tensors:
                if dindex.weight_map.get(n) != rel:
                    bad.append(f"{n}: in {rel} but not indexed there")
    if dindex.metadata != {"total_size": payload, "layout": gaudi_port.GAUDI_LAYOUT_FORMAT}:
        bad.append(f"{INDEX_NAME}: metadata {dindex.metadata} is not total_size {payload} + the Gaudi layout")
    if dindex.total_size != payload:
        bad.append(f"{INDEX_NAME}: total_size {dindex.total_size} differs from the shards' {payload} bytes")
    for n in dindex.weight_map:
        if n not in expected:
            bad.append(f"{n}: unexpected tensor in the output")
    value_checks: list[tuple] = []
    try:
        for name, spec in want.items():
            if progress:
                progress(name)
            rel = dindex.weight_map.get(name)
            if rel is None:
                bad.append(f"{name}: missing from the output")
                continue
            f = dfile(rel)
            if f is None:
                continue
            if name not in f.tensors:
                bad.append(f"{name}: missing from {rel}")
                continue
            info = f.info(name)
            rep.checked += 1
            if info.dtype != spec.dtype or tuple(info.shape) != spec.shape:
                bad.append(f"{name}: {info.dtype} {list(info.shape)}, expected {spec.dtype} {list(spec.shape)}")
                continue
            why = ""
            if ".ffn.experts.w13." in name or ".ffn.experts.w2." in name:
                prefix, rest = name.split("ffn.experts.")
                which, leaf = rest.split(".")
                why = _check_experts(src, prefix, which, leaf, f, name)
                if leaf == "weight":
                    value_checks.append(("expert", prefix, which, name, f"{prefix}ffn.experts.{which}.scale"))
            elif ".engram.embed.buckets." in name:
                table, rest = name.split(".buckets.")
                b, leaf = rest.split(".")
                L = int(name.split(".")[1])
                r0, r1 = buckets[L][int(b)]
                sname = f"{table}.{leaf}"
                row = src.f(sname).info(sname).nbytes // src.f(sname).info(sname).shape[0]
                why = _cmp_bytes(src, sname, r0 * row, f, name, 0, (r1 - r0) * row)
                if leaf == "weight":
                    value_checks.append(("bucket", table, r0, name, f"{table}.buckets.{b}.scale"))
            elif (
                name.endswith(".weight")
                and spec.dtype == "BF16"
                and name in src.index.weight_map
                and src.f(name).info(name).dtype == "F8_E4M3"
            ):
                why = _check_linear(src, name[:-7], f, name)
            elif name in src.index.weight_map:
                si = src.f(name).info(name)
                if si.dtype != info.dtype or si.shape != info.shape:
                    why = f"source is {si.dtype} {list(si.shape)}"
                else:
                    why = _cmp_bytes(src, name, 0, f, name, 0, si.nbytes)
            else:
                why = "no source tensor for it"
            if why:
                bad.append(f"{name}: {why} ({rel})")
            # the manifest's sha256 of the output tensor
            m = manifest.get(name)
            if m is None:
                bad.append(f"{name}: not in {MANIFEST}")
            elif (m.get("file"), m.get("dtype"), m.get("shape"), m.get("nbytes")) != (
                rel,
                info.dtype,
                list(info.shape),
                info.nbytes,
            ):
                bad.append(f"{name}: {MANIFEST} entry disagrees with {rel}")
            else:
                h = hashlib.sha256()
                for c in f.iter_chunks(name, CHUNK):
                    h.update(c)
                if h.hexdigest() != m.get("sha256"):
                    bad.append(f"{name}: sha256 differs from {MANIFEST} ({rel})")
        # decode weight + scale pairs on both sides, once both passed their byte checks
        named = {m.split(":")[0] for m in bad}
        for kind, a, b, wname, sname in value_checks:
            if wname in named or sname in named or sname not in dindex.weight_map:
                continue
            wf, sf = dfile(dindex.weight_map[wname]), dfile(dindex.weight_map[sname])
            if wf is None or sf is None:
                continue
            if kind == "expert":
                why = _check_expert_values(src, a, b, wf, sf)
            else:
                why = _check_bucket_values(src, a, b, wf, wname, sname)
            if why:
                bad.append(f"{wname}: {why}")
    finally:
        src.close()
        for f in dfiles.values():
            if f is not None:
                f.close()
    return rep


def _side_bytes(p: Path) -> bytes:
    """A small output or source file's bytes: a regular file, capped (recipekit/bounded.py)."""
    return bounded.read_bytes(p, p.name, bounded.SIDE_FILE_MAX_BYTES, code="side-file-unreadable")
