"""Held-out perplexity of the shipped pydoc model against a unigram baseline and the random model.

`python -m recipekit.backends.cpu.tinylm.evaluate [--corpus backends/cpu/tinylm/data/corpus.jsonl.gz]` (needs torch
and transformers: the test extras). The held-out text is the corpus's held-out docstrings rendered as
chat turns (prepare.samples); the pydoc model and the unigram baseline (add-one smoothed counts of the
training tokens the model saw, same tokenizer: the training samples with the topic rounds recorded in the
shipped prepare.json) are scored in nats per token; the random-weight model has its own
tokenizer, so all three are also given in bits per UTF-8 byte of the same text. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

from recipekit import bounded
from recipekit.backends.cpu import pydoc_model as pm
from recipekit.backends.cpu.tinylm import corpus as cp

WINDOW = 512


def score(model_dir: Path, text: str) -> tuple[float, int]:
    """Total next-token nats over `text` (windows of WINDOW tokens, fp32, CPU) and the tokens scored."""
    import torch  # lazy: pulls numpy, torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: pulls transformers

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(ids) - 1, WINDOW):
            chunk = torch.tensor(ids[s : s + WINDOW + 1])[None]
            if chunk.shape[1] < 2:
                break
            logp = model(chunk[:, :-1]).logits[0].float().log_softmax(-1)
            total -= float(logp.gather(1, chunk[0, 1:, None]).sum())
            count += chunk.shape[1] - 1
    return total, count


def unigram(shipped: Path, train_texts: list[str], text: str) -> tuple[float, int]:
    from tokenizers import Tokenizer  # lazy: pulls tokenizers

    tok = Tokenizer.from_file(str(shipped / "tokenizer.json"))
    counts = [1] * tok.get_vocab_size()
    for enc in tok.encode_batch(train_texts, add_special_tokens=False):
        for i in enc.ids:
            counts[i] += 1
    n = sum(counts)
    ids = tok.encode(text, add_special_tokens=False).ids
    # windows as above: the first token of each window is not scored
    scored = [t for k, t in enumerate(ids) if k % WINDOW != 0]
    return -sum(math.log(counts[t] / n) for t in scored), len(scored)


def topic_rounds(shipped: Path) -> int:
    """How many times the shipped model's training data held each topic (prepare.py's record of that run)."""
    record = bounded.read_json(shipped / "prepare.json", "prepare record", 1 << 20)
    rounds = record.get("topic_rounds") if isinstance(record, dict) else None
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ValueError(f"{shipped / 'prepare.json'}: topic_rounds is {rounds!r}, not a count >= 1")
    return rounds


def main() -> int:
    from recipekit.backends.cpu.tiny_model import make_tiny_deepseek  # lazy: pulls pydantic
    from recipekit.backends.cpu.tinylm import prepare  # lazy: pulls pydantic

    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=str(Path(__file__).resolve().parent / "data" / "corpus.jsonl.gz"))
    a = ap.parse_args()
    docs = cp.read(Path(a.corpus))
    rounds = topic_rounds(pm.SHIPPED)
    text = "".join(prepare.samples(docs, "held_out"))
    nbytes = len(text.encode())
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        pydoc_dir = pm.install_pydoc_model(Path(tmp) / "pydoc")
        random_dir = make_tiny_deepseek(Path(tmp) / "random", seed=0)
        for name, (nats, n) in {
            "pydoc": score(pydoc_dir, text),
            "unigram": unigram(pm.SHIPPED, prepare.samples(docs, "train", rounds), text),
            "random": score(random_dir, text),
        }.items():
            rows[name] = {
                "nats_per_token": round(nats / n, 4),
                "perplexity": round(math.exp(nats / n), 2),
                "tokens": n,
                "bits_per_byte": round(nats / math.log(2) / nbytes, 4),
            }
    out = {
        "held_out": {"samples": len(prepare.samples(docs, "held_out")), "bytes": nbytes},
        "model_sha256": pm.SHIPPED_SHA256["model.safetensors"],
        "unigram_topic_rounds": rounds,
        "scores": rows,
        "note": "random has its own 640-token tokenizer: compare it by bits_per_byte",
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
