"""Tests for eval/engagement/patrol.py (§5.1.2, App. C Tables 10–14) and its table cells."""

from __future__ import annotations

import numpy as np
import pytest

from eval.engagement import patrol as P
from eval.engagement.core import INTERVENTION, Intervention, run_episode
from eval.metrics import bootstrap_ci

QUIET = P.with_overrides(P.MODULE_LEVEL, alarm_prob=0.0, horizon=120)


class Script:
    """Respond at the listed ticks, otherwise continue; remember every event."""

    def __init__(self, ticks=()):
        self.ticks = set(ticks)
        self.seen = []

    def reset(self, seed):
        self.seen = []

    def act(self, tick, events, utility):
        self.seen.extend((tick, e.kind, dict(e.payload)) for e in events)
        return (Intervention(P.RESPOND),) if tick in self.ticks else ()

    def finish(self, tick, events, utility):
        self.seen.extend((tick, e.kind, dict(e.payload)) for e in events)


def test_routine_runs_on_empty_intervention_sets_with_closed_form_timing():
    env, agent = P.PatrolEnv(QUIET), Script()
    ep = run_episode(env, agent, seed=0, horizon=QUIET.horizon)
    # handle 20 ticks, then 7 cells to the next checkpoint: handled at 20 + 27k
    assert [t for t, k, _ in agent.seen if k == "handled"] == [20, 47, 74, 101]
    assert not [r for r in ep.timeline if r.kind == INTERVENTION]
    assert sum(ep.utilities) == 4 * QUIET.checkpoint_reward


def alarm_world(cfg):
    # an alarm at tick 1 at (8, 8), the only checkpoint >= 8 cells from (1, 1); deadline 25
    return P.with_overrides(cfg, alarm_prob=1.0, deadline_range=(25, 25), horizon=60)


def test_module_level_interrupt_keeps_handling_work_and_costs_nothing():
    cfg = alarm_world(P.MODULE_LEVEL)
    env, agent = P.PatrolEnv(cfg), Script(ticks={1})
    ep = run_episode(env, agent, seed=0, horizon=cfg.horizon)
    assert agent.seen[0][:2] == (1, "alarm")
    seen = [(t, k) for t, k, _ in agent.seen if k in ("resolved", "handled")]
    # respond at 1: 14 cells (ticks 1-14), resolve 3 (15-17) -> resolved at 18; back 14 cells
    # (18-31); the 19 ticks of handling left (32-50) -> handled at 51
    assert seen[:2] == [(18, "resolved"), (51, "handled")]
    assert env.stats["interrupt_cost"] == 0.0 and ep.utilities[1] == -cfg.active_cost


def test_state_level_interrupt_restarts_the_phase_and_charges_its_cost():
    cfg = alarm_world(P.STATE_LEVEL[2])  # observe 8 (cost 5), commit 12 (cost 20)
    env, agent = P.PatrolEnv(cfg), Script(ticks={1})
    ep = run_episode(env, agent, seed=0, horizon=cfg.horizon)
    seen = [(t, k) for t, k, _ in agent.seen if k in ("resolved", "phase_done", "handled")]
    # the observe phase had 1 tick done at tick 1: it restarts from zero after the alarm
    assert seen[:3] == [(18, "resolved"), (40, "phase_done"), (52, "handled")]
    assert env.stats["interrupt_cost"] == 5.0
    assert ep.utilities[1] == -5.0 - cfg.active_cost


class Spy:
    """Run an inner policy and record what it was shown."""

    def __init__(self, inner):
        self.inner, self.record = inner, Script()

    def reset(self, seed):
        self.inner.reset(seed)
        self.record.reset(seed)

    def act(self, tick, events, utility):
        self.record.act(tick, events, utility)
        return self.inner.act(tick, events, utility)

    def finish(self, *args):
        self.record.finish(*args)


def test_loop_responds_only_at_module_boundaries():
    cfg = P.with_overrides(P.MODULE_LEVEL, horizon=300)
    for seed in range(5):
        spy = Spy(P.LoopPolicy())
        ep = run_episode(P.PatrolEnv(cfg), spy, seed=seed, horizon=cfg.horizon)
        responds = [r.tick for r in ep.timeline if r.kind == INTERVENTION]
        boundary = {t for t, k, p in spy.record.seen if k == "status" and p["boundary"]}
        assert responds and set(responds) == boundary


def status(**kw):
    base = {"module": P.HANDLE, "phase": 0, "phase_left": 5, "boundary": False,
            "progress": 0.5, "interrupt_cost": 5.0, "alarm_left": 20, "distance": 7,
            "distance_after": 7, "responding": False}
    return {**base, **kw}


# Table 10 (Patch), thresholds ours: depth, status -> respond?
@pytest.mark.parametrize("depth,kw,expected", [
    (2, {"module": P.NAV, "phase": -1}, True),  # patrol navigation: respond
    (2, {"phase": 0}, True),  # observe: respond
    (2, {"phase": 1, "alarm_left": 12}, True),  # commit: respond only if <= 12 left
    (2, {"phase": 1, "alarm_left": 13}, False),
    (3, {"phase": 1, "alarm_left": 12}, True),  # verify: same bound
    (3, {"phase": 1, "alarm_left": 13}, False),
    (3, {"phase": 2, "alarm_left": 3}, False),  # commit at depth 3: always continue
    (3, {"phase": 2, "boundary": True}, True),  # at a boundary nothing is abandoned
])
def test_patch_follows_table_10(depth, kw, expected):
    assert P.PatchPolicy(P.STATE_LEVEL[depth]).decide(status(**kw)) is expected


# PatchPro checks in the App. C order; resolve takes 3 ticks; depth 3, net alarm value 75
@pytest.mark.parametrize("kw,expected", [
    ({"distance": 18, "alarm_left": 20}, False),  # unreachable: skip
    ({"distance": 5, "alarm_left": 8, "phase": 2, "progress": 0.9}, True),  # very urgent
    ({"module": P.NAV, "phase": -1, "alarm_left": 29}, True),  # patrol navigation
    ({"phase_left": 5, "distance_after": 7, "alarm_left": 15}, False),  # finish first fits
    ({"phase_left": 5, "distance_after": 7, "alarm_left": 15, "boundary": True}, True),
    # finishing first is too late: phase rules (verify: urgency 20, cutoff 0.6, ratio 1.5)
    ({"phase": 1, "phase_left": 6, "alarm_left": 14, "progress": 0.9,
      "interrupt_cost": 10.0}, True),
    ({"phase": 1, "phase_left": 9, "alarm_left": 25, "distance": 14, "distance_after": 14,
      "progress": 0.9, "interrupt_cost": 10.0}, False),  # not urgent, well advanced
    ({"phase": 2, "phase_left": 6, "alarm_left": 14, "progress": 0.2,
      "interrupt_cost": 40.0}, False),  # 75 < 2.0 x 40: not worth the cost
])
def test_patchpro_checks(kw, expected):
    assert P.PatchProPolicy(P.STATE_LEVEL[3]).decide(status(**kw)) is expected


def test_ep_beats_loop_at_module_level_with_cis():
    """Table 2(a) direction: EP resolves more alarms, faster, for a higher return."""
    cfg = P.with_overrides(P.MODULE_LEVEL, horizon=200)
    ep_res = P.evaluate(cfg, P.train_ep(cfg, 800), 150).summary()
    loop_res = P.evaluate(cfg, P.LoopPolicy(), 150).summary()
    assert ep_res["resolve"].low > loop_res["resolve"].high
    assert ep_res["expire"].high < loop_res["expire"].low
    assert ep_res["ticks_per_alarm"].high < loop_res["ticks_per_alarm"].low
    assert ep_res["return"].low > loop_res["return"].high


@pytest.mark.parametrize("depth", [2, 3])
def test_hand_written_patches_beat_loop_at_state_level(depth):
    cfg = P.with_overrides(P.STATE_LEVEL[depth], horizon=200)
    res = {name: P.evaluate(cfg, pol, 150).summary()
           for name, pol in [("loop", P.LoopPolicy()), ("patch", P.PatchPolicy(cfg)),
                             ("patchpro", P.PatchProPolicy(cfg))]}
    assert res["patchpro"]["return"].low > res["loop"]["return"].high
    assert res["patch"]["return"].value > res["loop"]["return"].value
    assert res["loop"]["interrupt_cost"].value == 0.0


