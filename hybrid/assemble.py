"""Hybrid checkpoint assembly without copying tensors, and its check (`check --checkpoint-format hybrid`).

The CMP 170HX recipe serves: routed experts of the backbone layers (0..n_layers-1) from an EXL3
pack, everything else from the official FP8 checkpoint (attention, shared experts, norms, DSpark
drafter with its own FP4 experts, Engram shards), and embeddings / LM head / vision from a BF16
source when one is given. The output folder holds:
- relative symlinks to the source shards (and the official tokenizer files): no tensor byte is
  written, which `assemble` proves by the process's own write counter (/proc/self/io wchar);
- `model.safetensors.index.json` mapping every tensor to exactly one linked file;
- `config.json` = the official config with `quantization_config` merged the way the vllm-exl3
  plugin expects (outer exl3, routed experts with their bits, non-routed deepseek_v4_fp8 with its
  block size, DSpark experts from source);
- `hybrid-assembly.json`: the declared source roots, each link's target, size and sha256, and the
  experts-only file regex (DSV41_EXPERTS_ONLY_FILES_RE) computed from and checked against the
  actual file names.
"""

from __future__ import annotations

import collections
import itertools
import json
import operator
import os
import re
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

from recipekit import confine
from recipekit.atomic import atomic_write_text, fsync_dir, pid_temp_name
from recipekit.checkpoint import dsv41
from recipekit.checkpoint import dsv41 as _dsv41
from recipekit.checkpoint.collector import collector_paused
from recipekit.checkpoint.dsv41 import is_vision
from recipekit.checkpoint.layout import MAX_LISTED, LayoutReport
from recipekit.checkpoint.manifest import MANIFEST_NAME, Manifest, sha256_file, verify_tensors
from recipekit.checkpoint.safetensors_io import (
    SafetensorsFile,
    numpy_dtype,
    read_index,
    read_json_unique,
    resolve_member,
)
from recipekit.errors import ExitCode, RecipekitError
from recipekit.hybrid import fastplan
from recipekit.hybrid.engram.rules import locate_tables
from recipekit.hybrid.exl3 import CODEBOOK_MULT, bits_of_trellis, exl3_specs, linear_dims, routed_module
from recipekit.hybrid.exl3_rules import (
    BITS_MAX,
    BITS_MIN,
    CODEBOOK_MULTIPLIER,
    MARKER_SHAPES,
    PLUGIN_CODEBOOKS,
    RULES,
    pad128,
    signed32,
)
from recipekit.hybrid.unmapped import (
    SKIP_SETTING,
    engram_tables,
    names_digest,
    skip_regex,
    skip_rule_exact,
    unmapped_tensors,
    verify_skip_regex,
)
from recipekit.progress import Ticker

RECORD_NAME = "hybrid-assembly.json"
RECORD_FORMAT = "recipekit-hybrid/1"
INDEX_NAME = "model.safetensors.index.json"
BF16_TOP = ("embed.weight", "head.weight", "image_start", "image_end", "image_newline")
FETCH_RECORD_NAME = ".recipekit-fetch.json"  # fetch_record.MANIFEST, named here without importing pydantic
NOT_LINKED = {"config.json", INDEX_NAME, "recipekit-manifest.json", RECORD_NAME}


def is_bf16_sourced(name: str) -> bool:
    """Tensors taken from the BF16 source when one is given: embeddings, LM head, vision."""

    return name in BF16_TOP or is_vision(name)


@dataclass
class Source:
    role: str
    root: Path
    weight_map: dict[str, str]
    headers: dict[str, dict]  # file -> {tensor name -> TensorInfo}
    duplicates: dict[str, list[str]]  # tensor name -> files whose headers hold it (> 1)
    manifest_files: dict[str, dict]  # file -> {"size", "sha256"?} from the source's own manifest
    data_start: dict[str, int] = field(default_factory=dict)  # file -> offset of its data section
    data_len: dict[str, int] = field(default_factory=dict)  # file -> length of its data section

    def info(self, name: str):
        return self.headers[self.weight_map[name]][name]


def source_manifest_files(root: Path) -> dict[str, dict]:
    """file -> {"size", "sha256"} from the source's own manifests: the checkpoint manifest written
    by recipekit generators/converters, and the records of what `recipe fetch` verified."""
    out: dict[str, dict] = {}
    if os.path.lexists(root / FETCH_RECORD_NAME):
        from recipekit.checkpoint.fetch_record import load_manifest  # lazy: pulls pydantic (~0.3 s)

        records = load_manifest(root)["sources"]
    else:
        records = {}  # what load_manifest answers for a folder without one
    for ent in records.values():
        for rel, rec in (ent.get("files") or {}).items():
            if isinstance(rec, dict) and "size" in rec:
                out[rel] = {"size": rec["size"], **({"sha256": rec["sha256"]} if rec.get("sha256") else {})}
    if (root / MANIFEST_NAME).is_file():
        out.update(Manifest.read(root / MANIFEST_NAME).files)
    return out


def load_source(role: str, root: str | Path, progress: Ticker | None = None) -> Source:
    """Index (paths checked to stay inside `root`), every shard header, and the source manifest;
    `progress` counts the headers read (one update per shard)."""

    root = Path(root)
    idx = read_index(root)
    shards = idx.shards()
    if progress:
        progress.update(done=0, total=len(shards), note=f"reading the {role} headers")
    headers: dict[str, dict] = {}
    data_start: dict[str, int] = {}
    data_len: dict[str, int] = {}
    seen: dict[str, list[str]] = {}
    for rel in shards:
        if "/" in rel:
            raise RecipekitError(
                code="assemble-nested-shard",
                location=str(root / INDEX_NAME),
                message=f"{role} shard {rel!r} is in a subfolder",
                hint="hybrid assembly links shard files that sit next to their index",
            )
        with SafetensorsFile(resolve_member(root, rel)) as f:
            headers[rel] = f.tensors  # the file's own dict, built for this read and kept, not copied
            data_start[rel] = f.data_start
            data_len[rel] = f.file_size - f.data_start
        if progress:
            progress.update(advance=1)
    # a name in two shards is rare: find them with set arithmetic, then list where each one is
    names_total = sum(map(len, headers.values()))
    if names_total != len(set().union(*headers.values()) if headers else ()):
        for rel, held in headers.items():
            for n in held:
                seen.setdefault(n, []).append(rel)
    for n, rel in idx.weight_map.items():
        if n not in headers.get(rel, {}):
            raise RecipekitError(
                code="assemble-missing-tensor",
                location=str(root / INDEX_NAME),
                message=f"{role}: the index maps {n} to {rel}, whose header does not hold it",
                hint="the source checkpoint is incomplete or its index is stale",
            )
    mfiles = source_manifest_files(root)
    dups = {n: fs for n, fs in seen.items() if len(fs) > 1}
    return Source(role, root, idx.weight_map, headers, dups, mfiles, data_start, data_len)


# ---------------------------------------------------------------------------------------------
# planning


@dataclass
class Plan:
    config: dict
    n_layers: int
    weight_map: dict[str, str] = field(default_factory=dict)  # tensor -> linked file name
    origin: dict[str, str] = field(default_factory=dict)  # tensor -> role
    links: dict[str, tuple[str, Path]] = field(default_factory=dict)  # file name -> (role, source path)
    total_size: int = 0
    layer_bits: dict[str, int] = field(default_factory=dict)
    codebook: str | None = None
    ignored_exl3: int = 0
    quantization_config: dict = field(default_factory=dict)


def _object(value: Any) -> dict:
    """A config member that must be a JSON object: itself, or {} when absent or of another type (the
    callers report a wrong type where it matters; nothing downstream trips over a list)."""
    return value if isinstance(value, dict) else {}


def _fail(code: str, message: str, hint: str, location: str | None = None, details=()) -> RecipekitError:
    return RecipekitError(
        code=code,
        message=message,
        hint=hint,
        location=location,
        exit_code=ExitCode.INVALID_INPUT,
        details=list(details),
    )


