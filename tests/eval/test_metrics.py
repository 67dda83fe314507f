"""Tests for eval/metrics.py against hand-computed values (and a brute-force pass@k check)."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest

from eval.metrics import (
    SampleSummary,
    avg_at_k,
    bootstrap_ci,
    dataset_pass_at_k,
    maj_at_k,
    majority_correct,
    majority_vote,
    pass_at_k,
    summarize,
)

# ------------------------------------------------------------------ pass@k


@pytest.mark.parametrize("n,c,k,expected", [
    (5, 2, 2, 1 - comb(3, 2) / comb(5, 2)),  # 0.7
    (5, 2, 1, 0.4),
    (4, 0, 1, 0.0),
    (4, 0, 4, 0.0),
    (4, 4, 1, 1.0),
    (4, 4, 4, 1.0),
    (10, 3, 8, 1.0),  # n - c < k: every k-subset contains a correct sample
    (1, 1, 1, 1.0),
    (1, 0, 1, 0.0),
])
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_example_from_the_brief():
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)


def test_pass_at_k_matches_brute_force_over_subsets():
    flags = [1, 0, 0, 1, 0, 0, 1]
    n, c = len(flags), sum(flags)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(flags, k))
        brute = sum(any(s) for s in subsets) / len(subsets)
        assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


def test_pass_at_k_is_stable_for_large_n():
    # C(1000, 500) overflows floats; the product form does not.
    value = pass_at_k(1000, 10, 500)
    assert 0.99 < value <= 1.0
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001)


def test_pass_at_k_rejects_bad_arguments():
    with pytest.raises(ValueError, match="exceeds the number of samples"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="exceeds n"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="k must be >= 1"):
        pass_at_k(3, 1, 0)
    with pytest.raises(TypeError, match="int"):
        pass_at_k(3.0, 1, 1)  # type: ignore[arg-type]


def test_dataset_pass_at_k():
    assert dataset_pass_at_k([5, 4, 4], [2, 0, 4], 2) == pytest.approx((0.7 + 0.0 + 1.0) / 3)
    with pytest.raises(ValueError, match="problem 1"):
        dataset_pass_at_k([5, 1], [2, 0], 2)
    with pytest.raises(ValueError, match="empty"):
        dataset_pass_at_k([], [], 1)


# ------------------------------------------------------------------ avg@k


def test_avg_at_k_means_per_problem_first():
    assert avg_at_k([[1, 0, 0, 0], [1, 1, 1, 1]]) == pytest.approx((0.25 + 1.0) / 2)
    # ragged rows: per-problem means, not a pooled mean (pooled would be 2/5)
    assert avg_at_k([[1], [0, 0, 1, 0]]) == pytest.approx((1.0 + 0.25) / 2)
    assert avg_at_k([[True, False]]) == 0.5
    with pytest.raises(ValueError, match="problem 1 has no samples"):
        avg_at_k([[1], []])
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        avg_at_k([[2]])
    with pytest.raises(ValueError, match="empty"):
        avg_at_k([])


# ------------------------------------------------------------------ maj@k


def test_majority_vote_ties_go_to_first_seen():
    assert majority_vote(["3", "5", "5", "3"]) == "3"
    assert majority_vote(["5", "3", "3", "5"]) == "5"
    assert majority_vote([None, "7", None]) == "7"
    assert majority_vote([None, "", "  "]) is None
    assert majority_vote(["x = 1", "x  =  1", "2"]) == "x = 1"  # whitespace-normalised class


def test_maj_at_k_is_the_graded_verdict_of_the_majority_answer():
    answers = [
        ["3", "5", "5"],  # majority 5, graded right
        ["3", "3", "5"],  # majority 3, graded wrong
        [None, None, "4"],  # only one vote, graded right
        [None, None, None],  # no answer: wrong
        ["1/2", "0.5", "0.5"],  # majority "0.5": its first sample's verdict counts
    ]
    correct = [[False, True, True], [False, False, True], [False, False, True],
               [False, False, False], [True, False, True]]
    # by hand: 1 + 0 + 1 + 0 + 0 (the first "0.5" sample was graded wrong) = 2 of 5
    assert maj_at_k(answers, correct) == pytest.approx(2 / 5)
    assert [majority_correct(a, c) for a, c in zip(answers, correct)] == [
        True, False, True, False, False]
    # first k=1 samples only: 3 (wrong), 3 (wrong), nothing, nothing, 1/2 (right)
    assert maj_at_k(answers, correct, k=1) == pytest.approx(1 / 5)
    with pytest.raises(ValueError, match="lists of verdicts"):
        maj_at_k(answers, correct[:1])
    with pytest.raises(ValueError, match="fewer than k"):
        maj_at_k(answers, correct, k=4)
    with pytest.raises(ValueError, match="verdicts"):
        majority_correct(["1"], [True, False])


# ------------------------------------------------------------------ bootstrap


def test_bootstrap_ci_contains_mean_and_is_deterministic():
    rng = np.random.default_rng(123)
    scores = rng.random(200) < 0.3
    mean, lo, hi = bootstrap_ci(scores.astype(float), n_boot=2000, seed=7)
    assert mean == pytest.approx(scores.mean())
    assert lo < mean < hi
    assert 0.0 <= lo and hi <= 1.0
    assert bootstrap_ci(scores.astype(float), n_boot=2000, seed=7) == (mean, lo, hi)
    assert bootstrap_ci(scores.astype(float), n_boot=2000, seed=8) != (mean, lo, hi)
    # about +-1.96 standard errors for a proportion
    se = np.sqrt(mean * (1 - mean) / scores.size)
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.08)


def test_bootstrap_ci_narrower_interval_for_larger_alpha():
    scores = [0, 1, 1, 0, 1, 0, 0, 1, 1, 1]
    _, lo95, hi95 = bootstrap_ci(scores, alpha=0.05)
    _, lo50, hi50 = bootstrap_ci(scores, alpha=0.5)
    assert lo95 <= lo50 <= hi50 <= hi95 and (hi50 - lo50) < (hi95 - lo95)


def test_bootstrap_ci_degenerate_and_bad_input():
    assert bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0, 1.0)
    assert bootstrap_ci([0.25]) == (0.25, 0.25, 0.25)
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_ci([])
    with pytest.raises(ValueError, match="alpha"):
        bootstrap_ci([0, 1], alpha=1.5)
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci([0.0, float("nan")])


def test_bootstrap_ci_large_input_is_chunked():
    scores = (np.arange(50_000) % 4 == 0).astype(float)  # 25% correct
    mean, lo, hi = bootstrap_ci(scores, n_boot=100)
    assert mean == 0.25 and lo < 0.25 < hi and hi - lo < 0.02


# ------------------------------------------------------------------ summarize


def test_summarize_rows():
    rows = [
        ("p1", 0, True), ("p1", 1, False), ("p1", 2, False), ("p1", 3, True),  # 2/4
        ("p2", 0, False), ("p2", 1, False), ("p2", 2, False), ("p2", 3, False),  # 0/4
        ("p3", 3, True), ("p3", 2, True), ("p3", 1, True), ("p3", 0, True),  # 4/4
    ]
    s = summarize(rows, n_boot=500, seed=1)
    assert isinstance(s, SampleSummary)
    assert (s.n_problems, s.min_samples, s.max_samples) == (3, 4, 4)
    assert s.avg_at_k == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert sorted(s.pass_at_k) == [1, 2, 3, 4]
    assert s.pass_at_k[1] == pytest.approx(s.avg_at_k)
    assert s.pass_at_k[2] == pytest.approx((1 - comb(2, 2) / comb(4, 2) + 0 + 1) / 3)
    assert s.pass_at_k[4] == pytest.approx(2 / 3)
    assert s.ci_low <= s.avg_at_k <= s.ci_high
    flat = s.as_dict()
    assert flat["pass@4"] == pytest.approx(2 / 3) and flat["n_problems"] == 3
    # row order does not change anything, CI included
    assert summarize(list(reversed(rows)), n_boot=500, seed=1) == s


def test_summarize_uneven_samples_and_duplicates():
    rows = [("a", 0, 1), ("a", 1, 0), ("b", 0, 1)]
    s = summarize(rows)
    assert (s.min_samples, s.max_samples) == (1, 2)
    assert sorted(s.pass_at_k) == [1]
    with pytest.raises(ValueError, match="duplicate grade for problem 'a' sample 0"):
        summarize([("a", 0, True), ("a", 0, False)])
    with pytest.raises(ValueError, match="no rows"):
        summarize([])
