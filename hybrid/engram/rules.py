"""The sm_80 engine's rules on the Engram tables it reads from disk, as data, and their check.

What `DSV41_ENGRAM_STORAGE=ssd` reads (research/consumers.md §3, zebgop-ops/dsv41reap-pp @ 138e7488,
`overlay/engram_ssd/engram_ssd.py`, `row_store.cpp`, overlay `engram.py`): the original safetensors
shards, found through the model folder's `model.safetensors.index.json`. `locate_tables` applies
those rules to a folder and returns each layer's table (file, row count, absolute byte offsets of
the weight and scale regions) plus one problem line per broken rule, each naming its rule id.
`check_placement` adds the rules on the placed Engram folder (`DSV41_ENGRAM_DIR`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipekit import bounded
from recipekit.checkpoint.engram_addressing import EngramConfig, EngramLayout
from recipekit.checkpoint.manifest import sha256_file
from recipekit.checkpoint.safetensors_io import INDEX_NAME, SafetensorsFile
from recipekit.errors import ExitCode, RecipekitError

ENGINE_SRC = "zebgop-ops/dsv41reap-pp@8ef75116"
ENGINE_ROW_WIDTH = 256  # e4m3 bytes per row (engram_ssd.py:127)
ENGINE_SCALE_BLOCK = 32  # columns per E8M0 scale (engram_ssd.py:127)


@dataclass(frozen=True)
class E8M0Rule:
    """How the engine turns an E8M0 scale code into the float32 it multiplies the e4m3 value by."""

    bias: int  # codes 1..254 scale by 2**(code - bias)
    code_0: float  # what code 0 gives (not 2**-127)
    code_255: float  # what code 255 gives (not NaN)
    text: str
    source: str


# engram_ssd.py:146 sets _exp_shift = 23; :219-223 dequantize with
# (scale.to(int32) << 23).view(float32) * e4m3 value, per 32 columns, then store bf16:
# the code lands in float32's exponent field, so code 0 is +0.0 and code 255 is +inf.
ENGINE_E8M0 = E8M0Rule(
    bias=127,
    code_0=0.0,
    code_255=float("inf"),
    text="scale = the float32 whose bits are code << 23 (2**(code-127) for 1..254, +0.0 for 0, +inf for 255), "
    "times the e4m3fn value, one scale per 32 columns",
    source=f"{ENGINE_SRC} overlay/engram_ssd/engram_ssd.py:146, 219-223 (and reference_lookup_cpu)",
)


def engine_scales(codes: Any) -> Any:
    """float32 scale of each E8M0 code as the engine computes it (bit-cast of code << 23)."""
    import numpy as np  # lazy: pulls numpy

    c = np.asarray(codes, dtype=np.uint8)
    return (c.astype(np.uint32) << np.uint32(23)).view(np.float32)


@dataclass(frozen=True)
class Rule:
    id: str
    text: str
    source: str


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule(
            "engram-index",
            "the model folder's model.safetensors.index.json maps layers.{L}.engram.embed.weight and "
            ".scale of every Engram layer",
            "dsv41reap-pp overlay/engram_ssd/engram_ssd.py (index lookup); consumers.md §3",
        ),
        Rule(
            "engram-same-shard",
            "a layer's weight and scale are in one shard",
            "dsv41reap-pp overlay/engram_ssd/engram_ssd.py:86-91",
        ),
        Rule(
            "engram-dtype-shape",
            "weight F8_E4M3 [rows, head_dim (256)], scale F8_E8M0 [rows, head_dim/32 (8)]",
            "dsv41reap-pp overlay/engram_ssd/engram_ssd.py:95-100",
        ),
        Rule(
            "engram-offsets",
            "row r is at 8 + header_len + data_offsets[0] + r*256 (weights), + r*8 (scales): both "
            "regions lie inside the file",
            "dsv41reap-pp overlay/engram_ssd/row_store.cpp:10-12, 107-108",
        ),
        Rule(
            "engram-engine-geometry",
            f"rows are {ENGINE_ROW_WIDTH} e4m3 bytes wide with one E8M0 scale per {ENGINE_SCALE_BLOCK} columns "
            f"({ENGINE_ROW_WIDTH // ENGINE_SCALE_BLOCK} per row): the engine hard-codes both and refuses any other "
            "width (the default tiny checkpoint's tables are 64 wide)",
            f"{ENGINE_SRC} overlay/engram_ssd/engram_ssd.py:127 (assert dim == 256 and block_size == 32), "
            ":96-99 (shapes [rows, 256] and [rows, 8]); row_store.cpp fetch_one (256 B + 8 B per row)",
        ),
        Rule(
            "engram-rows",
            "each table has the addressing's row count (sum of the layer's 24 primes: 384,006,168 and "
            "384,016,682 at full size)",
            "research/dsv41-format.md §4.2; recipekit.checkpoint.engram_addressing",
        ),
        Rule(
            "engram-location",
            "the shards are regular files (hard links or copies) inside the declared Engram folder, "
            "so the container's bind mount reaches them",
            "recipe DSV41_ENGRAM_DIR; consumers.md §3 (MiaAI prepare script)",
        ),
        Rule(
            "engram-reduced-index",
            "the Engram folder's index maps exactly the Engram tensors, with their total_size",
            "consumers.md §3 (public readers of DSV41_ENGRAM_DIR: shards + reduced index + config.json)",
        ),
        Rule("engram-config", "the Engram folder holds the model's config.json", "consumers.md §3"),
        Rule(
            "engram-same-bytes",
            "the Engram folder's shards are the bytes the model's index resolves (same inode, or same size and sha256)",
            "issue 15 part 2: the hybrid index keeps resolving the same bytes",
        ),
        Rule(
            "engram-skip-exact",
            "DSV41_SKIP_WEIGHT_RE matches exactly the Engram tensors of the index",
            "dsv41reap-pp overlay/patch_weight_iter.py; run-dsv41-pp4.sh:91",
        ),
    )
}


def problem(rule: str, where: str, message: str) -> str:
    """One problem line: `rule <id>: <where>: <message>`."""
    assert rule in RULES, rule
    return f"rule {rule}: {where}: {message}"


def weight_name(layer: int) -> str:
    return f"layers.{layer}.engram.embed.weight"


def scale_name(layer: int) -> str:
    return f"layers.{layer}.engram.embed.scale"


def engram_tensor_names(layers: tuple[int, ...] | list[int]) -> list[str]:
    return [n for L in layers for n in (weight_name(L), scale_name(L))]


@dataclass(frozen=True)
class EngramTable:
    """One layer's table as the engine sees it: absolute offsets of row 0 in the shard."""

    layer: int
    path: Path  # the shard as named by the index (may be a link)
    shard: str  # the index's relative name
    rows: int
    head_dim: int
    weight_base: int  # 8 + header_len + data_offsets[0] of the weight
    scale_base: int
    file_size: int

    @property
    def scale_cols(self) -> int:
        return self.head_dim // 32

    def weight_offset(self, row: int) -> int:
        return self.weight_base + row * self.head_dim

    def scale_offset(self, row: int) -> int:
        return self.scale_base + row * self.scale_cols


