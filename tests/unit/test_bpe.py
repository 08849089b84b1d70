"""recipekit.bpe: the one byte-level BPE trainer behind both tiny models' tokenizers."""

from __future__ import annotations

import re
from pathlib import Path

from recipekit.bpe import train_byte_level_bpe

TEXTS = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog", "ünïcödé text too"] * 3


def test_specials_first_deterministic_and_lossless():
    a = train_byte_level_bpe(TEXTS, 300, ["<s>", "</s>"])
    b = train_byte_level_bpe(TEXTS, 300, ["<s>", "</s>"])
    assert a.to_str() == b.to_str()
    assert a.token_to_id("<s>") == 0 and a.token_to_id("</s>") == 1
    for t in ("the cat sat", "never seen: ẞ 💡"):  # byte level: any text round-trips
        assert a.decode(a.encode(t).ids) == t
    assert len(a.encode("the cat sat on the mat").ids) < len("the cat sat on the mat")  # merges learnt


def test_min_frequency_and_post_processor_are_the_callers_choice():
    loose = train_byte_level_bpe(TEXTS, 400, ["<s>"])
    strict = train_byte_level_bpe(TEXTS, 400, ["<s>"], min_frequency=6)
    assert strict.get_vocab_size() < loose.get_vocab_size()
    assert loose.post_processor is None
    assert train_byte_level_bpe(TEXTS, 300, ["<s>"], byte_level_post_processor=True).post_processor is not None


def test_no_other_module_trains_a_bpe():
    import recipekit.bpe as mod

    root = Path(mod.__file__).resolve().parent.parent
    found = [
        str(py.relative_to(root))
        for folder in ("recipekit", "backends", "bench", "tools", "hybrid")
        for py in (root / folder).rglob("*.py")
        if py.resolve() != Path(mod.__file__).resolve() and re.search(r"BpeTrainer|models\.BPE\(", py.read_text())
    ]
    assert found == []
