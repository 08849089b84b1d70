"""EXL3 tensor layout of routed experts, and a tiny EXL3 pack generator for tests.

exllamav3 cannot quantize without a GPU, so tests use a pack with the real EXL3 storage layout
and random content (research/platform.md, research/prior-art-recipes.md §1.6/§2.3):
- per linear `<module>` (here `layers.L.ffn.experts.E.w{1,2,3}`, DeepSeek's own names):
  `.trellis` int16 [in/16, out/16, 16 * bits] (one 16x16 tile of 256 weights = 16 * bits int16
  words), `.suh` fp16 [in] and `.svh` fp16 [out] (the sign/scale vectors around the Hadamard
  rotations), and a codebook marker: `.mcg` or `.mul1`, a 0-d int32 holding the codebook
  multiplier (0xCBAC1FED for mcg, 0x83DCD12D for mul1, stored as signed int32);
- per-tensor bits read back from the trellis width (never inferred from an average bpw);
- the pack's own config.json with exllamav3's quantization_config (quant_method exl3, bits,
  codebook, ...) plus `quantization_config.json` with per-tensor storage and bits;
- the pack's own shard names `model-0000i-of-0000N.safetensors` and index.
in = the linear's input features: hidden for w1 (gate) and w3 (up), intermediate for w2 (down).
"""

from __future__ import annotations

import json
import math
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from recipekit.atomic import atomic_write_text, build_dir, pid_temp_name
from recipekit.checkpoint import dsv41
from recipekit.checkpoint.manifest import MANIFEST_NAME, Manifest, TensorEntry, reusable_build, sha256_file
from recipekit.checkpoint.safetensors_io import ShardWriter, TensorSpec, read_index, write_index
from recipekit.errors import RecipekitError

EXL3_SUFFIXES = ("trellis", "suh", "svh", "mcg", "mul1", "su", "sv", "bias")
CODEBOOK_MULT = {"mcg": 0xCBAC1FED, "mul1": 0x83DCD12D}
ROUTED_RE = re.compile(r"^layers\.(\d+)\.ffn\.experts\.(\d+)\.(w1|w2|w3)\.(.+)$")
TILE = 16
QUANT_CONFIG_FILE = "quantization_config.json"
PACK_STAMP = ".recipekit-tiny-exl3.json"
GENERATOR_VERSION = 1


def routed_module(name: str, n_layers: int) -> tuple[str, str] | None:
    """(module prefix, suffix) if `name` is a routed-expert tensor of a backbone layer, else None."""
    if ".ffn.experts." not in name:  # a substring test first: most names of a checkpoint are not experts
        return None
    m = ROUTED_RE.match(name)
    if not m or int(m.group(1)) >= n_layers:
        return None
    return name[: -len(m.group(4)) - 1], m.group(4)


def linear_dims(module: str, hidden: int, inter: int) -> tuple[int, int]:
    """(in_features, out_features) of a routed expert linear."""
    return (inter, hidden) if module.endswith(".w2") else (hidden, inter)


