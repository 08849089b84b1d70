"""A slow, independent Engram addressing reference for tests, written from the spec
(research/dsv41-format.md §4.2) with plain Python ints and the standard library only:
trial-division primes, unicodedata normalization, one position at a time."""

from __future__ import annotations

import re
import unicodedata


def ref_is_prime(n: int) -> bool:
    if n < 2:
        return False
    d = 2
    while d * d <= n:
        if n % d == 0:
            return False
        d += 1
    return True


def ref_primes(layer_count: int, max_ngram: int, n_heads: int, vocab_size: int) -> list[list[int]]:
    """Per layer, per n-gram order, per head: the next unused prime above the running value."""
    used: set[int] = set()
    layers = []
    for _ in range(layer_count):
        flat = []
        for _order in range(2, max_ngram + 1):
            cur = vocab_size - 1
            for _h in range(n_heads):
                cand = cur + 1
                while cand in used or not ref_is_prime(cand):
                    cand += 1
                used.add(cand)
                flat.append(cand)
                cur = cand
        layers.append(flat)
    return layers


def ref_offsets(primes: list[int]) -> list[int]:
    out, acc = [], 0
    for p in primes:
        out.append(acc)
        acc += p
    return out


def ref_normalize(text: str) -> str:
    s = unicodedata.normalize("NFKC", text)
    s = unicodedata.normalize("NFD", s)
    s = "".join(ch for ch in s if unicodedata.category(ch) != "Mn")
    s = s.lower()
    s = re.sub(r"[ \t\r\n]+", " ", s)
    if s == " ":
        return s  # a lone space survives the strip
    return s.strip()


def ref_token_map(tok) -> tuple[list[int], int]:
    """`tok` is a tokenizers.Tokenizer (used only to decode single ids)."""
    keys: dict[str, int] = {}
    out = []
    for tid in range(tok.get_vocab_size(with_added_tokens=True)):
        text = tok.decode([tid], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tok.id_to_token(tid)
        else:
            key = ref_normalize(text) or text
        if key not in keys:
            keys[key] = len(keys)
        out.append(keys[key])
    return out, len(keys)


def ref_row_ids(
    tokens,
    dead,
    token_map,
    multipliers,
    primes,
    offsets,
    pad_token_id,
    max_ngram,
    n_heads,
    lookback=(),
    lookback_dead=(),
):
    """Row ids per position of `tokens` (lists of Python ints), n-gram order major, head minor."""
    seq = list(lookback) + list(tokens)
    dseq = list(lookback_dead or [False] * len(lookback)) + list(dead)
    pad = token_map[pad_token_id]
    result = []
    for t in range(len(lookback), len(seq)):
        rolling, blocked, rows = 0, False, []
        for s in range(max_ngram):
            j = t - s
            if j < 0 or dseq[j]:
                blocked = True
            v = pad if blocked else token_map[seq[j]]
            rolling ^= v * multipliers[s]
            if s >= 1:
                for h in range(n_heads):
                    col = (s - 1) * n_heads + h
                    rows.append(rolling % primes[col] + offsets[col])
        result.append(rows)
    return result
