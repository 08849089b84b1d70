"""Reloads a trained folder the way a consumer does and asks it a question (standalone: torch + transformers).

`python check_export.py MODEL_DIR [QUESTION]`: loads MODEL_DIR with AutoModelForCausalLM (which reads
the per-expert tensor names and maps them onto its own layout), prints the greedy answer to the
question rendered through the tokenizer's chat template, and the held-out loss when held_out.u16 is
given as a third argument.
"""

from __future__ import annotations

import sys
from typing import Any


def main() -> int:
    import torch  # lazy: pulls numpy, torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: pulls transformers

    folder = sys.argv[1]
    question = sys.argv[2] if len(sys.argv) > 2 else "What does the with statement do?"
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids: Any = tok.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt"
    )
    if not isinstance(ids, torch.Tensor):
        ids = ids["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=160, do_sample=False)
    print("Q:", question)
    print("A:", tok.decode(out[0, ids.shape[1] :], skip_special_tokens=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
