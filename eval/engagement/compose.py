"""Subsystems running at different rates on one EP timeline (paper §3.2 multi-rate feedback,
§4 "Coordination across temporal scales" and "Compositional reuse of the interface").

:class:`Subsystems` is an EP environment made of named EP environments (each a
:class:`~eval.engagement.core.TickEnvironment`), subsystem ``k`` ticking once every
``period_k`` ticks of the shared timeline (a slow planner, a fast controller, a sensor stream).
Interventions are addressed ``"<subsystem>.<action>"``; observation events come back as
``"<subsystem>.<kind>"`` with their payloads untouched; the utility of a shared tick is the sum
of the utilities of the subsystems that ticked in it.

Timing contract: subsystem ``k`` ticks at shared ticks ``0, p_k, 2 p_k, ...``; its local tick
``tau`` is shared tick ``tau * p_k``. An event it delivers at local tick ``tau`` reaches the
agent at shared tick ``tau * p_k``, never earlier. Interventions sent for it between two of its
ticks wait, in arrival order, and are applied at its next tick (a slow component consumes
commands at its own rate); they are checked against its admissible sets when sent, so an
inadmissible command fails at once. The composite's admissible sets are the union of the
subsystems' actions with their prefixes, several subsystems at once; a subsystem that has
ended, or has commands waiting for its next tick, offers none (one command set per own tick); deliberation latency is
handled on the shared timeline (a subsystem receives the landed intervention with latency 0;
its own ``decision_latency``, if any, still applies, in its own ticks). Seeds: subsystem ``k`` is reset with the ``k``-th
child of ``SeedSequence(seed)``, so adding a subsystem does not change the others' draws.

The episode ends when every subsystem has ended (``end="all"``, default) or any has
(``end="any"``), or at ``horizon`` shared ticks; a subsystem whose last tick is shared tick
``t`` has ended at ``t + period`` (when its last events arrive). Not guaranteed: subsystems do not see each
other; coupling them is the agent's job (or a subclass's ``_transition``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from eval.engagement.core import (
    AdmissibleSets,
    Event,
    Intervention,
    TickEnvironment,
)

SEP = "."


@dataclass
class Subsystem:
    """One component: a name (the prefix of its actions and events), its environment and the
    number of shared ticks per tick of its own."""

    name: str
    env: TickEnvironment
    period: int = 1

    def __post_init__(self) -> None:
        if not self.name or SEP in self.name:
            raise ValueError(f"a subsystem name is non-empty without {SEP!r}, got {self.name!r}")
        if not (isinstance(self.period, int) and self.period >= 1):
            raise ValueError(f"subsystem {self.name!r}: period must be an int >= 1, got "
                             f"{self.period!r}")
        if not isinstance(self.env, TickEnvironment):
            raise TypeError(f"subsystem {self.name!r}: env must be a TickEnvironment, got "
                            f"{type(self.env).__name__}")


class Subsystems(TickEnvironment):
    """Named subsystems at their own rates on one shared timeline (see the module docstring)."""

    def __init__(self, parts: Sequence[Subsystem], horizon: int, end: str = "all") -> None:
        super().__init__(horizon)
        names = [p.name for p in parts]
        if not parts or len(set(names)) != len(names):
            raise ValueError(f"need at least one subsystem, each with its own name: {names}")
        if end not in ("all", "any"):
            raise ValueError(f"end must be 'all' or 'any', got {end!r}")
        self.parts = {p.name: p for p in parts}
        self.end = end
        self._waiting: dict[str, list[Intervention]] = {n: [] for n in self.parts}
        self._done: dict[str, int] = {}  # subsystem -> the shared tick its end reaches
        self.action_names = frozenset(f"{p.name}{SEP}{a}" for p in parts
                                      for a in p.env.action_names)

    def _split(self, item: Intervention) -> tuple[Subsystem, Intervention]:
        name, _, action = item.name.partition(SEP)
        return self.parts[name], Intervention(action, item.args)

    def admissible(self) -> AdmissibleSets:
        specs = []
        for part in self.parts.values():
            if part.name in self._done or self._waiting[part.name]:
                continue
            for spec in part.env.admissible().actions:
                needs = None if spec.needs is None else f"{part.name}{SEP}{spec.needs}"
                specs.append(replace(spec, name=f"{part.name}{SEP}{spec.name}", needs=needs))
        return AdmissibleSets(tuple(specs), max_size=None)

    def _start(self) -> None:
        seeds = np.random.SeedSequence(int(self.rng.integers(2**63))).spawn(len(self.parts))
        self._waiting: dict[str, list[Intervention]] = {n: [] for n in self.parts}
        self._done: dict[str, int] = {}  # subsystem -> the shared tick its end reaches
        for part, ss in zip(self.parts.values(), seeds, strict=True):
            self._deliver(part, part.env.reset(int(ss.generate_state(1)[0])))

    def _deliver(self, part: Subsystem, events: tuple[Event, ...]) -> None:
        for ev in events:
            self.emit(f"{part.name}{SEP}{ev.kind}", ev.payload, at=ev.tick * part.period)

    def _transition(self, interventions: Sequence[Intervention]) -> float:
        for item in interventions:
            part, local = self._split(replace(item, latency=0))
            if part.name in self._done:
                raise ValueError(f"subsystem {part.name!r} has ended; {item.name!r} is not "
                                 "admissible")
            waiting = self._waiting[part.name] + [local]
            problem = part.env.admissible().problem(waiting)
            if problem is not None:
                raise ValueError(f"subsystem {part.name!r}: {problem}")
            self._waiting[part.name] = waiting
        utility = 0.0
        for part in self.parts.values():
            if part.name in self._done or self.now % part.period:
                continue
            result = part.env.tick(self._waiting[part.name])
            self._waiting[part.name] = []
            utility += result.utility
            self._deliver(part, result.events)
            if result.done:  # its last events arrive one of its own ticks later
                self._done[part.name] = self.now + part.period
        return utility

    def _finished(self) -> bool:
        ended = [n for n, at in self._done.items() if at <= self.now]
        return bool(ended) if self.end == "any" else len(ended) == len(self.parts)
