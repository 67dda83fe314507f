"""Tests for the ratio-of-aggregates bootstrap (``eval.metrics.bootstrap_ratio_ci``) and the
``CI`` value type, against a brute-force percentile bootstrap, closed forms on tiny cases and
the delta-method standard error."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eval.metrics import CI, MAX_BOOT_CELLS, bootstrap_ci, bootstrap_ratio_ci


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default method), written out by hand."""
    h = (len(sorted_values) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


def _brute_force_ratio_ci(num, den, n_boot, alpha, seed):
    """One resample at a time in plain Python from one unchunked draw of the same generator."""
    idx = np.random.default_rng(seed).integers(0, len(num), size=(n_boot, len(num)))
    ratios = []
    for row in idx.tolist():
        d = sum(den[i] for i in row)
        if d > 0:
            ratios.append(sum(num[i] for i in row) / d)
    ratios.sort()
    return (sum(num) / sum(den), _percentile(ratios, alpha / 2), _percentile(ratios, 1 - alpha / 2))


@pytest.mark.parametrize("seed,alpha", [(0, 0.05), (42, 0.05), (7, 0.2)])
def test_ratio_ci_matches_a_brute_force_percentile_bootstrap(seed, alpha):
    rng = np.random.default_rng(100 + seed)
    den = rng.integers(0, 5, size=23).tolist()  # some zero denominators
    num = [int(rng.integers(0, d + 1)) for d in den]
    got = bootstrap_ratio_ci(num, den, n_boot=700, alpha=alpha, seed=seed)
    want = _brute_force_ratio_ci(num, den, 700, alpha, seed)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_ratio_ci_chunked_resampling_draws_the_same_resamples():
    # n * n_boot exceeds MAX_BOOT_CELLS, so resamples are drawn in several chunks
    n, n_boot, seed = 2500, 1000, 3
    assert n * n_boot > MAX_BOOT_CELLS
    rng = np.random.default_rng(11)
    den = rng.integers(1, 6, size=n).astype(float)
    num = rng.binomial(den.astype(int), 0.3).astype(float)
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))  # one unchunked draw
    ratios = num[idx].sum(axis=1) / den[idx].sum(axis=1)
    want = (num.sum() / den.sum(), *np.quantile(ratios, [0.025, 0.975]))
    assert bootstrap_ratio_ci(num, den, n_boot=n_boot, seed=seed) == pytest.approx(want, rel=1e-12)


def test_ratio_ci_is_a_ratio_of_sums_not_a_mean_of_ratios():
    num, den = [1, 9], [1, 10]  # per-unit rates 1.0 and 0.9 (mean 0.95); aggregate 10/11
    value, low, high = bootstrap_ratio_ci(num, den, n_boot=500)
    assert value == pytest.approx(10 / 11)
    assert low <= 10 / 11 <= high


def test_ratio_ci_tiny_case_closed_form():
    # units (1/1, 0/1): a resample of two units has ratio 0 (p=1/4), 1/2 (p=1/2) or 1 (p=1/4),
    # so with many resamples the 2.5% and 97.5% percentiles are exactly 0 and 1
    assert bootstrap_ratio_ci([1, 0], [1, 1], n_boot=4000, seed=5) == (0.5, 0.0, 1.0)
    # a single unit: every resample is that unit
    assert bootstrap_ratio_ci([3], [4]) == (0.75, 0.75, 0.75)


def test_ratio_ci_width_matches_the_delta_method():
    # se(R) ~ sqrt(mean((y - R x)^2) / n) / mean(x) for R = sum(y) / sum(x)
    rng = np.random.default_rng(1)
    n = 3000
    den = rng.integers(1, 10, size=n).astype(float)
    num = rng.binomial(den.astype(int), 0.4).astype(float)
    r = num.sum() / den.sum()
    se = math.sqrt(np.mean((num - r * den) ** 2) / n) / den.mean()
    value, low, high = bootstrap_ratio_ci(num, den, n_boot=2000, seed=0)
    assert value == pytest.approx(r)
    assert (high - low) / 2 == pytest.approx(1.96 * se, rel=0.1)


def test_ratio_ci_with_unit_denominators_is_the_mean_ci_on_the_same_resamples():
    values = np.random.default_rng(4).normal(size=40)
    ratio = bootstrap_ratio_ci(values, np.ones(40), n_boot=1000, seed=42)
    mean = bootstrap_ci(values, n_boot=1000, seed=42)
    assert ratio == pytest.approx(mean, rel=1e-12, abs=1e-12)


def test_ratio_ci_zero_denominators():
    # resamples made only of the 0/0 unit have no ratio and are left out; every other resample
    # has ratio exactly 1/2, so the interval collapses onto it
    assert bootstrap_ratio_ci([2, 0, 1], [4, 0, 2], n_boot=300) == (0.5, 0.5, 0.5)
    # nothing in any denominator: the ratio is undefined
    value, low, high = bootstrap_ratio_ci([0, 0], [0, 0])
    assert math.isnan(value) and math.isnan(low) and math.isnan(high)


def test_ratio_ci_is_deterministic_for_a_seed():
    num, den = [1, 2, 0, 3, 1, 1], [2, 2, 1, 4, 3, 1]
    a = bootstrap_ratio_ci(num, den, n_boot=200, seed=9)
    assert a == bootstrap_ratio_ci(num, den, n_boot=200, seed=9)
    assert a != bootstrap_ratio_ci(num, den, n_boot=200, seed=10)


@pytest.mark.parametrize("num,den,kwargs,match", [
    ([], [], {}, "non-empty"),
    ([1, 2], [1], {}, "differ in length"),
    ([1, float("nan")], [1, 1], {}, "NaN"),
    ([1, 1], [1, -1], {}, ">= 0"),
    ([1, 1], [1, 1], {"alpha": 0.0}, "alpha"),
    ([1, 1], [1, 1], {"n_boot": 0}, "n_boot"),
])
def test_ratio_ci_rejects_bad_input(num, den, kwargs, match):
    with pytest.raises(ValueError, match=match):
        bootstrap_ratio_ci(num, den, **kwargs)


# ------------------------------------------------------------------ CI


def test_ci_half_width_and_table_cell():
    ci = CI(0.5, 0.4, 0.7)
    assert ci.half_width == pytest.approx(0.15)
    assert ci.fmt() == "0.50 ± 0.15"
    assert ci.fmt(100, 1) == "50.0 ± 15.0"
    assert ci.fmt(100, 0, suffix="%") == "50% ± 15"
    assert CI(float("nan"), float("nan"), float("nan")).fmt(100, 1) == "nan ± nan"


def test_ci_wraps_the_tuple_forms():
    values = [0.0, 1.0, 1.0, 0.0, 1.0]
    ci = CI(*bootstrap_ci(values, n_boot=500, seed=1))
    assert (ci.value, ci.low, ci.high) == bootstrap_ci(values, n_boot=500, seed=1)
    assert ci.value == pytest.approx(0.6)
