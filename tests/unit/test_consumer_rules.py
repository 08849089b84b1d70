"""vLLM's DSV4.1 loader rules (recipekit.checkpoint.consumer_rules) held by the tiny checkpoint and
enforced by `recipe checkpoint check --checkpoint-format original`: each broken rule is a finding naming it."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from recipekit.checkpoint import consumer_rules, dsv41
from recipekit.checkpoint.layout import _vllm_findings, check_layout, tokenizer_findings


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from recipekit.checkpoint.tiny_dsv41 import make_tiny_dsv41

    out = tmp_path_factory.mktemp("rules") / "tiny"
    make_tiny_dsv41(out, seed=0)
    return out


def _config(tiny):
    return json.loads((tiny / "config.json").read_text())


def _actual(config):
    specs = dsv41.vision_tensors(config) | dsv41.original_tensors(dsv41.Geometry.from_config(config))
    return {n: ("x", s.dtype, s.shape) for n, s in specs.items()}


def test_tiny_is_vllm_constructible_and_passes(tiny):
    cfg = _config(tiny)
    text = cfg["text_config"]
    assert (text["head_dim"], text["qk_rope_head_dim"], text["index_head_dim"]) == (512, 64, 128)
    assert text["hidden_size"] % 128 == 0 and text["moe_intermediate_size"] % 128 == 0  # exllamav3 pads to 128
    assert text["vocab_size"] == 129280 and cfg["image_token_id"] == 129264
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    assert tok.token_to_id("<image>") == 129264 and tok.get_vocab_size(with_added_tokens=True) == 129280
    assert tok.encode("a <image> b").ids.count(129264) == 1
    assert _vllm_findings(cfg, _actual(cfg)) == [] and tokenizer_findings(tiny, cfg) == []
    rep = check_layout(tiny, "original")
    assert rep.ok, rep.problems


@pytest.mark.parametrize(
    "key,value,rule",
    [
        ("head_dim", 64, "vllm-head-dim"),
        ("qk_rope_head_dim", 16, "vllm-rope-dim"),
        ("index_head_dim", 32, "vllm-index-head-dim"),
        ("vocab_size", 1008, "vllm-vocab-holds-image"),
    ],
)
def test_shape_rules(tiny, key, value, rule):
    cfg = _config(tiny)
    cfg["text_config"][key] = value
    found = _vllm_findings(cfg, {})
    r = consumer_rules.RULES[rule]
    assert any(f.startswith(f"rule {rule} (") and r.source in f and f"is {value}" in f for f in found), found


@pytest.mark.parametrize(
    "drop,rule",
    [
        ("quant_method", "vllm-quant-keys"),
        ("activation_scheme", "vllm-quant-keys"),
        ("expert_dtype", "vllm-expert-dtype"),
        ("weight_block_size", "vllm-block-size"),
    ],
)
def test_quantization_config_rules(tiny, drop, rule):
    cfg = _config(tiny)
    del cfg["quantization_config"][drop]
    found = _vllm_findings(cfg, _actual(_config(tiny)))
    assert [f for f in found if f.startswith(f"rule {rule} ")], found
    cfg = _config(tiny)
    cfg["quantization_config"]["weight_block_size"] = [128, 128]
    assert any("rule vllm-block-size" in f and "[128, 128]" in f for f in _vllm_findings(cfg, {}))


def test_vision_names_and_bias_vl_rules(tiny):
    cfg = _config(tiny)
    actual = _actual(cfg)
    actual["aligner.norm.weight"] = ("x", "BF16", (128,))
    actual["vision.blocks.0.attn.qkv.weight"] = ("x", "BF16", (96, 32))
    found = _vllm_findings(cfg, actual)
    assert any(f.startswith("rule vllm-vision-names") and "aligner.norm.weight" in f for f in found)
    assert any(
        "vision.blocks.0.attn.qkv.weight" in f and "did you mean 'vision.blocks.0.attn.wqkv.weight'" in f for f in found
    )
    no_vision = copy.deepcopy(cfg)
    no_vision["vision_config"]["num_hidden_layers"] = 0
    g = dsv41.Geometry.from_config(no_vision)
    assert not any(n.endswith("bias_vl") for n in dsv41.original_tensors(g))
    assert dsv41.vision_tensors(no_vision) == {}
    found = _vllm_findings(no_vision, _actual(cfg))
    assert any(f.startswith("rule vllm-gate-bias-vl") and "layers.0.ffn.gate.bias_vl" in f for f in found)
    assert any(n.endswith("bias_vl") for n in dsv41.original_tensors(dsv41.Geometry.from_config(cfg)))


def test_image_token_rule_reads_the_tokenizer_not_the_config(tiny, tmp_path, run_cli):
    bad = tmp_path / "bad"
    shutil.copytree(tiny, bad, symlinks=True)
    doc = json.loads((bad / "tokenizer.json").read_text())
    for a in doc["added_tokens"]:
        if a["content"] == "<image>":
            a["content"] = "<img>"
    (bad / "tokenizer.json").write_text(json.dumps(doc, ensure_ascii=False))
    code, out, _ = run_cli("checkpoint", "check", str(bad), "--checkpoint-format", "original", "--format", "json")
    rep = json.loads(out)
    assert code == 2 and not rep["ok"]
    assert any(
        p.startswith("rule vllm-image-token (") and "mm_preprocess.py:51-67" in p and "is id None" in p
        for p in rep["problems"]
    ), rep["problems"]
    # config.image_token_id agreeing does not help: vLLM does not read it
    assert json.loads((bad / "config.json").read_text())["image_token_id"] == 129264


def test_engram_dead_token_is_vllms_129264_in_the_tiny(tiny):
    from recipekit.checkpoint.engram_addressing import EngramAddresser

    addr = EngramAddresser.from_checkpoint(tiny)
    seq = [5, 129264, 7, 8, 9]
    assert addr.dead_mask(seq).tolist() == [False, True, False, False, False]
    by_default = addr.row_ids(1, seq)
    assert (by_default == addr.row_ids(1, seq, dead=[t == 129264 for t in seq])).all()
    assert not (by_default == addr.row_ids(1, seq, dead=[False] * 5)).all()  # the dead token changes rows