def exl3_specs(module: str, in_f: int, out_f: int, bits: int, codebook: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (dtype, shape) of one EXL3 linear."""
    if in_f % TILE or out_f % TILE:
        raise RecipekitError(
            code="exl3-shape-not-tileable",
            message=f"{module}: {in_f} x {out_f} is not a multiple of the 16x16 EXL3 tile",
            hint="EXL3 needs in/out features divisible by 16",
        )
    if not 1 <= bits <= 8:
        raise RecipekitError(
            code="exl3-bad-bits", message=f"{module}: {bits} bits", hint="EXL3 stores 1..8 bits per weight"
        )
    if codebook not in CODEBOOK_MULT:
        raise RecipekitError(
            code="exl3-bad-codebook", message=f"codebook {codebook!r}", hint=f"one of {', '.join(CODEBOOK_MULT)}"
        )
    return {
        f"{module}.trellis": ("I16", (in_f // TILE, out_f // TILE, TILE * bits)),
        f"{module}.suh": ("F16", (in_f,)),
        f"{module}.svh": ("F16", (out_f,)),
        f"{module}.{codebook}": ("I32", ()),
    }


def bits_of_trellis(shape) -> int:
    """Bits per weight from a trellis shape [in/16, out/16, 16 * bits]."""
    if len(shape) != 3 or shape[2] % TILE:
        raise RecipekitError(
            code="exl3-bad-trellis",
            message=f"trellis shape {list(shape)}",
            hint="a trellis is [in/16, out/16, 16 * bits] int16",
        )
    return shape[2] // TILE


def default_bits(layer: int, n_layers: int) -> int:
    """3 bits, with a band of 2-bit layers in the middle (as in the public 2.9-bpw-class packs)."""
    lo = max(0, n_layers // 2 - max(1, n_layers // 16))
    hi = min(n_layers, n_layers // 2 + max(1, n_layers // 16))
    return 2 if lo <= layer < hi else 3


def _codebook_value(codebook: str) -> int:
    v = CODEBOOK_MULT[codebook]
    return v - (1 << 32) if v >= 1 << 31 else v


def _content(name: str, dtype: str, shape, seed: int):
    import numpy as np  # lazy: pulls numpy

    n = math.prod(shape)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if dtype == "I16":
        return rng.integers(-(1 << 15), 1 << 15, n, dtype=np.int16).view(np.uint8)
    if dtype == "F16":
        # suh/svh: random signs times a small per-channel scale, as the quantizer leaves them
        v = (rng.integers(0, 2, n) * 2 - 1) * rng.uniform(0.5, 1.5, n) / math.sqrt(max(1, n))
        return v.astype(np.float16).view(np.uint8)
    raise ValueError(dtype)


@dataclass
class PackResult:
    path: Path
    tensors: int
    shards: int
    total_size: int
    bits: float
    skipped: bool = False


def make_tiny_exl3(
    like: str | Path,
    out: str | Path,
    seed: int = 0,
    codebook: str = "mcg",
    shards: int | None = None,
    bits: Callable[[int, int], int] = default_bits,
    force: bool = False,
) -> PackResult:
    """Write an EXL3 pack of the routed experts of every backbone layer of checkpoint `like`."""
    import numpy as np  # lazy: pulls numpy

    like, out = Path(like), Path(out)
    config = dsv41.load_config(like)
    g = dsv41.Geometry.from_config(config, str(like / "config.json"))
    official_shards = len(read_index(like).shards())
    stamp_want = {
        "generator": GENERATOR_VERSION,
        "seed": seed,
        "codebook": codebook,
        "like_config": json.dumps(config, sort_keys=True),
    }
    stamp = reusable_build(out, PACK_STAMP, stamp_want, force, "make-tiny-exl3")
    if stamp is not None:
        return PackResult(out, stamp["tensors"], stamp["shards"], stamp["total_size"], stamp["bits"], skipped=True)
    # one shard per layer by default; never the official shard count, so names cannot collide
    n_shards = shards or g.n_layers
    if n_shards == official_shards:
        n_shards += 1
    layer_bits = {L: int(bits(L, g.n_layers)) for L in range(g.n_layers)}
    per_shard: list[list[tuple[str, str, tuple[int, ...]]]] = [[] for _ in range(n_shards)]
    storage: dict[str, dict] = {}
    weights = total_bits = 0
    for L in range(g.n_layers):
        shard = min(n_shards - 1, L * n_shards // g.n_layers)
        for e in range(g.n_routed):
            for w in ("w1", "w2", "w3"):
                module = f"layers.{L}.ffn.experts.{e}.{w}"
                in_f, out_f = linear_dims(module, g.hidden, g.inter)
                specs = exl3_specs(module, in_f, out_f, layer_bits[L], codebook)
                for name, (dt, shape) in specs.items():
                    per_shard[shard].append((name, dt, shape))
                storage[module] = {
                    "quant_format": "exl3",
                    "bits_per_weight": layer_bits[L],
                    "stored_tensors": {n: {"dtype": dt, "shape": list(s)} for n, (dt, s) in specs.items()},
                }
                weights += in_f * out_f
                total_bits += in_f * out_f * layer_bits[L]
    names = [f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors" for i in range(n_shards)]
    with build_dir(out) as tmp:
        weight_map: dict[str, str] = {}
        manifest = Manifest(meta={"generator": "recipekit tiny exl3", "seed": seed, "like": str(like)})
        total = 0
        for fname, members in zip(names, per_shard):
            tspecs = [TensorSpec(n, dt, shape) for n, dt, shape in members]
            with ShardWriter(tmp / fname, tspecs, metadata={"format": "pt"}) as wr:
                for n, dt, shape in members:
                    if dt == "I32":
                        data = np.array([_codebook_value(codebook)], dtype=np.int32).view(np.uint8)
                    else:
                        data = _content(n, dt, shape, seed)
                    wr.write(data, n)
                    weight_map[n] = fname
            for ts in tspecs:
                manifest.tensors[ts.name] = TensorEntry(fname, ts.dtype, list(ts.shape), ts.nbytes, wr.sha256[ts.name])
                total += ts.nbytes
            manifest.files[fname] = {"size": (tmp / fname).stat().st_size, "sha256": sha256_file(tmp / fname)}
        write_index(tmp, weight_map, total)
        avg_bits = round(total_bits / max(1, weights), 3)
        qc = {
            "quant_method": "exl3",
            "version": "tiny",
            "bits": avg_bits,
            "codebook": codebook,
            "scope": "deepseek_v41_routed_experts",
            "layer_bits": {str(L): b for L, b in layer_bits.items()},
            "calibration": {"rows": 0, "cols": 0, "note": "random content, layout only"},
        }
        pack_config = dict(config)
        pack_config["quantization_config"] = qc
        atomic_write_text(
            tmp / "config.json",
            json.dumps(pack_config, indent=2) + "\n",
            sync_dir="ignore",
            temp=pid_temp_name(tmp / "config.json"),
        )
        atomic_write_text(
            tmp / QUANT_CONFIG_FILE,
            json.dumps({"tensor_storage": storage}, indent=1) + "\n",
            sync_dir="ignore",
            temp=pid_temp_name(tmp / QUANT_CONFIG_FILE),
        )

        manifest.write(tmp / MANIFEST_NAME)
        stamp = dict(stamp_want, tensors=len(weight_map), shards=n_shards, total_size=total, bits=avg_bits)
        atomic_write_text(
            tmp / PACK_STAMP,
            json.dumps(stamp, indent=1) + "\n",
            sync_dir="ignore",
            temp=pid_temp_name(tmp / PACK_STAMP),
        )
    return PackResult(out, len(weight_map), n_shards, total, avg_bits)
