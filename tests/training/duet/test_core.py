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
    group_advantages,
    is_weight,
    loss_weights,
    neyman_allocation,
    observe_step,
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
    ({"s_hat": [-0.5, 1.0], "l_hat": [1.0, 1.0], "budget": 10.0}, "s_floor"),
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


def test_calibration_chi2_clips_degenerate_groups_at_the_floor():
    # App. A.4: mean of (s_hat / sigma - 1)^2, sigma clipped at a small floor so degenerate
    # groups (sigma = 0) count instead of dropping out.
    expect = ((1 / 1 - 1) ** 2 + (3 / 2 - 1) ** 2 + (5 / 0.01 - 1) ** 2) / 3
    assert calibration_chi2([1.0, 3.0, 5.0], [1.0, 2.0, 0.0]) == pytest.approx(expect)
    assert calibration_chi2([0.5, 0.0], [0.0, 0.0], floor=0.5) == pytest.approx((0 + 1) / 2)
    assert calibration_chi2([1.0, 2.0], [None, 4.0]) == pytest.approx((2 / 4 - 1) ** 2)
    assert calibration_chi2([1.0], [None]) is None
    with pytest.raises(ValueError, match="floor"):
        calibration_chi2([1.0], [1.0], floor=0.0)


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


def test_refloor_takes_every_sigma_so_degenerate_prompts_get_n_min():
    # App. A.3: the floor is the 5th percentile of sigma_obs across prompts; prompts whose groups
    # were all right or all wrong have sigma_obs = 0 and count too.
    state = PromptState(s_floor=0.01)
    sigmas = {"dead1": 0.0, "dead2": 0.0, **{f"q{i}": 0.5 + 0.1 * i for i in range(18)}}
    for key, value in sigmas.items():
        state.observe_sigma(key, value)
    expect = _linear_quantile(list(sigmas.values()), 0.05)  # h = 19 x 0.05 -> between the zeros
    assert expect == 0.0
    assert state.refloor() == expect and state.floor_frozen
    assert state.s_hat("dead1") == 0.0 and state.s_hat("never-seen") == 0.0
    assert state.s_hat("q3") == pytest.approx(0.8)
    # Eq. 4 with s_hat = 0 gives n_min at any lam; the budget goes to the others.
    keys = ["dead1", "q0", "dead2", "q9"]
    s_hat, lengths = [state.s_hat(k) for k in keys], [10.0, 12.0, 30.0, 8.0]
    alloc = neyman_allocation(s_hat, lengths, budget=400.0, n_min=2)
    expect_counts = [max(2, math.floor(sv / math.sqrt(alloc.lam * ln) + 0.5))
                     for sv, ln in zip(s_hat, lengths, strict=True)]
    assert alloc.counts == expect_counts
    assert alloc.counts[0] == alloc.counts[2] == 2
    cost = sum(c * ln for c, ln in zip(alloc.counts, lengths, strict=True))
    assert 400.0 - max(lengths) <= cost <= 400.0


def test_allocation_with_no_informative_prompt_gives_n_min_everywhere():
    alloc = neyman_allocation([0.0, 0.0], [10.0, 20.0], budget=100.0, n_min=2)
    assert alloc.counts == [2, 2] and alloc.cost == 60.0 and alloc.feasible and alloc.lam == 0.0
    warm = neyman_allocation([0.0, 0.0], [10.0, 20.0], budget=100.0, n_min=2, lam0=0.3)
    assert warm.counts == [2, 2] and warm.lam == 0.3  # nothing to solve: the warm start stays
    # the slot cap with a zero prompt: positive ones at the cap, the zero one at n_min
    capped = neyman_allocation([0.0, 1.0], [10.0, 10.0], budget=1000.0, n_min=2, n_max=8)
    assert capped.counts == [2, 8]


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


# ---------------------------------------------------------------------------------------------
# Phase 3 (Algorithm 1 lines 35-43) and Phase 4's lengths (lines 46-52), on a tiny batch


def _phase3_by_hand(rewards, counts, slots, aborted, p_abort, s_pre, scale="group"):
    """Algorithm 1 lines 38-42, written out: the baseline over all n_q allocated rollouts
    (aborted ones included), advantage (r - mean) / (sample std + 1e-4), then zero advantage
    and no tokens for aborted and unallocated rows, and w = 1 / (s_pre * p_abort) otherwise."""
    adv, keep, loss_adv = [0.0] * len(rewards), [False] * len(rewards), [0.0] * len(rewards)
    for g, n in enumerate(counts):
        group = [rewards[g * slots + j] for j in range(n)]
        mean = sum(group) / n
        std = math.sqrt(sum((x - mean) ** 2 for x in group) / (n - 1))
        for j in range(n):
            i = g * slots + j
            adv[i] = (group[j] - mean) / (std + 1e-4) if scale == "group" else group[j] - mean
            if not aborted[i]:
                keep[i] = True
                loss_adv[i] = adv[i] / (s_pre[g] * p_abort[i])
    return adv, keep, loss_adv


