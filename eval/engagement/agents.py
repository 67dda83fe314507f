"""Generic EP agents: they read nothing but the interface (paper §3.3: a policy maps the
information state to a distribution over admissible intervention sets), so they run on any
environment that describes its admissible sets, with no event names or action names of their
own.

- :class:`RandomAgent`: each tick, one admissible set of at most ``up_to`` interventions
  drawn uniformly (the empty set included when admissible); a baseline and a fuzzer of an
  environment's admissibility rules.
- :class:`FirstOptionAgent`: whenever a non-empty set is admissible, the first one offered
  (an environment's option order is its default priority); otherwise the empty set.

Both receive the :class:`~eval.engagement.core.Interface` from
:func:`~eval.engagement.core.run_episode` (``connect``); run outside it, they raise a clear
error. Guaranteed: every set they return was admissible when they returned it; a seeded
episode is reproducible (RandomAgent draws only from the agent seed).
Not guaranteed: sensible behaviour (neither reads the events' contents).
"""

from __future__ import annotations

import numpy as np

from eval.engagement.core import Event, Interface, Intervention


class _InterfaceAgent:
    def __init__(self) -> None:
        self.interface: Interface | None = None
        self.rng = np.random.default_rng(0)

    def reset(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def connect(self, interface: Interface) -> None:
        self.interface = interface

    def _candidates(self, up_to: int) -> list[tuple[Intervention, ...]]:
        if self.interface is None:
            raise RuntimeError(f"{type(self).__name__} decides from the admissible sets: run it "
                               "with run_episode, which connects it to the environment")
        return list(self.interface.admissible().sets(up_to))

    def finish(self, tick: int, events: tuple[Event, ...], utility: float) -> None:
        return None


class RandomAgent(_InterfaceAgent):
    """A uniformly drawn admissible set of at most ``up_to`` interventions each tick."""

    def __init__(self, up_to: int = 1) -> None:
        super().__init__()
        if not (isinstance(up_to, int) and up_to >= 1):
            raise ValueError(f"up_to must be an int >= 1, got {up_to!r}")
        self.up_to = up_to

    def act(self, tick: int, events: tuple[Event, ...], utility: float) -> tuple[Intervention, ...]:
        sets = self._candidates(self.up_to)
        if not sets:
            raise RuntimeError(f"tick {tick}: no admissible set of at most {self.up_to} "
                               "interventions; raise up_to")
        return sets[int(self.rng.integers(len(sets)))]


class FirstOptionAgent(_InterfaceAgent):
    """The first non-empty admissible set offered (one intervention), else the empty set."""

    def act(self, tick: int, events: tuple[Event, ...], utility: float) -> tuple[Intervention, ...]:
        sets = [s for s in self._candidates(1) if s]
        return sets[0] if sets else ()