def merge_quantization_config(
    official_qc: dict, pack_qc: dict, layer_bits: dict[str, int], codebook: str | None
) -> dict:
    """Outer exl3 (routed experts), non-routed FP8 with its block size, DSpark experts from source."""
    block = list(official_qc.get("weight_block_size") or [])
    if official_qc.get("quant_method") != "fp8" or block != [32, 32]:
        raise _fail(
            "assemble-official-not-fp8",
            f"official quantization_config is {official_qc.get('quant_method')!r} with block {block}",
            "--official must be the DeepSeek-V4.1 FP8 checkpoint (weight_block_size [32, 32])",
        )
    merged = {k: v for k, v in pack_qc.items() if k not in ("layer_bits", "scope")}
    merged.update(
        {
            "quant_method": "exl3",
            "bits": merged_bits(layer_bits),
            "codebook": codebook or pack_qc.get("codebook"),
            "scope": "deepseek_v41_routed_experts",
            "layer_bits": dict(layer_bits),  # a ledger, never flattened into one number
            "non_routed_quantization": {
                "quant_method": "deepseek_v4_fp8",
                "weight_block_size": block,
                "activation_scheme": official_qc.get("activation_scheme", "dynamic"),
                "scale_fmt": official_qc.get("scale_fmt", "ue8m0"),
            },
            "mtp_experts": "source",
            "mtp_expert_dtype": official_qc.get("expert_dtype", "fp4"),
        }
    )
    return merged


def merged_bits(layer_bits: dict[str, int]) -> int:
    """The integer `bits` the plugin reads: the most common trellis width (layer_bits holds the rest)."""
    counts: dict[int, int] = {}
    for b in layer_bits.values():
        counts[b] = counts.get(b, 0) + 1
    return max(sorted(counts), key=lambda b: counts[b]) if counts else 0


def _rule_fail(
    code: str, rule_id: str, message: str, hint: str, location: str | None = None, details=()
) -> RecipekitError:

    return _fail(code, RULES[rule_id].finding(message), hint, location, details)


def check_pack_geometry(official_cfg: dict, pack_cfg: dict, where: str) -> None:
    """The pack's expert count and widths must be the official config's (rule exl3-pack-geometry)."""
    a = _object(official_cfg.get("text_config", official_cfg))
    b = _object(pack_cfg.get("text_config", pack_cfg))
    for key in ("n_routed_experts", "hidden_size", "moe_intermediate_size"):
        if a.get(key) != b.get(key):
            raise _rule_fail(
                "assemble-exl3-geometry",
                "exl3-pack-geometry",
                f"the pack's {key} is {b.get(key)!r}, the official config's {a.get(key)!r}",
                "quantize the pack from this official checkpoint's experts",
                where,
            )


def check_pack_bits(pack_qc: dict, layer_bits: dict[str, int], where: str) -> None:
    """Pack bits present and 2..6, its layer_bits ledger agreeing with the trellis widths."""

    hint = f"EXL3 for vllm-exl3 is {BITS_MIN}..{BITS_MAX} bits per weight"
    if "bits" not in pack_qc or pack_qc["bits"] is None:
        raise _rule_fail(
            "assemble-exl3-bits",
            "exl3-bits",
            "the pack's quantization_config has no bits",
            "an exllamav3 pack records bits in quantization_config",
            where,
        )
    b = pack_qc["bits"]
    if isinstance(b, bool) or not isinstance(b, (int, float)) or not BITS_MIN <= b <= BITS_MAX:
        raise _rule_fail(
            "assemble-exl3-bits", "exl3-bits", f"the pack's bits {b!r} is outside {BITS_MIN}..{BITS_MAX}", hint, where
        )
    for layer, w in sorted(layer_bits.items(), key=lambda kv: int(kv[0])):
        if not BITS_MIN <= w <= BITS_MAX:
            raise _rule_fail(
                "assemble-exl3-bits",
                "exl3-layer-bits",
                f"layer {layer} trellis width is {w} bits, outside {BITS_MIN}..{BITS_MAX}",
                hint,
                where,
            )
    ledger = pack_qc.get("layer_bits")
    if isinstance(ledger, dict):
        for k, v in ledger.items():
            if str(k) in layer_bits and v != layer_bits[str(k)]:
                raise _rule_fail(
                    "assemble-exl3-bits",
                    "exl3-layer-bits",
                    f"layer_bits says layer {k} is {v!r} bits, its trellis is {layer_bits[str(k)]}",
                    "the per-layer ledger must match the stored trellis widths",
                    where,
                )


class _MarkerReader:
    """Reads codebook marker values (int32) from the pack with os.pread at the offsets of the headers
    load_source already read: one open descriptor at a time, no second header parse."""

    def __init__(self, src: Source) -> None:
        self.src = src
        self.rel: str | None = None
        self.fd = -1

    def value(self, name: str) -> list[int]:
        rel = self.src.weight_map[name]
        if rel != self.rel:
            self.close()
            self.fd = os.open(resolve_member(self.src.root, rel), os.O_RDONLY)
            self.rel = rel
        t = self.src.headers[rel][name]
        at = self.src.data_start[rel] + t.begin
        raw = os.pread(self.fd, t.nbytes, at)
        if len(raw) != t.nbytes:
            raise _fail(
                "assemble-exl3-invalid",
                f"{name}: short read of {len(raw)} of {t.nbytes} bytes at offset {at} of {rel}",
                "the pack changed or is truncated: regenerate or re-download it",
                str(self.src.root / rel),
            )
        return [int.from_bytes(raw[i : i + 4], "little", signed=True) for i in range(0, len(raw), 4)]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            self.rel = None


def marker_problems(module: str, have: dict[str, str], src: Source, reader: _MarkerReader) -> list[str]:
    """Codebook marker rules: exactly one marker, of a plugin codebook, shape [] or [1], holding its multiplier."""

    markers = [s for s in CODEBOOK_MULTIPLIER if s in have]
    if not markers:
        return [RULES["exl3-codebook"].finding(f"{module}: no codebook marker (3INST), the plugin takes mcg or mul1")]
    if len(markers) > 1:
        return [RULES["exl3-marker-shape"].finding(f"{module}: both mcg and mul1 codebook markers")]
    cb = markers[0]
    info = src.info(have[cb])
    if tuple(info.shape) not in MARKER_SHAPES or info.dtype != "I32":
        return [
            RULES["exl3-marker-shape"].finding(
                f"{module}.{cb}: {info.dtype} {list(info.shape)}, the plugin takes I32 [] or [1]"
            )
        ]
    vals = reader.value(have[cb])
    want = CODEBOOK_MULTIPLIER[cb]
    if [v & 0xFFFFFFFF for v in vals] != [want]:
        got = ", ".join(f"{v & 0xFFFFFFFF:#010x}" for v in vals)
        return [
            RULES["exl3-marker-value"].finding(
                f"{module}.{cb} holds {got}, expected {want:#010x} ({signed32(want)} as int32)"
            )
        ]
    return []


def names_in_two_files(
    file_tensors: dict[str, Any], roles: dict[str, str], weight_map: dict[str, str]
) -> dict[str, list[str]]:
    """Tensor name -> the linked files whose headers hold it, for names held by more than one
    (rule hybrid-one-source), whichever source each file comes from, official shards included.

    The one exception is the declared BF16 replacement: embeddings, LM head and vision that the index
    maps to the --bf16 source while an official shard linked for its other tensors still holds its
    own copy (assembly with --bf16 exists for exactly that)."""
    if sum(map(len, file_tensors.values())) == len(set().union(*file_tensors.values())):
        return {}  # no name in two files (set arithmetic at C speed; the lists below only when one is)
    held: dict[str, list[str]] = {}
    for rel in sorted(file_tensors):
        for n in file_tensors[rel]:
            held.setdefault(n, []).append(rel)
    out = {}
    for n, fs in held.items():
        if len(fs) < 2:
            continue
        mapped = weight_map.get(n)
        if (
            is_bf16_sourced(n)
            and roles.get(mapped or "") == "bf16"
            and all(roles.get(f) == "official" for f in fs if f != mapped)
        ):
            continue
        out[n] = fs
    return out


def codebook_config_problem(where: str, named: Any, markers: str | None) -> str | None:
    """quantization_config.codebook against the markers' codebook (rule exl3-codebook-config)."""
    if markers is None or named is None or named == markers:
        return None
    return RULES["exl3-codebook-config"].finding(
        f"{where} names codebook {named!r}, the experts' markers are {markers}"
    )


