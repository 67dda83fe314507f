"""The EP library pieces (paper §3.1, §3.3, §4): admissible intervention sets, deliberation
latency as an interface feature, multi-rate composition (eval/engagement/compose.py), the
generic agents (eval/engagement/agents.py) and the example environment written only against
the interface (eval/engagement/pager.py). Expected ticks are worked out by hand from the
stated rules."""

from __future__ import annotations

import json

import pytest

from eval.engagement.agents import FirstOptionAgent, RandomAgent
from eval.engagement.compose import Subsystem, Subsystems
from eval.engagement.core import (
    DECISION,
    EVENT,
    INTERVENTION,
    ActionSpec,
    AdmissibleSets,
    Intervention,
    run_episode,
)
from eval.engagement.pager import PagerConfig, PagerEnv

# ------------------------------------------------------------------ admissible sets


def test_admissible_sets_enumerate_exactly_the_allowed_sets():
    sets = AdmissibleSets((ActionSpec("a", ({"x": 1}, {"x": 2})),
                           ActionSpec("b", needs="a")), max_size=2)
    got = {tuple((i.name, tuple(sorted(i.args.items()))) for i in s) for s in sets.sets()}
    a1, a2, b = ("a", (("x", 1),)), ("a", (("x", 2),)), ("b", ())
    # b only with an a; never two a's (distinct names); the empty set first
    assert got == {(), (a1,), (a2,), (a1, b), (a2, b)}
    assert next(iter(sets.sets())) == ()
    assert [Intervention("b")] not in sets
    assert "only together with a" in sets.problem([Intervention("b")])
    assert "not admissible now" in sets.problem([Intervention("a", {"x": 3})])
    assert "at most 2" in sets.problem([Intervention("a", {"x": 1})] * 3)
    strict = AdmissibleSets((ActionSpec("a"),), allow_empty=False, rule="one a per tick")
    assert strict.problem([]).endswith("(one a per tick)")


def test_an_inadmissible_set_is_rejected_before_any_state_changes():
    env = PagerEnv(PagerConfig(horizon=20, schedule=((3, 9),)))
    env.reset(0)
    with pytest.raises(ValueError, match=r"tick 0: 'answer' is not admissible now"):
        env.tick([Intervention("answer", {"page": 0})])  # not arrived yet
    assert env.now == 0 and not env.pending_decisions()


# ------------------------------------------------------------------ latency


def _rows(ep, kind=None):
    return [(r.tick, r.kind, r.name, json.loads(r.payload)) for r in ep.timeline
            if kind is None or r.kind == kind]


def test_a_decision_with_latency_is_triggered_d_ticks_later_while_the_world_runs():
    # page at tick 2 (deadline 10); reading it takes 2 ticks, answering 3: decided at 2,
    # triggered at 4, answering ticks 4-6, answered event at 7
    env = PagerEnv(PagerConfig(horizon=12, schedule=((2, 10),), think_ticks=2,
                               answer_ticks=3))
    ep = run_episode(env, FirstOptionAgent(), seed=0, horizon=12)
    assert _rows(ep, DECISION) == [(2, DECISION, "answer", {"args": {"page": 0},
                                                            "latency": 2})]
    assert _rows(ep, INTERVENTION) == [(4, INTERVENTION, "answer", {"page": 0})]
    assert [(t, n) for t, _, n, _ in _rows(ep, EVENT)] == [(2, "page"), (7, "answered")]
    assert ep.utilities[6] == 1.0 and sum(ep.utilities) == 1.0


def test_a_deadline_passing_during_deliberation_drops_the_decision():
    # deadline 4: the decision made at 2 would be triggered at 4, but the page expires at 4
    # (in the transition of tick 3) and the pending decision is cancelled
    env = PagerEnv(PagerConfig(horizon=8, schedule=((2, 4),), think_ticks=2))
    ep = run_episode(env, FirstOptionAgent(), seed=0, horizon=8)
    assert [(t, n) for t, _, n, _ in _rows(ep, EVENT)] == [(2, "page"), (4, "expired")]
    assert _rows(ep, INTERVENTION) == [] and sum(ep.utilities) == -1.0
    assert env.pending_decisions() == ()


def test_the_agents_own_latency_adds_to_the_environments():
    env = PagerEnv(PagerConfig(horizon=10, schedule=((0, 9),), think_ticks=1))
    env.reset(0)
    env.tick([Intervention("answer", {"page": 0}, latency=2)])
    (pending,) = env.pending_decisions()
    assert (pending.decided_at, pending.trigger_at, pending.intervention.latency) == (0, 3, 3)
    with pytest.raises(ValueError, match="latency is a whole number"):
        Intervention("answer", latency=-1)


# ------------------------------------------------------------------ generic agents


@pytest.mark.parametrize("seed", range(25))
def test_random_agent_only_ever_sends_admissible_sets(seed):
    cfg = PagerConfig(horizon=80, rate=0.15, think_ticks=1, answer_ticks=4)
    env = PagerEnv(cfg)
    ep = run_episode(env, RandomAgent(), seed=seed, horizon=cfg.horizon)  # raises if not
    answered = [p["id"] for _, _, n, p in _rows(ep, EVENT) if n == "answered"]
    for page in answered:  # an answer only for an arrived page, and only once
        arrival, deadline = env.pages[page]
        starts = [t for t, _, n, p in _rows(ep, INTERVENTION) if p == {"page": page}]
        assert len(starts) == 1 and arrival + 1 <= starts[0] <= deadline
    # replay is identical
    again = run_episode(PagerEnv(cfg), RandomAgent(), seed=seed, horizon=cfg.horizon)
    assert again.timeline == ep.timeline and again.utilities == ep.utilities


def test_generic_agents_need_the_interface():
    with pytest.raises(RuntimeError, match="run it with run_episode"):
        FirstOptionAgent().act(0, (), 0.0)


def test_first_option_agent_runs_the_existing_environments_unchanged():
    from eval.engagement import assistant as A
    from eval.engagement import deliberation as D

    env = D.DeliberationEnv(D.SINGLE_TASK, D.EP)
    ep = run_episode(env, FirstOptionAgent(), seed=1, horizon=env.horizon)
    # the first option is mode 0 (1 s): it always fits the slack (>= 2 s)
    assert env.outcomes[0] in ("success", "failure") and env.decisions[0][2] == 0
    assert ep.ticks == 1
    cfg = A.AssistantConfig(horizon_units=10.0, n_seeds=1, episodes_per_seed=1)
    for method in A.METHODS:
        out = A.scripted_outputs(cfg)
        run_episode(A.AssistantEnv(cfg, out, method), RandomAgent(), seed=4, horizon=cfg.horizon)


# ------------------------------------------------------------------ multi-rate composition


def _slow_and_fast():
    slow = PagerConfig(horizon=10, schedule=((1, 8),), think_ticks=0, answer_ticks=2)
    fast = PagerConfig(horizon=30, schedule=((5, 20),), think_ticks=0, answer_ticks=2)
    return slow, fast


def test_a_slow_subsystem_delivers_events_at_its_own_rate():
    slow, fast = _slow_and_fast()
    env = Subsystems([Subsystem("fast", PagerEnv(fast)), Subsystem("slow", PagerEnv(slow), 3)],
                     horizon=30)
    ep = run_episode(env, FirstOptionAgent(), seed=0, horizon=30)
    events = [(t, n) for t, _, n, _ in _rows(ep, EVENT)]
    # independent computation: each pager alone, its ticks scaled by its period
    alone = {}
    for name, cfg, period in (("fast", fast, 1), ("slow", slow, 3)):
        solo = run_episode(PagerEnv(cfg), FirstOptionAgent(), seed=0, horizon=cfg.horizon)
        alone[name] = [(t * period, f"{name}.{n}") for t, _, n, _ in _rows(solo, EVENT)]
    assert sorted(events) == sorted(alone["fast"] + alone["slow"])
    assert ("slow.answered", 9) in {(n, t) for t, n in events}  # local 3 = shared 9
    assert sum(ep.utilities) == 2.0


class _Script:
    """Send the given sets at the given ticks, nothing otherwise."""

    def __init__(self, plan):
        self.plan = plan

    def reset(self, seed):
        pass

    def act(self, tick, events, utility):
        return self.plan.get(tick, ())

    def finish(self, tick, events, utility):
        pass


def test_commands_to_a_slow_subsystem_wait_for_its_next_tick_and_are_checked_at_once():
    slow, fast = _slow_and_fast()
    parts = [Subsystem("fast", PagerEnv(fast)), Subsystem("slow", PagerEnv(slow), 3)]
    answer = Intervention("slow.answer", {"page": 0})
    ep = run_episode(Subsystems(parts, horizon=20), _Script({4: (answer,)}), seed=0,
                     horizon=20)
    # sent at 4, applied at the slow tick of 6 (local 2); 2 local ticks of answering end in
    # local tick 3, so the answered event arrives at local 4 = shared 12
    assert ("slow.answered", 12) in {(n, t) for t, _, n, _ in _rows(ep, EVENT)}
    # while a command waits, the slow subsystem offers nothing more
    with pytest.raises(ValueError, match=r"tick 5: 'slow.answer' is not admissible now"):
        run_episode(Subsystems(parts, horizon=20), _Script({4: (answer,), 5: (answer,)}),
                    seed=0, horizon=20)


@pytest.mark.parametrize("seed", range(10))
def test_random_agent_runs_composed_subsystems(seed):
    parts = [Subsystem("a", PagerEnv(PagerConfig(horizon=40, rate=0.2))),
             Subsystem("b", PagerEnv(PagerConfig(horizon=15, rate=0.3, think_ticks=0)), 4)]
    env = Subsystems(parts, horizon=60, end="all")
    ep = run_episode(env, RandomAgent(up_to=2), seed=seed, horizon=60)
    assert ep.ticks == 60  # b ends at shared 60 (15 local ticks x 4); a at 40
    for t, _, name, _ in _rows(ep, EVENT):
        if name.startswith("b."):
            assert t % 4 == 0
