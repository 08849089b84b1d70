"""Turns the corpus into what the training script reads: the tokenizer and the token streams.

Training samples are chat turns rendered the way the model's chat template renders them:
each pydoc topic three times (three phrasings of the question, the topic's text as the answer,
cut at a paragraph boundary) and once as plain text; each training docstring once ("What does
NAME do?"). The held-out docstrings are rendered the same way and only scored. Deterministic:
the outputs depend only on the corpus bytes and the seed.

`python -m recipekit.backends.cpu.tinylm.prepare CORPUS.jsonl.gz OUT_DIR [TOPIC_ROUNDS]` writes tokenizer files,
config.json, train.u16 / held_out.u16 (little-endian uint16 token ids) and prepare.json.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path

from recipekit.backends.cpu import tiny_model as tm
from recipekit.backends.cpu.tinylm import corpus as cp
from recipekit.bpe import train_byte_level_bpe

VOCAB = 4096
ANSWER_CHARS = 1600
STATEMENTS = {
    "assert", "break", "continue", "del", "for", "global", "if", "import", "nonlocal",
    "pass", "raise", "return", "try", "while", "with",
}  # fmt: skip


def _cut(text: str, limit: int = ANSWER_CHARS) -> str:
    """The text up to `limit` characters, ending at a paragraph boundary when one exists."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    cut = head.rfind("\n\n")
    return head[:cut] if cut > limit // 3 else head


def topic_questions(name: str, text: str) -> list[str]:
    if name in STATEMENTS:
        return [
            f"What does the {name} statement do?",
            f"How does the {name} statement work?",
            f"Explain the {name} statement.",
        ]
    title = text.splitlines()[0].strip() if text.strip() else name
    return [f"What is {title}?", f"Tell me about {title}.", f"Explain {name}."]


def chat(question: str, answer: str) -> str:
    return f"{tm.BOS}<|user|>{question}\n<|assistant|>{answer}{tm.EOS}\n"


def samples(docs: list[dict], split: str, topic_rounds: int = 1) -> list[str]:
    """The split's samples; each topic's questions and plain text `topic_rounds` times."""
    out = []
    for d in docs:
        if d["split"] != split:
            continue
        if d["kind"] == "topic":
            for _ in range(topic_rounds):
                out += [chat(q, _cut(d["text"])) for q in topic_questions(d["name"], d["text"])]
                out.append(f"{tm.BOS}{d['text']}{tm.EOS}\n")
        else:
            out.append(chat(f"What does {d['name']} do?", _cut(d["text"])))
    return out


def main(corpus_path: Path, out: Path, seed: int = 0, topic_rounds: int = 1) -> dict:
    import numpy as np  # lazy: pulls numpy

    docs = cp.read(corpus_path)
    train_docs = [d["text"] for d in docs if d["split"] == "train"]
    tok = train_byte_level_bpe(train_docs, VOCAB, tm.SPECIAL_TOKENS, min_frequency=2, byte_level_post_processor=True)
    out.mkdir(parents=True, exist_ok=True)
    for name, data in tm.tokenizer_files(tok).items():
        (out / name).write_bytes(data)
    cfg = tm.config_dict(tok.get_vocab_size())
    cfg.update(PYDOC_ARCH)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    train = samples(docs, "train", topic_rounds)
    random.Random(seed).shuffle(train)
    held = samples(docs, "held_out")
    meta = {
        "seed": seed,
        "topic_rounds": topic_rounds,
        "vocab_size": tok.get_vocab_size(),
        "corpus_sha256": hashlib.sha256(corpus_path.read_bytes()).hexdigest(),
    }
    for split, texts in (("train", train), ("held_out", held)):
        ids = [i for enc in tok.encode_batch(texts, add_special_tokens=False) for i in enc.ids]
        np.asarray(ids, dtype="<u2").tofile(out / f"{split}.u16")
        meta[split] = {"samples": len(texts), "tokens": len(ids), "chars": sum(map(len, texts))}
    (out / "held_out.txt").write_text("".join(held), encoding="utf-8")
    (out / "prepare.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


# The pydoc model's geometry: the attention of the random tiny model (the 576-wide latent head the
# CPU MLA kernel needs, 4 heads of 32 + 64 rope), wider and deeper elsewhere; ~6.9 M parameters.
PYDOC_ARCH = {
    "hidden_size": 256,
    "intermediate_size": 768,
    "moe_intermediate_size": 128,
    "num_hidden_layers": 4,
    "q_lora_rank": 128,
    "max_position_embeddings": 4096,
}

if __name__ == "__main__":
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    print(json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2]), topic_rounds=rounds), indent=2))
