"""Trains several pydoc-model configurations at once on one GPU and judges each by the on-topic measure.

Standalone (torch, transformers, safetensors, numpy; nothing from recipekit), for a GPU host that
only has the working tree:

    python sweep.py PREP_DIR PREP_TOPICS3_DIR OUT_DIR [--max-seconds S]

Each configuration of CONFIGS runs train.py in its own process (the model is tiny: they share the
GPU). Then each trained folder is asked ontopic.py's QUESTIONS with the same greedy decode
(chat template, MAX_TOKENS new tokens, special tokens dropped from the text as an OpenAI server
drops them) in bf16, the served dtype, and in fp32; an answer is on topic by ontopic.on_topic.
The best (most on topic in bf16, then the with-question, then fp32, then held-out loss) is copied
to OUT_DIR/best (its model.safetensors in parts under 16 MiB: `cat model.safetensors.part*`), and
OUT_DIR/sweep.json holds every configuration's curve, answers and counts.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BASE = {"align": "sample", "lr": 2e-3, "batch": 32, "steps": 1000, "prep": "base", "arch": {}}
WIDE = {"hidden_size": 320, "intermediate_size": 960, "moe_intermediate_size": 160}  # 9.49 M parameters
CONFIGS: dict[str, dict] = {
    "random-1000": {**BASE, "align": "random"},  # the shipped model's recipe, for comparison
    "sample-1000": BASE,
    "sample-topics3-1000": {**BASE, "prep": "topics3"},
    "sample-wide-1000": {**BASE, "arch": WIDE},
    "sample-deep6-1000": {**BASE, "arch": {"num_hidden_layers": 6}},
    "sample-lr1e-3-b64-800": {**BASE, "lr": 1e-3, "batch": 64, "steps": 800},
}
PART = 15 << 20


def _ontopic():
    spec = importlib.util.spec_from_file_location("ontopic", HERE / "ontopic.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def judge(folder: Path) -> dict:
    """Greedy answers to ontopic's QUESTIONS in bf16 and fp32 (on the GPU when there is one)."""
    import torch  # lazy: pulls torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: pulls transformers

    ot = _ontopic()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = AutoTokenizer.from_pretrained(str(folder))
    out: dict = {}
    for dtype_name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        model: Any = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
        model = model.to(device).eval()
        rows = []
        for q, keys in ot.QUESTIONS:
            ids: Any = tok.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, return_tensors="pt"
            )
            if not isinstance(ids, torch.Tensor):
                ids = ids["input_ids"]
            ids = ids.to(device)
            with torch.no_grad():
                gen = model.generate(ids, max_new_tokens=ot.MAX_TOKENS, do_sample=False)
            text = tok.decode(gen[0, ids.shape[1] :], skip_special_tokens=True)
            rows.append({"question": q, "answer": text, "on_topic": ot.on_topic(text, keys)})
        out[dtype_name] = {"on_topic": sum(r["on_topic"] for r in rows), "answers": rows}
        del model
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("prep")
    ap.add_argument("prep_topics3")
    ap.add_argument("out")
    ap.add_argument("--max-seconds", type=float, default=300.0)
    ap.add_argument("--work", default="/tmp/tinylm-sweep", help="where the trained folders and logs go")
    ap.add_argument("--steps", type=int, default=0, help="every configuration's step count (a smoke test)")
    ap.add_argument("--judge", help=argparse.SUPPRESS)  # internal: judge one folder, print JSON
    a = ap.parse_args()
    if a.judge:
        print(json.dumps(judge(Path(a.judge))))
        return 0
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    preps = {"base": a.prep, "topics3": a.prep_topics3}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = {}
    t0 = time.time()
    for name, c in CONFIGS.items():
        cmd = [sys.executable, str(HERE / "train.py"), preps[c["prep"]], str(work / name)]
        cmd += ["--steps", str(a.steps or c["steps"]), "--max-seconds", str(a.max_seconds), "--batch", str(c["batch"])]
        cmd += ["--lr", str(c["lr"]), "--align", c["align"], "--arch", json.dumps(c["arch"])]
        procs[name] = subprocess.Popen(cmd, stdout=open(work / f"{name}.log", "w"), stderr=subprocess.STDOUT, env=env)
    for name, p in procs.items():
        print(f"{name}: train exit {p.wait()} at {time.time() - t0:.0f} s", flush=True)
    judges = {
        name: subprocess.Popen(
            [sys.executable, __file__, "-", "-", "-", "--judge", str(work / name)], stdout=subprocess.PIPE, env=env
        )
        for name in CONFIGS
        if (work / name / "model.safetensors").is_file()
    }
    results = {}
    for name, p in judges.items():
        stdout, _ = p.communicate()
        log = json.loads((work / name / "train_log.json").read_text())
        size = (work / name / "model.safetensors").stat().st_size
        results[name] = {"config": CONFIGS[name], "train_log": log, "bytes": size, **json.loads(stdout)}
        r = results[name]
        print(
            f"{name}: bf16 {r['bf16']['on_topic']}/10 fp32 {r['fp32']['on_topic']}/10 held-out {log['held_out_loss']:.3f} "
            f"steps {log['curve'][-1]['step']} {log['seconds']} s {size / 1e6:.1f} MB  with: {r['bf16']['answers'][0]['answer'][:150]!r}",
            flush=True,
        )

    def rank(name: str) -> tuple:
        r = results[name]
        return (
            r["bytes"] <= 20_000_000,
            r["bf16"]["on_topic"],
            r["bf16"]["answers"][0]["on_topic"],
            r["fp32"]["on_topic"],
            -r["train_log"]["held_out_loss"],
        )

    best = max(results, key=rank)
    print(f"best: {best}", flush=True)
    (out / "sweep.json").write_text(json.dumps({"best": best, "results": results}, indent=2) + "\n")
    keep = out / "best"
    keep.mkdir(exist_ok=True)
    data = (work / best / "model.safetensors").read_bytes()
    for i in range(0, len(data), PART):
        (keep / f"model.safetensors.part{i // PART}").write_bytes(data[i : i + PART])
    for f in ("config.json", "train_log.json"):
        (keep / f).write_bytes((work / best / f).read_bytes())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
