"""The oracle's components against independent code: transformers' `deepseek_v4` (DeepSeek-V4).

Same component, same math, random fp32 inputs, fp32 tolerance. Where V4.1 differs from V4 the test
says how (and tests the V4.1 part against the spec instead):
- mHC mixing + Sinkhorn: identical in V4 and V4.1. The *schedule* differs: V4 collapses each site
  with its own `pre`; V4.1's single pass collapses with the previous site's `pre` (the delay is
  in model.Oracle.forward, checked by the wrong-model test) and has no hc_head.
- routing: V4 and V4.1 both use sqrtsoftplus + bias top-k and route scale; V4 also has hash
  routing (tid2eid), dropped in V4.1. transformers' topk ties are unspecified; ours are stable.
- experts / shared expert: the clamped SwiGLU is the same; V4.1 applies the routing weight before
  w2 (linear, so equal up to rounding).
- RoPE: the same interleaved pairs on the trailing rope dims; YaRN inverse frequencies equal
  transformers' yarn for the same factor/betas/original length (we apply no attention mscale).
"""

from __future__ import annotations

import pytest
import torch
import transformers.models.deepseek_v4.modeling_deepseek_v4 as v4  # the independent implementation (test extras)

from recipekit.bench.oracle import attention as att
from recipekit.bench.oracle.mhc import hc_mix, hc_pre
from recipekit.bench.oracle.moe import moe, route, swiglu

pytestmark = pytest.mark.timeout(120)
H, HC, E, I, K = 64, 4, 8, 32, 2  # noqa: E741  (I: the expert intermediate size, as the model code names it)


def _config(**kw):
    from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config

    base: dict = dict(
        hidden_size=H,
        intermediate_size=I,
        moe_intermediate_size=I,
        num_hidden_layers=2,
        num_attention_heads=2,
        head_dim=32,
        hc_mult=HC,
        hc_sinkhorn_iters=20,
        hc_eps=1e-6,
        rms_norm_eps=1e-20,
        swiglu_limit=10.0,
        n_routed_experts=E,
        num_local_experts=E,
        num_experts_per_tok=K,
        routed_scaling_factor=1.5,
        scoring_func="sqrtsoftplus",
        vocab_size=100,
    )
    base.update(kw)
    return DeepseekV4Config(**base)


def test_hyper_connection_mixing_and_sinkhorn_equal_transformers():
    g = torch.Generator().manual_seed(0)
    cfg = _config()
    m = v4.DeepseekV4HyperConnection(cfg)
    with torch.no_grad():
        m.fn.copy_(torch.randn(m.fn.shape, generator=g) * 0.3)
        m.base.copy_(torch.randn(m.base.shape, generator=g))
        m.scale.copy_(torch.rand(3, generator=g) + 0.5)
    x = torch.randn(1, 7, HC, H, generator=g)
    post_ref, comb_ref, collapsed_ref = m(x)
    pre, post, comb = hc_mix(x[0], m.fn.detach(), m.base.detach(), m.scale.detach(), 20, 1e-6, 1e-20)
    assert torch.allclose(post, post_ref[0], rtol=1e-5, atol=1e-6)
    assert torch.allclose(comb, comb_ref[0], rtol=1e-5, atol=1e-6)
    assert torch.allclose(hc_pre(x[0], pre), collapsed_ref[0], rtol=1e-5, atol=1e-5)
    assert torch.allclose(comb.sum(-1), torch.ones(7, HC), atol=0.05)  # rows ~1 after 20 rounds
    assert torch.allclose(comb.sum(-2), torch.ones(7, HC), atol=1e-5)


def test_sqrtsoftplus_routing_equals_transformers():
    g = torch.Generator().manual_seed(1)
    r = v4.DeepseekV4TopKRouter(_config())
    with torch.no_grad():
        r.weight.copy_(torch.randn(E, H, generator=g))
        r.e_score_correction_bias.copy_(torch.randn(E, generator=g) * 0.1)
    x = torch.randn(16, H, generator=g)
    _, w_ref, idx_ref = r(x)
    sel, w = route(x, r.weight.detach(), r.e_score_correction_bias, K, 1.5, True, "lower-index")
    order = torch.argsort(idx_ref, dim=-1)
    assert torch.equal(torch.sort(sel, -1).values, torch.gather(idx_ref, 1, order))
    ours = torch.gather(w, 1, torch.argsort(sel, -1))
    assert torch.allclose(ours, torch.gather(w_ref, 1, order), rtol=1e-6, atol=1e-6)


def test_clamped_swiglu_experts_and_shared_expert_equal_transformers():
    g = torch.Generator().manual_seed(2)
    cfg = _config()
    ex = v4.DeepseekV4Experts(cfg)
    w1, w3 = torch.randn(E, I, H, generator=g), torch.randn(E, I, H, generator=g)
    w2 = torch.randn(E, H, I, generator=g) * 0.2
    with torch.no_grad():
        ex.gate_up_proj.copy_(torch.cat([w1, w3], dim=1))
        ex.down_proj.copy_(w2)
    x = torch.randn(10, H, generator=g) * 2  # big enough that both clamps bite
    sel = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(10)])
    w = torch.rand(10, K, generator=g)
    ref = ex(x, sel, w)
    out, used = moe(x, sel, w, lambda e: (w1[e], w2[e], w3[e]), 10.0, lambda t: t)
    assert used == sorted(set(sel.flatten().tolist()))
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-4)
    mlp = v4.DeepseekV4MLP(cfg)
    with torch.no_grad():
        mlp.gate_proj.weight.copy_(w1[0])
        mlp.up_proj.weight.copy_(w3[0])
        mlp.down_proj.weight.copy_(w2[0])
    assert torch.allclose(swiglu(x, w1[0], w2[0], w3[0], 10.0), mlp(x), rtol=1e-5, atol=1e-4)


def test_interleaved_rope_equals_transformers():
    g = torch.Generator().manual_seed(3)
    inv = att.rope_inv_freq(16, 10000.0, None, 4096)
    ref_inv = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.float) / 16))
    assert torch.allclose(torch.tensor(inv, dtype=torch.float32), ref_inv, rtol=1e-6)
    pos = torch.arange(9)
    cos, sin = att.rope_table(inv, pos, "cpu")
    x = torch.randn(3, 9, 48, generator=g)  # [heads, T, head_dim]; rope on the last 16
    ours = att.apply_rope(x, cos, sin)
    ref = v4.apply_rotary_pos_emb(x[None], cos[None], sin[None], unsqueeze_dim=1)[0]
    assert torch.allclose(ours, ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(ours[..., :32], x[..., :32])
    back = att.apply_rope(ours, cos, sin, inverse=True)
    assert torch.allclose(back, x, atol=1e-5)


def test_yarn_inverse_frequencies_equal_transformers():
    from transformers import PretrainedConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    yarn = {
        "rope_type": "yarn",
        "factor": 16.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "original_max_position_embeddings": 65536,
    }
    cfg = PretrainedConfig()
    cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim = 64, 1, 64
    cfg.max_position_embeddings = 1048576
    cfg.rope_parameters = dict(yarn, rope_theta=160000.0)
    ref, _factor = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
    ours = att.rope_inv_freq(64, 160000.0, yarn, 1048576)
    assert torch.allclose(torch.tensor(ours, dtype=torch.float32), ref.float(), rtol=1e-5)
