"""Engram addressing against the slow independent reference (tests/unit/engram_reference.py)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from recipekit.checkpoint import engram_addressing as A
from recipekit.errors import RecipekitError
from tests.unit import engram_reference as R
from tests.unit.real_dsv41_config import REAL_TEXT

# Published in several independent ports of DeepSeek-V4.1's engram.py (research/dsv41-format.md §4.2).
REAL_MULTIPLIERS = {
    1: (76632096046245, 4839876093313, 35959672319349, 73987337458391),
    14: (67716810739261, 51510806800915, 30921347202721, 82619226485591),
}
REAL_CONFIG = {
    "text_config": {k: v for k, v in REAL_TEXT.items() if k.startswith("engram_")},
    "image_token_id": 129264,
}

WORDS = [
    "Café",
    "cafe",
    "CAFE",
    "ＣＡＦＥ",
    "café",
    "cafe\u0301",
    " the",
    "The",
    "the ",
    "the",
    " ",
    "  ",
    "\t",
    "\n\n",
    " \t x \n",
    "x",
    "ﬁsh",
    "fish",
    "naïve",
    "naive",
    "日本",
    "Ωmega",
    "ωmega",
    "Ⅻ",
    "xii",
    "<image>",
    "a  b",
    "a b",
    "A\tB",
]


def _bytes_to_unicode() -> dict[int, str]:
    """The byte-level alphabet: printable bytes map to themselves, the rest to chars from 256 up."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def make_test_tokenizer(path):
    """Byte-level BPE vocab: specials, the 256 bytes (>= 0x80 decode to U+FFFD alone), WORDS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    b2u = _bytes_to_unicode()
    vocab: dict[str, int] = {}
    for sp in ("<bos>", "<eos>", "<pad>"):
        vocab[sp] = len(vocab)
    for b in range(256):
        vocab.setdefault(b2u[b], len(vocab))
    for w in WORDS:
        vocab.setdefault("".join(b2u[b] for b in w.encode("utf-8")), len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<bos>", "<eos>", "<pad>"])
    tok.save(str(path))
    return tok


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("engram-ckpt")
    tok = make_test_tokenizer(d / "tokenizer.json")
    tmap, size = A.compressed_token_map(d / "tokenizer.json")
    cfg = A.EngramConfig((1, 3), (0, 0), 4, 61, 3, 64, 2)
    rows = [sum(p) for p in A.EngramLayout.build(cfg, check=False).primes]
    conf = {
        "text_config": {
            "engram_layer_ids": [1, 3],
            "engram_num_embeddings": rows,
            "engram_max_ngram_size": 4,
            "engram_vocab_size": 61,
            "engram_n_heads": 3,
            "engram_head_dim": 64,
            "engram_pad_token_id": 2,
            "engram_compressed_vocab_size": size,
        },
        "image_token_id": tok.token_to_id("".join(_bytes_to_unicode()[b] for b in b"<image>")),
    }
    (d / "config.json").write_text(json.dumps(conf))
    return d, tok, conf


def test_real_layout_primes_offsets_and_sizes():
    cfg = A.EngramConfig.from_dict(REAL_CONFIG)
    lay = A.EngramLayout.build(cfg)
    assert cfg.n_cols == 24
    assert lay.primes[0][:3] == (16000057, 16000079, 16000081)
    assert lay.primes[1][-3:] == (16000877, 16000879, 16000889)
    assert [sum(p) for p in lay.primes] == [384006168, 384016682]
    ref = R.ref_primes(2, 4, 8, 16000000)
    assert [list(p) for p in lay.primes] == ref
    assert [list(o) for o in lay.offsets] == [R.ref_offsets(p) for p in ref]
    assert lay.bucket_ranges(14)[-1] == (384016682 - 16000889, 384016682)


def test_layout_mismatch_is_refused():
    conf = json.loads(json.dumps(REAL_CONFIG))
    conf["text_config"]["engram_num_embeddings"] = [384006168, 384016683]
    with pytest.raises(RecipekitError) as e:
        A.EngramLayout.build(A.EngramConfig.from_dict(conf))
    assert e.value.code == "engram-layout-mismatch" and "layer 14" in e.value.message


def test_pinned_real_multipliers_match_public_values_and_numpy():
    pinned = A.pinned_multipliers(99092, 4)
    assert pinned == REAL_MULTIPLIERS
    raw = json.loads(A.PINNED_MULTIPLIERS.read_text())["tables"][0]["layers"]
    assert all(isinstance(v, str) for vals in raw.values() for v in vals)
    assert A.derive_multipliers((1, 14), 4, 99092) == REAL_MULTIPLIERS
    mults, src = A.resolve_multipliers(A.EngramConfig.from_dict(REAL_CONFIG), 99092)
    assert mults == REAL_MULTIPLIERS and src.endswith("multipliers.json")


def test_token_map_matches_reference(tiny_ckpt):
    d, tok, conf = tiny_ckpt
    tmap, size = A.compressed_token_map(d / "tokenizer.json")
    ref_map, ref_size = R.ref_token_map(tok)
    assert (tmap, size) == (ref_map, ref_size)
    ids = {w: tok.token_to_id("".join(_bytes_to_unicode()[b] for b in w.encode())) for w in WORDS}
    same = lambda a, b: tmap[ids[a]] == tmap[ids[b]]  # noqa: E731
    assert same("Café", "cafe") and same("CAFE", "cafe") and same("ＣＡＦＥ", "cafe") and same("cafe\u0301", "cafe")
    assert same(" the", "The") and same("the ", "the") and same("ﬁsh", "fish") and same("naïve", "naive")
    assert same("Ωmega", "ωmega") and same("Ⅻ", "xii") and same("a  b", "a b") and same("A\tB", "a b")
    assert same(" ", "  ") and same(" ", "\t") and same(" ", "\n\n")  # lone (collapsed) space
    assert not same(" ", "x") and same(" \t x \n", "x")
    assert not same("日本", "cafe")
    # partial UTF-8 byte tokens are keyed by their raw token string: all distinct
    b2u = _bytes_to_unicode()
    high = [tmap[tok.token_to_id(b2u[b])] for b in range(0x80, 0x100)]
    assert len(set(high)) == 128
    # classes are numbered by first appearance
    seen = -1
    for c in tmap:
        assert c <= seen + 1
        seen = max(seen, c)


def _random_case(rng: random.Random, vocab: int, dead_id: int):
    n = rng.randint(1, 12)
    toks = [rng.randrange(vocab) for _ in range(n)]
    for i in range(n):
        if rng.random() < 0.15:
            toks[i] = 2  # pad token inside the sequence is an ordinary token
        if rng.random() < 0.15:
            toks[i] = dead_id
    return toks


def test_row_ids_match_reference_on_random_sequences(tiny_ckpt):
    d, tok, conf = tiny_ckpt
    addr = A.EngramAddresser.from_checkpoint(d)
    cfg = addr.config
    assert cfg.image_token_id == conf["image_token_id"]
    # vLLM's dead-token rule: only id 129264 is dead, whatever config.image_token_id says
    assert not addr.dead_mask([cfg.image_token_id]).any() and addr.dead_mask([129264]).all()
    rng = random.Random(7)
    vocab = len(addr.token_map)
    for case in range(60):
        toks = _random_case(rng, vocab, cfg.image_token_id)
        dead = [t == cfg.image_token_id for t in toks]  # image positions passed explicitly
        for li, lid in enumerate(cfg.layer_ids):
            got = addr.row_ids(lid, toks, dead=dead).tolist()
            want = R.ref_row_ids(
                toks,
                dead,
                addr.token_map.tolist(),
                addr.multipliers[lid],
                addr.layout.primes[li],
                R.ref_offsets(addr.layout.primes[li]),
                cfg.pad_token_id,
                cfg.max_ngram_size,
                cfg.n_heads,
            )
            assert got == want, (case, lid, toks)
            for row in got:  # every id inside its own bucket
                for col, r in enumerate(row):
                    lo, hi = addr.layout.bucket_ranges(lid)[col]
                    assert lo <= r < hi


def test_sequence_start_dead_tokens_and_lookback(tiny_ckpt):
    d, tok, conf = tiny_ckpt
    addr = A.EngramAddresser.from_checkpoint(d)
    lid = addr.config.layer_ids[1]
    seq = [40, 41, 42, 43, 44, 45, 46]
    whole = addr.row_ids(lid, seq)
    # chunked with look-back == whole; without look-back the chunk starts fresh (differs)
    chunk = addr.row_ids(lid, seq[4:], lookback=seq[:4])
    assert (chunk == whole[4:]).all()
    fresh = addr.row_ids(lid, seq[4:])
    assert (fresh[0] != whole[4]).any()
    # the first position sees only pad behind it: same rows as the pad token followed by the token
    pad_first = addr.row_ids(lid, [2, 2, 2, 40])
    assert (whole[0] == pad_first[3]).all()
    # a dead token blocks every look-back through it
    dead = np.zeros(len(seq), bool)
    dead[2] = True
    blocked = addr.row_ids(lid, seq, dead=dead)
    assert (blocked[:2] == whole[:2]).all()
    assert (blocked[3] == addr.row_ids(lid, [seq[3]])[0]).all()
    # 3 back from position 5 is the dead position 2: only the 4-gram columns change
    h = addr.config.n_heads
    assert (blocked[5][: 2 * h] == whole[5][: 2 * h]).all() and (blocked[5][2 * h :] != whole[5][2 * h :]).any()
    assert (blocked[6] == whole[6]).all()


def test_real_geometry_against_reference():
    cfg = A.EngramConfig.from_dict(REAL_CONFIG)
    lay = A.EngramLayout.build(cfg)
    tmap = [i % 99092 for i in range(129280)]
    addr = A.EngramAddresser(lay, tmap, 99092, REAL_MULTIPLIERS)
    rng = random.Random(3)
    for _ in range(20):
        toks = _random_case(rng, 129280, 129264)
        dead = [t == 129264 for t in toks]
        for li, lid in enumerate((1, 14)):
            want = R.ref_row_ids(
                toks, dead, tmap, REAL_MULTIPLIERS[lid], lay.primes[li], R.ref_offsets(lay.primes[li]), 2, 4, 8
            )
            got = addr.row_ids(lid, toks)
            assert got.shape == (len(toks), 24)
            assert got.tolist() == want
            assert got.max() < 384016682


def test_cli_rows_and_map_only(tiny_ckpt, run_cli):
    d, tok, conf = tiny_ckpt
    addr = A.EngramAddresser.from_checkpoint(d)
    code, out, err = run_cli("engram", "rows", str(d), "--layer", "3", "--tokens", "40,41,2,43", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert len(rows) == 4 and all(len(r) == 3 * 3 for r in rows)
    assert rows == addr.row_ids(3, [40, 41, 2, 43]).tolist()
    code, out, err = run_cli(
        "engram", "rows", str(d), "--layer", "3", "--tokens", "40,41,2,43", "--map-only", "--format", "json"
    )
    assert code == 0 and json.loads(out) == [int(addr.token_map[t]) for t in (40, 41, 2, 43)]
    code, out, err = run_cli(
        "engram", "rows", str(d), "--layer", "3", "--tokens", "40,41,2,43", "--dead", "1", "--format", "json"
    )
    dead_rows = json.loads(out)
    assert dead_rows[0] == rows[0] and dead_rows[2] != rows[2]


@pytest.mark.parametrize(
    "args,code_name",
    [
        (["--layer", "2", "--tokens", "1,2"], "engram-layer-unknown"),
        (["--layer", "1", "--tokens", "1,x"], "bad-int-list"),
        (["--layer", "1", "--tokens", "1,999999"], "engram-token-out-of-range"),
        (["--layer", "1", "--tokens", "1,2", "--dead", "5"], "bad-dead-position"),
    ],
)
def test_cli_rows_errors(tiny_ckpt, run_cli, args, code_name):
    d, _, _ = tiny_ckpt
    code, out, err = run_cli("engram", "rows", str(d), *args)
    assert code == 2 and f"error[{code_name}]" in err and "hint:" in err and "Traceback" not in err


def test_compressed_size_mismatch_is_refused(tiny_ckpt, tmp_path, run_cli):
    d, _, conf = tiny_ckpt
    bad = json.loads(json.dumps(conf))
    bad["text_config"]["engram_compressed_vocab_size"] += 1
    (tmp_path / "config.json").write_text(json.dumps(bad))
    (tmp_path / "tokenizer.json").write_bytes((d / "tokenizer.json").read_bytes())
    code, out, err = run_cli("engram", "rows", str(tmp_path), "--layer", "1", "--tokens", "1")
    assert code == 2 and "error[engram-token-map-mismatch]" in err


def test_checkpoint_json_files_are_read_through_the_bounded_reader(tmp_path):
    with pytest.raises(RecipekitError) as e:
        A.EngramConfig.from_checkpoint(tmp_path)
    assert e.value.code == "checkpoint-config-missing" and e.value.exit_code == 6
    (tmp_path / "config.json").write_text('{"text_config": ')
    with pytest.raises(RecipekitError) as e:
        A.EngramConfig.from_checkpoint(tmp_path)
    assert e.value.code == "checkpoint-config-invalid" and "does not parse" in e.value.message
    (tmp_path / "config.json").write_text(json.dumps(REAL_CONFIG))
    cfg = A.EngramConfig.from_checkpoint(tmp_path)
    (tmp_path / A.SIDECAR_NAME).write_text("[1, 2]")
    with pytest.raises(RecipekitError) as e:
        A.resolve_multipliers(cfg, 99092, tmp_path)
    assert e.value.code == "engram-multipliers-invalid" and "not a JSON object" in e.value.message
