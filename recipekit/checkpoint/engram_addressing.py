"""Engram row addressing: which table rows a token position reads.

Row ids depend only on token ids (research/dsv41-format.md §4.2):
1. a compressed token map rebuilt from tokenizer.json (tokens that normalize alike share a class);
2. per-layer odd multipliers, one per look-back shift (pinned as strings in data/multipliers.json
   for the real model; derived with numpy's generator for other geometries and stored with the
   checkpoint or the row-store manifest);
3. (max_ngram_size - 1) x n_heads prime-sized buckets per layer, the primes drawn in order above
   engram_vocab_size - 1 and never reused; a layer's table is the concatenation of its buckets;
4. a rolling multiply-XOR hash over compressed ids, with pad once the look-back leaves the
   sequence or meets a dead (image) token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from recipekit import bounded, textsafe
from recipekit.checkpoint.consumer_rules import IMAGE_TOKEN_ID
from recipekit.checkpoint.dsv41 import CONFIG_MAX_BYTES
from recipekit.errors import ExitCode, RecipekitError

DATA_DIR = Path(__file__).resolve().parent / "data"
PINNED_MULTIPLIERS = DATA_DIR / "multipliers.json"
SIDECAR_NAME = "engram_multipliers.json"  # per-checkpoint multipliers (tiny checkpoints)
INT64_MAX = (1 << 63) - 1


def _conf_get(conf: dict, key: str):
    """A config value from the top level or the nested text_config (DSV4.1 nests it)."""
    if key in conf:
        return conf[key]
    text = conf.get("text_config")
    if isinstance(text, dict) and key in text:
        return text[key]
    return None


# Upper bounds on the config's Engram fields: the full-size model has 24 hash columns (3 n-gram orders
# x 8 heads) and 256-wide rows; far larger values are not a DeepSeek-V4.1 config, and the prime search
# of the layout grows with the column count (a config with 10^9 heads would never finish).
MAX_HASH_COLUMNS = 4096
MAX_HEAD_DIM = 1 << 16


def _int_of(conf: dict, key: str, location: str, lo: int = 0, hi: int | None = None) -> int:
    v = _conf_get(conf, key)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        raise RecipekitError(
            code="engram-config-invalid",
            location=f"{location} $.{key}",
            message=f"{key} is {textsafe.shown(repr(v))[:60]}, not an integer in {lo}..{hi if hi is not None else ''}",
            hint="point at a DeepSeek-V4.1 checkpoint's config.json (or regenerate it)",
        )
    return v


def _ints_of(conf: dict, key: str, location: str) -> tuple[int, ...]:
    v = _conf_get(conf, key)
    if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in v):
        raise RecipekitError(
            code="engram-config-invalid",
            location=f"{location} $.{key}",
            message=f"{key} is {textsafe.shown(repr(v))[:60]}, not a list of non-negative integers",
            hint="point at a DeepSeek-V4.1 checkpoint's config.json (or regenerate it)",
        )
    return tuple(v)


@dataclass(frozen=True)
class EngramConfig:
    """The engram_* fields of a checkpoint's config.json."""

    layer_ids: tuple[int, ...]
    num_embeddings: tuple[int, ...]
    max_ngram_size: int
    vocab_size: int
    n_heads: int
    head_dim: int
    pad_token_id: int
    compressed_vocab_size: int | None = None
    image_token_id: int | None = None

    @classmethod
    def from_dict(cls, conf: dict, location: str = "config.json") -> "EngramConfig":
        needed = (
            "engram_layer_ids",
            "engram_num_embeddings",
            "engram_max_ngram_size",
            "engram_vocab_size",
            "engram_n_heads",
            "engram_head_dim",
            "engram_pad_token_id",
        )
        missing = [k for k in needed if _conf_get(conf, k) is None]
        if missing:
            raise RecipekitError(
                code="engram-config-missing",
                location=location,
                message=f"the config has no Engram fields {', '.join(missing)}",
                hint="point at a DeepSeek-V4.1 checkpoint (or a tiny one made by `recipe checkpoint make-tiny`)",
            )
        layer_ids = _ints_of(conf, "engram_layer_ids", location)
        num_embeddings = _ints_of(conf, "engram_num_embeddings", location)
        if len(layer_ids) != len(num_embeddings) or not layer_ids:
            raise RecipekitError(
                code="engram-config-invalid",
                location=f"{location} $.engram_num_embeddings",
                message=f"{len(layer_ids)} engram layers but {len(num_embeddings)} table sizes",
                hint="engram_layer_ids and engram_num_embeddings must have one entry per Engram layer",
            )
        cvs = _conf_get(conf, "engram_compressed_vocab_size")
        img = _conf_get(conf, "image_token_id")
        cfg = cls(
            layer_ids=layer_ids,
            num_embeddings=num_embeddings,
            max_ngram_size=_int_of(conf, "engram_max_ngram_size", location, 2, MAX_HASH_COLUMNS + 1),
            vocab_size=_int_of(conf, "engram_vocab_size", location, 2),
            n_heads=_int_of(conf, "engram_n_heads", location, 1, MAX_HASH_COLUMNS),
            head_dim=_int_of(conf, "engram_head_dim", location, 32, MAX_HEAD_DIM),
            pad_token_id=_int_of(conf, "engram_pad_token_id", location),
            compressed_vocab_size=_int_of(conf, "engram_compressed_vocab_size", location) if cvs is not None else None,
            image_token_id=_int_of(conf, "image_token_id", location) if img is not None else None,
        )
        if cfg.n_cols > MAX_HASH_COLUMNS or cfg.head_dim % 32:
            raise RecipekitError(
                code="engram-config-invalid",
                location=location,
                message=f"{cfg.n_cols} hash columns, head_dim {cfg.head_dim}",
                hint=f"need at most {MAX_HASH_COLUMNS} columns ((max_ngram_size - 1) x n_heads; 24 at full size) "
                "and head_dim a multiple of 32 (one E8M0 scale per 32 columns)",
            )
        if cfg.max_ngram_size < 2 or cfg.n_heads < 1 or cfg.vocab_size < 2:
            raise RecipekitError(
                code="engram-config-invalid",
                location=location,
                message=f"max_ngram_size {cfg.max_ngram_size}, n_heads {cfg.n_heads}, vocab {cfg.vocab_size}",
                hint="need max_ngram_size >= 2, n_heads >= 1, engram_vocab_size >= 2",
            )
        return cfg

    @classmethod
    def from_checkpoint(cls, ckpt: Path | str) -> "EngramConfig":
        path = Path(ckpt) / "config.json"
        try:
            conf = bounded.read_json(path, "config.json", CONFIG_MAX_BYTES, code="checkpoint-config-invalid")
        except FileNotFoundError:
            raise RecipekitError(
                code="checkpoint-config-missing",
                location=str(path),
                message="no config.json in the checkpoint folder",
                hint="pass the folder that holds config.json and tokenizer.json",
                exit_code=ExitCode.NOT_FOUND,
            ) from None
        return cls.from_dict(conf, str(path))

    @property
    def n_cols(self) -> int:
        """Hash columns (buckets) per layer: n-gram orders 2..max times heads."""
        return (self.max_ngram_size - 1) * self.n_heads

    def layer_index(self, layer_id: int) -> int:
        if layer_id not in self.layer_ids:
            raise RecipekitError(
                code="engram-layer-unknown",
                message=f"layer {layer_id} has no Engram table",
                hint=f"Engram layers of this checkpoint: {', '.join(map(str, self.layer_ids))}",
            )
        return self.layer_ids.index(layer_id)


