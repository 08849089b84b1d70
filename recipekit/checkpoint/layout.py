"""Checkpoint layout checks: does a folder hold exactly the tensors its config implies?

A layout is registered by name (`LAYOUT_CHECKERS`, `register_layout`) as a function
`expected(config) -> dict[name, Spec]` plus an optional extra check, or as a whole `check`
of its own. This module registers `original` (the DSV4.1 contract); other layouts register
from their own package when imported (recipekit.backends.gaudi.layout: `gaudi`;
recipekit.hybrid.hybrid_layout: `hybrid`), so whoever runs a check imports those first
(recipekit.backends.registry.load_layouts imports the modules each backend's BACKEND.layouts names). `check_layout(dir, layout)` then verifies: every expected
tensor present exactly once with the right dtype and shape (scale shapes included), no
unexpected tensors, index entries agreeing with the shard headers, and the index
`total_size` equal to the sum of the shards' tensor bytes.
Vision tensors (`vision.*`, `aligner.*`) are passed through by every layout.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any, Callable

from recipekit import bounded
from recipekit.checkpoint import consumer_rules, dsv41
from recipekit.checkpoint.collector import collector_paused
from recipekit.checkpoint.safetensors_io import SafetensorsFile, read_index, resolve_member
from recipekit.errors import ExitCode, RecipekitError, did_you_mean

MAX_LISTED = 40

TOKENIZER_MAX_BYTES = 256 * 1024 * 1024  # the largest tokenizer.json files are tens of MiB


@dataclass
class LayoutReport:
    folder: str
    layout: str
    problems: list[str] = field(default_factory=list)
    tensors: int = 0
    shards: int = 0
    total_size: int = 0
    warnings: list[str] = field(default_factory=list)  # reported, not failing (e.g. an engine setting to add)
    # set by a layout whose check compares its sources' bytes: whether the sha256 comparison ran
    sha256_checked: bool | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        if self.ok:
            return (
                f"LAYOUT_OK {self.layout}: {self.tensors:,} tensors in {self.shards} shards, "
                f"{self.total_size:,} bytes ({self.folder})"
            )
        return f"LAYOUT_FAIL {self.layout}: {len(self.problems)} problem(s) in {self.folder}"

    def to_dict(self) -> dict:
        data = {
            "ok": self.ok,
            "layout": self.layout,
            "folder": self.folder,
            "tensors": self.tensors,
            "shards": self.shards,
            "total_size": self.total_size,
            "problems": self.problems,
            "warnings": self.warnings,
        }
        if self.sha256_checked is not None:
            data["sha256_checked"] = self.sha256_checked
        return data


@dataclass(frozen=True)
class CheckpointFormat:
    """A checkpoint format (original, gaudi, hybrid, ...): the tensors a folder must hold. Not
    schema.Layout, which is a parallel variant of a recipe (tp4, pp4)."""

    name: str
    expected: Callable[[dict[str, Any]], dict[str, dsv41.Spec]] | None
    extra_check: Callable[[dict[str, Any], dict[str, tuple[str, str, tuple[int, ...]]]], list[str]] | None = None
    description: str = ""
    marker_key: str | None = None  # the config.json key that marks a checkpoint in this layout
    title: str = ""  # how messages name the layout
    check: Callable[[Path, bool], LayoutReport] | None = None  # (folder, hash_sources): a check of its own
    folder_check: Callable[[Path, dict[str, Any]], list[str]] | None = None  # side files (tokenizer, ...)


LAYOUT_CHECKERS: dict[str, CheckpointFormat] = {}
_DTYPE = operator.itemgetter(1)  # TensorInfo (name, dtype, shape, begin, end)
_SHAPE = operator.itemgetter(2)
_SPEC_DTYPE_SHAPE = operator.itemgetter(0, 1)  # dsv41.Spec (dtype, shape, group, kind)
_ACTUAL_DTYPE_SHAPE = operator.itemgetter(1, 2)  # scan's (file, dtype, shape)


def register_layout(layout: CheckpointFormat) -> CheckpointFormat:
    LAYOUT_CHECKERS[layout.name] = layout
    return layout


def _original_expected(config: dict[str, Any]) -> dict[str, dsv41.Spec]:
    geom = dsv41.Geometry.from_config(config)  # validates the text fields first (config-invalid)
    specs = dsv41.vision_tensors(config)
    specs.update(dsv41.original_tensors(geom))
    return specs


def _vllm_findings(config: dict[str, Any], actual: dict[str, tuple[str, str, tuple[int, ...]]]) -> list[str]:
    """What vLLM's DSV4.1 loader requires (recipekit.checkpoint.consumer_rules), each naming its rule."""
    R = consumer_rules.RULES
    text = config.get("text_config", config)
    text = text if isinstance(text, dict) else {}
    out = []
    for rid, key, want in (
        ("vllm-head-dim", "head_dim", consumer_rules.HEAD_DIM),
        ("vllm-rope-dim", "qk_rope_head_dim", consumer_rules.QK_ROPE_HEAD_DIM),
        ("vllm-index-head-dim", "index_head_dim", consumer_rules.INDEX_HEAD_DIM),
    ):
        if text.get(key) != want:
            out.append(R[rid].finding(f"text_config.{key} is {text.get(key)!r}, vLLM requires {want}"))
    vocab = text.get("vocab_size")
    if not isinstance(vocab, int) or vocab <= consumer_rules.IMAGE_TOKEN_ID:
        out.append(
            R["vllm-vocab-holds-image"].finding(
                f"text_config.vocab_size is {vocab!r}, it must exceed the image token id {consumer_rules.IMAGE_TOKEN_ID}"
            )
        )
    q = config.get("quantization_config")
    q = q if isinstance(q, dict) else {}
    for key in consumer_rules.REQUIRED_QUANT_KEYS:
        if key not in q:
            out.append(R["vllm-quant-keys"].finding(f"quantization_config has no {key!r}"))
    if q.get("expert_dtype") != consumer_rules.EXPERT_DTYPE:
        out.append(
            R["vllm-expert-dtype"].finding(
                f"quantization_config.expert_dtype is {q.get('expert_dtype')!r}, expected {consumer_rules.EXPERT_DTYPE!r}"
            )
        )
    if list(q.get("weight_block_size") or []) != consumer_rules.WEIGHT_BLOCK_SIZE:
        out.append(
            R["vllm-block-size"].finding(
                f"quantization_config.weight_block_size is {q.get('weight_block_size')!r}; DSV4.1 uses [32, 32] "
                "(128x128 is V4)"
            )
        )
    vision = dsv41.vision_tensors(config)
    for n in sorted(n for n in actual if n.startswith(dsv41.VISION_PREFIXES) and n not in vision)[:MAX_LISTED]:
        hint = did_you_mean(n, vision)
        out.append(
            R["vllm-vision-names"].finding(f"{n}: not a vision tensor vLLM loads" + (f" ({hint})" if hint else ""))
        )
    if dsv41.vision_layers(config) == 0:
        for n in sorted(n for n in actual if n.endswith(".ffn.gate.bias_vl"))[:MAX_LISTED]:
            out.append(R["vllm-gate-bias-vl"].finding(f"{n}: present but the vision tower has no layers"))
    return out


