"""Tests for the paired bootstrap of a difference of two ratios of aggregates
(``eval.compare.paired_ratio_bootstrap``) and the claims row built on it
(``eval.claims.judge_ratio``).

The independent reference is the exact bootstrap distribution: with ``n`` units there are
``n**n`` equally likely ordered resamples, enumerated here with itertools, each arm's rate
recomputed from the resampled totals by plain Python sums.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from eval.claims import Claim, ClaimError, judge_ratio
from eval.compare import paired_ratio_bootstrap

# four units (problems): (recovering, erroring) per arm; unit 3 has no error in arm b and
# unit 2 none in arm a, so some resamples leave an arm without a rate
NUM_A, DEN_A = [2, 1, 0, 0], [2, 3, 0, 1]
NUM_B, DEN_B = [0, 1, 1, 0], [1, 2, 3, 0]


def exact_distribution():
    """The difference R_a - R_b over every ordered resample with both rates defined."""
    n = len(NUM_A)
    diffs = []
    for idx in itertools.product(range(n), repeat=n):
        da, db = sum(DEN_A[i] for i in idx), sum(DEN_B[i] for i in idx)
        if da and db:
            diffs.append(sum(NUM_A[i] for i in idx) / da - sum(NUM_B[i] for i in idx) / db)
    return np.array(sorted(diffs))


def test_rates_are_ratios_of_totals_not_means_of_unit_ratios():
    got = paired_ratio_bootstrap(NUM_A, DEN_A, NUM_B, DEN_B, n_boot=200, seed=1)
    assert got.mean_a == pytest.approx(3 / 6) and got.mean_b == pytest.approx(2 / 6)
    assert got.diff == pytest.approx(3 / 6 - 2 / 6) and got.n == 4
    assert got.method == "paired_ratio_bootstrap"


def test_ci_and_p_value_match_the_exact_bootstrap_distribution():
    exact = exact_distribution()
    observed = 3 / 6 - 2 / 6
    got = paired_ratio_bootstrap(NUM_A, DEN_A, NUM_B, DEN_B, n_boot=100_000, seed=7,
                                 alternative="greater")

    def cdf(x):  # exact P(D* <= x)
        return np.count_nonzero(exact <= x + 1e-12) / exact.size

    def below(x):  # exact P(D* < x)
        return np.count_nonzero(exact < x - 1e-12) / exact.size

    # a percentile of the Monte-Carlo resamples sits where the exact CDF crosses its level
    for bound, level in ((got.ci_low, 0.025), (got.ci_high, 0.975)):
        assert below(bound) <= level + 0.01 and cdf(bound) >= level - 0.01
    # shift method: P(D* - observed >= observed), ties counted
    exact_p = np.count_nonzero(exact - observed >= observed - 1e-9) / exact.size
    assert got.p_value == pytest.approx(exact_p, abs=0.01)


def test_no_variation_gives_the_point_and_p_one():
    got = paired_ratio_bootstrap([0, 0, 0], [1, 0, 2], [0, 0, 0], [0, 3, 1], n_boot=500)
    assert (got.diff, got.ci_low, got.ci_high, got.p_value) == (0.0, 0.0, 0.0, 1.0)


@pytest.mark.parametrize(("args", "message"), [
    (([1, 0], [0, 0], [1, 0], [1, 1]), "arm a's denominators sum to 0"),
    (([1, 0], [1, 1], [0], [1]), "got lengths"),
    (([1, 0], [1, -1], [1, 0], [1, 1]), "counts or totals >= 0"),
    (([1], [1], [1], [1]), "at least 2 units"),
])
def test_bad_input_says_what_is_wrong(args, message):
    with pytest.raises(ValueError, match=message):
        paired_ratio_bootstrap(*args, n_boot=50)


CLAIM = Claim(paper="P", section="§1", statement="the method recovers more often",
              metric="recovery", reference="ref", treatment="method")


def test_judge_ratio_row_arms_and_verdict():
    ref = {u: (n, d) for u, n, d in zip("wxyz", NUM_B, DEN_B, strict=True)}
    treat = {u: (n, d) for u, n, d in zip("wxyz", NUM_A, DEN_A, strict=True)}
    row = judge_ratio(CLAIM, ref, treat, n_boot=2000)
    assert row["treatment_value"] == pytest.approx(0.5)
    assert row["reference_value"] == pytest.approx(1 / 3)
    assert row["diff"] == pytest.approx(1 / 6) and row["n"] == 4
    assert row["diff_ci_low"] < 0 < row["diff_ci_high"]  # four units: the CI straddles 0
    assert row["verdict"] == "inconclusive"
    # a clear effect on many units is reproduced
    many_ref = {i: (0, 2) for i in range(30)}
    many_treat = {i: (2, 2) for i in range(30)}
    strong = judge_ratio(CLAIM, many_ref, many_treat, n_boot=500)
    assert strong["verdict"] == "reproduced" and strong["diff"] == 1.0


def test_judge_ratio_refuses_what_it_cannot_judge():
    with pytest.raises(ClaimError, match="same units"):
        judge_ratio(CLAIM, {"a": (0, 1), "b": (0, 1)}, {"a": (0, 1), "c": (0, 1)})
    with pytest.raises(ClaimError, match="denominators sum to 0"):
        judge_ratio(CLAIM, {"a": (0, 0), "b": (0, 0)}, {"a": (0, 1), "b": (1, 1)})
    worse = Claim(paper="P", section="§1", statement="keeps it", metric="m", reference="r",
                  treatment="t", kind="no_worse", margin=0.1)
    with pytest.raises(ClaimError, match="`better` claims only"):
        judge_ratio(worse, {"a": (0, 1), "b": (0, 1)}, {"a": (0, 1), "b": (1, 1)})
