"""DUET controller pieces (training/duet/core.py) against the paper (DUET §3, Algorithm 1 in
App. A.10, Theorems 1 and 3): closed forms, literal transcriptions and Monte Carlo."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest

from training.duet import (
    GateParams,
    LengthQuantiles,
    PromptState,
    RolloutGate,
    answer_marker,
    calibration_chi2,
    coin_draws,
    is_weight,
    neyman_allocation,
    stratification_factors,
    within_step_sigma,
)

# ---------------------------------------------------------------------------------------------
# Theorem 1 (App. A.2.3)


def _random_problem(rng: np.random.Generator):
    m = int(rng.integers(2, 60))
    sigma = rng.uniform(0.01, 5.0, m)
    lengths = rng.uniform(20.0, 3000.0, m)
    budget = float(rng.uniform(0.5, 20.0) * lengths.sum())
    return sigma, lengths, budget


@pytest.mark.parametrize("seed", range(20))
def test_theorem1_continuous_optimum_closed_form(seed):
    rng = np.random.default_rng(seed)
    sigma, lengths, budget = _random_problem(rng)
    s_norm = float(np.sum(sigma * np.sqrt(lengths)))  # S = sum_k sigma_k sqrt(L_k)
    n_star = (budget / s_norm) * sigma / np.sqrt(lengths)
    v_star = s_norm**2 / budget
    # A warm start far from the answer (lam moved by orders of magnitude) must not matter.
    for lam0 in (None, 1e-6 * (s_norm / budget) ** 2, 1e4 * (s_norm / budget) ** 2):
        alloc = neyman_allocation(sigma, lengths, budget, n_min=0, lam0=lam0, rounding=False)
        n = np.asarray(alloc.counts)
        np.testing.assert_allclose(n, n_star, rtol=1e-6)
        assert float(np.sum(sigma**2 / n)) == pytest.approx(v_star, rel=1e-6)
        assert alloc.lam == pytest.approx((s_norm / budget) ** 2, rel=1e-6)
        assert alloc.lam * budget == pytest.approx(v_star, rel=1e-6)  # V* = lam* B
        assert alloc.iterations >= 10


def test_theorem1_beats_uniform_allocation_at_matched_budget():
    rng = np.random.default_rng(7)
    sigma, lengths, budget = _random_problem(rng)
    alloc = neyman_allocation(sigma, lengths, budget, n_min=0, rounding=False)
    uniform = budget / lengths.sum()
    v_unif = float(np.sum(sigma**2 / uniform))
    v_opt = float(np.sum(sigma**2 / np.asarray(alloc.counts)))
    ratio = (np.sum(sigma**2) * lengths.sum()) / np.sum(sigma * np.sqrt(lengths)) ** 2
    assert v_unif / v_opt == pytest.approx(ratio, rel=1e-6)  # the corollary's Cauchy-Schwarz
    assert v_unif > v_opt


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("n_min", [1, 2, 4])
def test_rounded_allocation_closes_budget_within_one_rollout(seed, n_min):
    rng = np.random.default_rng(1000 + seed)
    sigma, lengths, _ = _random_problem(rng)
    budget = float(rng.uniform(1.2 * n_min, 12.0) * lengths.sum())
    lam0 = float(rng.uniform(1e-9, 1e3))
    alloc = neyman_allocation(sigma, lengths, budget, n_min=n_min, lam0=lam0)
    counts = np.asarray(alloc.counts)
    assert all(isinstance(c, int) for c in alloc.counts)
    assert counts.min() >= n_min
    cost = float(np.dot(counts, lengths))
    assert cost <= budget
    assert budget - cost <= lengths.max()
    assert alloc.feasible and alloc.cost == pytest.approx(cost)
    # Eq. 4, transcribed: every count comes from the one returned lam (half-up rounding).
    expect = [max(n_min, math.floor(s / math.sqrt(alloc.lam * ln) + 0.5))
              for s, ln in zip(sigma, lengths, strict=True)]
    assert list(alloc.counts) == expect


def test_allocation_when_n_min_alone_exceeds_budget():
    alloc = neyman_allocation([1.0, 3.0], [100.0, 200.0], budget=500.0, n_min=2)
    assert alloc.counts == [2, 2] and not alloc.feasible and alloc.cost == 600.0


def test_allocation_warm_start_runs_papers_ten_steps_when_enough():
    sigma, lengths = [0.5, 1.0, 2.0, 4.0], [300.0, 200.0, 500.0, 100.0]
    first = neyman_allocation(sigma, lengths, 8000.0, n_min=1)
    again = neyman_allocation(sigma, lengths, 8000.0, n_min=1, lam0=first.lam)
    assert again.iterations == 10 and again.counts == first.counts


@pytest.mark.parametrize("kwargs, match", [
    ({"s_hat": [0.0, 1.0], "l_hat": [1.0, 1.0], "budget": 10.0}, "s_floor"),
    ({"s_hat": [1.0], "l_hat": [0.0], "budget": 10.0}, "l_hat"),
    ({"s_hat": [1.0, 2.0], "l_hat": [1.0], "budget": 10.0}, "equal-length"),
    ({"s_hat": [1.0], "l_hat": [1.0], "budget": 0.0}, "budget"),
    ({"s_hat": [1.0], "l_hat": [1.0], "budget": 10.0, "lam0": -1.0}, "lam0"),
])
def test_allocation_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        neyman_allocation(**kwargs)


def test_stratification_factors_literal():
    assert stratification_factors([1, 2, 3, 10]) == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert stratification_factors([1, 100], eps_pre=0.05) == pytest.approx([0.05, 1.0])
    with pytest.raises(ValueError, match="positive"):
        stratification_factors([0, 2])


@pytest.mark.parametrize("aborted, p, s_pre, expect", [
    (False, 1.0, 1.0, 1.0), (False, 0.05, 1.0, 20.0), (False, 1.0, 0.25, 4.0),
    (False, 0.1, 0.5, 20.0), (True, 1.0, 1.0, 0.0), (True, 0.05, 0.5, 0.0),
])
def test_is_weight_eq6(aborted, p, s_pre, expect):
    assert is_weight(aborted, p, s_pre) == pytest.approx(expect)


def test_calibration_chi2():
    assert calibration_chi2([1.0, 3.0, 5.0], [1.0, 2.0, 0.0]) == pytest.approx(0.125)
    assert calibration_chi2([1.0], [None]) is None


# ---------------------------------------------------------------------------------------------
# Online state (Eq. 3, Algorithm 1 lines 4, 46-55)


def test_within_step_sigma_eq3():
    adv, lps, kept = [1.0, -0.5, 2.0, 0.3], [-3.0, -10.0, -1.0, -7.0], [True, True, False, True]
    expect = statistics.stdev([1.0 * -3.0, -0.5 * -10.0, 0.3 * -7.0])
    assert within_step_sigma(adv, lps, kept) == pytest.approx(expect)
    assert within_step_sigma(adv, lps, [True, False, False, False]) is None


def test_prompt_state_running_means_floor_and_resume():
    state = PromptState(s_floor=0.01, l_cold=128.0)
    assert state.s_hat("q") == 0.01 and state.l_hat("q") == 128.0  # cold prompt
    sigmas = [0.5, 0.2, 0.0, 0.9]
    for s in sigmas:
        state.observe_sigma("q", s)
    assert state.s_hat("q") == pytest.approx(sum(sigmas) / 4)
    state.observe_sigma("tiny", 0.001)
    assert state.s_hat("tiny") == 0.01  # max(s_floor, sigma_obs)
    state.observe_lengths("q", [10, 20])
    state.observe_lengths("q", [60])
    assert state.l_hat("q") == pytest.approx(30.0)
    state.observe_lengths("r", [50])
    assert state.l_hat("unseen") == pytest.approx(40.0)  # mean of observed prompts' L_hat
    restored = PromptState()
    restored.load_state_dict(json.loads(json.dumps(state.state_dict())))
    assert restored.state_dict() == state.state_dict()
    assert restored.s_hat("q") == state.s_hat("q") and restored.l_hat("r") == 50.0


def test_prompt_state_refloor_is_fifth_percentile_then_frozen():
    state = PromptState(s_floor=0.01)
    values = list(np.linspace(0.1, 2.0, 21))
    for i, v in enumerate(values):
        state.observe_sigma(i, float(v))
    # p5 of 21 evenly spaced points (linear interpolation): 0.1 + 0.05 * 20 * step
    assert state.refloor() == pytest.approx(0.1 + 0.05 * 20 * (1.9 / 20))
    state.observe_sigma("late", 0.0001)
    assert state.refloor() == pytest.approx(0.195)  # frozen


def _linear_quantile(values, q):
    x = sorted(values)
    h = (len(x) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(x) - 1)
    return x[lo] + (h - lo) * (x[hi] - x[lo])


def test_length_quantiles_cold_start_refit_cadence_and_window():
    k = LengthQuantiles(max_len=1000, window=50, refit_every=10)
    assert (k.k1, k.k2) == (300, 700)
    rng = np.random.default_rng(3)
    seen = []
    for step in range(1, 25):
        lengths = [int(x) for x in rng.integers(20, 900, 7)]
        seen += lengths
        k.observe(lengths)
        refit = k.end_step(step)
        assert refit == (step % 10 == 0)
        if step < 10:
            assert (k.k1, k.k2) == (300, 700)
        if refit:
            window = seen[-50:]
            assert k.k1 == round(_linear_quantile(window, 0.3))
            assert k.k2 == round(_linear_quantile(window, 0.8))
    again = LengthQuantiles(max_len=1000)
    again.load_state_dict(json.loads(json.dumps(k.state_dict())))
    assert again.state_dict() == k.state_dict()


# ---------------------------------------------------------------------------------------------
# The abort rule (Algorithm 1 lines 11-33) on scripted token streams

MARK = -1


def _run(params, stream_len, marker_at=None, u=0.99, tail_marker=None):
    """Drive a gate over a scripted stream of ``stream_len`` tokens whose ``marker_at``-th
    token (1-based) completes the answer marker; the stream ends naturally after its last."""
    tokens = [0] * stream_len
    if marker_at is not None:
        tokens[marker_at - 1] = MARK
    gate = RolloutGate(params, tail_marker or (lambda tail: MARK in tail), u)
    length = stream_len
    for t in range(1, stream_len + 1):
        if gate.check(t, lambda n, t=t: tokens[max(0, t - n):t]):
            length = t
            break
    return gate, length


P = GateParams(k1=16, k2=64, grace=10, poll_every=8, eps_abort=0.1)


@pytest.mark.parametrize("marker_at, detected", [(24, 24), (40, 40), (21, 24), (3, 16)])
def test_marker_stops_at_detection_plus_grace(marker_at, detected):
    gate, length = _run(P, 500, marker_at=marker_at)
    assert gate.tau == detected and length == detected + P.grace == gate.stopped_at
    assert not gate.aborted and not gate.coin_drawn and gate.p_abort == 1.0


def test_marker_outside_the_tail_is_not_seen():
    params = GateParams(k1=16, k2=64, grace=10, poll_every=8, eps_abort=0.1, tail_tokens=4)
    gate, length = _run(params, 500, marker_at=3, u=0.5)
    assert not gate.marker_seen and gate.aborted and length == 64 + 10


def test_no_marker_aborts_at_k2_plus_grace_with_coin_recorded():
    gate, length = _run(P, 500, u=0.5)
    assert gate.coin_drawn and gate.aborted and length == gate.stopped_at == P.k2 + P.grace


def test_eps_kept_rollout_runs_to_natural_eos_even_if_marker_comes_later():
    gate, length = _run(P, 300, u=0.05)  # u < eps: kept
    assert gate.coin_drawn and not gate.aborted and gate.stopped_at is None and length == 300
    assert gate.p_abort == 0.1 and is_weight(gate.aborted, gate.p_abort, 1.0) == pytest.approx(10)
    gate, length = _run(P, 300, marker_at=120, u=0.05)  # marker after the coin: no trim
    assert gate.stopped_at is None and length == 300 and not gate.aborted


def test_short_rollout_ends_naturally_before_any_gate():
    gate, length = _run(P, 50)
    assert length == 50 and gate.stopped_at is None and not gate.coin_drawn


def test_marker_between_polls_before_gate_is_caught_at_next_poll():
    # K2 + G = 74: a marker at token 70 is seen at the poll t=72, before the coin.
    gate, length = _run(P, 500, marker_at=70)
    assert gate.tau == 72 and not gate.coin_drawn and length == 82


def test_seeded_coins_reproduce_outcomes():
    params = GateParams(k1=4, k2=8, grace=2, poll_every=2, eps_abort=0.5)

    def outcomes(seed):
        draws = coin_draws(seed, step=3, count=64)
        return [_run(params, 40, u=u)[0].aborted for u in draws]

    assert outcomes(11) == outcomes(11)
    assert outcomes(11) != outcomes(12)
    assert 10 < sum(outcomes(11)) < 54


def test_gate_rejects_bad_parameters():
    with pytest.raises(ValueError, match="eps_abort"):
        GateParams(k1=1, k2=2, eps_abort=0.0)
    with pytest.raises(ValueError, match="K1 <= K2"):
        GateParams(k1=5, k2=2)


# ---------------------------------------------------------------------------------------------
# Theorem 3 (App. A.2.6): Monte Carlo unbiasedness of the eps-keep IS correction


def test_theorem3_is_weighted_estimator_is_unbiased_and_dropping_is_biased():
    rng = np.random.default_rng(2026)
    params = GateParams(k1=8, k2=24, grace=4, poll_every=4, eps_abort=0.2)
    n, p_marker = 20000, 0.6
    values, weights, kept_plain, has_marker = [], [], [], []
    coins = rng.random(n)
    for i in range(n):
        marker = rng.random() < p_marker
        # Marker rollouts answer early (value ~ 1 + noise); marker-less ones are the slow,
        # hard ones (value ~ -2 + noise), run long, and are what the abort gate sees.
        if marker:
            at = int(rng.integers(1, 25))
            stream_len = int(rng.integers(at, 60))
            z = 1.0 + rng.normal(0, 0.5)
        else:
            at, stream_len, z = None, int(rng.integers(30, 60)), -2.0 + rng.normal(0, 0.5)
        gate, _ = _run(params, stream_len, marker_at=at, u=float(coins[i]))
        values.append(z)
        weights.append(is_weight(gate.aborted, gate.p_abort, 1.0))
        kept_plain.append(0.0 if gate.aborted else 1.0)
        has_marker.append(gate.marker_seen)
    z, w = np.asarray(values), np.asarray(weights)
    natural = p_marker * 1.0 + (1 - p_marker) * -2.0
    h = w * z
    se = h.std(ddof=1) / math.sqrt(n)
    assert abs(h.mean() - natural) < 4 * se
    # Dropping the marker-less rollouts (no IS reweighting) is visibly biased.
    kept = np.asarray(kept_plain)
    drop_mean = float((kept * z).sum() / kept.sum())
    assert abs(drop_mean - natural) > 20 * se
    marker_only = float(z[np.asarray(has_marker)].mean())
    assert abs(marker_only - natural) > 20 * se


# ---------------------------------------------------------------------------------------------
# Markers per answer format


@pytest.mark.parametrize("fmt, text, fired", [
    ("boxed", "so the answer is \\boxed{42}", True),
    ("boxed", "so the answer is \\boxed{\\frac{1}{2}}", True),
    ("boxed", "so the answer is \\boxed{\\frac{1}{2}", False),
    ("boxed", "so the answer is \\boxed{", False),
    ("boxed", "no answer yet", False),
    ("tir", "<think>x</think><answer>7</answer>", True),
    ("tir", "<think>x</think><answer>7", False),
    ("tir", "<think>x</think><answer> </answer>", False),
    ("sxs", "<think>a</think><speak>it is \\boxed{3}</speak>", True),
    ("sxs", "<think>a</think><speak>it is \\boxed{3}", False),
    ("sxs", "<think>\\boxed{3}</think><speak>it is three</speak>", False),
])
def test_answer_markers(fmt, text, fired):
    assert answer_marker(fmt)(text) is fired


def test_answer_marker_rejects_unknown_format():
    with pytest.raises(ValueError, match="answer_format"):
        answer_marker("latex")


def test_allocation_cap_n_max():
    sigma, lengths = [0.1, 1.0, 5.0], [100.0, 100.0, 100.0]
    alloc = neyman_allocation(sigma, lengths, budget=1200.0, n_min=1, n_max=6)
    assert max(alloc.counts) <= 6 and min(alloc.counts) >= 1
    assert 1200.0 - 100.0 <= alloc.cost <= 1200.0
    roomy = neyman_allocation(sigma, lengths, budget=5000.0, n_min=1, n_max=6)
    assert roomy.counts == [6, 6, 6]