def _original_extra(config: dict[str, Any], actual: dict[str, tuple[str, str, tuple[int, ...]]]) -> list[str]:
    q = config.get("quantization_config") or {}
    problems = []
    if q.get("quant_method") != "fp8":
        problems.append(
            f"config quantization_config.quant_method is {q.get('quant_method')!r}, the original layout is 'fp8'"
        )
    problems += _vllm_findings(config, actual)
    for other in LAYOUT_CHECKERS.values():
        if other.marker_key and config.get(other.marker_key):
            problems.append(
                f"config carries the {other.title or other.name} layout marker; check it with --checkpoint-format {other.name}"
            )
    return problems


def tokenizer_findings(folder: Path, config: dict[str, Any]) -> list[str]:
    """The image token vLLM reads from the tokenizer (consumer_rules "vllm-image-token")."""
    path = folder / "tokenizer.json"
    if dsv41.vision_layers(config) == 0 and not path.is_file():
        return []
    rule = consumer_rules.RULES["vllm-image-token"]
    if not path.is_file():
        return [rule.finding("no tokenizer.json: vLLM takes the image token id from the tokenizer")]
    try:
        doc = bounded.read_json(path, "tokenizer.json", TOKENIZER_MAX_BYTES, code="tokenizer-invalid")
        added = {a["content"]: a["id"] for a in doc.get("added_tokens") or [] if isinstance(a, dict)}
        vocab = (doc.get("model") or {}).get("vocab") or {}
    except RecipekitError as e:
        return [rule.finding(e.message)]
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as e:
        return [rule.finding(f"tokenizer.json does not parse: {e}")]
    tid = added.get(consumer_rules.IMAGE_TOKEN)
    if tid is None and isinstance(vocab, dict):
        tid = vocab.get(consumer_rules.IMAGE_TOKEN)
    if tid != consumer_rules.IMAGE_TOKEN_ID:
        return [
            rule.finding(
                f"the tokenizer's {consumer_rules.IMAGE_TOKEN} is id {tid!r}, vLLM requires "
                f"{consumer_rules.IMAGE_TOKEN_ID} (config.image_token_id is not what it reads)"
            )
        ]
    return []