def test_ep_beats_patchpro_at_depth_2_on_paired_episodes():
    """Table 2(b), depth 2: the trained EP policy out-earns PatchPro on the same evaluation
    seeds (bootstrap CI of the per-episode difference above zero). EP needs distance in its
    state for this: without it, it cannot tell reachable alarms from lost ones and falls
    about 24 points below PatchPro on this configuration (measured)."""
    cfg = P.STATE_LEVEL[2]
    ep = P.evaluate(cfg, P.train_ep(cfg))
    patchpro = P.evaluate(cfg, P.PatchProPolicy(cfg))
    _, low, _ = bootstrap_ci(ep.returns - patchpro.returns, 1000, seed=cfg.seed)
    assert low > 0.0


def test_per_seed_returns_gives_one_mean_per_seed_and_method():
    # no alarms: each 120-tick episode handles checkpoints at 20, 47, 74, 101 -> 4 x 5 = 20
    quiet = P.with_overrides(P.STATE_LEVEL[2], alarm_prob=0.0, horizon=120)
    got = P.per_seed_returns(quiet, [0, 1], methods=["loop", "patch"], train_episodes=1,
                             eval_episodes=3)
    assert got == {"loop": [20.0, 20.0], "patch": [20.0, 20.0]}
    with pytest.raises(ValueError, match="choose from"):
        P.per_seed_returns(quiet, [0], methods=["patchpro", "oracle"], train_episodes=1)
    with pytest.raises(ValueError, match="at least one seed"):
        P.per_seed_returns(quiet, [])


@pytest.mark.slow
@pytest.mark.parametrize("depth", [2, 3])
def test_state_level_ep_beats_loop_and_patch(depth):
    cfg = P.STATE_LEVEL[depth]
    res = {name: P.evaluate(cfg, pol).summary() for name, pol in P.policies(cfg).items()}
    assert res["ep"]["return"].low > res["patch"]["return"].high
    assert res["ep"]["return"].low > res["loop"]["return"].high
    assert res["ep"]["expire"].value <= res["patchpro"]["expire"].value + 0.02


# ------------------------------------------------------------------ table cells


def test_summary_cells_are_ratios_of_aggregates_with_the_table_bootstrap():
    # eight hand-made episodes; alarms and responses include zero-count episodes
    alarms = np.array([2, 1, 2, 1, 0, 3, 2, 1], dtype=float)
    resolved = np.array([1, 0, 2, 1, 0, 3, 1, 1], dtype=float)
    responses = np.array([1, 0, 2, 1, 0, 2, 0, 1], dtype=float)
    counts = {"alarms": alarms, "resolved": resolved, "expired": alarms - resolved,
              "alarm_ticks": 10 * alarms, "responses": responses,
              "latency": np.array([4, 0, 3, 2, 0, 5, 0, 1], dtype=float),
              "interrupt_cost": np.zeros(8)}
    returns = np.array([3.0, -1.0, 4.0, 1.0, 5.0, -9.0, 2.0, 6.0])
    s = P.PatrolResult(returns, counts).summary()
    # point values: rates from the totals (9/12 resolved, 15/7 latency), not per-episode means
    assert s["resolve"].value == pytest.approx(9 / 12)
    assert s["expire"].value == pytest.approx(3 / 12)
    assert s["ticks_per_alarm"].value == pytest.approx(10.0)
    assert s["latency"].value == pytest.approx(15 / 7)
    assert (s["interrupt_cost"].low, s["interrupt_cost"].high) == (0.0, 0.0)
    # the intervals the tables printed before the bootstrap moved to eval.metrics
    # (1000 resamples, seed 42), computed by the engagement package's former implementation
    assert (s["return"].value, s["return"].low, s["return"].high) == pytest.approx(
        (1.375, -1.875, 4.0))
    assert (s["resolve"].low, s["resolve"].high) == pytest.approx((0.5, 0.9333333333333333))
    assert (s["latency"].low, s["latency"].high) == pytest.approx(
        (1.3983333333333334, 3.0))
    assert s["resolve"].fmt(100, 1) == "75.0 ± 21.7"
