"""The one byte-level BPE trainer (HF `tokenizers`), used by the tiny test models' tokenizers.

Deterministic: the result depends only on the texts (in order) and the arguments.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence


def train_byte_level_bpe(
    texts: Iterable[str],
    vocab_size: int,
    special_tokens: Sequence[str],
    min_frequency: int = 0,
    byte_level_post_processor: bool = False,
) -> Any:
    """A byte-level BPE `tokenizers.Tokenizer` trained on `texts`; `special_tokens` get ids 0..n-1
    in order. `byte_level_post_processor` adds the ByteLevel post-processor (offsets untrimmed)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # lazy: pulls tokenizers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if byte_level_post_processor:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(special_tokens),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok
