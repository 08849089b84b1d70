"""Proof 4 of the oracle: CPU vs CUDA. fp32 CPU and CUDA sum in different orders and the default
tiny checkpoint (uniform FP8 codes, |q| ~900) amplifies that rounding ~10x per layer (measured,
README), so on it the device comparison is made with the same model computed in float64
(`dtype="float64"`): there CPU and CUDA agree to 8e-12 per token on the H200 host. In fp32 the
comparison runs on the generator's well-conditioned variant (`weights="conditioned"`: init-like
weight magnitudes, same encodings and geometry), where fp32 must agree within 1e-5 per token and on NLL. CPU-side: the top-k tie rule is a total order, so permuted equal
scores select the same entries; float64 selection scores and the float64 model are recorded."""

from __future__ import annotations

import pytest
import torch  # a test dependency (the oracle's forward)

from recipekit.bench.gates.perplexity import ppl_text
from recipekit.bench.oracle import attention as att
from recipekit.bench.oracle.moe import route
from recipekit.bench.oracle.numerics import Numerics, stable_topk
from recipekit.bench.oracle.run import run_oracle, tokenize_text
from recipekit.bench.oracle.tiny import make_oracle_tiny

pytestmark = pytest.mark.timeout(600)
TOKENS = 24
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this host (run on a GPU host)")


def _rel(a: list[float], b: list[float]) -> tuple[float, float]:
    """(max over tokens of |a - b| / |b|, |NLL_a - NLL_b| / |NLL_b|): the definitions README states."""
    per_token = max(abs(x - y) / abs(y) for x, y in zip(a, b))
    return per_token, abs(sum(a) - sum(b)) / abs(sum(b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ties", ["lower-index", "higher-index"])
def test_tie_rule_selects_the_same_entries_for_permuted_equal_scores(device, ties):
    g = torch.Generator().manual_seed(0)
    base = torch.tensor([3.0, 1.0, 3.0, 2.0, 3.0, 0.5, 3.0, 2.0])  # four-way tie at the top, k = 2 splits it
    expect = {0, 2} if ties == "lower-index" else {4, 6}
    assert set(stable_topk(base.to(device), 2, ties).tolist()) == expect
    for _ in range(20):
        perm = torch.randperm(len(base), generator=g)
        picked = stable_topk(base[perm].to(device), 2, ties).cpu()
        # map the picks back to the original positions: the rule orders by (score desc, position), so
        # under a permutation the chosen scores are equal and the positions are the smallest/largest ones
        assert base[perm][picked].tolist() == [3.0, 3.0]
        pos = torch.nonzero(base[perm] == 3.0)[:, 0]
        want = pos[:2] if ties == "lower-index" else pos.flip(0)[:2]
        assert sorted(picked.tolist()) == sorted(want.tolist())


@pytest.mark.parametrize("device", DEVICES)
def test_index_and_router_selection_on_ties_is_device_independent(device):
    scores = torch.tensor([[1.0, 5.0, 5.0, 5.0, 0.0, 5.0]])
    mask = att.select_topk(scores.to(device), torch.tensor([6], device=device), 2, "lower-index").cpu()
    assert mask.tolist() == [[False, True, True, False, False, False]]
    # the router: equal biased scores, lower expert id wins; float64 selection picks the same set
    x = torch.ones((1, 4), device=device)
    gate_w = torch.ones((6, 4), device=device)
    bias = torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 0.0], device=device)
    for f64 in (False, True):
        sel, w = route(x, gate_w, bias, 3, 2.5, True, "lower-index", select_f64=f64)
        assert sel.cpu().tolist() == [[2, 4, 0]] and w.dtype == torch.float32
        assert w.sum().item() == pytest.approx(2.5, rel=1e-6)


def test_float64_selection_scores_are_double_and_agree_with_fp32():
    g = torch.Generator().manual_seed(1)
    q, w, k = torch.randn(5, 3, 8, generator=g), torch.rand(5, 3, generator=g), torch.randn(7, 8, generator=g)
    s32, s64 = att.index_scores(q, w, k), att.index_scores(q, w, k, select_f64=True)
    assert s32.dtype == torch.float32 and s64.dtype == torch.float64
    assert torch.allclose(s32.double(), s64, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = make_oracle_tiny(tmp_path_factory.mktemp("oracle-dev") / "orig")
    return d, tokenize_text(d, ppl_text(), TOKENS)


def test_float64_model_is_recorded_and_near_fp32(tiny):
    folder, ids = tiny
    f32 = run_oracle(folder, [ids], threads=1, numerics=Numerics(select_f64=True))
    f64 = run_oracle(folder, [ids], threads=1, dtype="float64")
    assert f32["compute_dtype"] == "float32" and f64["compute_dtype"] == "float64"
    assert f32["numerics"]["select_f64"] is True and f64["numerics"]["select_f64"] is False
    assert "cuda.matmul.allow_tf32" in f64["backend_flags"]
    per_token, nll = _rel(f32["results"][0]["logprobs"], f64["results"][0]["logprobs"])
    assert 0 < per_token < 1e-2 and nll < 1e-4  # fp32's own rounding on the tiny model: small, not zero
    with pytest.raises(ValueError, match="float32 or float64"):
        run_oracle(folder, [ids], dtype="float16")


@needs_cuda
def test_cpu_vs_cuda_within_1e5_relative(tiny):
    folder, ids = tiny
    cpu = run_oracle(folder, [ids], dtype="float64")
    cuda = run_oracle(folder, [ids], device="cuda", dtype="float64")
    per_token, nll = _rel(cuda["results"][0]["logprobs"], cpu["results"][0]["logprobs"])
    assert per_token <= 1e-5 and nll <= 1e-5, (per_token, nll)
    assert cuda["results"][0]["argmax"] == cpu["results"][0]["argmax"]
    # fp32 on CUDA: full-precision flags recorded, and two runs bit-identical
    a = run_oracle(folder, [ids], device="cuda")
    b = run_oracle(folder, [ids], device="cuda")
    assert a["results"] == b["results"]
    flags = a["backend_flags"]
    assert flags["cuda.matmul.allow_tf32"] is False and flags["cudnn.allow_tf32"] is False
    assert flags["cuda.matmul.allow_fp16_reduced_precision_reduction"] is False


COND_TOKENS = 256


@pytest.fixture(scope="module")
def conditioned(tmp_path_factory):
    d = make_oracle_tiny(tmp_path_factory.mktemp("oracle-dev-cond") / "orig", weights="conditioned")
    return d, tokenize_text(d, ppl_text(), COND_TOKENS)


@needs_cuda
def test_cpu_vs_cuda_fp32_within_1e5_relative_on_the_conditioned_checkpoint(conditioned):
    folder, ids = conditioned
    cpu = run_oracle(folder, [ids])
    cuda = run_oracle(folder, [ids], device="cuda")
    assert cpu["compute_dtype"] == cuda["compute_dtype"] == "float32"
    assert len(cuda["results"][0]["logprobs"]) == len(ids) - 1
    per_token, nll = _rel(cuda["results"][0]["logprobs"], cpu["results"][0]["logprobs"])
    assert per_token <= 1e-5 and nll <= 1e-5, (per_token, nll)
    assert cuda["results"][0]["argmax"] == cpu["results"][0]["argmax"]


def test_cli_refuses_an_unknown_dtype(tiny, tmp_path, capsys):
    from recipekit.cli.main import main

    folder, _ = tiny
    out = tmp_path / "x.json"
    assert main(["oracle", "run", "-c", str(folder), "--dtype", "float16", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error[oracle-bad-option]")
    assert not out.exists()
