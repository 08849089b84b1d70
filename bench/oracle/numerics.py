"""The oracle's numerics choices (where the public ports differ), with documented defaults.

Every run records the options it used (`Numerics.to_dict`). Defaults follow the fp32 reading of
research/oracle-multinode.md §2.3: no activation or cache rounding, stable top-k (ties -> lower
index, lower expert id), no YaRN attention mscale.
- act_quant: FP8-quantize activations per 32 (power-of-two scale, e4m3) before every linear that
  is FP8/FP4 in the original checkpoint (the vendor's act_quant, K:70-86). Default off.
- kv_fp8: the same rounding on the window KV latent before attention. Default off.
- topk_ties: "lower-index" (stable sort, TensorFold) or "higher-index" (ds4 kernel). Default lower.
  The rule is a total order, (score desc, index asc) or (score desc, index desc), applied by a
  stable sort, so equal scores select the same set on every device and in every permutation.
- select_f64: accumulate the scores that only select (the indexer's scores and weights, the
  router's logits) in float64, so that a near-tie cannot be decided by the device's fp32 summation
  order. Default off (the public ports' fp32): measured on the H200 host (results/h200-2026-12-01-
  run3.json) it changed nothing, because CPU and CUDA already differ continuously before any
  selection flips (the tiny checkpoints amplify rounding ~10x per layer, see README).
The head's streaming log-sum-exp accumulates in float64 (fixed). The compute dtype (fp32, or
float64 as the yardstick for fp32's rounding) is a run option, recorded as compute_dtype.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from recipekit.errors import RecipekitError

TIE_RULES = ("lower-index", "higher-index")
FP8_MAX = 448.0
ACT_BLOCK = 32


@dataclass(frozen=True)
class Numerics:
    act_quant: bool = False
    kv_fp8: bool = False
    topk_ties: str = "lower-index"
    select_f64: bool = False
    # a deliberately wrong model, for the sanity tests that prove the gate can fail
    wrong: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.topk_ties not in TIE_RULES:
            raise RecipekitError(
                code="oracle-bad-option",
                message=f"topk_ties {self.topk_ties!r} is not one of {TIE_RULES}",
                hint="--topk-ties lower-index | higher-index",
            )
        unknown = set(self.wrong) - {"swap_layers", "no_engram", "no_mhc_delay"}
        if unknown:
            raise RecipekitError(
                code="oracle-bad-option",
                message=f"unknown wrong-model switch(es) {sorted(unknown)}",
                hint="swap_layers=[a, b], no_engram, no_mhc_delay",
            )

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        if not self.wrong:
            d.pop("wrong")
        d["fixed"] = {
            "index_k": "fp32 (no FP4 rounding)",
            "compressed_kv": "fp32 (no FP4 rounding)",
            "yarn_mscale": "not applied (scale head_dim^-0.5)",
            "matmul": "fp32, TF32 off",
            "head_logsumexp": "float64 running max and sum over fp32 logit chunks",
        }
        return d


def fp8_act_quant(x):
    """Vendor act_quant: per 32 along the last axis, s = 2^ceil(log2(max(amax, 1e-4)/448)), e4m3 round trip."""
    import torch  # lazy: pulls torch

    shp = x.shape
    b = x.reshape(*shp[:-1], shp[-1] // ACT_BLOCK, ACT_BLOCK)
    amax = b.abs().amax(-1, keepdim=True).clamp_min(1e-4)
    s = torch.exp2(torch.ceil(torch.log2(amax / FP8_MAX)))
    q = (b / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).to(torch.float32)
    return (q * s).reshape(shp)


def stable_topk(scores, k: int, ties: str):
    """Indices of the k largest along the last axis; ties broken by index per `ties` (deterministic)."""
    import torch  # lazy: pulls torch

    if ties == "higher-index":
        flipped = torch.flip(scores, dims=(-1,))
        idx = torch.sort(flipped, dim=-1, descending=True, stable=True).indices[..., :k]
        return scores.shape[-1] - 1 - idx
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices[..., :k]