def is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin, exact for every n below 3.3e24."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    for p in small:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in small:
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


@dataclass(frozen=True)
class EngramLayout:
    """Bucket primes and offsets of every Engram layer, checked against the config."""

    config: EngramConfig
    primes: tuple[tuple[int, ...], ...]  # [layer][col], col = (ngram - 2) * n_heads + head
    offsets: tuple[tuple[int, ...], ...]  # exclusive prefix sums of a layer's primes

    @classmethod
    def build(cls, cfg: EngramConfig, check: bool = True) -> "EngramLayout":
        seen: set[int] = set()
        per_layer = []
        for _ in cfg.layer_ids:
            cols: list[int] = []
            for _order in range(cfg.max_ngram_size - 1):
                current = cfg.vocab_size - 1
                for _head in range(cfg.n_heads):
                    candidate = current + 1
                    while candidate in seen or not is_prime(candidate):
                        candidate += 1
                    seen.add(candidate)
                    cols.append(candidate)
                    current = candidate
            per_layer.append(tuple(cols))
        offsets = []
        for layer_cols in per_layer:
            acc, offs = 0, []
            for p in layer_cols:
                offs.append(acc)
                acc += p
            offsets.append(tuple(offs))
        layout = cls(cfg, tuple(per_layer), tuple(offsets))
        if check:
            layout.check()
        return layout

    def check(self) -> None:
        bad = []
        for lid, cols, declared in zip(self.config.layer_ids, self.primes, self.config.num_embeddings):
            if sum(cols) != declared:
                bad.append(f"layer {lid}: buckets sum to {sum(cols)}, engram_num_embeddings says {declared}")
        if bad:
            raise RecipekitError(
                code="engram-layout-mismatch",
                location="config.json $.engram_num_embeddings",
                message="; ".join(bad),
                hint="engram_vocab_size, engram_n_heads or engram_max_ngram_size disagree with the table sizes",
            )

    def rows(self, layer_id: int) -> int:
        return self.config.num_embeddings[self.config.layer_index(layer_id)]

    def bucket_ranges(self, layer_id: int) -> list[tuple[int, int]]:
        """[start, end) row range of each bucket (hash column) of a layer."""
        i = self.config.layer_index(layer_id)
        return [(o, o + p) for o, p in zip(self.offsets[i], self.primes[i])]


