"""Hybrid planning by whole columns: the routed experts of the official index split off with one
regex call, and an EXL3 pack whose modules all follow one pattern proven valid per (layer, linear)
instead of per module (46,080 modules, 184,320 tensors at full size).

Each function answers None where the input is not that regular (a name with a newline, a module
with other tensors than the rest, a shape or marker that differs, an unreadable marker): the
caller then plans tensor by tensor, which names the problem in its own words, so the errors and
the outputs are those of the per-tensor planning.
"""

from __future__ import annotations

import itertools
import operator
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from recipekit.checkpoint.safetensors_io import resolve_member
from recipekit.errors import RecipekitError
from recipekit.hybrid.exl3 import bits_of_trellis, linear_dims
from recipekit.hybrid.exl3_rules import CODEBOOK_MULTIPLIER, MARKER_SHAPES, pad128

# exl3.ROUTED_RE over names joined by newlines: (name, module, layer) per routed line
_ROUTED_LINE_RE = re.compile(r"^((layers\.(\d+)\.ffn\.experts\.\d+\.(?:w1|w2|w3))\..+)$", re.MULTILINE)
_ROUTED_LAYER_RE = re.compile(r"^layers\.(\d+)\.ffn\.experts\.\d+\.(?:w1|w2|w3)\..", re.MULTILINE)
# the same rules over the names framed by newlines ("\n" + names joined by "\n"), each line found by
# its leading newline: the scan jumps from one newline to the next (with `^` and re.MULTILINE it tries
# every character), about twice as fast at full size
_ROUTED_MODULE_NL_RE = re.compile(r"\n(layers\.\d+\.ffn\.experts\.\d+\.(?:w1|w2|w3))\.[^\n]")
_NOT_ROUTED_NL_RE = re.compile(r"\n(?!layers\.\d+\.ffn\.experts\.\d+\.(?:w1|w2|w3)\.[^\n])([^\n]*)")
# the tensors an EXL3 linear may have, in the order the per-module planning takes them
PACK_SUFFIXES = (".trellis", ".suh", ".svh", ".su", ".sv", ".mcg", ".mul1", ".bias")
_BEGIN = operator.itemgetter(3)  # TensorInfo (name, dtype, shape, begin, end)
_END = operator.itemgetter(4)
_DTYPE_SHAPE = operator.itemgetter(1, 2)


def split_routed(names: list[str], n_layers: int, rest_only: bool = False) -> tuple[list[str], dict[str, None]] | None:
    """(the names that are not routed experts of a backbone layer, in order; the routed modules in
    first-appearance order), as exl3.routed_module decides name by name, by one regex call per
    list; None for a name holding a newline. `rest_only`: the first list alone (no modules)."""
    if not names:
        return [], {}
    framed = "\n" + "\n".join(names)
    if framed.count("\n") != len(names):
        return None
    # a routed line whose layer is not one of "0".."n_layers-1" (past the backbone, or spelled otherwise)?
    backbone = "|".join(map(str, range(n_layers))) or "(?!)"
    odd = re.compile(rf"\nlayers\.(?!(?:{backbone})\.ffn\.)\d+\.ffn\.experts\.\d+\.(?:w1|w2|w3)\.[^\n]")
    if odd.search(framed) is None:
        rest = _NOT_ROUTED_NL_RE.findall(framed)
        modules = {} if rest_only else dict.fromkeys(_ROUTED_MODULE_NL_RE.findall(framed))
        return rest, modules
    joined = framed[1:]
    # a routed name past the backbone's layers is not routed here: name by name over the routed ones
    keep = {x: int(x) < n_layers for x in set(_ROUTED_LAYER_RE.findall(joined))}
    rows = _ROUTED_LINE_RE.findall(joined)
    routed = {r[0] for r in rows if keep[r[2]]}
    return [n for n in names if n not in routed], {} if rest_only else dict.fromkeys(r[1] for r in rows if keep[r[2]])


def payload_of(infos: list[Any]) -> int:
    """Sum of the tensors' byte lengths (TensorInfo rows)."""
    return sum(map(_END, infos)) - sum(map(_BEGIN, infos))


@dataclass
class PackPlan:
    modules: list[str]  # sorted, as the per-module planning takes them
    suffixes: list[str]  # the tensors every module has, in PACK_SUFFIXES order
    layer_bits: dict[str, int]  # in the per-module planning's order (sorted module names)
    codebook: str

    @property
    def count(self) -> int:
        return len(self.modules) * len(self.suffixes)

    def names(self) -> list[str]:
        """The pack tensors taken, in the per-module planning's order."""
        return [m + x for m in self.modules for x in self.suffixes]


def _infos(headers: dict[str, dict], files: dict[str, str], names: list[str]) -> Any:
    """Each name's TensorInfo from the header of the file `files` names for it."""
    return map(dict.__getitem__, map(headers.__getitem__, map(files.__getitem__, names)), names)


def _one(headers: dict[str, dict], files: dict[str, str], names: list[str]) -> tuple[str, tuple[int, ...]] | None:
    """The (dtype, shape) all `names` share, or None."""
    kinds = set(map(_DTYPE_SHAPE, _infos(headers, files, names)))
    return next(iter(kinds)) if len(kinds) == 1 else None


