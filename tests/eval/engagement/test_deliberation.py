"""Tests for eval/engagement/deliberation.py: the §5.1.1 task model, EP vs Step timing,
Q-learning reaching the brute-force optimum, and the direction of Table 1 with CIs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from eval.engagement import deliberation as D
from eval.engagement.core import Intervention, run_episode

# A small single-task configuration whose optimal mode depends on both urgency and difficulty
# (the time cost makes easy tasks prefer the fast mode); the best mode beats the runner-up by
# >= 0.11 expected utility in every cell.
SMALL = D.DeliberationConfig(
    slack_choices=(2, 4, 7), urgency_edges=(3, 5), mode_durations=(1, 3, 6),
    mode_qualities=(0.5, 0.9, 0.99), kappa=6.0, time_cost=0.15, alpha=None, epsilon=1.0,
    seed=3)


def brute_force_values(cfg, slack, lo, hi):
    """Expected utility of each mode for a task with this slack and difficulty ~ U[lo, hi),
    by direct numerical integration of the success model of §5.1.1."""
    d = np.linspace(lo, hi, 4001)
    values = []
    for q, dur in zip(cfg.mode_qualities, cfg.mode_durations, strict=True):
        if dur <= slack:  # answer in time: +reward w.p. p, -penalty otherwise; pay dur seconds
            p = np.mean(q ** (1 + cfg.kappa * d))
            values.append(p * cfg.reward - (1 - p) * cfg.penalty - cfg.time_cost * dur)
        else:  # the deadline passes first: timeout after `slack` seconds
            values.append(-cfg.penalty - cfg.time_cost * slack)
    return np.array(values)


def test_small_configuration_has_a_difficulty_dependent_optimum():
    edges = (0.0, 1 / 3, 2 / 3, 1.0)
    best = {(s, b): int(np.argmax(brute_force_values(SMALL, s, edges[b], edges[b + 1])))
            for s in SMALL.slack_choices for b in range(3)}
    assert best[(7, 0)] != best[(7, 2)] and len(set(best.values())) == 3


def test_q_learning_reaches_the_brute_force_optimal_mode_in_every_cell():
    agent = D.train(SMALL, D.EP, episodes=30_000)
    edges = (0.0, 1 / 3, 2 / 3, 1.0)
    for slack in SMALL.slack_choices:
        for b in range(3):
            values = brute_force_values(SMALL, slack, edges[b], edges[b + 1])
            s = (D.urgency_bin(SMALL, slack), b)
            assert agent.greedy(s) == int(np.argmax(values)), (slack, b, agent.q[s], values)
            np.testing.assert_allclose(agent.q[s], values, atol=0.15)


def test_step_training_optimum_ignores_durations():
    # under Step timing nothing costs time, so the highest-quality mode is optimal everywhere
    cfg = D.with_overrides(SMALL, time_cost=0.0)
    agent = D.train(cfg, D.STEP, episodes=6_000)
    assert {agent.greedy(s) for s in agent.q} == {2}


def test_success_probability_is_the_literal_formula():
    cfg = D.SINGLE_TASK
    for m, q in enumerate(cfg.mode_qualities):
        for d in (0.0, 0.25, 0.9):
            assert D.success_probability(cfg, m, d) == pytest.approx(q ** (1 + cfg.kappa * d))


class Fixed:
    """Deliberate with one mode whenever a task opens; otherwise do nothing."""

    def __init__(self, mode):
        self.mode = mode
        self.seen = []

    def reset(self, seed):
        self.seen = []

    def act(self, tick, events, utility):
        self.seen.extend((tick, e.kind, dict(e.payload)) for e in events)
        opened = any(e.kind == D.TASK for e in events)
        return (Intervention(D.DELIBERATE, {"mode": self.mode}),) if opened else ()

    def finish(self, tick, events, utility):
        self.seen.extend((tick, e.kind, dict(e.payload)) for e in events)


def one_task(slack, timing, mode, cfg=D.SINGLE_TASK):
    cfg = D.with_overrides(cfg, slack_choices=(slack,))
    env, agent = D.DeliberationEnv(cfg, timing), Fixed(mode)
    ep = run_episode(env, agent, seed=1, horizon=env.horizon)
    return env, agent, ep


def test_ep_deliberation_runs_for_its_duration_and_answers_at_completion():
    env, agent, ep = one_task(slack=10, timing=D.EP, mode=3)  # 6 s, fits
    kinds = [(t, k) for t, k, _ in agent.seen]
    assert kinds == [(0, D.TASK), (6, D.ANSWER)]
    assert ep.ticks == 6 and env.clock == 6 and env.outcomes[0] in ("success", "failure")


def test_ep_deliberation_longer_than_the_slack_times_out_at_the_deadline():
    env, agent, ep = one_task(slack=4, timing=D.EP, mode=4)  # 9 s > 4 s
    assert [(t, k) for t, k, _ in agent.seen] == [(0, D.TASK), (4, D.TIMEOUT)]
    assert env.outcomes == [D.TIMEOUT] and ep.utilities == (0.0, 0.0, 0.0, -1.0)


def test_step_deliberation_is_instantaneous_and_never_times_out():
    env, agent, _ = one_task(slack=2, timing=D.STEP, mode=4)
    assert [(t, k) for t, k, _ in agent.seen] == [(0, D.TASK), (1, D.ANSWER)]
    assert env.clock == 0 and env.outcomes[0] != D.TIMEOUT


def test_sequential_overrun_expires_later_tasks_on_the_spot():
    cfg = D.with_overrides(D.SEQUENTIAL, tasks_per_episode=3, deadline_gaps=(3,))
    env, agent = D.DeliberationEnv(cfg, D.EP), Fixed(4)  # 9 s per task; deadlines 3, 6, 9
    run_episode(env, agent, seed=0, horizon=env.horizon)
    # task 0 times out at 3 s; task 1 (deadline 6) opens at 3 s and times out at 6 s; task 2
    # (deadline 9) opens at 6 s and times out at 9 s
    assert [(t, k, p.get("index")) for t, k, p in agent.seen] == [
        (0, D.TASK, 0), (3, D.TIMEOUT, 0), (3, D.TASK, 1), (6, D.TIMEOUT, 1), (6, D.TASK, 2),
        (9, D.TIMEOUT, 2)]
    assert [p["slack"] for _, k, p in agent.seen if k == D.TASK] == [3, 3, 3]


def test_bad_mode_is_rejected_with_the_valid_range():
    env = D.DeliberationEnv(D.SINGLE_TASK, D.EP)
    env.reset(0)
    with pytest.raises(ValueError, match=r"mode in 0\.\.4"):
        env.tick((Intervention(D.DELIBERATE, {"mode": 5}),))


@pytest.mark.parametrize("overrides,match", [
    ({"mode_qualities": (0.5,)}, "same modes"),
    ({"mode_durations": (0, 1, 2, 3, 4)}, "whole seconds"),
    ({"urgency_edges": (5, 3)}, "strictly increasing"),
])
def test_config_rejects_bad_values(overrides, match):
    with pytest.raises(ValueError, match=match):
        D.with_overrides(D.SINGLE_TASK, **overrides)


def test_table1_direction_single_task():
    """Table 1 / Table 8: Step-trained policy overuses mode 5 and times out under EP; the EP
    policy avoids timeouts and spreads modes by slack (Fig. 3)."""
    res = D.cross_evaluate(D.SINGLE_TASK, train_episodes=6_000, eval_episodes=1_000)
    step_ep, ep_ep = res[(D.STEP, D.EP)].summary(), res[(D.EP, D.EP)].summary()
    assert step_ep["mode5"].low > 0.8 and step_ep["timeout"].low > 0.6
    assert step_ep["return"].high < 0
    assert ep_ep["timeout"].high < 0.05 and ep_ep["mode5"].high < 0.4
    assert ep_ep["return"].low > step_ep["return"].high
    # EP spreads modes by slack: the mean chosen duration grows with slack, >= 3 modes used
    decisions = res[(D.EP, D.EP)].decisions
    durations = D.SINGLE_TASK.mode_durations
    mean_dur = [np.mean([durations[m] for s, _, m, _ in decisions if s == slack])
                for slack in D.SINGLE_TASK.slack_choices]
    assert all(a < b for a, b in itertools.pairwise(mean_dur))
    assert len({m for _, _, m, _ in decisions}) >= 3


def test_table1_direction_sequential():
    """Table 1 / Table 9: over-deliberation learned under Step exhausts the shared deadline
    budget under EP (timeouts, lower return); EP training avoids it."""
    res = D.cross_evaluate(D.SEQUENTIAL, train_episodes=6_000, eval_episodes=400)
    step_ep, ep_ep = res[(D.STEP, D.EP)].summary(), res[(D.EP, D.EP)].summary()
    assert step_ep["timeout"].low > 0.15 and ep_ep["timeout"].high < 0.05
    assert ep_ep["return"].low > step_ep["return"].high
    assert step_ep["mode5"].low > ep_ep["mode5"].high
    # under Step evaluation deliberation is free, so the Step-trained policy does at least
    # as well there as under EP evaluation
    assert res[(D.STEP, D.STEP)].summary()["return"].low > step_ep["return"].high
