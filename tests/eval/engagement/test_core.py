"""Tests for eval/engagement/core.py and pomdp.py: the EP loop (§3.1, App. B.1), the
synchronized POMDP adapter (§3.2, App. B.4), persistent actions, event timing and replay."""

from __future__ import annotations

import json

import numpy as np
import pytest

from eval.engagement.core import (
    EVENT,
    INTERVENTION,
    UTILITY,
    Event,
    Intervention,
    TickEnvironment,
    TickResult,
    episode_seeds,
    run_episode,
)
from eval.engagement.pomdp import PolicyAgent, SynchronizedEP

# ------------------------------------------------------------------ POMDP adapter (B.4)

LISTEN, OPEN_LEFT, OPEN_RIGHT = 0, 1, 2


class Tiger:
    """The classic tiger POMDP: listen (-1, 85% accurate) or open a door (+10 / -100)."""

    def reset(self, rng):
        self.tiger = int(rng.integers(2))
        return "start"

    def step(self, action, rng):
        if action == LISTEN:
            heard = self.tiger if rng.random() < 0.85 else 1 - self.tiger
            return ("left", "right")[heard], -1.0, False
        opened = 0 if action == OPEN_LEFT else 1
        reward = -100.0 if opened == self.tiger else 10.0
        self.tiger = int(rng.integers(2))
        return "start", reward, bool(rng.random() < 0.3)


def tiger_policy(obs, rng):
    # a stochastic memoryless policy, so the agent's generator matters too
    if obs == "start" or rng.random() < 0.5:
        return LISTEN
    return OPEN_RIGHT if obs == "left" else OPEN_LEFT


def hand_written_step_loop(seed: int, horizon: int, discount: float):
    """The textbook observe-act-transition loop, written without the EP library."""
    env_seed, agent_seed = (int(s.generate_state(1)[0])
                            for s in np.random.SeedSequence(seed).spawn(2))
    env_rng, agent_rng = np.random.default_rng(env_seed), np.random.default_rng(agent_seed)
    model = Tiger()
    obs = model.reset(env_rng)
    trajectory, total = [], 0.0
    for t in range(horizon):
        action = tiger_policy(obs, agent_rng)
        next_obs, reward, done = model.step(action, env_rng)
        trajectory.append((obs, action, reward))
        total += discount**t * reward
        obs = next_obs
        if done:
            break
    return trajectory, total


def adapter_trajectory(seed: int, horizon: int, discount: float):
    ep = run_episode(SynchronizedEP(Tiger(), horizon), PolicyAgent(tiger_policy), seed,
                     horizon, discount)
    obs = [json.loads(r.payload)["obs"] for r in ep.timeline if r.kind == EVENT]
    actions = [json.loads(r.payload)["action"] for r in ep.timeline if r.kind == INTERVENTION]
    # one observation per tick, one action per tick: paired by construction (B.4)
    assert len(obs) == ep.ticks + 1 and len(actions) == ep.ticks
    return list(zip(obs, actions, ep.utilities, strict=False)), ep.discounted_return


@pytest.mark.parametrize("seed", range(25))
def test_synchronized_adapter_reproduces_the_step_loop_exactly(seed):
    expected, expected_return = hand_written_step_loop(seed, horizon=30, discount=0.95)
    got, got_return = adapter_trajectory(seed, horizon=30, discount=0.95)
    assert got == expected
    assert got_return == pytest.approx(expected_return, rel=0, abs=1e-12)


def test_seed_split_matches_seed_sequence_spawn():
    a, b = np.random.SeedSequence(7).spawn(2)
    assert episode_seeds(7) == (int(a.generate_state(1)[0]), int(b.generate_state(1)[0]))


@pytest.mark.parametrize("chosen", [(), (Intervention("act", {"action": 0}),) * 2])
def test_synchronized_tick_rejects_empty_or_multiple_interventions(chosen):
    env = SynchronizedEP(Tiger(), 5)
    env.reset(0)
    with pytest.raises(ValueError, match="exactly one action"):
        env.tick(chosen)


# ------------------------------------------------------------------ persistent actions


class Walker(TickEnvironment):
    """A 1-D walk: ``go(to=x)`` starts a persistent move of one cell per tick."""

    action_names = frozenset({"go", "ping"})

    def _start(self):
        self.pos, self.target = 0, 0
        self.trace = []

    def _transition(self, interventions):
        for item in interventions:
            if item.name == "go":
                self.target = item.args["to"]
                self.actions.start("go", abs(self.target - self.pos))
            else:
                self.emit("pong", {})
        moving = "go" in self.actions
        if moving:
            self.pos += 1 if self.target > self.pos else -1
        for _ in self.actions.advance():
            self.emit("arrived", {"pos": self.pos})
        self.trace.append(self.pos)
        return -1.0 if moving else 0.0  # a cost per tick spent moving


class Scripted:
    def __init__(self, script):
        self.script = script  # tick -> interventions
        self.seen = []

    def reset(self, seed):
        self.seen = []

    def act(self, tick, events, utility):
        self.seen.extend((tick, e) for e in events)
        return self.script.get(tick, ())

    def finish(self, tick, events, utility):
        self.seen.extend((tick, e) for e in events)


def test_persistent_action_progresses_with_empty_intervention_sets():
    env, agent = Walker(horizon=12), Scripted({0: (Intervention("go", {"to": 5}),)})
    ep = run_episode(env, agent, seed=0, horizon=12)
    # one intervention at tick 0, then nothing; the state still moves one cell per tick
    assert [r for r in ep.timeline if r.kind == INTERVENTION] == [ep.timeline[0]]
    assert env.trace == [1, 2, 3, 4, 5] + [5] * 7
    assert [(t, e.kind, dict(e.payload)) for t, e in agent.seen] == [(5, "arrived", {"pos": 5})]
    assert ep.utilities == (-1.0,) * 5 + (0.0,) * 7