# ---------------------------------------------------------------------------------------------
# compressed token map


def _normalizer():
    from tokenizers import Regex, normalizers  # lazy: pulls tokenizers

    # A lone-space token would strip to "" and merge with unrelated tokens: protect it with a
    # private-use sentinel through Strip().
    sentinel = "\ue000"
    return normalizers.Sequence(
        [
            normalizers.NFKC(),
            normalizers.NFD(),
            normalizers.StripAccents(),
            normalizers.Lowercase(),
            normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
            normalizers.Replace(Regex(r"^ $"), sentinel),
            normalizers.Strip(),
            normalizers.Replace(sentinel, " "),
        ]
    )


def compressed_token_map(tokenizer_json: Path | str) -> tuple[list[int], int]:
    """Token id -> compressed class id (classes numbered by first appearance), and the class count."""
    from tokenizers import Tokenizer  # lazy: pulls tokenizers

    path = Path(tokenizer_json)
    if not path.is_file():
        raise RecipekitError(
            code="tokenizer-missing",
            location=str(path),
            message="no tokenizer.json: the compressed token map is built from it",
            hint="the checkpoint folder must hold the model's tokenizer.json",
            exit_code=ExitCode.NOT_FOUND,
        )
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # the Rust side raises a plain Exception for a bad file
        raise RecipekitError(
            code="tokenizer-invalid",
            location=str(path),
            message=f"tokenizer.json does not load: {e}",
            hint="re-download the tokenizer",
        ) from None
    norm = _normalizer()
    size = tok.get_vocab_size(with_added_tokens=True)
    classes: dict[str, int] = {}
    out = [0] * size
    texts = tok.decode_batch([[tid] for tid in range(size)], skip_special_tokens=False)
    for tid, text in enumerate(texts):
        if "\ufffd" in text:
            # a partial UTF-8 byte token: keyed by its raw token string
            raw = tok.id_to_token(tid)
            key = raw if raw is not None else text
        else:
            n = norm.normalize_str(text)
            key = n if n else text
        cid = classes.get(key)
        if cid is None:
            cid = classes[key] = len(classes)
        out[tid] = cid
    return out, len(classes)


# ---------------------------------------------------------------------------------------------
# multipliers