register_layout(
    CheckpointFormat(
        "original",
        _original_expected,
        _original_extra,
        "the public DeepSeek-V4.1 checkpoint: FP8 linears + 32x32 E8M0, per-expert MXFP4",
        folder_check=tokenizer_findings,
    )
)


def _limit(problems: list[str]) -> list[str]:
    if len(problems) <= MAX_LISTED:
        return problems
    return problems[:MAX_LISTED] + [f"... and {len(problems) - MAX_LISTED} more"]


def scan(folder: Path) -> tuple[dict[str, tuple[str, str, tuple[int, ...]]], list[str], int, int, int | None]:
    """Read the index and every shard header: name -> (file, dtype, shape), problems, shards, bytes, index total."""
    index = read_index(folder)
    problems: list[str] = []
    actual: dict[str, tuple[str, str, tuple[int, ...]]] = {}
    payload = 0
    shards = index.shards() if index.from_file else ["model.safetensors"]
    for rel in shards:
        try:
            path = resolve_member(folder, rel)
            if not path.is_file():
                problems.append(f"shard {rel} named by the index does not exist")
                continue
            with SafetensorsFile(path) as f:
                wm = index.weight_map
                if actual.keys().isdisjoint(f.tensors) and all(map(operator.eq, map(wm.get, f.tensors), repeat(rel))):
                    # nothing to report in this shard: its data section is exactly its tensors' bytes
                    payload += f.file_size - f.data_start
                    infos = f.tensors.values()
                    actual.update(zip(f.tensors, zip(repeat(rel), map(_DTYPE, infos), map(_SHAPE, infos))))
                    continue
                for name, t in f.tensors.items():
                    payload += t.nbytes
                    if name in actual:
                        problems.append(f"{name}: present more than once ({actual[name][0]} and {rel})")
                        continue
                    actual[name] = (rel, t.dtype, t.shape)
                    if index.weight_map.get(name) != rel:
                        problems.append(f"{name}: in {rel} but the index says {index.weight_map.get(name)!r}")
        except RecipekitError as e:
            problems.append(f"{rel}: [{e.code}] {e.message}")
    for name, rel in index.weight_map.items():
        if name not in actual and (folder / rel).is_file():
            problems.append(f"{name}: listed in the index for {rel} but not in that shard")
    on_disk = {p.name for p in folder.glob("*.safetensors")}
    for extra in sorted(on_disk - set(shards)):
        problems.append(f"shard {extra} is on disk but not in the index")
    return actual, problems, len(shards), payload, index.total_size if index.from_file else payload