def test_several_interventions_in_one_tick_all_take_effect():
    script = {2: (Intervention("go", {"to": 2}), Intervention("ping"))}
    env, agent = Walker(horizon=6), Scripted(script)
    run_episode(env, agent, seed=0, horizon=6)
    assert [(t, e.kind) for t, e in agent.seen] == [(3, "pong"), (4, "arrived")]
    assert env.trace == [0, 0, 1, 2, 2, 2]


def test_unknown_intervention_is_rejected_with_the_admissible_names():
    env = Walker(horizon=3)
    env.reset(0)
    with pytest.raises(ValueError, match=r"unknown intervention 'jump'.*\['go', 'ping'\]"):
        env.tick((Intervention("jump"),))


# ------------------------------------------------------------------ event timing


class Mailbox(TickEnvironment):
    """Events (several per tick, or none) arrive at arrival ticks drawn at reset."""

    action_names = frozenset()

    def __init__(self, horizon, fixed=None):
        super().__init__(horizon)
        self.fixed = fixed

    def _start(self):
        if self.fixed is not None:
            self.arrivals = list(self.fixed)
        else:
            n = int(self.rng.integers(5, 15))
            self.arrivals = sorted(int(t) for t in self.rng.integers(0, 20, size=n))
        for i, t in enumerate(self.arrivals):
            self.emit("mail", {"id": i}, at=t)

    def _transition(self, interventions):
        return 0.0


@pytest.mark.parametrize("seed", range(10))
def test_events_are_delivered_at_their_arrival_tick_never_before(seed):
    env, agent = Mailbox(horizon=25), Scripted({})
    run_episode(env, agent, seed=seed, horizon=25)
    seen = [(t, e.payload["id"]) for t, e in agent.seen]
    # the independent record: the arrival ticks drawn by the environment's own generator
    env_seed, _ = episode_seeds(seed)
    rng = np.random.default_rng(env_seed)
    n = int(rng.integers(5, 15))
    arrivals = sorted(int(t) for t in rng.integers(0, 20, size=n))
    assert seen == list(zip(arrivals, range(n), strict=True))


def test_several_events_in_one_tick_and_empty_ticks_between():
    env, agent = Mailbox(horizon=10, fixed=[0, 3, 3, 3, 7]), Scripted({})
    run_episode(env, agent, seed=0, horizon=10)
    assert [(t, e.payload["id"]) for t, e in agent.seen] == [(0, 0), (3, 1), (3, 2), (3, 3),
                                                              (7, 4)]


def test_scheduling_an_event_in_the_past_is_an_error():
    env = Mailbox(horizon=5)
    env.reset(0)
    env.tick(())
    with pytest.raises(ValueError, match="earliest tick it can reach the agent is 2"):
        env.emit("late", {}, at=1)


class EarlyLeaker:
    """A broken environment that hands out an event stamped for a later tick."""

    def reset(self, seed):
        return ()

    def tick(self, interventions):
        return TickResult((Event(5, "leak", {}),), 0.0, False)


def test_loop_rejects_an_event_delivered_before_its_tick():
    with pytest.raises(ValueError, match="stamped for tick 5 was delivered at tick 1"):
        run_episode(EarlyLeaker(), Scripted({}), seed=0, horizon=3)


# ------------------------------------------------------------------ replay and timeline


def test_seeded_replay_is_identical_and_seeds_matter():
    from eval.engagement.deliberation import SEQUENTIAL, DeliberationEnv, QAgent

    def play(seed):
        env = DeliberationEnv(SEQUENTIAL, "ep")
        agent = QAgent(SEQUENTIAL)  # explores with its own seeded generator
        return run_episode(env, agent, seed, env.horizon, 0.99)

    a, b, c = play(3), play(3), play(4)
    assert a.rows(method="q") == b.rows(method="q")
    assert a.utilities == b.utilities and a.discounted_return == b.discounted_return
    assert a.rows() != c.rows()


def test_timeline_rows_are_plain_and_complete():
    env, agent = Walker(horizon=3), Scripted({1: (Intervention("go", {"to": 1}),)})
    ep = run_episode(env, agent, seed=0, horizon=3)
    rows = ep.rows(env="walker")
    assert rows == [
        {"env": "walker", "seed": 0, "tick": 0, "kind": UTILITY, "name": "u", "payload": "0.0"},
        {"env": "walker", "seed": 0, "tick": 1, "kind": INTERVENTION, "name": "go",
         "payload": '{"to": 1}'},
        {"env": "walker", "seed": 0, "tick": 1, "kind": UTILITY, "name": "u", "payload": "-1.0"},
        {"env": "walker", "seed": 0, "tick": 2, "kind": EVENT, "name": "arrived",
         "payload": '{"pos": 1}'},
        {"env": "walker", "seed": 0, "tick": 2, "kind": UTILITY, "name": "u", "payload": "0.0"},
    ]


def test_discounted_return_is_the_per_tick_discounted_sum():
    env, agent = Walker(horizon=8), Scripted({0: (Intervention("go", {"to": 4}),)})
    ep = run_episode(env, agent, seed=0, horizon=8, discount=0.5)
    assert ep.discounted_return == pytest.approx(-(1 + 0.5 + 0.25 + 0.125))


@pytest.mark.parametrize("kwargs,match", [({"horizon": 0}, "horizon"),
                                          ({"horizon": 3, "discount": 0.0}, "discount")])
def test_run_episode_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        run_episode(Walker(horizon=3), Scripted({}), seed=0, **kwargs)
