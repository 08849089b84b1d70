"""Paired NLL of two scorers on the same tokens (two servers, two releases, a server vs the oracle).

Per token i: d_i = nll_b(i) - nll_a(i) = lp_a(i) - lp_b(i). The mean difference and its standard
error se = sd(d) / sqrt(n) (sample sd, n - 1) give the change in mean NLL, the relative perplexity
change exp(mean d) - 1 (the CMP seed's "+0.57 %") and z = mean d / se (its "1.7 sigma"). Pairing
removes the per-token difficulty both scorers share, so se is far smaller than for two unpaired means.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def paired_nll(a: Sequence[float | None], b: Sequence[float | None]) -> dict[str, float | int | None]:
    """a, b: log-probs of the same tokens, in the same order (None entries are skipped in pairs)."""
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    if len(a) != len(b):
        raise ValueError(f"paired NLL needs the same tokens: {len(a)} vs {len(b)} log-probs")
    n = len(pairs)
    if n < 2:
        raise ValueError("paired NLL needs at least 2 scored tokens")
    d = [x - y for x, y in pairs]
    mean = sum(d) / n
    var = sum((v - mean) ** 2 for v in d) / (n - 1)
    se = math.sqrt(var / n)
    nll_a = -sum(x for x, _ in pairs) / n
    nll_b = -sum(y for _, y in pairs) / n
    return {
        "tokens": n,
        "nll_a": nll_a,
        "nll_b": nll_b,
        "mean_diff": mean,
        "se": se,
        "rel_ppl_change": math.expm1(mean),
        "rel_ppl_change_pct": 100 * math.expm1(mean),
        "se_pct": 100 * se * math.exp(mean),
        # se 0 (every token moved by the same amount): no z-score to report, rather than inf
        "sigma": (mean / se) if se > 0 else (0.0 if mean == 0 else None),
    }


def describe(p: dict[str, float | int | None]) -> str:
    pct = float(p["rel_ppl_change_pct"] or 0.0)
    sig = "n/a σ: every token moved alike" if p["sigma"] is None else f"{float(p['sigma']):.1f} σ"
    return f"paired NLL {pct:+.2f} % ({sig}, se {float(p['se_pct'] or 0.0):.2f} %) over {p['tokens']} tokens"