def test_phase3_aborted_rows_leave_the_loss_but_stay_in_the_baseline():
    slots, counts = 4, [3, 4, 2]
    # prompt 0: rows 0-2 (row 1 aborted, reward 0); prompt 1: rows 4-7 (row 5 aborted, row 6
    # eps-kept); prompt 2: rows 8-9; rows 3, 10, 11 are unallocated slots.
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    aborted = [False, True, False, False, False, True, False, False, False, False, False, False]
    p_abort = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.2, 1.0, 1.0, 1.0, 1.0, 1.0]
    s_pre = stratification_factors(counts, 0.05)
    for scale in ("group", "none"):
        out = loss_weights(rewards, counts, slots, aborted, p_abort, s_pre, scale=scale)
        adv, keep, loss_adv = _phase3_by_hand(rewards, counts, slots, aborted, p_abort, s_pre,
                                              scale)
        np.testing.assert_allclose(out.advantages, adv, rtol=1e-12, atol=1e-12)
        assert out.keep.tolist() == keep
        np.testing.assert_allclose(out.loss_advantages, loss_adv, rtol=1e-12, atol=1e-12)
    # the aborted reward is in prompt 0's baseline: mean 1/3, not the kept rollouts' 1/2
    out = loss_weights(rewards, counts, slots, aborted, p_abort, s_pre, scale="none")
    assert out.advantages[0] == pytest.approx(1.0 - 1.0 / 3.0)
    assert out.advantages[2] == pytest.approx(-1.0 / 3.0)
    assert out.weights[6] == pytest.approx(1.0 / (s_pre[1] * 0.2))  # eps-kept: 1 / eps
    assert out.weights[1] == out.weights[5] == 0.0 and out.loss_advantages[1] == 0.0
    # a dropped (degenerate) group takes all its rows out
    dropped = loss_weights(rewards, counts, slots, aborted, p_abort, s_pre,
                           dropped=[False, False, True])
    assert not dropped.keep[8:].any() and dropped.keep[:8].tolist() == keep[:8]


def test_phase3_degenerate_and_short_groups_have_zero_advantage():
    assert group_advantages([1.0, 1.0, 1.0, 0.0], [3], 4).tolist() == [0.0] * 4
    assert group_advantages([1.0, 0.0], [1], 2).tolist() == [0.0, 0.0]  # one rollout: no group
    with pytest.raises(ValueError, match="reward rows"):
        group_advantages([1.0, 0.0, 1.0], [2], 2)


def test_l_hat_comes_from_every_generated_rollout_and_the_window_from_natural_stops():
    state, quantiles = PromptState(l_cold=48.0), LengthQuantiles(max_len=48, window=64,
                                                                  refit_every=1)
    slots, counts, cap = 4, [4, 2], 48
    # prompt a: a trimmed rollout (12), an aborted one (stopped at K2 + G = 43), an eps-kept one
    # cut by the cap (48), a natural stop (20); prompt b: two natural stops; unallocated: 0.
    lengths = [12, 43, 48, 20, 30, 34, 0, 0]
    aborted = [False, True, False, False, False, False, False, False]
    keep = [True, False, True, True, True, True, False, False]
    advantages = [1.0, -1.0, -1.0, 1.0, 0.7, -0.7, 0.0, 0.0]
    seq_logps = {0: -5.0, 2: -20.0, 3: -8.0, 4: -9.0, 5: -11.0}
    sigmas = observe_step(state, quantiles, ["a", "b"], counts, slots, lengths=lengths,
                          aborted=aborted, keep=keep, advantages=advantages,
                          seq_logps=seq_logps, max_len=cap)
    # L_hat: every generated token counts, the aborted rollout's 43 included
    assert state.l_hat("a") == pytest.approx((12 + 43 + 48 + 20) / 4)
    assert state.l_hat("b") == pytest.approx((30 + 34) / 2)
    # K1/K2 window: not aborted and stopped below the cap
    assert sorted(quantiles.window) == [12, 20, 30, 34]
    # Eq. 3 over kept rows with log-probs
    assert sigmas["a"] == pytest.approx(statistics.stdev([1.0 * -5.0, -1.0 * -20.0, 1.0 * -8.0]))
    assert sigmas["b"] == pytest.approx(statistics.stdev([0.7 * -9.0, -0.7 * -11.0]))
    assert state.s_hat("a") == pytest.approx(sigmas["a"])


def test_budget_prices_what_the_abort_rule_generates():
    """With L_hat from every generated rollout, the allocation's planned tokens match what the
    step is expected to generate; L_hat from kept rollouts alone would plan for the short
    kept ones (10 tokens) and overspend 2.5x. Rollout lengths: a marker rollout trimmed at 10
    tokens, or no marker by the gate and aborted at 40, each with probability 1/2."""
    rng = np.random.default_rng(3)
    state, quantiles = PromptState(l_cold=48.0), LengthQuantiles(max_len=48)
    keys, slots, full = ["p", "q", "r"], 8, 4
    for _ in range(200):  # observe the policy for a while, 8 rollouts per prompt
        lengths, aborted = [], []
        for _ in keys:
            hit = rng.random(slots) < 0.5
            lengths += [10 if h else 40 for h in hit]
            aborted += [not h for h in hit]
        observe_step(state, quantiles, keys, [slots] * 3, slots, lengths=lengths,
                     aborted=aborted, keep=[not a for a in aborted],
                     advantages=[0.0] * len(lengths), seq_logps={}, max_len=48)
    l_hat = [state.l_hat(k) for k in keys]
    budget = 1.0 * full * sum(l_hat)
    alloc = neyman_allocation([1.0, 1.0, 1.0], l_hat, budget, n_min=2, n_max=slots)
    expected_spend = sum(n * 25.0 for n in alloc.counts)  # E[length] = (10 + 40) / 2
    assert expected_spend / budget == pytest.approx(1.0, abs=0.05)
    # L_hat is the mean generated length (25), not the kept rollouts' 10
    assert l_hat == pytest.approx([25.0] * 3, abs=1.5)
