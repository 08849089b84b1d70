"""The fp32 CPU oracle: Hugging Face transformers on the same checkpoint and the same tokens.

Run as a script with the ENGINE venv's python (it has torch + transformers; the toolkit venv
must not): `python oracle_hf.py < request.json > answer.json`, request
{"model_dir": DIR, "sequences": [[ids...], ...], "top": 1}. The answer gives, per sequence,
the log-probability of every token after the first given its prefix, and the arg-max id.
This file imports nothing from recipekit so it runs in any python with torch.
"""

import json
import sys


def main() -> int:
    req = json.load(sys.stdin)
    import torch  # lazy: pulls torch
    from transformers import AutoModelForCausalLM  # lazy: pulls transformers

    torch.manual_seed(0)
    torch.set_num_threads(int(req.get("threads", 1)))
    model = AutoModelForCausalLM.from_pretrained(req["model_dir"], dtype=torch.float32)
    model.eval()
    out = []
    with torch.inference_mode():
        for ids in req["sequences"]:
            x = torch.tensor([ids], dtype=torch.long)
            logp = model(x).logits[0].float().log_softmax(-1)  # [n, vocab]
            tgt = x[0, 1:]
            lp = logp[:-1].gather(1, tgt[:, None])[:, 0]
            out.append({"logprobs": lp.tolist(), "argmax": logp[:-1].argmax(-1).tolist()})
    json.dump({"oracle": "hf-transformers-fp32-cpu", "torch": torch.__version__, "results": out}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
