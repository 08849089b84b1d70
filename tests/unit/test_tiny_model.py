"""The tiny DeepSeek-V3 generator: deterministic bytes, DeepSeek-V3 tensor names and shapes,
the config vLLM needs, a trained byte-level tokenizer with a tool-aware chat template, and
verification that catches damage."""

from __future__ import annotations

import json

import pytest

from recipekit.backends.cpu import tiny_model as tm


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tm.make_tiny_deepseek(tmp_path_factory.mktemp("m") / "tiny", seed=0)


def test_same_seed_same_bytes_other_seed_other_weights(model_dir, tmp_path):
    again = tm.make_tiny_deepseek(tmp_path / "again", seed=0)
    for name in ("model.safetensors", "tokenizer.json", "config.json", "tokenizer_config.json"):
        assert (again / name).read_bytes() == (model_dir / name).read_bytes(), name
    other = tm.make_tiny_deepseek(tmp_path / "other", seed=1)
    assert (other / "model.safetensors").read_bytes() != (model_dir / "model.safetensors").read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (model_dir / "tokenizer.json").read_bytes()


def test_config_has_what_vllm_cpu_needs(model_dir):
    cfg = json.loads((model_dir / "config.json").read_text())
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"] and cfg["model_type"] == "deepseek_v3"
    assert cfg["kv_lora_rank"] == 512 and cfg["qk_rope_head_dim"] == 64  # the 576-wide MLA head
    assert (cfg["topk_method"], cfg["scoring_func"]) == ("noaux_tc", "sigmoid")
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["first_k_dense_replace"]) == (128, 2, 1)
    assert (cfg["n_routed_experts"], cfg["n_shared_experts"], cfg["num_experts_per_tok"]) == (8, 1, 2)
    assert (cfg["n_group"], cfg["topk_group"], cfg["q_lora_rank"]) == (2, 1, 64)
    from tokenizers import Tokenizer

    assert (
        cfg["vocab_size"] == Tokenizer.from_file(str(model_dir / "tokenizer.json")).get_vocab_size() == tm.VOCAB_TARGET
    )


def test_tensor_names_and_shapes_are_deepseek_v3(model_dir):
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "np") as f:
        names = set(f.keys())
        assert f.metadata() == {"format": "pt"}
        emb = f.get_slice("model.embed_tokens.weight").get_shape()
        kv_a = f.get_slice("model.layers.0.self_attn.kv_a_proj_with_mqa.weight").get_shape()
        q_b = f.get_slice("model.layers.1.self_attn.q_b_proj.weight").get_shape()
        bias = f.get_tensor("model.layers.1.mlp.gate.e_score_correction_bias")
    cfg = json.loads((model_dir / "config.json").read_text())
    assert emb == [cfg["vocab_size"], 128] and kv_a == [576, 128] and q_b == [4 * 96, 64]
    assert bias.dtype.name == "float32" and (bias == 0).all()
    assert "model.layers.0.mlp.gate_proj.weight" in names  # dense first layer
    assert "model.layers.0.mlp.gate.weight" not in names
    for e in range(8):
        for p in ("gate_proj", "up_proj", "down_proj"):
            assert f"model.layers.1.mlp.experts.{e}.{p}.weight" in names
    assert "model.layers.1.mlp.shared_experts.down_proj.weight" in names and "lm_head.weight" in names
    assert names == set(tm.tensor_shapes(cfg))
    assert len(names) == 1 + (9 + 3) + (9 + 2 + 24 + 3) + 2  # embed, dense layer, MoE layer, norm + head


def test_tokenizer_is_byte_level_with_special_tokens_and_a_tool_template(model_dir):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    for i, t in enumerate(tm.SPECIAL_TOKENS):
        assert tok.token_to_id(t) == i
    text = 'Héllo, wörld! 你好 {"unit": "celsius"}'
    assert tok.decode(tok.encode(text).ids) == text  # byte level: any text round-trips
    assert len(tok.encode("The recipe names the model").ids) < len("The recipe names the model")  # merges learned
    tc = json.loads((model_dir / "tokenizer_config.json").read_text())
    import jinja2

    tmpl = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(tc["chat_template"])
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    out = tmpl.render(
        messages=[
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "get_weather", "arguments": {"unit": "celsius"}}}],
            },
            {"role": "tool", "content": "12 C"},
        ],
        tools=tools,
        add_generation_prompt=True,
        bos_token=tm.BOS,
        eos_token=tm.EOS,
    )
    assert out.startswith("<|begin|><|system|>") and '"name": "get_weather"' in out
    call = out.split("<|assistant|><tool_call>", 1)[1].split("</tool_call><|end|>\n", 1)[0]
    assert json.loads(call) == {"name": "get_weather", "arguments": {"unit": "celsius"}}
    assert out.endswith("<|tool|>12 C\n<|assistant|>")


def test_verification_catches_damage_and_a_rebuild_replaces_it_atomically(model_dir, tmp_path):
    d = tm.make_tiny_deepseek(tmp_path / "t", seed=0)
    assert tm.verify_tiny_deepseek(d, 0) and not tm.verify_tiny_deepseek(d, 1)
    (d / "tokenizer.json").write_text("{}")
    assert not tm.verify_tiny_deepseek(d, 0)
    tm.make_tiny_deepseek(d, seed=0)
    assert tm.verify_tiny_deepseek(d, 0)
    assert (d / "tokenizer.json").read_bytes() == (model_dir / "tokenizer.json").read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["t"]  # no temporary folder left behind


def test_the_generated_config_is_the_one_the_local_recipe_states(model_dir):
    from recipekit.backends.cpu.pydoc_model import SHIPPED
    from recipekit.backends.cpu.tinylm.prepare import PYDOC_ARCH
    from recipekit.catalog import load_recipe

    stated = load_recipe("tiny-deepseek-cpu").recipe.model.config
    shipped = json.loads((SHIPPED / "config.json").read_text())  # the default WEIGHTS=pydoc
    assert stated and {k: shipped.get(k) for k in stated} == stated
    # WEIGHTS=random: the same family and attention, only the widths the pydoc model widens differ
    cfg = json.loads((model_dir / "config.json").read_text())
    assert {k: cfg.get(k) for k in stated if k not in PYDOC_ARCH} == {
        k: v for k, v in stated.items() if k not in PYDOC_ARCH
    }