JSON_MAX_BYTES = 64 * 1024 * 1024  # an index of the full model is a few MB


def read_json(path: Path, what: str) -> dict:
    """A JSON object file of the model or Engram folder, read through the bounded reader."""
    try:
        doc = bounded.read_json(path, what, JSON_MAX_BYTES, code="engram-file-invalid")
    except FileNotFoundError:
        raise RecipekitError(
            code="engram-file-missing",
            location=str(path),
            message=f"no {what}",
            hint="point at a model folder (config.json + model.safetensors.index.json)",
            exit_code=ExitCode.NOT_FOUND,
        ) from None
    if not isinstance(doc, dict):
        raise RecipekitError(
            code="engram-file-invalid", location=str(path), message=f"{what} is not a JSON object", hint="regenerate it"
        )
    return doc


def expected_rows(config: dict) -> dict[int, int]:
    """Rows per Engram layer from the addressing (primes checked against engram_num_embeddings)."""

    cfg = EngramConfig.from_dict(config)
    layout = EngramLayout.build(cfg, check=False)
    return {L: sum(p) for L, p in zip(cfg.layer_ids, layout.primes)}


def locate_tables(
    model_dir: str | os.PathLike, config: dict | None = None, index: dict | None = None
) -> tuple[dict[int, EngramTable], list[str]]:
    """Apply the engine's index/shard/dtype/offset/row rules to a model folder. `config` and
    `index`: the folder's config.json and index as the caller has already parsed them (a caller
    that read the index with its own duplicate-key check saves a second parse of a file of ~14 MB)."""

    folder = Path(model_dir)
    config = config if config is not None else read_json(folder / "config.json", "config.json")
    cfg = EngramConfig.from_dict(config, str(folder / "config.json"))
    want_rows = expected_rows(config)
    index = index if index is not None else read_json(folder / INDEX_NAME, INDEX_NAME)
    wm: dict[str, Any] = index["weight_map"] if isinstance(index.get("weight_map"), dict) else {}
    tables: dict[int, EngramTable] = {}
    problems: list[str] = []
    for L in cfg.layer_ids:
        w, s = weight_name(L), scale_name(L)
        missing = [n for n in (w, s) if n not in wm]
        if missing:
            problems.append(problem("engram-index", str(folder / INDEX_NAME), f"does not map {', '.join(missing)}"))
            continue
        if wm[w] != wm[s]:
            problems.append(problem("engram-same-shard", f"layer {L}", f"weight in {wm[w]}, scale in {wm[s]}"))
            continue
        shard = str(wm[w])
        path = folder / shard
        if "/" in shard or shard.startswith(".") or not path.exists():
            problems.append(
                problem("engram-index", f"layer {L}", f"the index names {shard!r}, not a file of the folder")
            )
            continue
        try:
            with SafetensorsFile(path) as f:
                tw, ts = f.tensors.get(w), f.tensors.get(s)
                data_start, size = f.data_start, f.file_size
        except RecipekitError as e:
            problems.append(problem("engram-offsets", shard, f"[{e.code}] {e.message}"))
            continue
        if tw is None or ts is None:
            problems.append(problem("engram-same-shard", shard, f"the header does not hold {w if tw is None else s}"))
            continue
        bad = []
        if tw.dtype != "F8_E4M3" or len(tw.shape) != 2 or tw.shape[1] != cfg.head_dim:
            bad.append(f"weight {tw.dtype} {list(tw.shape)}, expected F8_E4M3 [rows, {cfg.head_dim}]")
        if ts.dtype != "F8_E8M0" or len(ts.shape) != 2 or ts.shape[1] != cfg.head_dim // 32:
            bad.append(f"scale {ts.dtype} {list(ts.shape)}, expected F8_E8M0 [rows, {cfg.head_dim // 32}]")
        if not bad and tw.shape[0] != ts.shape[0]:
            bad.append(f"weight has {tw.shape[0]} rows, scale {ts.shape[0]}")
        if bad:
            problems.append(problem("engram-dtype-shape", f"{shard} layer {L}", "; ".join(bad)))
            continue
        rows = int(tw.shape[0])
        regions = [
            (n, data_start + t.begin, t.end - t.begin, rows * width)
            for n, t, width in ((w, tw, cfg.head_dim), (s, ts, cfg.head_dim // 32))
        ]
        out = [
            f"{n}: bytes {start}..{start + length} ({length} for {need} needed) past the {size}-byte file"
            if start + need > size or length != need
            else ""
            for n, start, length, need in regions
        ]
        out = [o for o in out if o]
        if out:
            problems.append(problem("engram-offsets", shard, "; ".join(out)))
            continue
        if rows != want_rows[L]:
            problems.append(
                problem("engram-rows", f"{shard} layer {L}", f"{rows:,} rows, the addressing needs {want_rows[L]:,}")
            )
            continue
        tables[L] = EngramTable(L, path, shard, rows, cfg.head_dim, regions[0][1], regions[1][1], size)
    return tables, problems


def open_tables(model_dir: str | os.PathLike) -> dict[int, EngramTable]:
    """`locate_tables`, raising the first broken rule as a one-line error."""
    tables, problems = locate_tables(model_dir)
    if problems:
        raise RecipekitError(
            code="engram-rule-failed",
            location=str(model_dir),
            message=problems[0] + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""),
            hint="`recipe engram verify DIR` lists every broken rule",
        )
    return tables


def skip_regex_problems(regex: str | None, names: list[str], engram_names: list[str]) -> list[str]:
    """The skip rule must match exactly the Engram tensors (no backbone tensor, every table)."""
    if not regex:
        return []
    try:
        rx = re.compile(regex)
    except re.error as e:
        return [problem("engram-skip-exact", "DSV41_SKIP_WEIGHT_RE", f"{regex!r} is not a regex: {e}")]
    matched = {n for n in names if rx.search(n)}
    wanted = set(engram_names)
    out = []
    if wanted - matched:
        out.append(
            problem(
                "engram-skip-exact",
                "DSV41_SKIP_WEIGHT_RE",
                f"{regex!r} leaves {', '.join(sorted(wanted - matched)[:4])} to the weight loader",
            )
        )
    if matched - wanted:
        out.append(
            problem(
                "engram-skip-exact",
                "DSV41_SKIP_WEIGHT_RE",
                f"{regex!r} also skips {len(matched - wanted)} non-Engram tensor(s), e.g. "
                f"{sorted(matched - wanted)[0]}",
            )
        )
    return out


def geometry_problems(config: dict, where: str) -> list[str]:
    """The engine's fixed row geometry against the config's Engram head_dim (what the tables are checked by)."""

    hd = EngramConfig.from_dict(config, where).head_dim
    if hd == ENGINE_ROW_WIDTH:
        return []
    return [
        problem(
            "engram-engine-geometry",
            where,
            f"engram_head_dim {hd}: tables [rows, {hd}] with [rows, {hd // ENGINE_SCALE_BLOCK}] scales; the engine "
            f"reads only [rows, {ENGINE_ROW_WIDTH}] with [rows, {ENGINE_ROW_WIDTH // ENGINE_SCALE_BLOCK}]",
        )
    ]


def not_checked(model_dir: str | os.PathLike | None, hash_bytes: bool) -> list[str]:
    """What a verify with these options leaves unchecked, said plainly (empty: the full check)."""
    if model_dir is None:
        return [
            "the shards' bytes were not compared with the served model's (no --model): tables replaced by "
            "other bytes of the same size pass, and the engine would read them wrongly"
        ]
    if not hash_bytes:
        return [
            "copied shards were compared with the model's by size only, not sha256 (--quick / --no-hash): "
            "tables replaced by other bytes of the same size pass (hard links are checked by inode)"
        ]
    return []


def check_placement(
    engram_dir: str | os.PathLike,
    model_dir: str | os.PathLike | None = None,
    skip_re: str | None = None,
    hash_bytes: bool = True,
) -> tuple[dict[int, EngramTable], list[str]]:
    """Every rule on the Engram folder; with `model_dir`, also that the model's index resolves the same bytes."""

    folder = Path(engram_dir)
    problems: list[str] = []
    if not (folder / "config.json").is_file():
        problems.append(problem("engram-config", str(folder), "no config.json"))
        return {}, problems
    config = read_json(folder / "config.json", "config.json")
    tables, found = locate_tables(folder, config)
    problems += found
    problems += geometry_problems(config, str(folder / "config.json"))
    layers = list(expected_rows(config))
    names = engram_tensor_names(layers)
    index = read_json(folder / INDEX_NAME, INDEX_NAME)
    wm = index.get("weight_map")
    meta = index.get("metadata")
    if not isinstance(wm, dict) or not isinstance(meta, (dict, type(None))):
        problems.append(
            problem(
                "engram-reduced-index",
                str(folder / INDEX_NAME),
                "weight_map must be an object (tensor -> shard) and metadata an object",
            )
        )
        wm, meta = {}, {}
    meta = meta or {}
    if set(wm) != set(names):
        extra = sorted(set(wm) - set(names))
        problems.append(
            problem(
                "engram-reduced-index",
                str(folder / INDEX_NAME),
                f"maps {len(wm)} tensor(s), expected exactly {len(names)}"
                + (f"; extra: {', '.join(extra[:3])}" if extra else ""),
            )
        )
    total = sum(t.rows * (t.head_dim + t.scale_cols) for t in tables.values())
    if len(tables) == len(layers) and meta.get("total_size") != total:
        problems.append(
            problem(
                "engram-reduced-index", str(folder / INDEX_NAME), f"total_size {meta.get('total_size')!r} != {total}"
            )
        )
    for t in tables.values():
        if t.path.is_symlink() or not t.path.is_file() or t.path.resolve().parent != folder.resolve():
            problems.append(
                problem(
                    "engram-location",
                    t.shard,
                    f"{t.path} is a link or outside {folder}; "
                    "the engine's mount reaches only regular files of the folder",
                )
            )
    if model_dir is not None:
        model = Path(model_dir)
        try:
            mwm = read_json(model / INDEX_NAME, INDEX_NAME).get("weight_map")
        except RecipekitError as e:
            problems.append(problem("engram-same-bytes", str(model), e.message))
            mwm = {}
        if not isinstance(mwm, dict):
            problems.append(problem("engram-same-bytes", str(model / INDEX_NAME), "weight_map is not an object"))
            mwm = {}
        for t in tables.values():
            rel = mwm.get(weight_name(t.layer))
            if not isinstance(rel, str):
                problems.append(
                    problem("engram-same-bytes", str(model / INDEX_NAME), f"does not map {weight_name(t.layer)}")
                )
                continue
            a, b = (model / rel), t.path
            if not a.exists():
                problems.append(problem("engram-same-bytes", str(a), "missing"))
                continue
            sa, sb = a.stat(), b.stat()
            if (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino):
                continue
            if sa.st_size != sb.st_size or (hash_bytes and sha256_file(a.resolve()) != sha256_file(b)):
                problems.append(problem("engram-same-bytes", t.shard, f"differs from {a} (the model index's shard)"))
        problems += skip_regex_problems(skip_re, list(mwm), names)
    return tables, problems
