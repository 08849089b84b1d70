"""Trains the pydoc model's weights: a DeepSeek-V3 (MLA + MoE) from transformers, on the prepared tokens.

Standalone (torch, transformers, safetensors, numpy; nothing from recipekit), so it runs on a GPU
host that only has the working tree: `python train.py PREP_DIR OUT_DIR [--steps N] [--device cuda]`.
PREP_DIR is what prepare.py wrote. Deterministic given the seed on one device type (deterministic
algorithms on, fixed sampling order, a fixed step count; the kept checkpoint is the last one, or
with --keep best the one with the lowest held-out loss among the evaluations). Routing uses DeepSeek-V3's auxiliary-loss-free
balancing: after each step each MoE layer's e_score_correction_bias moves by BIAS_RATE towards
under-loaded experts. Writes model.safetensors (bf16, the published per-expert tensor names, the
router bias in fp32), config.json, generation_config.json, the tokenizer files and train_log.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from pathlib import Path

SEQ = 512
BATCH = 32
LR = 2e-3
WARMUP = 100
WEIGHT_DECAY = 0.1
EVAL_EVERY = int(os.environ.get("TINYLM_EVAL_EVERY", "100"))
BIAS_RATE = 1e-3
SEED = 0


def build_model(cfg: dict, device: str, seed: int = SEED):
    import torch  # lazy: pulls numpy, torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM  # lazy: pulls transformers

    config = DeepseekV3Config(**cfg)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(config)
    try:
        model.set_experts_implementation("eager")
    except Exception:  # older transformers: the eager loop is the only one
        pass
    return model.to(device)  # type: ignore[arg-type]


BOS_ID = 0  # prepare.py starts every sample (chat turn or plain topic) with BOS


def sample_starts(tokens):
    """The positions where a sample starts (its BOS token) and a full window still fits."""
    import numpy as np  # lazy: pulls numpy

    starts = np.flatnonzero(tokens[: len(tokens) - SEQ - 1] == BOS_ID)
    return starts


def windows(tokens, n: int, rng, starts=None):
    """`n` training windows of SEQ+1 tokens (inputs and shifted targets): at random offsets, or,
    given `starts`, each at a random sample's start (a question stays with its answer's beginning)."""
    import numpy as np  # lazy: pulls numpy

    if starts is None:
        picked = rng.integers(0, len(tokens) - SEQ - 1, size=n)
    else:
        picked = starts[rng.integers(0, len(starts), size=n)]
    return np.stack([tokens[s : s + SEQ + 1] for s in picked])


def held_out_loss(model, tokens, device) -> float:
    """Mean next-token loss (nats) over the held-out stream in SEQ windows."""
    import torch  # lazy: pulls numpy, torch

    model.eval()
    total, count = 0.0, 0
    with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
        for s in range(0, len(tokens) - 1, SEQ):
            chunk = torch.tensor(tokens[s : s + SEQ + 1].astype("int64"), device=device)[None]
            if chunk.shape[1] < 2:
                break
            logits = model(chunk[:, :-1]).logits.float()
            loss = torch.nn.functional.cross_entropy(logits[0], chunk[0, 1:], reduction="sum")
            total += float(loss)
            count += chunk.shape[1] - 1
    model.train()
    return total / count


def export_state(model) -> dict:
    """The model's tensors under the published DeepSeek-V3 names (experts split per expert), bf16;
    the router bias stays fp32 as upstream."""
    import torch  # lazy: pulls numpy, torch

    out = {}
    for name, t in model.state_dict().items():
        t = t.detach().float().cpu()
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            inter = t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = t[e, :inter].to(torch.bfloat16).contiguous()
                out[f"{base}{e}.up_proj.weight"] = t[e, inter:].to(torch.bfloat16).contiguous()
        elif name.endswith("mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = t[e].to(torch.bfloat16).contiguous()
        elif name.endswith("e_score_correction_bias"):
            out[name] = t.contiguous()
        else:
            out[name] = t.to(torch.bfloat16).contiguous()
    return out


def main() -> int:
    import numpy as np  # lazy: pulls numpy
    import torch  # lazy: pulls numpy, torch
    from safetensors.torch import save_file  # lazy: pulls numpy, safetensors, torch

    ap = argparse.ArgumentParser()
    ap.add_argument("prep")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--max-seconds", type=float, default=0.0, help="stop early past this (recorded in the log)")
    ap.add_argument(
        "--stop-step", type=int, default=0, help="stop after this many steps (the schedule still spans --steps)"
    )
    ap.add_argument("--keep", choices=["final", "best"], default="final", help="the checkpoint written")
    ap.add_argument("--batch", type=int, default=BATCH)
    ap.add_argument("--lr", type=float, default=LR)
    ap.add_argument("--align", choices=["random", "sample"], default="random", help="where windows start")
    ap.add_argument("--arch", default="{}", help="JSON object of config fields over PREP/config.json's")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    prep, out = Path(a.prep), Path(a.out)
    cfg = json.loads((prep / "config.json").read_text())
    cfg.update(json.loads(a.arch))
    train = np.fromfile(prep / "train.u16", dtype="<u2")
    held = np.fromfile(prep / "held_out.u16", dtype="<u2")
    model = build_model(cfg, a.device, a.seed)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr,
        betas=(0.9, 0.95),
    )

    def lr_at(step: int) -> float:
        if step < WARMUP:
            return a.lr * (step + 1) / WARMUP
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - WARMUP) / max(1, a.steps - WARMUP))))

    routers = [m for m in model.modules() if type(m).__name__ == "DeepseekV3TopkRouter"]
    loads: dict[int, torch.Tensor] = {}

    def hook(mod, _inp, output):
        idx = output[2]
        loads[id(mod)] = loads.get(id(mod), 0) + torch.bincount(idx.flatten(), minlength=mod.num_experts)

    for r in routers:
        r.register_forward_hook(hook)
    rng = np.random.default_rng(a.seed)
    starts = sample_starts(train) if a.align == "sample" else None
    log = {
        "params": n_params,
        "device": a.device,
        "steps": a.steps,
        "seq": SEQ,
        "batch": a.batch,
        "lr": a.lr,
        "align": a.align,
        "seed": a.seed,
        "arch": json.loads(a.arch),
        "curve": [],
    }
    best, best_state, last_held_out, t0 = float("inf"), None, float("inf"), time.time()

    def evaluate(done: int, train_loss: float) -> None:
        nonlocal best, best_state, last_held_out
        hl = held_out_loss(model, held, a.device)
        point = {
            "step": done,
            "train_loss": round(train_loss, 4),
            "held_out_loss": round(hl, 4),
            "seconds": round(time.time() - t0, 1),
        }
        log["curve"].append(point)
        print(json.dumps(point), flush=True)
        if hl < best:
            best = hl
            log["best_held_out_step"] = done
            if a.keep == "best":
                best_state = export_state(model)
                log["kept_step"] = done
        last_held_out = hl

    print(
        f"params {n_params:,}  train tokens {len(train):,}  held-out tokens {len(held):,}  device {a.device}",
        flush=True,
    )
    loss = torch.zeros(())
    for step in range(a.steps):
        if (a.max_seconds and time.time() - t0 > a.max_seconds) or (a.stop_step and step == a.stop_step):
            log["stopped_early_at_step"] = step
            if step and (not log["curve"] or log["curve"][-1]["step"] != step):
                evaluate(step, loss.item())  # the stopping point is scored (and kept) like any other
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        batch = torch.tensor(windows(train, a.batch, rng, starts).astype("int64"), device=a.device)
        loads.clear()
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16):
            logits = model(batch[:, :-1]).logits.float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():  # auxiliary-loss-free balancing (DeepSeek-V3 report, section 2.1.2)
            for r in routers:
                load = loads[id(r)].float()
                r.e_score_correction_bias += BIAS_RATE * torch.sign(load.mean() - load)
        if (step + 1) % EVAL_EVERY == 0 or step + 1 == a.steps:
            evaluate(step + 1, loss.item())
    if a.keep == "final":
        best_state = export_state(model)
        log["kept_step"] = log["curve"][-1]["step"]
        best = last_held_out
    log["held_out_loss"] = best
    log["seconds"] = round(time.time() - t0, 1)
    log["torch"] = torch.__version__
    import transformers  # lazy: pulls transformers

    log["transformers"] = transformers.__version__
    out.mkdir(parents=True, exist_ok=True)
    assert best_state is not None  # at least one evaluation ran (the last step always evaluates)
    save_file(best_state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2, "do_sample": False}, indent=2) + "\n"
    )
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(prep / name, out / name)
    (out / "train_log.json").write_text(json.dumps(log, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
