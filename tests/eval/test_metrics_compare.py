"""Tests for eval/compare.py (paired tests, Student t) and eval/budget.py (budget / TIR metrics).

Expected values are worked out by hand in the comments, taken from printed t tables, or from
closed forms of the t distribution (df = 1, 2, 3); mpmath (a dependency of sympy, which
math-verify pulls in) is the independent high-precision reference where it is installed.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from eval.budget import (
    BudgetPoint,
    Estimate,
    SweepPoint,
    accuracy_at_b,
    budget_curve,
    budgeted_success_at_b,
    mean_tokens_at_b,
    thinking_budget_sweep,
    token_cost_effectiveness,
)
from eval.compare import (
    PairedResult,
    align_paired_scores,
    paired_bootstrap,
    paired_t_test,
    regularized_incomplete_beta,
    student_t_cdf,
    student_t_ppf,
    student_t_sf,
)
from eval.metrics import bootstrap_ci, bootstrap_means

# ================================================================== Student t distribution


@pytest.mark.parametrize("t,df,one_sided_p", [
    (2.0, 10, 0.03669),  # table values quoted in the brief
    (1.0, 5, 0.18161),
    (2.228, 10, 0.025),  # t_{0.975, 10} = 2.228
    (12.706, 1, 0.025),  # t_{0.975, 1} = 12.706
    (2.353, 3, 0.05),  # t_{0.95, 3} = 2.353
    (2.776, 4, 0.025),  # t_{0.975, 4} = 2.776
])
def test_student_t_sf_matches_table_values(t, df, one_sided_p):
    assert student_t_sf(t, df) == pytest.approx(one_sided_p, abs=6e-5)
    assert student_t_cdf(-t, df) == pytest.approx(one_sided_p, abs=6e-5)


@pytest.mark.parametrize("t", [-30.0, -3.0, -1.0, -0.2, 0.0, 0.3, 1.0, 2.5, 7.0, 1e3])
def test_student_t_sf_matches_closed_forms(t):
    # df = 1 is the Cauchy distribution; df = 2 and 3 have elementary CDFs
    assert student_t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, rel=1e-12, abs=1e-15)
    assert student_t_sf(t, 2) == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)), rel=1e-12,
                                               abs=1e-15)
    u = t / math.sqrt(3)
    cdf3 = 0.5 + (u / (1 + u * u) + math.atan(u)) / math.pi
    assert student_t_cdf(t, 3) == pytest.approx(cdf3, rel=1e-12, abs=1e-15)
    assert student_t_sf(t, 7) + student_t_cdf(t, 7) == pytest.approx(1.0, abs=1e-14)


def test_student_t_large_df_tends_to_the_normal():
    for t in (0.5, 1.0, 1.96, 3.0):
        normal = 0.5 * math.erfc(t / math.sqrt(2))
        assert student_t_sf(t, math.inf) == pytest.approx(normal, rel=1e-15)
        assert student_t_sf(t, 1e6) == pytest.approx(normal, rel=1e-4)
        assert student_t_sf(t, 1e12) == pytest.approx(normal, rel=1e-9)
    # ... but not for small df: heavier tails
    assert student_t_sf(3.0, 5) > 10 * 0.5 * math.erfc(3.0 / math.sqrt(2)) / 2


@pytest.mark.parametrize("q,df,expected", [
    (0.975, 10, 2.228139),
    (0.975, 1, 12.706205),
    (0.975, 3, 3.182446),
    (0.95, 3, 2.353363),
    (0.995, 20, 2.845340),
    (0.975, math.inf, 1.959964),
    (0.025, 10, -2.228139),
    (0.5, 4, 0.0),
])
def test_student_t_ppf_table_values(q, df, expected):
    assert student_t_ppf(q, df) == pytest.approx(expected, abs=2e-6)


def test_student_t_ppf_inverts_the_cdf_even_in_far_tails():
    for df in (1, 3, 30, 1e6):
        for q in (1e-20, 1e-6, 0.1, 0.7, 1 - 1e-9):
            assert student_t_cdf(student_t_ppf(q, df), df) == pytest.approx(q, rel=1e-8)


def test_regularized_incomplete_beta_identities():
    for x in (0.0, 0.1, 0.37, 0.5, 0.9, 1.0):
        assert regularized_incomplete_beta(x, 1, 1) == pytest.approx(x, abs=1e-14)
        assert regularized_incomplete_beta(x, 3, 1) == pytest.approx(x ** 3, abs=1e-14)
        assert regularized_incomplete_beta(x, 1, 4) == pytest.approx(1 - (1 - x) ** 4, abs=1e-14)
        # symmetry I_x(a, b) = 1 - I_{1-x}(b, a)
        assert (regularized_incomplete_beta(x, 2.5, 7.0)
                + regularized_incomplete_beta(1 - x, 7.0, 2.5)) == pytest.approx(1.0, abs=1e-13)
    assert regularized_incomplete_beta(0.5, 40, 40) == pytest.approx(0.5, abs=1e-13)
    # I_x(1/2, 1/2) = (2 / pi) asin(sqrt(x))
    assert regularized_incomplete_beta(0.3, 0.5, 0.5) == pytest.approx(
        2 / math.pi * math.asin(math.sqrt(0.3)), rel=1e-12)


def test_student_t_against_mpmath():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    worst = 0.0
    for df in (0.5, 1, 2.5, 4, 9, 10, 25, 200, 1e4, 1e6):
        for t in (-8.0, -1.5, -0.01, 0.4, 1.0, 2.0, 3.3, 6.0, 10.0):
            mt, mdf = mpmath.mpf(t), mpmath.mpf(df)
            tails = mpmath.betainc(mdf / 2, mpmath.mpf(0.5), 0, mdf / (mdf + mt * mt),
                                   regularized=True)
            if abs(t) < 1:  # the central part is the better-conditioned form near 0
                tails = 1 - mpmath.betainc(mpmath.mpf(0.5), mdf / 2, 0,
                                           mt * mt / (mdf + mt * mt), regularized=True)
            expected = float(tails / 2 if t > 0 else 1 - tails / 2)
            worst = max(worst, abs(student_t_sf(t, df) - expected) / expected)
    assert worst < 1e-9
    for x, a, b in ((0.2, 0.7, 3.0), (0.95, 30, 2), (0.6, 50, 50), (1e-4, 0.3, 0.3)):
        expected = float(mpmath.betainc(a, b, 0, x, regularized=True))
        assert regularized_incomplete_beta(x, a, b) == pytest.approx(expected, rel=1e-11)


def test_student_t_bad_arguments():
    with pytest.raises(ValueError, match="degrees of freedom must be > 0"):
        student_t_sf(1.0, 0)
    with pytest.raises(ValueError, match="degrees of freedom"):
        student_t_sf(1.0, float("nan"))
    with pytest.raises(ValueError, match="NaN"):
        student_t_sf(float("nan"), 3)
    with pytest.raises(ValueError, match="in \\(0, 1\\)"):
        student_t_ppf(1.0, 3)
    with pytest.raises(ValueError, match="0 <= x <= 1"):
        regularized_incomplete_beta(1.5, 1, 1)
    with pytest.raises(ValueError, match="a > 0 and b > 0"):
        regularized_incomplete_beta(0.5, 0, 1)
    assert student_t_sf(math.inf, 3) == 0.0 and student_t_sf(-math.inf, 3) == 1.0


# ================================================================== paired t-test

# Four problems; differences d = a - b = [0.4, 0.2, 0.3, 0.1]:
#   mean(d) = 0.25; deviations +-0.15, +-0.05 -> sum of squares 0.05; var = 0.05 / 3
#   se = sqrt(0.05 / 3 / 4) = sqrt(1/240); t = 0.25 * sqrt(240) = sqrt(15) = 3.8730; df = 3.
# Table: t_{0.975,3} = 3.182 < 3.873 < t_{0.99,3} = 4.541, so 0.01 < one-sided p < 0.025.
# df = 3 closed form, u = t / sqrt(3) = sqrt(5):
#   CDF = 1/2 + (u / (1 + u^2) + atan u) / pi = 1/2 + (sqrt(5)/6 + atan(sqrt 5)) / pi
A4 = [0.9, 0.8, 0.7, 0.6]
B4 = [0.5, 0.6, 0.4, 0.5]
ONE_SIDED_P4 = 0.5 - (math.sqrt(5) / 6 + math.atan(math.sqrt(5))) / math.pi  # = 0.015233


def test_paired_t_test_four_pair_hand_example():
    r = paired_t_test(A4, B4)
    assert isinstance(r, PairedResult) and r.method == "paired_t_test"
    assert (r.n, r.df) == (4, 3)
    assert r.mean_a == pytest.approx(0.75) and r.mean_b == pytest.approx(0.5)
    assert r.diff == pytest.approx(0.25)
    assert r.statistic == pytest.approx(math.sqrt(15))
    assert 0.01 < ONE_SIDED_P4 < 0.025
    assert ONE_SIDED_P4 == pytest.approx(0.015233, abs=1e-6)
    assert r.p_value == pytest.approx(2 * ONE_SIDED_P4, rel=1e-10)
    # 95% CI: 0.25 +- 3.182446 * sqrt(1/240) = 0.25 +- 0.205427
    half = 3.1824463 * math.sqrt(1 / 240)
    assert (r.ci_low, r.ci_high) == pytest.approx((0.25 - half, 0.25 + half), abs=1e-6)
    assert r.significant() and not r.significant(0.01)


def test_paired_t_test_one_sided_alternatives():
    greater = paired_t_test(A4, B4, alternative="greater")
    less = paired_t_test(A4, B4, alternative="less")
    assert greater.p_value == pytest.approx(ONE_SIDED_P4, rel=1e-10)
    assert less.p_value == pytest.approx(1 - ONE_SIDED_P4, rel=1e-10)
    # swapping the models swaps the direction
    assert paired_t_test(B4, A4, alternative="less").p_value == pytest.approx(ONE_SIDED_P4)
    assert paired_t_test(B4, A4).diff == pytest.approx(-0.25)
    assert greater.alternative == "greater" and greater.ci_low == less.ci_low  # CI is two-sided


def test_paired_t_test_alpha_widens_or_narrows_the_ci():
    r90 = paired_t_test(A4, B4, alpha=0.10)
    # t_{0.95, 3} = 2.353363
    assert r90.ci_high - r90.diff == pytest.approx(2.353363 * math.sqrt(1 / 240), abs=1e-6)
    assert r90.p_value == paired_t_test(A4, B4).p_value


def test_paired_t_test_zero_variance_cases():
    same = paired_t_test([1, 0, 1, 1], [1, 0, 1, 1])
    assert (same.diff, same.ci_low, same.ci_high, same.p_value, same.statistic) == (0, 0, 0, 1, 0)
    for alternative in ("greater", "less"):
        assert paired_t_test([1, 0, 1], [1, 0, 1], alternative=alternative).p_value == 1.0
    # every difference +1: t = +inf
    shifted = paired_t_test([1, 1, 1], [0, 0, 0])
    assert shifted.statistic == math.inf and shifted.p_value == 0.0
    assert (shifted.ci_low, shifted.ci_high) == (1.0, 1.0)
    assert paired_t_test([1, 1, 1], [0, 0, 0], alternative="greater").p_value == 0.0
    assert paired_t_test([1, 1, 1], [0, 0, 0], alternative="less").p_value == 1.0


def test_paired_t_test_is_paired():
    # model A is 0.02 better on every problem, up to tiny noise; problems vary a lot in
    # difficulty, so unpaired CIs overlap heavily but the paired test sees the difference
    rng = np.random.default_rng(3)
    difficulty = rng.random(40)
    b = difficulty
    a = difficulty + 0.02 + rng.normal(0, 0.005, size=40)
    paired = paired_t_test(a, b)
    assert paired.p_value < 1e-10 and paired.ci_low > 0
    _, a_low, a_high = bootstrap_ci(a)
    _, b_low, b_high = bootstrap_ci(b)
    assert a_low < b_high and b_low < a_high  # overlapping unpaired intervals


def test_paired_t_test_p_values_are_calibrated_under_the_null():
    rng = np.random.default_rng(11)
    p_values = [paired_t_test(rng.normal(size=15), rng.normal(size=15)).p_value
                for _ in range(400)]
    rejected = np.mean(np.asarray(p_values) < 0.05)
    assert 0.02 <= rejected <= 0.09  # expected 0.05; 400 draws -> SE ~0.011


def test_paired_t_test_against_mpmath_reference():
    mpmath = pytest.importorskip("mpmath")
    rng = np.random.default_rng(5)
    a, b = rng.random(12), rng.random(12)
    d = a - b
    t = d.mean() / (d.std(ddof=1) / math.sqrt(12))
    expected = float(mpmath.betainc(5.5, 0.5, 0, 11 / (11 + t * t), regularized=True))
    assert paired_t_test(a, b).p_value == pytest.approx(expected, rel=1e-10)


# ================================================================== input alignment


def test_dict_inputs_are_aligned_by_problem_id():
    a = {"p1": 0.9, "p2": 0.8, "p3": 0.7, "p4": 0.6}
    b = {"p4": 0.5, "p3": 0.4, "p1": 0.5, "p2": 0.6}  # different insertion order
    by_id = paired_t_test(a, b)
    assert by_id.diff == pytest.approx(0.25) and by_id.statistic == pytest.approx(math.sqrt(15))
    xs, ys = align_paired_scores(a, b)
    assert xs.tolist() == [0.9, 0.8, 0.7, 0.6] and ys.tolist() == [0.5, 0.6, 0.4, 0.5]
    assert paired_bootstrap(a, b, n_boot=500) == paired_bootstrap(A4, B4, n_boot=500)


def test_mismatched_problem_ids_are_reported_with_counts():
    a = {"p1": 1, "p2": 0, "p3": 1, "p4": 1}
    b = {"p1": 1, "p2": 1, "p9": 0}
    with pytest.raises(ValueError) as info:
        paired_t_test(a, b)
    message = str(info.value)
    assert "2 problem id(s) of scores_a are missing from scores_b ('p3', 'p4')" in message
    assert "1 problem id(s) of scores_b are missing from scores_a ('p9')" in message
    assert "shared ids" in message
    many = {f"q{i}": 1.0 for i in range(9)}
    with pytest.raises(ValueError, match=r"9 problem id\(s\) of scores_a .*\(4 more\)"):
        paired_bootstrap(many, {"z": 1.0, "y": 0.0})


def test_bad_paired_inputs():
    with pytest.raises(ValueError, match="scores_a has 3, scores_b has 2"):
        paired_t_test([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="at least 2 problems, got 1"):
        paired_bootstrap([1.0], [0.0])
    with pytest.raises(TypeError, match="both scores as dicts"):
        paired_t_test({"p": 1, "q": 0}, [1, 0])
    with pytest.raises(ValueError, match="non-finite"):
        paired_t_test([1.0, float("nan")], [0.0, 1.0])
    with pytest.raises(TypeError, match="not a string"):
        paired_t_test("1010", "0101")
    with pytest.raises(ValueError, match="alternative must be one of"):
        paired_t_test(A4, B4, alternative="bigger")
    with pytest.raises(ValueError, match="alpha"):
        paired_bootstrap(A4, B4, alpha=0)
    with pytest.raises(ValueError, match="n_boot must be >= 1"):
        paired_bootstrap(A4, B4, n_boot=0)
    with pytest.raises(ValueError, match="1-D"):
        paired_t_test([[1, 0]], [[0, 1]])


# ================================================================== paired bootstrap


def test_paired_bootstrap_is_deterministic_and_its_ci_contains_the_difference():
    rng = np.random.default_rng(0)
    b = (rng.random(120) < 0.45).astype(float)
    a = np.where(rng.random(120) < 0.2, 1.0 - b, b)  # flip 20% of answers
    r = paired_bootstrap(a, b, n_boot=4000, seed=7)
    assert r.method == "paired_bootstrap" and r.df is None and r.n == 120
    assert r.diff == pytest.approx(a.mean() - b.mean()) and r.statistic == r.diff
    assert r.ci_low <= r.diff <= r.ci_high and r.ci_low < r.ci_high
    assert paired_bootstrap(a, b, n_boot=4000, seed=7) == r
    assert paired_bootstrap(a, b, n_boot=4000, seed=8) != r
    assert 0.0 < r.p_value <= 1.0


def test_paired_bootstrap_two_problem_example_by_hand():
    # d = a - b = [0, 1], observed mean 0.5. Resampling 2 problems: the mean is 0 (both draws
    # the first problem, prob 1/4), 0.5 (1/2) or 1 (1/4). Shifted null = {-0.5, 0, 0.5}:
    #   two-sided P(|null| >= 0.5) = 1/2;  greater P(null >= 0.5) = 1/4;  less P(null <= 0.5) = 1
    # 95% percentile CI: 25% of the mass sits at 0 and 25% at 1 -> exactly (0, 1).
    a, b = [1.0, 1.0], [1.0, 0.0]
    two = paired_bootstrap(a, b, n_boot=20_000, seed=1)
    assert two.diff == 0.5 and (two.ci_low, two.ci_high) == (0.0, 1.0)
    assert two.p_value == pytest.approx(0.5, abs=0.015)
    assert paired_bootstrap(a, b, n_boot=20_000, seed=1, alternative="greater").p_value == (
        pytest.approx(0.25, abs=0.015))
    assert paired_bootstrap(a, b, n_boot=20_000, seed=1, alternative="less").p_value == 1.0


def test_paired_bootstrap_p_value_matches_exhaustive_enumeration():
    # three problems, d = [1, 0, 0], observed 1/3: all 27 equally likely resamples give the
    # exact bootstrap distribution. The mean is k/3 with k ~ Binomial(3, 1/3) draws of the
    # first problem: P(k=0) = 8/27, P(k=1) = 12/27, P(k=2) = 6/27, P(k=3) = 1/27.
    #   two-sided |k/3 - 1/3| >= 1/3  <=>  k in {0, 2, 3}: 15/27
    #   greater   k/3 - 1/3 >= 1/3    <=>  k in {2, 3}:    7/27   (ties count as extreme)
    a, b = [1.0, 1.0, 0.5], [0.0, 1.0, 0.5]
    d = np.subtract(a, b)
    observed = d.mean()
    means = np.array([d[list(idx)].mean() for idx in itertools.product(range(3), repeat=3)])
    exact_two = np.mean(np.abs(means - observed) >= abs(observed) - 1e-12)
    exact_greater = np.mean(means - observed >= observed - 1e-12)
    assert exact_two == pytest.approx(15 / 27) and exact_greater == pytest.approx(7 / 27)
    r = paired_bootstrap(a, b, n_boot=20_000, seed=2)
    assert r.p_value == pytest.approx(exact_two, abs=0.015)
    g = paired_bootstrap(a, b, n_boot=20_000, seed=2, alternative="greater")
    assert g.p_value == pytest.approx(exact_greater, abs=0.015)


def test_paired_bootstrap_degenerate_cases():
    same = paired_bootstrap([0.5, 1.0, 0.0], [0.5, 1.0, 0.0])
    assert (same.diff, same.ci_low, same.ci_high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    assert paired_bootstrap([1, 1], [1, 1], alternative="greater").p_value == 1.0
    # constant difference +1: every resample equals the observed one
    up = paired_bootstrap([1, 1, 1], [0, 0, 0], n_boot=999)
    assert (up.ci_low, up.ci_high) == (1.0, 1.0)
    assert up.p_value == pytest.approx(1 / 1000)  # the resolution of 999 resamples
    assert paired_bootstrap([1, 1, 1], [0, 0, 0], n_boot=999, alternative="less").p_value == 1.0


def test_paired_bootstrap_rounding_does_not_break_ties():
    # the differences sum to exactly 0, but in floats the mean is -1.7e-17; every resample is
    # then "at least as extreme" as no difference at all, so the two-sided p must be 1 exactly
    d = [0.3, -0.9, -0.2, 0.7, 0.1]
    assert sum(d) / 5 != 0.0  # the rounding this test is about
    assert paired_bootstrap(d, [0.0] * 5, n_boot=2000).p_value == 1.0
    # 0.3 + 0.1 + 0.1 + 0.8 - 0.4 = 0.9, observed 0.18: one-sided counts include exact ties
    d = np.array([0.3, 0.1, 0.1, 0.8, -0.4])
    boot = bootstrap_means(d, 2000, seed=0)
    ties_included = np.count_nonzero(np.round(boot - d.mean(), 12) <= round(d.mean(), 12))
    less = paired_bootstrap(d, np.zeros(5), n_boot=2000, seed=0, alternative="less")
    assert less.p_value == (1 + ties_included) / 2001


def test_paired_bootstrap_agrees_with_the_t_test_on_a_large_sample():
    rng = np.random.default_rng(9)
    b = rng.random(300)
    a = b + 0.03 + rng.normal(0, 0.2, size=300)
    boot = paired_bootstrap(a, b, n_boot=10_000, seed=0)
    t = paired_t_test(a, b)
    assert boot.diff == pytest.approx(t.diff)
    assert boot.ci_low == pytest.approx(t.ci_low, abs=0.004)
    assert boot.ci_high == pytest.approx(t.ci_high, abs=0.004)
    assert boot.p_value == pytest.approx(t.p_value, abs=0.01)


def test_bootstrap_means_matches_a_direct_resample():
    values = np.array([0.0, 1.0, 3.0])
    rng = np.random.default_rng(4)
    direct = values[rng.integers(0, 3, size=(5, 3))].mean(axis=1)
    assert bootstrap_means(values, 5, seed=4).tolist() == direct.tolist()


def test_paired_result_flat_dict():
    flat = paired_t_test(A4, B4).as_dict()
    assert set(flat) == {"mean_a", "mean_b", "diff", "ci_low", "ci_high", "p_value", "n",
                         "method", "alternative", "alpha", "statistic", "df"}
    assert flat["method"] == "paired_t_test" and flat["df"] == 3


# ================================================================== budget metrics

# p1: within budget at both; p2: correct but over budget at 100; p3: wrong at 100.
BUDGET_ROWS = [
    ("p1", 100, True, 80), ("p1", 200, True, 150),
    ("p2", 100, True, 120), ("p2", 200, True, 180),
    ("p3", 100, False, 100), ("p3", 200, True, 190),
]
# B=100: Success = (1 + 0 + 0)/3, Accuracy = (1 + 1 + 0)/3, tokens = (80 + 120 + 100)/3 = 100
# B=200: Success = Accuracy = 1, tokens = (150 + 180 + 190)/3 = 520/3


def test_budget_metrics_hand_example():
    success = budgeted_success_at_b(BUDGET_ROWS, n_boot=500)
    accuracy = accuracy_at_b(BUDGET_ROWS, n_boot=500)
    tokens = mean_tokens_at_b(BUDGET_ROWS, n_boot=500)
    assert list(success) == [100, 200] and all(isinstance(v, Estimate) for v in success.values())
    assert success[100].value == pytest.approx(1 / 3) and success[200].value == 1.0
    assert accuracy[100].value == pytest.approx(2 / 3) and accuracy[200].value == 1.0
    assert tokens[100].value == pytest.approx(100.0) and tokens[200].value == pytest.approx(520 / 3)
    for est in (*success.values(), *accuracy.values(), *tokens.values()):
        assert est.ci_low <= est.value <= est.ci_high
        assert (est.n_problems, est.n_samples) == (3, 3)
    assert (success[200].ci_low, success[200].ci_high) == (1.0, 1.0)  # every problem succeeds
    assert tokens[100].ci_low >= 80 and tokens[100].ci_high <= 120


def test_budget_exactly_at_the_limit_counts_as_within():
    rows = [("p", 128, True, 128), ("q", 128, True, 129)]
    assert budgeted_success_at_b(rows)[128].value == 0.5
    assert accuracy_at_b(rows)[128].value == 1.0


def test_budget_samples_are_averaged_per_problem_first():
    rows = [
        ("p1", 100, True, 80), ("p1", 100, False, 50),  # p1: success 1/2
        ("p2", 100, True, 90),  # p2: success 1
    ]
    est = budgeted_success_at_b(rows)[100]
    assert est.value == pytest.approx(0.75)  # not the pooled 2/3
    assert (est.n_problems, est.n_samples) == (2, 3)
    assert mean_tokens_at_b(rows)[100].value == pytest.approx((65 + 90) / 2)


def test_budget_curve_points():
    curve = budget_curve(list(reversed(BUDGET_ROWS)), n_boot=500, seed=3)
    assert [type(p) for p in curve] == [BudgetPoint, BudgetPoint]
    assert [p.budget for p in curve] == [100, 200]
    first = curve[0]
    assert (first.success, first.accuracy, first.mean_tokens) == pytest.approx((1 / 3, 2 / 3, 100))
    assert first.success_ci_low <= first.success <= first.success_ci_high
    assert first.accuracy_ci_low <= first.accuracy <= first.accuracy_ci_high
    # same numbers as the single-metric functions with the same seed; row order is irrelevant
    single = budgeted_success_at_b(BUDGET_ROWS, n_boot=500, seed=3)[100]
    assert (first.success_ci_low, first.success_ci_high) == (single.ci_low, single.ci_high)
    assert first.as_dict()["mean_tokens"] == pytest.approx(100)
    assert budget_curve(BUDGET_ROWS, n_boot=500, seed=3) == curve


def test_budget_rows_as_mappings_and_unlimited_budget():
    rows = [{"problem_id": p, "budget": b, "correct": c, "tokens_used": t}
            for p, b, c, t in BUDGET_ROWS]
    rows += [{"problem_id": "p1", "budget": math.inf, "correct": True, "tokens_used": 9000},
             {"problem_id": "p2", "budget": math.inf, "correct": np.bool_(False),
              "tokens_used": np.int64(4000)}]
    curve = budget_curve(rows, n_boot=200)
    assert [p.budget for p in curve] == [100, 200, math.inf]
    assert curve[0].success == pytest.approx(1 / 3)
    last = curve[-1]
    assert (last.n_problems, last.success, last.accuracy, last.mean_tokens) == (2, 0.5, 0.5, 6500)


def test_budget_rows_rejected_with_clear_messages():
    with pytest.raises(ValueError, match="no rows"):
        budget_curve([])
    with pytest.raises(ValueError, match="row 1 has 3 values; expected 4"):
        budget_curve([("p", 1, True, 1), ("p", 1, True)])
    with pytest.raises(ValueError, match=r"lacks field\(s\) \['tokens_used'\]"):
        accuracy_at_b([{"problem_id": "p", "budget": 8, "correct": True}])
    with pytest.raises(ValueError, match="budget is None; use math.inf"):
        accuracy_at_b([("p", None, True, 3)])
    with pytest.raises(ValueError, match="budget must be a positive number"):
        accuracy_at_b([("p", -5, True, 3)])
    with pytest.raises(ValueError, match="correct must be a bool"):
        accuracy_at_b([("p", 5, 0.5, 3)])
    with pytest.raises(ValueError, match="tokens_used must be a finite number >= 0"):
        mean_tokens_at_b([("p", 5, True, float("nan"))])
    with pytest.raises(ValueError, match="tokens_used must be a finite number >= 0"):
        mean_tokens_at_b([("p", 5, True, -1)])
    with pytest.raises(TypeError, match="problem_id must be hashable"):
        accuracy_at_b([(["p"], 5, True, 3)])
    with pytest.raises(TypeError, match="must be a tuple"):
        accuracy_at_b(["p,5,True,3"])
    with pytest.raises(ValueError, match="alpha"):
        accuracy_at_b(BUDGET_ROWS, alpha=2)


# ================================================================== tool-integrated reasoning


def test_token_cost_effectiveness_hand_values():
    # (0.60 - 0.50) / 2000 tokens * 1000 = 0.05 accuracy per 1000 tokens
    assert token_cost_effectiveness(0.60, 0.50, 2000) == pytest.approx(0.05)
    assert token_cost_effectiveness(0.40, 0.50, 500) == pytest.approx(-0.2)
    assert token_cost_effectiveness(0.5, 0.5, 1234.5) == 0.0
    with pytest.raises(ValueError, match="mean_tokens must be > 0"):
        token_cost_effectiveness(0.6, 0.5, 0)
    with pytest.raises(ValueError, match="mean_tokens must be > 0"):
        token_cost_effectiveness(0.6, 0.5, -10)
    with pytest.raises(ValueError, match="mean_tokens must be a finite number"):
        token_cost_effectiveness(0.6, 0.5, float("nan"))
    with pytest.raises(ValueError, match="divide percentages by 100"):
        token_cost_effectiveness(60, 50, 2000)


SWEEP_ROWS = [
    # cap, problem, correct, tokens
    (512, "a", True, 400), (512, "b", True, 500), (512, "c", False, 512),
    (math.inf, "a", True, 900), (math.inf, "b", True, 1500), (math.inf, "c", True, 2100),
    (256, "a", True, 250), (256, "b", False, 256), (256, "c", False, 100),
]
# cap 256: acc 1/3, tokens (250+256+100)/3 = 202; 512: acc 2/3, tokens 1412/3; inf: 1, 1500


def test_thinking_budget_sweep_hand_example():
    curve = thinking_budget_sweep(SWEEP_ROWS, n_boot=500)
    assert all(isinstance(p, SweepPoint) for p in curve)
    assert [p.cap for p in curve] == [256, 512, math.inf]
    assert [p.accuracy for p in curve] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert [p.mean_tokens for p in curve] == pytest.approx([202, 1412 / 3, 1500])
    assert [p.n_problems for p in curve] == [3, 3, 3]
    for p in curve:
        assert p.ci_low <= p.accuracy <= p.ci_high
    assert (curve[-1].ci_low, curve[-1].ci_high) == (1.0, 1.0)
    assert thinking_budget_sweep(list(reversed(SWEEP_ROWS)), n_boot=500) == curve
    # Eff of the uncapped run against the 256-cap run as baseline: (1 - 1/3) / 1500 * 1000
    eff = token_cost_effectiveness(curve[-1].accuracy, curve[0].accuracy, curve[-1].mean_tokens)
    assert eff == pytest.approx(2 / 3 / 1.5)


def test_thinking_budget_sweep_bad_rows():
    with pytest.raises(ValueError, match="cap is None"):
        thinking_budget_sweep([(None, "a", True, 10)])
    with pytest.raises(ValueError, match="tokens must be a finite number"):
        thinking_budget_sweep([(64, "a", True, "ten")])
    with pytest.raises(ValueError, match="lacks field"):
        thinking_budget_sweep([{"cap": 64, "problem_id": "a", "correct": True,
                                "tokens_used": 10}])
