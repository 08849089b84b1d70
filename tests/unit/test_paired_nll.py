"""Paired NLL with its standard error (no torch)."""

import math

import pytest

from recipekit.bench.gates.paired_nll import describe, paired_nll


def test_paired_nll_by_hand():
    a = [-1.0, -2.0, -3.0, -4.0]
    b = [-1.1, -2.0, -3.3, -4.2]
    p = paired_nll(a, b)
    d = [0.1, 0.0, 0.3, 0.2]  # lp_a - lp_b = nll_b - nll_a
    mean = sum(d) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 3)
    assert p["mean_diff"] == pytest.approx(mean)
    assert p["se"] == pytest.approx(sd / 2)
    assert p["sigma"] == pytest.approx(mean / (sd / 2))
    assert p["rel_ppl_change_pct"] == pytest.approx(100 * (math.exp(mean) - 1))
    assert p["nll_a"] == pytest.approx(2.5) and p["nll_b"] == pytest.approx(2.65)
    assert describe(p).startswith("paired NLL +16.18 % (")


def test_paired_nll_refuses_unpaired_input():
    with pytest.raises(ValueError):
        paired_nll([-1.0, -2.0], [-1.0])
    with pytest.raises(ValueError):
        paired_nll([-1.0], [-1.0])


def test_a_uniform_shift_reports_no_sigma_rather_than_inf():
    from recipekit.bench.gates.paired_nll import describe, paired_nll

    p = paired_nll([-1.0, -2.0, -3.0], [-1.5, -2.5, -3.5])
    assert p["se"] == 0.0 and p["sigma"] is None
    assert "inf" not in describe(p) and "n/a σ" in describe(p)