def multiplier_bound(compressed_vocab_size: int) -> int:
    return max(1, (INT64_MAX // compressed_vocab_size) // 2)


def derive_multipliers(
    layer_ids: Sequence[int], max_ngram_size: int, compressed_vocab_size: int
) -> dict[int, tuple[int, ...]]:
    """numpy default_rng(10007 * layer) draws, made odd. Only for geometries with no pinned values."""
    import numpy as np  # lazy: pulls numpy

    bound = multiplier_bound(compressed_vocab_size)
    out = {}
    for lid in layer_ids:
        gen = np.random.default_rng(10007 * lid)
        vals = gen.integers(0, bound, size=(max_ngram_size,), dtype=np.int64)
        out[lid] = tuple(int(v) * 2 + 1 for v in vals)
    return out


def _parse_multiplier_table(layers: dict, where: str) -> dict[int, tuple[int, ...]]:
    out = {}
    for k, vals in layers.items():
        try:
            ints = tuple(int(str(v)) for v in vals)
        except ValueError:
            raise RecipekitError(
                code="engram-multipliers-invalid",
                location=where,
                message=f"layer {k}: multipliers must be integer strings",
                hint="regenerate the multipliers file",
            ) from None
        if any(m <= 0 or m % 2 == 0 for m in ints):
            raise RecipekitError(
                code="engram-multipliers-invalid",
                location=where,
                message=f"layer {k}: every multiplier must be odd and positive",
                hint="regenerate the multipliers file",
            )
        out[int(k)] = ints
    return out


def pinned_multipliers(compressed_vocab_size: int, max_ngram_size: int) -> dict[int, tuple[int, ...]] | None:
    data = json.loads(PINNED_MULTIPLIERS.read_text())
    for table in data["tables"]:
        if table["compressed_vocab_size"] == compressed_vocab_size and table["max_ngram_size"] == max_ngram_size:
            return _parse_multiplier_table(table["layers"], str(PINNED_MULTIPLIERS))
    return None


def multipliers_document(cfg: EngramConfig, compressed_vocab_size: int, mults: dict[int, tuple[int, ...]]) -> dict:
    """The JSON form stored next to a tiny checkpoint or in a row-store manifest."""
    return {
        "compressed_vocab_size": compressed_vocab_size,
        "max_ngram_size": cfg.max_ngram_size,
        "layers": {str(k): [str(v) for v in vals] for k, vals in sorted(mults.items())},
    }


def resolve_multipliers(
    cfg: EngramConfig, compressed_vocab_size: int, ckpt: Path | str | None = None
) -> tuple[dict[int, tuple[int, ...]], str]:
    """Multipliers for every Engram layer and where they came from.

    Order: the checkpoint's own engram_multipliers.json, the pinned real-model table, numpy.
    """
    bound = multiplier_bound(compressed_vocab_size)
    found: dict[int, tuple[int, ...]] | None = None
    source = ""
    if ckpt is not None and (Path(ckpt) / SIDECAR_NAME).is_file():
        where = str(Path(ckpt) / SIDECAR_NAME)
        doc = bounded.read_json(where, SIDECAR_NAME, CONFIG_MAX_BYTES, code="engram-multipliers-invalid")
        if not isinstance(doc, dict):
            raise RecipekitError(
                code="engram-multipliers-invalid",
                location=where,
                message=f"{SIDECAR_NAME} is not a JSON object",
                hint="regenerate the multipliers file",
            )
        if doc.get("compressed_vocab_size") != compressed_vocab_size or doc.get("max_ngram_size") != cfg.max_ngram_size:
            raise RecipekitError(
                code="engram-multipliers-mismatch",
                location=where,
                message=(
                    f"stored for compressed vocab {doc.get('compressed_vocab_size')} / max n-gram "
                    f"{doc.get('max_ngram_size')}, the tokenizer gives {compressed_vocab_size} / {cfg.max_ngram_size}"
                ),
                hint="the tokenizer and the checkpoint do not belong together",
            )
        found, source = _parse_multiplier_table(doc["layers"], where), where
    if found is None:
        found = pinned_multipliers(compressed_vocab_size, cfg.max_ngram_size)
        source = str(PINNED_MULTIPLIERS) if found is not None else ""
    if found is None:
        found, source = derive_multipliers(cfg.layer_ids, cfg.max_ngram_size, compressed_vocab_size), "numpy"
    for lid in cfg.layer_ids:
        vals = found.get(lid)
        if vals is None or len(vals) != cfg.max_ngram_size:
            raise RecipekitError(
                code="engram-multipliers-mismatch",
                location=source,
                message=f"no {cfg.max_ngram_size} multipliers for layer {lid}",
                hint="regenerate the multipliers for this checkpoint",
            )
        if any(v > 2 * bound for v in vals):
            raise RecipekitError(
                code="engram-multipliers-invalid",
                location=source,
                message=f"layer {lid}: a multiplier exceeds the int64-safe bound {2 * bound}",
                hint="token id x multiplier would overflow int64",
            )
    return {lid: found[lid] for lid in cfg.layer_ids}, source


# ---------------------------------------------------------------------------------------------
# hashing


class EngramAddresser:
    """Token ids -> row ids of every Engram layer (vectorized, int64)."""

    def __init__(
        self,
        layout: EngramLayout,
        token_map: Sequence[int],
        compressed_vocab_size: int,
        multipliers: dict[int, tuple[int, ...]],
    ):
        import numpy as np  # lazy: pulls numpy

        self.layout = layout
        self.config = layout.config
        self.token_map = np.asarray(token_map, dtype=np.int64)
        self.compressed_vocab_size = compressed_vocab_size
        self.multipliers = multipliers
        if not 0 <= self.config.pad_token_id < len(self.token_map):
            raise RecipekitError(
                code="engram-pad-out-of-range",
                message=f"engram_pad_token_id {self.config.pad_token_id} is not a tokenizer id",
                hint="check engram_pad_token_id in config.json",
            )
        self.pad = int(self.token_map[self.config.pad_token_id])
        self._primes = {lid: np.asarray(p, dtype=np.int64) for lid, p in zip(self.config.layer_ids, layout.primes)}
        self._offsets = {lid: np.asarray(o, dtype=np.int64) for lid, o in zip(self.config.layer_ids, layout.offsets)}

    @classmethod
    def from_checkpoint(cls, ckpt: Path | str) -> "EngramAddresser":
        cfg = EngramConfig.from_checkpoint(ckpt)
        layout = EngramLayout.build(cfg)
        tmap, size = compressed_token_map(Path(ckpt) / "tokenizer.json")
        if cfg.compressed_vocab_size is not None and size != cfg.compressed_vocab_size:
            raise RecipekitError(
                code="engram-token-map-mismatch",
                location=f"{Path(ckpt) / 'config.json'} $.engram_compressed_vocab_size",
                message=f"the tokenizer gives {size} compressed classes, the config expects {cfg.compressed_vocab_size}",
                hint="every multiplier derives from this number: a mismatch would rehash every row",
            )
        mults, _src = resolve_multipliers(cfg, size, ckpt)
        return cls(layout, tmap, size, mults)

    def compress(self, tokens: Iterable[int]):
        import numpy as np  # lazy: pulls numpy

        ids = np.asarray(list(tokens) if not hasattr(tokens, "__array__") else tokens, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= len(self.token_map)):
            bad = int(ids[(ids < 0) | (ids >= len(self.token_map))][0])
            raise RecipekitError(
                code="engram-token-out-of-range",
                message=f"token id {bad} is outside the tokenizer (0..{len(self.token_map) - 1})",
                hint="pass token ids of this checkpoint's tokenizer",
            )
        return self.token_map[ids]

    def dead_mask(self, tokens):
        """Image tokens take no part in n-grams. As in vLLM, a token is dead only when its id is the
        hard-coded 129264 (consumer_rules "vllm-engram-dead-token"); config.image_token_id is not read."""
        import numpy as np  # lazy: pulls numpy

        t = np.asarray(tokens, dtype=np.int64)
        return t == IMAGE_TOKEN_ID

    def row_ids(self, layer_id: int, tokens, dead=None, lookback=(), lookback_dead=None):
        """Row ids [T, n_cols] (n-gram order major, head minor) for one sequence chunk.

        `lookback` are the tokens just before the chunk (at most max_ngram_size - 1 are used); with
        none the chunk starts the sequence and looks back onto pad.
        """
        import numpy as np  # lazy: pulls numpy

        self.config.layer_index(layer_id)
        depth = self.config.max_ngram_size - 1
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        lb = np.asarray(lookback, dtype=np.int64).reshape(-1)[-depth:] if depth else np.zeros(0, np.int64)
        dead = self.dead_mask(tokens) if dead is None else np.asarray(dead, dtype=bool).reshape(-1)
        lbd = (
            self.dead_mask(lb)
            if lookback_dead is None
            else np.asarray(lookback_dead, dtype=bool).reshape(-1)[-len(lb) :]
            if len(lb)
            else np.zeros(0, bool)
        )
        if dead.shape != tokens.shape:
            raise RecipekitError(
                code="engram-dead-mask-shape",
                message="dead mask and tokens differ in length",
                hint="one flag per token",
            )
        seq = np.concatenate([lb, tokens])
        seq_dead = np.concatenate([lbd, dead])
        comp = self.compress(seq)
        n, first = len(seq), len(lb)
        pos = np.arange(first, n)
        mults = self.multipliers[layer_id]
        primes, offsets = self._primes[layer_id], self._offsets[layer_id]
        heads = self.config.n_heads
        out = np.empty((len(tokens), self.config.n_cols), dtype=np.int64)
        rolling = np.zeros(len(tokens), dtype=np.int64)
        blocked = np.zeros(len(tokens), dtype=bool)
        for s in range(self.config.max_ngram_size):
            src = pos - s
            inside = src >= 0
            srcc = np.where(inside, src, 0)
            blocked |= ~inside | seq_dead[srcc]
            value = np.where(blocked, self.pad, comp[srcc])
            rolling ^= value * mults[s]
            if s > 0:
                cols = slice((s - 1) * heads, s * heads)
                out[:, cols] = rolling[:, None] % primes[None, cols] + offsets[None, cols]
        return out
