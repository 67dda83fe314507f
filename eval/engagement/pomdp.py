"""A synchronized POMDP loop as a special case of EP (paper §3.2 and App. B.4).

B.4 restricts EP so that every intervention set holds exactly one action, actions are
instantaneous, and every tick produces exactly one observation event. :class:`SynchronizedEP`
wraps a step-based model (``reset(rng) -> obs``, ``step(action, rng) -> (obs, reward, done)``)
into an EP environment that enforces exactly that: an intervention set other than one ``act``
intervention is rejected with an error (its admissible sets hold exactly the one-action sets),
and each tick emits one ``obs`` event at the next tick. :class:`PolicyAgent` wraps a step policy
``policy(obs, rng) -> action`` into an EP agent; the observation event kind and the action name
it uses are parameters (default ``obs`` / ``act``), so it drives any environment that follows
the synchronized restriction, not only :class:`SynchronizedEP`.

Guaranteed: running ``SynchronizedEP(model)`` with ``PolicyAgent(policy)`` through
:func:`~eval.engagement.core.run_episode` makes the same calls, in the same order, with
the same random generators (seeded by :func:`~eval.engagement.core.episode_seeds`) as a
hand-written step loop, so trajectories and returns are identical.

Not guaranteed: nothing about the wrapped model itself (its observation and reward are passed
through untouched).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from eval.engagement.core import (
    ActionSpec,
    AdmissibleSets,
    Event,
    Intervention,
    TickEnvironment,
)

ACT = "act"
OBS = "obs"


class StepModel(Protocol):
    def reset(self, rng: np.random.Generator) -> Any:
        ...

    def step(self, action: Any, rng: np.random.Generator) -> tuple[Any, float, bool]:
        ...


class SynchronizedEP(TickEnvironment):
    """EP view of a step model: one action in, one observation out, every tick (B.4)."""

    action_names = frozenset({ACT})

    def __init__(self, model: StepModel, horizon: int) -> None:
        super().__init__(horizon)
        self.model = model
        self._done = False

    def admissible(self) -> AdmissibleSets:
        """Exactly one ``act`` intervention, any action value (B.4)."""
        return AdmissibleSets((ActionSpec(ACT, extra_args=True),), max_size=1,
                              allow_empty=False, rule=(
                                  "a synchronized (POMDP) tick takes exactly one action; use "
                                  "an EP environment for empty or simultaneous interventions"))

    def _start(self) -> None:
        self._done = False
        self.emit(OBS, {"obs": self.model.reset(self.rng)})

    def _transition(self, interventions: Sequence[Intervention]) -> float:
        if len(interventions) != 1:
            raise ValueError(f"a synchronized (POMDP) tick takes exactly one action, got "
                             f"{len(interventions)}; use an EP environment for empty or "
                             "simultaneous interventions")
        obs, reward, done = self.model.step(interventions[0].args["action"], self.rng)
        self._done = bool(done)
        self.emit(OBS, {"obs": obs})
        return float(reward)

    def _finished(self) -> bool:
        return self._done


class PolicyAgent:
    """EP agent from a step policy: reads the tick's single observation event of kind
    ``obs_kind`` (its payload's ``obs_key`` value), returns one ``action`` intervention with the
    policy's choice as argument ``action``."""

    def __init__(self, policy: Callable[[Any, np.random.Generator], Any], *,
                 obs_kind: str = OBS, obs_key: str = "obs", action: str = ACT) -> None:
        self.policy = policy
        self.obs_kind, self.obs_key, self.action = obs_kind, obs_key, action
        self.rng = np.random.default_rng(0)

    def reset(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, tick: int, events: tuple[Event, ...], utility: float) -> tuple[Intervention]:
        obs_events = [e for e in events if e.kind == self.obs_kind]
        if len(obs_events) != 1:
            raise ValueError(f"tick {tick}: a synchronized loop expects exactly one "
                             f"{self.obs_kind!r} event, got {len(obs_events)}")
        obs = obs_events[0].payload[self.obs_key]
        return (Intervention(self.action, {"action": self.policy(obs, self.rng)}),)

    def finish(self, tick: int, events: tuple[Event, ...], utility: float) -> None:
        return None