def _take_all(plan: Plan, names: list[str], src: Source) -> None:
    """`take` for many names of a source without duplicates, by whole columns."""
    plan.weight_map.update(zip(names, map(src.weight_map.__getitem__, names)))
    plan.origin.update(dict.fromkeys(names, src.role))
    hdrs = map(src.headers.__getitem__, map(src.weight_map.__getitem__, names))
    plan.total_size += fastplan.payload_of(list(map(dict.__getitem__, hdrs, names)))


def plan_hybrid(official: Source, exl3: Source, bf16: Source | None) -> Plan:
    config = dsv41.load_config(official.root)
    g = dsv41.Geometry.from_config(config, str(official.root / "config.json"))
    pack_config = dsv41.load_config(exl3.root)
    pack_qc = _object(pack_config.get("quantization_config"))
    if pack_qc.get("quant_method") != "exl3":
        raise _fail(
            "assemble-not-exl3",
            f"the --exl3 pack's quantization_config.quant_method is {pack_qc.get('quant_method')!r}",
            "point --exl3 at an EXL3 pack (config.json quantization_config.quant_method = exl3)",
            str(exl3.root / "config.json"),
        )
    check_pack_geometry(config, pack_config, str(exl3.root / "config.json"))
    plan = Plan(config=config, n_layers=g.n_layers)
    expected = dsv41.original_tensors(g)

    weight_map, origin = plan.weight_map, plan.origin  # 188,245 calls at full size: locals, not attributes

    def take(name: str, src: Source) -> None:
        if src.duplicates and name in src.duplicates:
            raise _fail(
                "assemble-duplicate-tensor",
                f"{src.role}: {name} is in {len(src.duplicates[name])} shards ({', '.join(src.duplicates[name])})",
                "every tensor must come from exactly one file; remove the stray shard",
                str(src.root),
            )
        rel = src.weight_map[name]
        weight_map[name] = rel
        origin[name] = src.role
        t = src.headers[rel][name]
        plan.total_size += t.end - t.begin

    # official: all but the backbone's routed experts (and what the BF16 source provides)
    missing = [n for n in expected if n not in official.weight_map]
    del expected  # ~96,000 specs at full size: not needed past this check
    if missing:
        raise _fail(
            "assemble-missing-tensor",
            f"official: {len(missing)} tensor(s) missing, first {missing[0]}",
            "the official checkpoint is incomplete",
            str(official.root),
            missing[1:20],
        )
    modules: dict[str, tuple[int, int]] = {}
    split = None if official.duplicates else fastplan.split_routed(list(official.weight_map), g.n_layers)
    if split is not None:  # by whole columns: the same names, dims and order as the loop below
        keep, routed_modules = split
        modules = {m: linear_dims(m, g.hidden, g.inter) for m in routed_modules}
        if bf16 is not None:
            keep = [n for n in keep if not is_bf16_sourced(n)]
        _take_all(plan, keep, official)
    else:
        for name in official.weight_map:
            rm = routed_module(name, g.n_layers)
            if rm:
                modules[rm[0]] = linear_dims(rm[0], g.hidden, g.inter)
                continue
            if bf16 is not None and is_bf16_sourced(name):
                continue
            take(name, official)
    # exl3: the routed experts of every backbone layer, nothing else
    n_used_exl3 = 0  # the names taken from the pack are those whose origin is "exl3" (until the bf16 step)
    problems = []
    reader = _MarkerReader(exl3)
    pack_map = exl3.weight_map
    suffixes = fastplan.PACK_SUFFIXES
    sorted_modules = sorted(modules.items())
    pack = (
        None
        if exl3.duplicates
        else fastplan.plan_pack(
            [m for m, _ in sorted_modules],
            pack_map,
            exl3.headers,
            exl3.root,
            exl3.data_start,
            g.hidden,
            g.inter,
        )
    )
    if pack is not None:  # every module regular and valid: taken whole, as the loop below would
        plan.codebook = pack.codebook
        plan.layer_bits.update(pack.layer_bits)
        if pack.count == len(pack_map) == sum(map(len, exl3.headers.values())):
            # the pack's every tensor (so each shard's whole data section): the index's own names and sizes
            plan.weight_map.update(pack_map)
            plan.origin.update(dict.fromkeys(pack_map, exl3.role))
            plan.total_size += sum(exl3.data_len.values())
        else:
            _take_all(plan, pack.names(), exl3)
        n_used_exl3 = pack.count
        sorted_modules = []
    for module, (in_f, out_f) in sorted_modules:
        have = {x[1:]: n for x in suffixes if (n := module + x) in pack_map}
        if "trellis" not in have or not ({"suh", "su"} & set(have)) or not ({"svh", "sv"} & set(have)):
            problems.append(f"{module}: no complete EXL3 tensors (have {sorted(have) or 'none'})")
            continue
        t = exl3.info(have["trellis"])
        try:
            bits = bits_of_trellis(t.shape)
        except RecipekitError as e:
            problems.append(f"{module}: {e.message}")
            continue
        pin, pout = pad128(in_f), pad128(out_f)
        if t.dtype != "I16" or tuple(t.shape[:2]) != (pin // 16, pout // 16):
            problems.append(
                RULES["exl3-pad-128"].finding(
                    f"{module}.trellis: {t.dtype} {list(t.shape)}, expected I16 [{pin // 16}, {pout // 16}, 16*bits] "
                    f"({in_f} x {out_f} padded to 128)"
                )
            )
        for s, want in (("suh", in_f), ("svh", out_f)):
            if s in have:
                i = exl3.info(have[s])
                if i.dtype != "F16" or tuple(i.shape) != (want,):
                    problems.append(f"{module}.{s}: {i.dtype} {list(i.shape)}, expected F16 [{want}]")
        marker_issues = marker_problems(module, have, exl3, reader)
        if marker_issues:
            problems.extend(marker_issues)
            continue
        cb = "mcg" if "mcg" in have else "mul1"
        if plan.codebook is None:
            plan.codebook = cb
        elif plan.codebook != cb:
            problems.append(f"{module}: codebook {cb}, other experts use {plan.codebook}")
        layer = module.split(".")[1]
        if plan.layer_bits.setdefault(layer, bits) != bits:
            problems.append(f"{module}: {bits} bits, other experts of layer {layer} have {plan.layer_bits[layer]}")
        for n in have.values():
            take(n, exl3)
            n_used_exl3 += 1
    reader.close()
    if problems:
        raise _fail(
            "assemble-missing-tensor" if any("no complete" in p for p in problems) else "assemble-exl3-invalid",
            f"exl3: {len(problems)} problem(s), first: {problems[0]}",
            "the EXL3 pack must hold every routed expert of every backbone layer in the EXL3 layout",
            str(exl3.root),
            problems[1:20],
        )
    check_pack_bits(pack_qc, plan.layer_bits, str(exl3.root / "config.json"))
    cb_problem = codebook_config_problem("the pack's quantization_config", pack_qc.get("codebook"), plan.codebook)
    if cb_problem:
        raise _fail(
            "assemble-exl3-invalid",
            cb_problem,
            "the plugin takes each expert's codebook from its marker: fix the pack's quantization_config.codebook "
            "or re-quantize",
            str(exl3.root / "config.json"),
        )
    both = sorted(n for n in exl3.weight_map.keys() & official.weight_map.keys() if origin.get(n) != "exl3")
    if both:
        raise _rule_fail(
            "assemble-tensor-in-two-sources",
            "hybrid-one-source",
            f"{len(both)} tensor(s) are in both the official and the exl3 source, first {both[0]}",
            "the EXL3 pack must hold only the routed experts; remove the others from it",
            str(exl3.root),
            both[1:20],
        )
    plan.ignored_exl3 = len(exl3.weight_map) - n_used_exl3
    # bf16: embeddings, head, vision
    if bf16 is not None:
        for name in official.weight_map:
            if not is_bf16_sourced(name):
                continue
            if name not in bf16.weight_map:
                problems.append(f"{name}: not in the BF16 source")
                continue
            a, b = official.info(name), bf16.info(name)
            if b.dtype not in ("BF16", "F32") or tuple(a.shape) != tuple(b.shape):
                problems.append(
                    f"{name}: BF16 source has {b.dtype} {list(b.shape)}, official {a.dtype} {list(a.shape)}"
                )
                continue
            take(name, bf16)
        for name in bf16.weight_map:  # vision tensors the official copy may lack
            if is_vision(name) and name not in plan.weight_map:
                take(name, bf16)
        if problems:
            raise _fail(
                "assemble-missing-tensor",
                f"bf16: {problems[0]}",
                "the BF16 source must hold embed.weight, head.weight, image_* and the vision tower",
                str(bf16.root),
                problems[1:20],
            )
    # link names: each source's own shard names; two sources must not share a name
    sources = {"official": official, "exl3": exl3, "bf16": bf16}
    sources_ok = {r: x for r, x in sources.items() if x is not None}
    # (file, role) pairs in first-appearance order: weight_map and origin gain their keys together
    for rel, role in dict.fromkeys(zip(plan.weight_map.values(), plan.origin.values())):
        prev = plan.links.get(rel)
        if prev and prev[0] == role:
            continue  # one Path per linked file, not per tensor
        src = sources[role]
        assert src is not None  # a tensor's origin is a source the plan was given
        if prev and prev[0] != role:
            raise _fail(
                "assemble-name-collision",
                f"{rel} is a shard name of both the {prev[0]} and the {role} source",
                "shard names must differ between sources (e.g. -of-00048 vs -of-00039)",
            )
        plan.links[rel] = (role, src.root / rel)
    srcs_headers = {rel: sources_ok[role].headers[rel] for rel, (role, _) in plan.links.items()}
    twice = names_in_two_files(
        {rel: srcs_headers[rel] for rel in plan.links},
        {rel: role for rel, (role, _) in plan.links.items()},
        plan.weight_map,
    )
    if twice:
        first = min(twice)
        where = ", ".join(f"{plan.links[f][0]} {f}" for f in twice[first])
        raise _rule_fail(
            "assemble-tensor-in-two-sources",
            "hybrid-one-source",
            f"{len(twice)} tensor name(s) are held by two linked files, first {first} ({where})",
            "vLLM reads every tensor of every linked file and a skip rule works by name: remove the stray tensor "
            "from one source (or assemble without the file that holds it)",
            None,
            [f"{n}: {', '.join(fs)}" for n, fs in sorted(twice.items())[1:20]],
        )
    plan.quantization_config = merge_quantization_config(
        _object(config.get("quantization_config")), pack_qc, plan.layer_bits, plan.codebook
    )
    return plan


# ---------------------------------------------------------------------------------------------
# the experts-only file regex


# exl3.ROUTED_RE over a file's names joined by newlines, one regex call per file (names without a newline)
_ROUTED_LINES_RE = re.compile(r"(?:layers\.\d+\.ffn\.experts\.\d+\.(?:w1|w2|w3)\..+\n)*")
_LINE_LAYER_RE = re.compile(r"^layers\.(\d+)\.", re.MULTILINE)


def _all_routed(names: list[str], n_layers: int) -> bool:
    """Whether every name is a routed expert tensor of a backbone layer (exl3.routed_module)."""

    joined = "\n".join(names) + "\n"
    if joined.count("\n") != len(names):  # a name with a newline: the per-name rule decides
        return all(routed_module(n, n_layers) is not None for n in names)
    if _ROUTED_LINES_RE.fullmatch(joined) is None:
        return False
    return all(int(x) < n_layers for x in set(_LINE_LAYER_RE.findall(joined)))


def experts_only_files(weight_map: dict[str, str], n_layers: int) -> set[str]:
    """Files all of whose indexed tensors are routed experts of backbone layers."""
    split = fastplan.split_routed(list(weight_map), n_layers, rest_only=True)
    if split is not None:  # the files of the other names are the ones that are not experts-only
        return set(weight_map.values()) - set(map(weight_map.__getitem__, split[0]))
    by_file: dict[str, list[str]] = {}
    for name, rel in weight_map.items():
        by_file.setdefault(rel, []).append(name)
    return {f for f, names in by_file.items() if _all_routed(names, n_layers)}


def _common_prefix(strs: list[str]) -> str:
    return os.path.commonprefix(strs) if strs else ""


def experts_only_regex(all_files: set[str], experts: set[str]) -> str:
    """A regex matching exactly the experts-only files, in the recipe's style when possible:
    `^model-[0-9]+-of-000(43|39)\\.safetensors$`; otherwise an explicit alternation."""
    pat = re.compile(r"^model-[0-9]+-of-([0-9]+)\.safetensors$")
    if experts and all(pat.match(f) for f in experts):
        totals = sorted({m.group(1) for f in experts if (m := pat.match(f))})  # all match (checked above)
        pre = _common_prefix(totals)
        rests = sorted({t[len(pre) :] for t in totals}, reverse=True)
        if len(rests) == 1:
            body = re.escape(pre + rests[0])
        else:
            body = re.escape(pre) + "(" + "|".join(re.escape(r) for r in rests) + ")"
        candidate = rf"^model-[0-9]+-of-{body}\.safetensors$"
        if verify_experts_regex(candidate, all_files, experts) is None:
            return candidate
    if not experts:
        return r"^$"
    return "^(" + "|".join(re.escape(f) for f in sorted(experts)) + ")$"


def verify_experts_regex(regex: str, all_files: set[str], experts: set[str]) -> str | None:
    """None if `regex` matches exactly the experts-only files among all files, else what differs."""
    try:
        rx = re.compile(regex)
    except re.error as e:
        return f"does not compile: {e}"
    matched = {f for f in all_files if rx.search(f)}
    if matched == experts:
        return None
    parts = []
    if experts - matched:
        parts.append(f"misses {', '.join(sorted(experts - matched)[:3])}")
    if matched - experts:
        parts.append(f"also matches {', '.join(sorted(matched - experts)[:3])} (not experts-only)")
    return "; ".join(parts)


# ---------------------------------------------------------------------------------------------
# assembly


def _write_counter() -> int | None:
    """Bytes this process has passed to write()-family calls so far: `wchar` of /proc/self/io
    (Linux; None where the file is absent or unreadable).

    wchar, not write_bytes: write_bytes counts what reaches a block device, so a copy onto
    tmpfs (or one still in the page cache of a filesystem that accounts late) shows 0 there and
    would prove nothing; wchar counts every byte the process hands to write(), pwrite(),
    sendfile() and copy_file_range() on any filesystem. The counter covers the whole process, so
    it is read around the linking alone, where nothing else writes.
    """
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "wchar":
            return int(value)
    return None


def index_text(metadata: dict, weight_map: dict[str, str]) -> str:
    """json.dumps({"metadata": metadata, "weight_map": sorted weight_map}, indent=2) + "\\n", byte for byte,
    with the weight map's lines made by the C string encoder: json's indented output is pure Python
    (~1 s for the 188,245 entries of a full-size hybrid)."""
    enc = encode_basestring_ascii
    head = json.dumps({"metadata": metadata, "weight_map": None}, indent=2)
    if not weight_map:
        return head.replace('"weight_map": null', '"weight_map": {}') + "\n"
    lines = ",\n".join([f"    {enc(k)}: {enc(v)}" for k, v in sorted(weight_map.items())])
    assert head.endswith('"weight_map": null\n}')
    return head[: -len("null\n}")] + "{\n" + lines + "\n  }\n}\n"


def _link(target: Path, link: Path) -> None:
    rel = os.path.relpath(target, link.parent)
    if link.is_symlink():
        if os.readlink(link) == rel:
            return
        link.unlink()
    elif link.exists():
        raise _fail(
            "assemble-output-conflict",
            f"{link} exists and is not a link",
            "assemble into a new or previously assembled folder",
            str(link),
        )
    os.symlink(rel, link)


def _aux_files(root: Path) -> list[Path]:
    """Non-tensor files of the official checkpoint that serving needs (tokenizer, generation config...)."""
    out = []
    for p in sorted(root.iterdir()):
        if p.name.startswith(".") or p.name in NOT_LINKED or p.suffix == ".safetensors":
            continue
        if not p.is_file():
            continue
        # linked into the served folder: a link leading out of the official checkpoint is refused
        confine.refuse_link_outside(root, p, f"side file {p.name}", code="side-file-outside")
        out.append(p)
    return out


@collector_paused()
def assemble(
    official: str | Path,
    exl3: str | Path,
    out: str | Path,
    bf16: str | Path | None = None,
    experts_re: str | None = None,
    hash_sources: bool = True,
    skip_re: str | None = None,
    progress: Ticker | None = None,
) -> dict:
    """Assemble the hybrid checkpoint into `out` (idempotent); returns a report. `skip_re`: the
    DSV41_SKIP_WEIGHT_RE the engine will get, refused unless it matches exactly the unmapped tensors.
    `progress` gets done/total per shard (headers read, then files linked), never per tensor."""

    out = Path(out)
    srcs = {"official": load_source("official", official, progress), "exl3": load_source("exl3", exl3, progress)}
    if bf16 is not None:
        srcs["bf16"] = load_source("bf16", bf16, progress)
    if progress:
        progress.update(note="planning")
    for role, s in srcs.items():
        if out.resolve() == s.root.resolve() or s.root.resolve() in out.resolve().parents:
            raise _fail(
                "assemble-output-in-source",
                f"--out is inside the {role} source",
                "assemble into a folder outside the source checkpoints",
                str(out),
            )
    plan = plan_hybrid(srcs["official"], srcs["exl3"], srcs.get("bf16"))
    aux_paths = _aux_files(srcs["official"].root)  # refuses escaping links before anything is written
    all_files = set(plan.links)
    experts = experts_only_files(plan.weight_map, plan.n_layers)
    regex = experts_only_regex(all_files, experts)
    if experts_re is not None:
        diff = verify_experts_regex(experts_re, all_files, experts)
        if diff is not None:
            raise _fail(
                "assemble-experts-re-mismatch",
                f"DSV41_EXPERTS_ONLY_FILES_RE {experts_re!r} {diff}",
                f"the actual experts-only files match {regex!r}",
            )
    # each linked file's header (a dict: its keys are the names) instead of a copy as a set
    file_tensors = {rel: srcs[role].headers[rel] for rel, (role, _) in plan.links.items()}
    # load_source proved every indexed name is in the header of the file its index names, and the
    # plan links exactly the files of its names (one source per file name): a file whose header holds
    # as many names as the plan maps to it has none unmapped, and the linked files hold exactly the
    # indexed and the unmapped names
    indexed = collections.Counter(plan.weight_map.values())
    unmapped = unmapped_tensors(file_tensors, plan.weight_map, indexed)
    names_all: list[set[str]] = []  # every name of the linked files, built only where a rule needs it

    def all_names() -> set[str]:
        if not names_all:
            names_all.append(set().union(*file_tensors.values()) if file_tensors else set())
        return names_all[0]

    skip = skip_regex(unmapped, all_names, plan.weight_map)
    if skip_re is not None:
        exact = skip_rule_exact(skip_re, unmapped, plan.weight_map)
        diff = None if exact else verify_skip_regex(skip_re, all_names(), unmapped, engram_tables(all_names()))
        if diff is not None:
            raise _fail(
                "assemble-skip-re-mismatch",
                f"{SKIP_SETTING} {skip_re!r} {diff}",
                f"the unmapped tensors of the linked files match {skip!r}",
            )
    names_all.clear()  # the headers' memory goes with the sources' (below): nothing here holds them
    file_tensors = {}
    for s in srcs.values():  # nothing below reads a header or a source's index: free them before the index text
        s.headers, s.weight_map = {}, {}
    if out.exists() and any(out.iterdir()) and not (out / RECORD_NAME).is_file():
        raise _fail(
            "output-exists",
            "the folder exists, is not empty and is not a hybrid assembly",
            "choose an empty or new --out folder",
            str(out),
        )
    wchar0 = _write_counter()
    out.mkdir(parents=True, exist_ok=True)
    # record each linked file's size and sha256 (from the source's manifest when it has one)
    links: dict[str, dict] = {}
    if progress:
        progress.update(done=0, total=len(plan.links), note="hashing and linking the shards")
    for name, (role, src) in sorted(plan.links.items()):
        if progress:
            progress.update(advance=1)
        size = src.stat().st_size
        m = srcs[role].manifest_files.get(name, {})
        if "size" in m and int(m["size"]) != size:
            raise _fail(
                "assemble-source-changed",
                f"{role} {name}: {size} bytes, its manifest says {m['size']}",
                "re-download or regenerate the source",
                str(src),
            )
        digest = m.get("sha256")
        if digest is None and hash_sources:
            digest = sha256_file(src)
        links[name] = {
            "role": role,
            "target": os.path.relpath(src, out),
            "size": size,
            "sha256": digest,
            "from_manifest": "sha256" in m,
        }
    aux = {}
    for p in aux_paths:
        aux[p.name] = {"role": "official", "target": os.path.relpath(p, out), "size": p.stat().st_size}
    # remove links of a previous assembly that are no longer part of it
    if (out / RECORD_NAME).is_file():
        for p in out.iterdir():
            if p.is_symlink() and p.name not in links and p.name not in aux:
                p.unlink()
    linking0 = _write_counter()  # the tensors land here: linked, so no byte of them is written
    for name in links:
        _link(plan.links[name][1], out / name)
    for name in aux:
        _link(srcs["official"].root / name, out / name)
    linking1 = _write_counter()
    config = dict(plan.config)
    config["quantization_config"] = plan.quantization_config
    files_written = {}
    texts = {
        "config.json": json.dumps(config, indent=2) + "\n",
        INDEX_NAME: index_text({"total_size": plan.total_size, "format": "hybrid-exl3-fp8"}, plan.weight_map),
    }
    record = {
        "format": RECORD_FORMAT,
        # roots relative to the assembly, so the folders can move together or be seen through a bind
        # mount (MODELS_DIR at /models); the absolute root is kept for people only
        "sources": {
            role: {
                "root": os.path.relpath(s.root, out),
                "root_at_assembly": str(s.root.resolve()),
                "has_manifest": bool(s.manifest_files),
            }
            for role, s in srcs.items()
        },
        "n_layers": plan.n_layers,
        "layer_bits": plan.layer_bits,
        "codebook": plan.codebook,
        "experts_only_files_re": regex,
        "experts_only_files": sorted(experts),
        "tensors": len(plan.weight_map),
        "tensors_by_source": {r: sum(1 for o in plan.origin.values() if o == r) for r in srcs},
        "ignored_exl3_tensors": plan.ignored_exl3,
        "unmapped_tensors": len(unmapped),
        "unmapped_sha256": names_digest(unmapped),
        "skip_weight_re": skip,
        "skip_setting": SKIP_SETTING,
        "links": links,
        "aux_links": aux,
    }
    texts[RECORD_NAME] = json.dumps(record, indent=1) + "\n"
    for name, text in texts.items():
        atomic_write_text(out / name, text, sync_dir="ignore", temp=pid_temp_name(out / name))
        files_written[name] = len(text.encode())
    fsync_dir(out, "ignore")
    wchar1 = _write_counter()
    linked_bytes = sum(v["size"] for v in links.values())
    return {
        "out": str(out),
        "tensors": len(plan.weight_map),
        "tensors_by_source": record["tensors_by_source"],
        "links": len(links),
        "aux_links": len(aux),
        "linked_bytes": linked_bytes,
        "total_size": plan.total_size,
        "files_written": files_written,
        "bytes_written_files": sum(files_written.values()),
        "bytes_written_process": (wchar1 - wchar0) if wchar0 is not None and wchar1 is not None else None,
        # measured, not declared: what the process wrote while it placed the tensors (None: no counter)
        "tensor_bytes_written": (linking1 - linking0) if linking0 is not None and linking1 is not None else None,
        "experts_only_files_re": regex,
        "experts_only_files": len(experts),
        "layer_bits": plan.layer_bits,
        "codebook": plan.codebook,
        "unmapped_tensors": len(unmapped),
        "skip_weight_re": skip,
    }


# ---------------------------------------------------------------------------------------------
# check --checkpoint-format hybrid


def _read_json(path: Path, what: str) -> Any:
    try:
        return read_json_unique(path, what, 64 * 1024 * 1024, code="hybrid-file-invalid")
    except FileNotFoundError:
        raise _fail(
            "hybrid-file-missing", f"no {what}", "assemble the folder with `recipe checkpoint assemble`", str(path)
        ) from None


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


_SPEC_DTYPE_SHAPE = operator.attrgetter("dtype", "shape")
_SPEC_KIND_GROUP = operator.attrgetter("kind", "group")


def expected_hybrid(
    config: dict, by_name: bool = False
) -> tuple[dict[str, tuple[str, tuple[int, ...] | None]], list[str]]:
    """Non-vision tensors of the hybrid layout (official ones, the backbone's routed experts in
    EXL3 with the bits of the config's ledger), in the contract's order, and problems with that
    ledger. `by_name`: every contract name through exl3.routed_module (the slower reference)."""

    g = dsv41.Geometry.from_config(config)
    qc = _object(config.get("quantization_config"))
    bits = {
        str(k): v
        for k, v in _object(qc.get("layer_bits")).items()
        if isinstance(v, int) and not isinstance(v, bool)  # other values: merged_qc_problems names them
    }
    cb = qc.get("codebook")
    marker = cb if isinstance(cb, str) and cb in CODEBOOK_MULT else None
    out: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    problems: list[str] = []
    # (module kind, layer) -> [(suffix, (dtype, shape))]: the experts of a layer share their specs' objects
    per_layer: dict[tuple[str, str], list[tuple[str, tuple[str, tuple[int, ...] | None]]]] = {}
    contract = dsv41.original_tensors(g)

    def routed_specs(module: str, layer: str) -> list[tuple[str, tuple[str, tuple[int, ...] | None]]]:
        """(suffix, (dtype, shape)) of one routed module: every module of its (kind, layer) shares them."""
        if layer not in bits:
            msg = f"quantization_config.layer_bits has no entry for layer {layer}"
            if msg not in problems:
                problems.append(msg)
        in_f, out_f = linear_dims(module, g.hidden, g.inter)
        specs = exl3_specs(module, in_f, out_f, bits.get(layer, 1), marker or "mcg")
        return [
            (n[len(module) :], (dt, shape if layer in bits else None))
            for n, (dt, shape) in specs.items()
            if not (n.endswith((".mcg", ".mul1")) and marker is None)
        ]

    if by_name:  # exl3.routed_module decides name by name (the reference the runs below are tested against)
        for name, spec in contract.items():
            rm = routed_module(name, g.n_layers)
            if rm is None:
                out[name] = (spec.dtype, spec.shape)
            elif rm[1] == "weight":
                layer = rm[0].split(".")[1]
                key = (rm[0].rsplit(".", 1)[1], layer)
                if key not in per_layer:
                    per_layer[key] = routed_specs(rm[0], layer)
                for suffix, value in per_layer[key]:
                    out[rm[0] + suffix] = value
        return out, problems
    # In the contract's order, by runs of one (kind, group): the contract writes a backbone layer's
    # routed experts side by side, kind "expert" in group "layer:<L>", named
    # `layers.<L>.ffn.experts.<E>.w<k>.<weight|scale>` (exactly the names exl3.routed_module takes: a
    # test compares the two ways). Other runs are taken as they are; a routed run is replaced, at each
    # module's .weight name, by the EXL3 tensors of that module (its .scale names skipped).
    names = list(contract)
    pos = 0
    for (kind, group), run_specs in itertools.groupby(map(_SPEC_KIND_GROUP, contract.values())):
        run = names[pos : pos + len(list(run_specs))]
        pos += len(run)
        if kind != "expert" or not group.startswith("layer:"):
            out.update(zip(run, map(_SPEC_DTYPE_SHAPE, map(contract.__getitem__, run))))
            continue
        layer = group[len("layer:") :]
        mods = [n[: -len(".weight")] for n in run if n.endswith(".weight")]
        for m in mods:  # each (kind, layer) at its first module, in order
            if (m[-2:], layer) not in per_layer:
                per_layer[(m[-2:], layer)] = routed_specs(m, layer)
        kinds = {k: per_layer[(k, layer)] for k in ("w1", "w2", "w3") if (k, layer) in per_layer}
        out.update(
            zip(
                [m + suffix for m in mods for suffix, _ in kinds[m[-2:]]],
                [value for m in mods for _, value in kinds[m[-2:]]],
            )
        )
    return out, problems


def _engram_problems(folder: Path, config: dict, index: dict) -> list[str]:
    """The sm_80 engine's rules on the Engram tables the index resolves (hybrid/engram/rules.py);
    `index`: the folder's index as check_hybrid read it (not parsed a second time)."""

    try:
        return locate_tables(folder, config, index)[1]
    except RecipekitError as e:
        return [f"engram: [{e.code}] {e.message}"]


def merged_qc_problems(qc: dict) -> list[str]:
    """The merged quantization_config as the plugin's Exl3Config.from_config parses it."""

    out = []
    b = qc.get("bits")
    if isinstance(b, bool) or not isinstance(b, int) or not BITS_MIN <= b <= BITS_MAX:
        out.append(
            RULES["exl3-bits"].finding(
                f"quantization_config.bits is {b!r}, the plugin needs an integer "
                f"{BITS_MIN}..{BITS_MAX} (int() truncates a float, null raises)"
            )
        )
    if qc.get("codebook") not in PLUGIN_CODEBOOKS:
        out.append(
            RULES["exl3-codebook"].finding(
                f"quantization_config.codebook is {qc.get('codebook')!r}, "
                f"the plugin takes {' or '.join(PLUGIN_CODEBOOKS)}"
            )
        )
    lb = qc.get("layer_bits")
    if not isinstance(lb, dict) or not lb:
        out.append(RULES["exl3-layer-bits"].finding("quantization_config.layer_bits is missing or empty"))
        return out
    for k, v in lb.items():
        if not str(k).isdigit() or isinstance(v, bool) or not isinstance(v, int) or not BITS_MIN <= v <= BITS_MAX:
            out.append(
                RULES["exl3-layer-bits"].finding(
                    f"layer_bits[{k!r}] = {v!r}: keys are layer numbers, values integers {BITS_MIN}..{BITS_MAX}"
                )
            )
    return out


def pack_tensor_hash_problems(
    folder: Path, pack_root: Path, weight_map: dict[str, str], links: dict[str, dict]
) -> list[str]:
    """The EXL3 pack's own per-tensor sha256 (its recipekit manifest, when it has one), re-hashed in
    the pack the hybrid's links lead to (each link was checked to resolve inside that root)."""

    if not (pack_root / MANIFEST_NAME).is_file():
        return []
    man = Manifest.read(pack_root / MANIFEST_NAME)
    names = {n for n, rel in weight_map.items() if (links.get(rel) or {}).get("role") == "exl3" and n in man.tensors}
    return [f"exl3 pack manifest: {p}" for p in verify_tensors(pack_root, man, names)]


def _marker_value_problems(
    folder: Path, markers: list[tuple[str, str]], headers: dict[str, dict], data_start: dict[str, int]
) -> list[str]:
    """The markers' values, read with os.pread at the offsets of the headers already parsed."""
    out: list[str] = []
    by_file: dict[str, list[str]] = {}
    for n, rel in markers:
        by_file.setdefault(rel, []).append(n)
    for rel, names in sorted(by_file.items()):
        try:
            fd = os.open(folder / rel, os.O_RDONLY)
        except OSError as e:
            out.append(f"{rel}: cannot open: {e.strerror}")
            continue
        try:
            for n in names:
                t = headers[rel][n]
                want = CODEBOOK_MULTIPLIER[n.rsplit(".", 1)[1]]
                raw = os.pread(fd, t.nbytes, data_start[rel] + t.begin)
                if len(raw) != t.nbytes:
                    out.append(f"{rel}: [safetensors-truncated] short read at offset {data_start[rel] + t.begin}")
                    break
                if t.dtype == "I32":
                    vals = [int.from_bytes(raw[i : i + 4], "little") for i in range(0, len(raw), 4)]
                else:  # a wrong dtype (its own finding above): its values as that dtype, for the message
                    import numpy as np  # lazy: only for a marker stored in another dtype

                    arr = np.frombuffer(raw, dtype=numpy_dtype(t.dtype))
                    vals = [int(x) & 0xFFFFFFFF for x in arr.reshape(-1).tolist()]
                if vals != [want]:
                    out.append(
                        RULES["exl3-marker-value"].finding(
                            f"{n} holds {', '.join(f'{v:#010x}' for v in vals)}, expected {want:#010x}"
                        )
                    )
        finally:
            os.close(fd)
    return out


def unmapped_findings(
    record: dict,
    headers: dict[str, dict],
    weight_map: dict[str, str],
    skip_re: str | None,
    in_headers: bool = False,
) -> tuple[list[str], list[str]]:
    """(problems, warnings) about the tensors the linked files expose but the index does not map.
    `in_headers`: the caller proved that every indexed name is in the header of the file the index
    names (fastplan.coverage), so the linked files' names are the indexed ones and the unmapped ones."""

    file_tensors = headers  # a header's keys are its names: no copy as sets
    indexed = collections.Counter(weight_map.values()) if in_headers else None
    unmapped = unmapped_tensors(file_tensors, weight_map, indexed)
    names_all: list[set[str]] = []  # every name of the linked files, built only where a rule needs it

    def all_names() -> set[str]:
        if not names_all:
            names_all.append(set().union(*file_tensors.values()) if file_tensors else set())
        return names_all[0]

    def verify(regex: str, engram: bool = False) -> str | None:
        if in_headers and skip_rule_exact(regex, unmapped, weight_map):
            return None  # matches exactly the unmapped names among the linked files' (indexed + unmapped)
        return verify_skip_regex(regex, all_names(), unmapped, engram_tables(all_names()) if engram else frozenset())

    problems, warnings = [], []
    if record.get("unmapped_tensors") != len(unmapped) or record.get("unmapped_sha256") != names_digest(unmapped):
        problems.append(
            f"{RECORD_NAME}: records {record.get('unmapped_tensors')!r} unmapped tensors, the linked "
            f"files expose {len(unmapped)}"
        )
    recorded = record.get("skip_weight_re")
    diff = verify(recorded or "")
    if diff is not None:
        problems.append(f"{RECORD_NAME}: skip_weight_re {recorded!r} {diff}")
    if skip_re is not None:
        diff = verify(skip_re, engram=True)
        if diff is not None:
            problems.append(f"{SKIP_SETTING} {skip_re!r} {diff}")
    elif unmapped:
        warnings.append(
            f"{len(unmapped)} tensor(s) in the linked files are not in the index (e.g. {min(unmapped)}); "
            f"vLLM's weight iterator reads them all: for an engine whose loader needs it set "
            f"{SKIP_SETTING}={recorded!r}"
        )
    return problems, warnings


def _record_model() -> Any:
    """The assembly record as `assemble` writes it, checked whole before the check trusts any field."""
    from pydantic import BaseModel, ConfigDict  # lazy: pulls pydantic

    class _Strict(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)

    class SourceRec(_Strict):
        root: str
        root_at_assembly: str | None = None
        has_manifest: bool | None = None

    class LinkRec(_Strict):
        role: str
        target: str
        size: int
        sha256: str | None = None
        from_manifest: bool | None = None

    class AuxRec(_Strict):
        role: str
        target: str
        size: int

    class Record(_Strict):
        format: str
        sources: dict[str, SourceRec]
        n_layers: int
        layer_bits: dict[str, int] = {}
        codebook: str | None = None
        experts_only_files_re: str
        experts_only_files: list[str] = []
        tensors: int | None = None
        tensors_by_source: dict[str, int] = {}
        ignored_exl3_tensors: int | None = None
        unmapped_tensors: int | None = None
        unmapped_sha256: str | None = None
        skip_weight_re: str | None = None
        skip_setting: str | None = None
        links: dict[str, LinkRec]
        aux_links: dict[str, AuxRec] = {}

    return Record


def _checked_record(doc: Any, path: Path) -> dict:
    from pydantic import ValidationError  # lazy: pulls pydantic

    try:
        return _record_model().model_validate(doc).model_dump()
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "$"
        raise _fail(
            "hybrid-record-invalid",
            f"{RECORD_NAME} has the wrong shape ({e.error_count()} problem(s), first: {where}: {first['msg']})",
            "re-run `recipe checkpoint assemble` with the same sources (it rewrites the record)",
            str(path),
        ) from None


@collector_paused()
def check_hybrid(folder: str | Path, quick: bool = False, skip_re: str | None = None):
    """Coverage exactly once, dtypes/shapes, links inside the declared roots, sources unchanged,
    unmapped tensors covered by the skip rule (`skip_re`: the effective DSV41_SKIP_WEIGHT_RE, if any)."""

    folder = Path(folder)
    problems: list[str] = []
    record = _read_json(folder / RECORD_NAME, RECORD_NAME)
    index = _read_json(folder / INDEX_NAME, INDEX_NAME)
    config = _read_json(folder / "config.json", "config.json")
    for what, doc in ((INDEX_NAME, index), ("config.json", config)):
        if not isinstance(doc, dict):
            raise _fail(
                "hybrid-file-invalid",
                f"{what} is not a JSON object",
                "re-run `recipe checkpoint assemble`",
                str(folder / what),
            )
    record = _checked_record(record, folder / RECORD_NAME)
    if record.get("format") != RECORD_FORMAT:
        problems.append(f"{RECORD_NAME}: format {record.get('format')!r}, expected {RECORD_FORMAT}")
    if not isinstance(config.get("quantization_config"), dict):
        problems.append("config.json: quantization_config is not an object")
    roots = {
        role: (folder / s["root"]).resolve()
        for role, s in (record.get("sources") or {}).items()
        if isinstance(s, dict) and isinstance(s.get("root"), str)
    }
    for role, s in (record.get("sources") or {}).items():
        if isinstance(s, dict) and os.path.isabs(str(s.get("root", ""))):
            problems.append(
                f"{RECORD_NAME}: the {role} root {s['root']} is absolute (roots are relative to the assembly)"
            )
    if "official" not in roots or "exl3" not in roots:
        problems.append(f"{RECORD_NAME}: the official and exl3 source roots must be declared")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise _fail(
            "hybrid-file-invalid",
            "index has no weight_map object",
            "re-run `recipe checkpoint assemble`",
            str(folder / INDEX_NAME),
        )
    if set(map(type, weight_map.values())) - {str}:
        bad = next(n for n, r in weight_map.items() if not isinstance(r, str))
        raise _fail(
            "hybrid-file-invalid",
            f"the index maps {bad} to {type(weight_map[bad]).__name__} {str(weight_map[bad])[:60]}, not a file name",
            "re-run `recipe checkpoint assemble`",
            str(folder / INDEX_NAME),
        )
    # one string per file name (JSON gives each of 188,245 values its own)
    shared_files = {r: r for r in set(weight_map.values())}
    weight_map = dict(zip(weight_map, map(shared_files.__getitem__, weight_map.values())))
    index["weight_map"] = weight_map
    # links: every symlink relative, resolving inside its declared source root
    rec_links = {**(record.get("links") or {}), **(record.get("aux_links") or {})}
    headers: dict[str, dict] = {}
    data_start: dict[str, int] = {}  # linked file -> offset of its data section (the markers are read there)
    manifests: dict[str, dict] = {}
    for p in sorted(folder.iterdir()):
        if p.name in (RECORD_NAME, INDEX_NAME, "config.json") and not p.is_symlink():
            continue
        if not p.is_symlink():
            problems.append(f"{p.name}: a regular file (the assembly holds only links and its three JSON files)")
            continue
        target = os.readlink(p)
        real = p.resolve()
        ent = rec_links.get(p.name)
        role_root = roots.get(ent["role"]) if ent else None
        if os.path.isabs(target):
            problems.append(f"{p.name}: absolute link {target} (links must be relative)")
        if ent is None:
            problems.append(f"{p.name}: link not declared in {RECORD_NAME}")
        elif role_root is None or not _inside(real, role_root):
            problems.append(
                f"{p.name}: link escapes the declared {ent['role'] if ent else '?'} source root "
                f"({real} is outside {role_root})"
            )
            continue
        elif target != ent["target"]:
            problems.append(f"{p.name}: link points to {target}, the record says {ent['target']}")
        if not real.is_file():
            problems.append(f"{p.name}: link target {real} does not exist")
            continue
        if ent is None:
            continue
        size = real.stat().st_size
        if size != ent.get("size"):
            problems.append(f"{p.name}: source is {size} bytes, recorded {ent.get('size')}")
            continue
        if p.suffix == ".safetensors":
            if not quick and ent.get("sha256") and sha256_file(real) != ent["sha256"]:
                problems.append(f"{p.name}: source sha256 differs from the assembly record")
            if ent["role"] not in manifests:
                manifests[ent["role"]] = source_manifest_files(roots[ent["role"]])
            if manifests[ent["role"]]:
                m = manifests[ent["role"]].get(p.name)
                if m is None:
                    problems.append(f"{p.name}: not in the {ent['role']} source's manifest")
                elif int(m.get("size", size)) != size or (m.get("sha256") and ent.get("sha256") != m["sha256"]):
                    problems.append(f"{p.name}: differs from the {ent['role']} source's manifest")
            try:
                with SafetensorsFile(p) as f:
                    headers[p.name] = f.tensors  # built for this read: kept, not copied
                    data_start[p.name] = f.data_start
            except RecipekitError as e:
                problems.append(f"{p.name}: [{e.code}] {e.message}")
    for name in sorted(rec_links):
        if not (folder / name).is_symlink():
            problems.append(f"{name}: declared link is missing from the folder")
    # coverage exactly once, dtypes and shapes
    try:
        expected, ledger_problems = expected_hybrid(config)
        problems.extend(ledger_problems)
    except RecipekitError as e:
        raise _fail(
            "hybrid-config-invalid",
            e.message,
            "config.json must be the official config with a merged quantization_config",
            str(folder / "config.json"),
        ) from None
    # by whole columns (no set of 188k names built): is every expected name indexed, which are not expected
    missing = [] if all(map(weight_map.__contains__, expected)) else [n for n in expected if n not in weight_map]
    for n in missing[:MAX_LISTED]:
        problems.append(f"{n}: missing from the index")
    others_in_order = list(itertools.filterfalse(expected.__contains__, weight_map))
    others = set(others_in_order)
    extra = [n for n in others_in_order if not dsv41.is_vision(n)]
    for n in extra[:MAX_LISTED]:
        problems.append(f"{n}: in the index but not part of the hybrid layout")
    payload = 0
    unreadable = False
    markers: list[tuple[str, str]] = []
    covered = fastplan.coverage(weight_map, expected, headers, dsv41.is_vision, others)
    if covered is not None:  # all as expected, proven by whole columns: the loop below has nothing to say
        payload, markers = covered
    for n, rel in weight_map.items() if covered is None else ():
        if rel not in headers:
            unreadable = True
            if not ((folder / rel).is_symlink() or (folder / rel).exists()):
                problems.append(f"{n}: mapped to {rel}, which is not in the folder")
            continue  # otherwise already reported with the link
        t = headers[rel].get(n)
        if t is None:
            problems.append(f"{n}: mapped to {rel}, whose header does not hold it")
            continue
        payload += t.nbytes
        want = expected.get(n)
        if want is not None and n.endswith((".mcg", ".mul1")):
            markers.append((n, rel))
            if t.dtype != "I32" or tuple(t.shape) not in MARKER_SHAPES:
                problems.append(
                    RULES["exl3-marker-shape"].finding(
                        f"{n}: {t.dtype} {list(t.shape)} in {rel}, the plugin takes I32 [] or [1]"
                    )
                )
        elif want is not None:
            dt, shape = want
            if t.dtype != dt or (shape is not None and tuple(t.shape) != tuple(shape)):
                problems.append(
                    f"{n}: {t.dtype} {list(t.shape)} in {rel}, expected {dt} {list(shape) if shape else '?'}"
                )
        elif dsv41.is_vision(n) and t.dtype not in ("BF16", "F32"):
            problems.append(f"{n}: vision tensor stored as {t.dtype}")
    # the markers' kinds: every marker name ends in .mcg or .mul1 (both paths above take only those)
    n_mcg = sum(map(str.endswith, map(operator.itemgetter(0), markers), itertools.repeat(".mcg")))
    marker_kinds = [k for k, c in (("mcg", n_mcg), ("mul1", len(markers) - n_mcg)) if c]
    kinds = set(marker_kinds)
    by_rel: dict[str, list[Any]] = {}
    for n, rel in markers:
        by_rel.setdefault(rel, []).append(headers[rel][n])
    if not (
        len(kinds) == 1
        and fastplan.markers_hold(
            lambda rel: folder / rel, data_start, by_rel, CODEBOOK_MULTIPLIER[kinds.pop()].to_bytes(4, "little")
        )
    ):
        problems.extend(_marker_value_problems(folder, markers, headers, data_start))
    link_roles = {rel: str((rec_links.get(rel) or {}).get("role")) for rel in headers}
    for n, fs in sorted(names_in_two_files(headers, link_roles, weight_map).items())[:MAX_LISTED]:
        problems.append(RULES["hybrid-one-source"].finding(f"{n} is held by {len(fs)} linked files ({', '.join(fs)})"))
    if len(marker_kinds) == 1:
        qc_here = _object(config.get("quantization_config"))
        found = codebook_config_problem("config.json quantization_config", qc_here.get("codebook"), marker_kinds[0])
        if found:
            problems.append(found)
        pack_cfg = roots.get("exl3", folder) / "config.json" if "exl3" in roots else None
        if pack_cfg is not None and pack_cfg.is_file():
            pack_qc = _object(_dsv41.load_config(roots["exl3"]).get("quantization_config"))
            found = codebook_config_problem(
                "the exl3 pack's quantization_config", pack_qc.get("codebook"), marker_kinds[0]
            )
            if found:
                problems.append(found)
    if not unreadable and index.get("metadata", {}).get("total_size") != payload:
        problems.append(
            f"index total_size {index.get('metadata', {}).get('total_size')} differs from the tensors' bytes {payload}"
        )
    # config: the official one except quantization_config, which follows the plugin's contract
    if "official" in roots and (roots["official"] / "config.json").is_file():
        official_cfg = dsv41.load_config(roots["official"])  # the reader assembly took it through
        a = {k: v for k, v in config.items() if k != "quantization_config"}
        b = {k: v for k, v in official_cfg.items() if k != "quantization_config"}
        if a != b:
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            problems.append(
                f"config.json differs from the official config outside quantization_config ({', '.join(keys[:5])})"
            )
    qc = _object(config.get("quantization_config"))
    nr = _object(qc.get("non_routed_quantization"))
    if qc.get("quant_method") != "exl3":
        problems.append(f"quantization_config.quant_method is {qc.get('quant_method')!r}, expected 'exl3'")
    if nr.get("quant_method") != "deepseek_v4_fp8" or list(nr.get("weight_block_size") or []) != [32, 32]:
        problems.append(
            "quantization_config.non_routed_quantization must be deepseek_v4_fp8 with weight_block_size [32, 32]"
        )
    problems.extend(merged_qc_problems(qc))
    if qc.get("mtp_experts") != "source":
        problems.append("quantization_config.mtp_experts must be 'source' (DSpark experts stay in the official format)")
    # the experts-only regex, recomputed from the actual file names
    n_layers = int(record.get("n_layers") or 0)
    files = set(weight_map.values())
    experts = experts_only_files(weight_map, n_layers)
    want_re = record.get("experts_only_files_re")
    diff = verify_experts_regex(want_re or "", files, experts)
    if diff is not None:
        problems.append(f"experts-only regex {want_re!r} {diff}")
    problems.extend(_engram_problems(folder, config, index))
    if not quick and "exl3" in roots:
        problems.extend(pack_tensor_hash_problems(folder, roots["exl3"], weight_map, rec_links))
    warnings: list[str] = []
    if not unreadable:
        more, warnings = unmapped_findings(record, headers, weight_map, skip_re, in_headers=covered is not None)
        problems.extend(more)
    if len(problems) > MAX_LISTED:
        problems = problems[:MAX_LISTED] + [f"... and {len(problems) - MAX_LISTED} more"]
    return LayoutReport(str(folder), "hybrid", problems, len(weight_map), len(files), payload, warnings=warnings)