@collector_paused()
def check_layout(folder: str | Path, layout: str, hash_sources: bool = True) -> LayoutReport:
    """`hash_sources=False`: the hybrid check compares source sizes only (other layouts never hash)."""
    folder = Path(folder)
    if layout not in LAYOUT_CHECKERS:
        raise RecipekitError(
            code="unknown-layout",
            message=f"no layout {layout!r}",
            hint=did_you_mean(layout, LAYOUT_CHECKERS) or f"known: {', '.join(LAYOUT_CHECKERS)}",
        )
    lay = LAYOUT_CHECKERS[layout]
    if lay.check is not None:
        return lay.check(folder, hash_sources)
    if not folder.is_dir():
        raise RecipekitError(
            code="checkpoint-not-found",
            message=f"{folder} is not a folder",
            hint="pass the checkpoint folder (it holds config.json and the shards)",
            exit_code=ExitCode.NOT_FOUND,
        )
    config = dsv41.load_config(folder)
    expected = lay.expected(config) if lay.expected else {}
    actual, problems, n_shards, payload, total = scan(folder)
    if lay.extra_check:
        problems = lay.extra_check(config, actual) + problems
    if lay.folder_check:
        problems = lay.folder_check(folder, config) + problems
    missing = [n for n in expected if n not in actual] if expected.keys() - actual.keys() else []
    for n in missing[:MAX_LISTED]:
        problems.append(f"{n}: missing (expected {expected[n].dtype} {list(expected[n].shape)})")
    if len(missing) > MAX_LISTED:
        problems.append(f"... {len(missing) - MAX_LISTED} more missing tensors")
    others = actual.keys() - expected.keys()
    unexpected = [n for n in actual if n in others and not dsv41.is_vision(n)] if others else []
    for n in unexpected[:MAX_LISTED]:
        hint = did_you_mean(n, expected) if len(expected) < 5000 else None
        problems.append(f"{n}: unexpected tensor in {actual[n][0]}" + (f" ({hint})" if hint else ""))
    if len(unexpected) > MAX_LISTED:
        problems.append(f"... {len(unexpected) - MAX_LISTED} more unexpected tensors")
    # dtypes and shapes compared as whole columns first; the loop names the differences
    same = not missing and list(map(_SPEC_DTYPE_SHAPE, expected.values())) == list(
        map(_ACTUAL_DTYPE_SHAPE, map(actual.__getitem__, expected))
    )
    for n, spec in expected.items() if not same else ():
        if n in actual:
            rel, dt, shape = actual[n]
            if dt != spec.dtype or tuple(shape) != spec.shape:
                problems.append(f"{n}: {dt} {list(shape)} in {rel}, expected {spec.dtype} {list(spec.shape)}")
    for n in [n for n in actual if n.startswith(dsv41.VISION_PREFIXES)]:  # dsv41.is_vision
        dt = actual[n][1]
        if dt not in ("BF16", "F32"):
            problems.append(f"{n}: vision tensor stored as {dt}, expected BF16 or F32")
    if total is None:
        problems.append("index has no metadata.total_size")
    elif total != payload:
        problems.append(f"index total_size {total:,} differs from the shards' tensor bytes {payload:,}")
    return LayoutReport(str(folder), layout, _limit(problems), len(actual), n_shards, payload)


def require_layout(folder: str | Path, layout: str) -> LayoutReport:
    rep = check_layout(folder, layout)
    if not rep.ok:
        raise RecipekitError(
            code="checkpoint-layout-invalid",
            location=str(folder),
            message=f"not a valid {layout} checkpoint: {rep.problems[0]}",
            hint=f"run `recipe checkpoint check {folder} --checkpoint-format {layout}` for the full list",
            details=rep.problems[1:],
            exit_code=ExitCode.INVALID_INPUT,
        )
    return rep
