"""The trained pydoc model shipped as the local default, and the first-ten-minutes labels around it."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from recipekit.backends.cpu import pydoc_model as pm
from recipekit.backends.cpu import tiny_model as tm
from recipekit.backends.cpu.tinylm import corpus as cp
from recipekit.backends.cpu.tinylm import prepare

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "backends" / "cpu" / "tinylm" / "data" / "corpus.jsonl.gz"


def test_shipped_files_match_their_recorded_sha256_and_stay_small():
    for name, digest in pm.SHIPPED_SHA256.items():
        assert hashlib.sha256((pm.SHIPPED / name).read_bytes()).hexdigest() == digest, name
    size = (pm.SHIPPED / "model.safetensors").stat().st_size
    assert size == 13_864_952 and size < 20 * 1024 * 1024
    card = (pm.SHIPPED / pm.CARD).read_text()
    assert pm.SHIPPED_SHA256["model.safetensors"] in card and "13,864,952" in card


def test_shipped_weights_have_the_published_deepseek_v3_names_and_shapes():
    """vLLM's DeepseekV3 loader reads per-expert names (mlp.experts.{i}.gate_proj...), the router
    bias in fp32 and kv_lora_rank 512 + qk_rope_head_dim 64 (the CPU MLA kernel's 576 latent)."""
    from safetensors import safe_open

    cfg = json.loads((pm.SHIPPED / "config.json").read_text())
    assert (cfg["kv_lora_rank"], cfg["qk_rope_head_dim"], cfg["vocab_size"]) == (512, 64, 4096)
    want = tm.tensor_shapes(cfg)
    with safe_open(str(pm.SHIPPED / "model.safetensors"), "np") as f:
        got = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        dtypes = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    assert got == want
    assert {d for k, d in dtypes.items() if not k.endswith("e_score_correction_bias")} == {"BF16"}
    assert {d for k, d in dtypes.items() if k.endswith("e_score_correction_bias")} == {"F32"}
    assert sum(int(__import__("math").prod(s)) for s in want.values()) == 6_925_056 + 3 * 8  # + router biases


def test_install_copies_verifies_and_repairs_a_tampered_file(tmp_path):
    out = pm.install_pydoc_model(tmp_path / "m")
    assert pm.verify_pydoc_model(out)
    assert sorted(p.name for p in out.iterdir()) == sorted([*pm.SHIPPED_SHA256, pm.MANIFEST])
    tok = out / "tokenizer.json"
    tok.write_bytes(tok.read_bytes().replace(b'"<|end|>"', b'"<|END|>"', 1))
    assert not pm.verify_pydoc_model(out)
    pm.install_pydoc_model(out)
    assert pm.verify_pydoc_model(out) and not list(tmp_path.glob(".m.tmp-*"))


def test_model_card_line_says_what_it_is_and_what_it_cannot_do():
    line = pm.card_line()
    assert "6.9 M-parameter DeepSeek-V3" in line and "does not reason" in line


def test_corpus_split_and_training_samples_are_deterministic():
    docs = cp.read(CORPUS)
    assert (
        hashlib.sha256(CORPUS.read_bytes()).hexdigest()
        == json.loads((pm.SHIPPED / "prepare.json").read_text())["corpus_sha256"]
    )
    held = [d for d in docs if d["split"] == "held_out"]
    assert all(d["kind"] == "doc" and cp.held_out(d["name"]) for d in held) and len(held) == 258
    assert not any(cp.held_out(d["name"]) for d in docs if d["split"] == "train" and d["kind"] == "doc")
    train = prepare.samples(docs, "train")
    assert train == prepare.samples(docs, "train") and len(train) == 5081
    with_q = [s for s in train if "<|user|>What does the with statement do?\n<|assistant|>" in s]
    assert len(with_q) == 1 and with_q[0].split("<|assistant|>")[1].startswith('The "with" statement')


def test_the_recipe_defaults_to_the_pydoc_model_and_keeps_the_random_one():
    from recipekit.catalog import load_recipe
    from recipekit.config import effective_config

    loaded = load_recipe("tiny-deepseek-cpu")
    eff = effective_config(loaded, environ={})
    assert eff.setting("WEIGHTS", None) == "pydoc"
    assert effective_config(loaded, environ={}, sets=["WEIGHTS=random"]).setting("WEIGHTS", None) == "random"
    r = eff.recipe
    assert r.model.config["hidden_size"] == json.loads((pm.SHIPPED / "config.json").read_text())["hidden_size"]
    ppl = [x for x in r.results if x.metric == "ppl"]
    assert ppl and ppl[0].value == 62.45 and "unigram baseline 707.9" in ppl[0].conditions


def test_a_gate_the_recipe_marks_not_applicable_is_skip_with_its_reason_not_fail():
    from recipekit.bench.gates import runner
    from recipekit.bench.gates.base import GateContext
    from recipekit.catalog import load_recipe
    from recipekit.schema import Gate

    with pytest.raises(ValueError, match="needs a reason"):
        Gate.model_validate({"id": "needle", "applies": False})
    gates = load_recipe("tiny-deepseek-cpu").recipe.gates
    sel = runner.select(gates, None)
    needle = [s for s in sel if s[0] == "needle"]
    assert needle and "_not_applicable" in needle[0][1]
    # asked for by name, it runs
    assert "_not_applicable" not in runner.select(gates, ["needle"])[0][1]

    ctx = GateContext(None)  # type: ignore[arg-type]  # a skipped gate never touches the client
    res = asyncio.run(runner.run_gates(ctx, needle))
    assert res[0].status == "SKIP" and not res[0].required
    assert res[0].summary.startswith("does not apply to this recipe's model: neither tiny model can retrieve")
    doc = runner.document(res, {})
    assert doc["passed"] and doc["failed"] == [] and doc["advisory_failed"] == []


def test_start_sh_unknown_command_message_has_no_exit_code_in_it():
    p = subprocess.run([str(ROOT / "start.sh"), "tset"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert p.stderr == "[start.sh] error: unknown command 'tset' (try ./start.sh help)\n"


def test_list_and_show_name_the_served_model_and_the_multi_node_layouts(run_cli):
    code, out, _ = run_cli("list")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("tiny-deepseek-cpu"))
    assert "tiny-deepseek (local/tiny-deepseek-v3)" in row and "pp2-mp (multi-node)" in out
    code, out, _ = run_cli("show", "tiny-deepseek-cpu")
    assert code == 0 and "served as 'tiny-deepseek'" in out
    assert re.search(r"layouts\s+2x-replicas, pp2-mp, tp2-mp \(multi-node", out)
    code, _, err = run_cli("show", "tiny-deepseek-cpu", "--layout", "tp4")
    assert code == 2 and "multi-node layouts: 2x-replicas, pp2-mp, tp2-mp" in err


def test_an_unknown_command_gets_one_line_with_did_you_mean(run_cli):
    code, out, err = run_cli("rendr")
    assert code == 2 and out == ""
    assert err.strip() == "error[unknown-command] `recipe` has no command 'rendr' (hint: did you mean 'render'?)"
    code, _, err = run_cli("checkpoint", "valdate")
    assert code == 2 and "`recipe checkpoint` has no command 'valdate' (hint: did you mean 'validate'?)" in err


def test_validate_refuses_a_missing_folder_like_check_does(run_cli, tmp_path):
    code, out, err = run_cli("checkpoint", "validate", "--src", str(tmp_path), "--dst", str(tmp_path / "nope"))
    assert code == 6 and "VALIDATE_FAIL" not in out
    assert f"error[checkpoint-not-found] --dst: {tmp_path / 'nope'} is not a folder" in err


def test_fetch_dry_run_offline_takes_the_size_from_the_recipe_when_no_file_size_is_declared(run_cli, tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "RECIPEKIT_HOME": str(tmp_path)}
    code, out, err = run_cli("fetch", "deepseek-v4.1-flash-1017-cmp170hx-4x", "--dry-run", env=env)
    assert code == 0, err
    assert "size not declared" not in out
    assert "no file sizes declared (the whole recipe needs 440.0 GiB of disk)" in out
    assert "to download: 440.00 GiB" in out


def test_the_unigram_baseline_counts_the_topic_rounds_the_shipped_model_trained_on(tmp_path):
    from recipekit.backends.cpu.tinylm import evaluate

    assert (
        evaluate.topic_rounds(pm.SHIPPED) == json.loads((pm.SHIPPED / "prepare.json").read_text())["topic_rounds"] == 3
    )
    for bad in ({}, {"topic_rounds": 0}, {"topic_rounds": True}, {"topic_rounds": "3"}):
        (tmp_path / "prepare.json").write_text(json.dumps(bad))
        with pytest.raises(ValueError, match="topic_rounds is"):
            evaluate.topic_rounds(tmp_path)