def markers_hold(
    path_of: Callable[[str], Path], data_start: dict[str, int], by_rel: dict[str, list[Any]], want: bytes
) -> bool:
    """Every marker (TensorInfo, 4 bytes each) holds `want`: one pread per shard where a shard's
    markers lie side by side (as safetensors orders them), one per marker otherwise."""
    for rel, infos in by_rel.items():
        if any(t.end - t.begin != 4 or t.dtype != "I32" for t in infos):
            return False
        try:
            fd = os.open(path_of(rel), os.O_RDONLY)
        except (OSError, RecipekitError):
            return False
        try:
            lo, hi = min(map(_BEGIN, infos)), max(map(_END, infos))
            base = data_start[rel]
            if hi - lo == 4 * len(infos):  # 4-byte tensors that do not overlap: they tile [lo, hi)
                if os.pread(fd, hi - lo, base + lo) != want * len(infos):
                    return False
            elif any(os.pread(fd, 4, base + b) != want for b in map(_BEGIN, infos)):
                return False
        finally:
            os.close(fd)
    return True


def plan_pack(
    modules: list[str],
    pack_map: dict[str, str],
    headers: dict[str, dict],
    root: Path,
    data_start: dict[str, int],
    hidden: int,
    inter: int,
) -> PackPlan | None:
    """The pack's tensors for `modules` (sorted) when every module has the same tensors, each
    (layer, linear) one trellis/suh/svh/marker shape, valid, every layer one width and every marker
    its multiplier; None otherwise (the per-module planning then says what is wrong)."""
    if not modules:
        return None
    have = [x for x in PACK_SUFFIXES if modules[0] + x in pack_map]
    kinds = {x[1:] for x in have}
    markers = [x for x in (".mcg", ".mul1") if x in have]
    if "trellis" not in kinds or not ({"suh", "su"} & kinds) or not ({"svh", "sv"} & kinds) or len(markers) != 1:
        return None
    if not all(m + x in pack_map for m in modules for x in have):
        return None
    if len(pack_map) != len(modules) * len(have):  # the pack holds more: a tensor the first module lacks?
        module_set = set(modules)
        for n in pack_map.keys() - {m + x for m in modules for x in have}:
            head, _, tail = n.rpartition(".")
            if head in module_set and "." + tail in PACK_SUFFIXES:
                return None
    groups: dict[tuple[str, str], list[str]] = {}
    for m in modules:
        groups.setdefault((m.split(".", 2)[1], m[-2:]), []).append(m)
    marker = markers[0]
    layer_bits: dict[str, int] = {}
    for (layer, _w), mods in groups.items():
        in_f, out_f = linear_dims(mods[0], hidden, inter)
        trellis = _one(headers, pack_map, [m + ".trellis" for m in mods])
        if trellis is None or trellis[0] != "I16":
            return None
        try:
            bits = bits_of_trellis(trellis[1])
        except RecipekitError:
            return None
        if tuple(trellis[1][:2]) != (pad128(in_f) // 16, pad128(out_f) // 16):
            return None
        for s, width in ((".suh", in_f), (".svh", out_f)):
            if s in have and _one(headers, pack_map, [m + s for m in mods]) != ("F16", (width,)):
                return None
        mk = _one(headers, pack_map, [m + marker for m in mods])
        if mk is None or mk[0] != "I32" or tuple(mk[1]) not in MARKER_SHAPES:
            return None
        if layer_bits.setdefault(layer, bits) != bits:
            return None
    by_rel: dict[str, list[Any]] = {}
    for m in modules:
        n = m + marker
        rel = pack_map[n]
        by_rel.setdefault(rel, []).append(headers[rel][n])
    want = CODEBOOK_MULTIPLIER[marker[1:]].to_bytes(4, "little")
    if not markers_hold(lambda rel: resolve_member(root, rel), data_start, by_rel, want):
        return None
    return PackPlan(modules, have, layer_bits, marker[1:])


def coverage(
    weight_map: dict[str, str],
    expected: dict[str, tuple[str, tuple[int, ...] | None]],
    headers: dict[str, dict],
    is_vision: Callable[[str], bool],
    others: set[str] | None = None,
) -> tuple[int, list[tuple[str, str]]] | None:
    """(payload bytes, (marker, file) in index order) when every indexed tensor is in the header of
    the file the index names, has its expected dtype and shape (the markers the shape []), and every
    tensor not expected is a BF16/F32 vision tensor; None otherwise (the tensor-by-tensor check then
    names each problem). `others`: the indexed names not expected, where the caller has them already."""
    if set(map(type, weight_map.values())) != {str} or not set(weight_map.values()) <= headers.keys():
        return None
    names = list(weight_map)
    hdrs = list(map(headers.__getitem__, weight_map.values()))  # each name's own file's header
    if not all(map(dict.__contains__, hdrs, names)):
        return None
    infos = list(map(dict.__getitem__, hdrs, names))
    del hdrs
    got = list(map(_DTYPE_SHAPE, infos))
    if others is None:
        others = weight_map.keys() - expected.keys()
    for n in others:
        if not is_vision(n) or headers[weight_map[n]][n][1] not in ("BF16", "F32"):
            return None
    # each name's expected (dtype, shape); a tensor not expected (a vision one, checked above) its own
    if list(map(expected.get, names, got)) != got:
        return None
    maybe = itertools.compress(names, map(str.endswith, names, itertools.repeat((".mcg", ".mul1"))))
    markers = [(n, weight_map[n]) for n in maybe if n not in others]
    return payload_of(infos), markers
