"""The Engagement Process interface (paper §3.1, §3.3, App. B.1): ticks, intervention sets,
persistent timed actions, observation event sets, per-tick utility, discount and horizon.

An EP is run as a loop over ticks ``t = 0 .. H-1``. At tick ``t`` the agent has received the
event set ``O_t`` and the utility ``u_{t-1}`` (App. B.1 history) and returns an intervention set
``A_t``: empty, one atomic action, or several at once. The environment then advances one tick,
``s_{t+1} ~ T(. | s_t, A_t)``, and returns ``O_{t+1}``, ``u_t`` and whether the episode ended.
The cumulative utility is ``sum_t gamma^t u_t`` over the ticks actually run (§3.1, Utility).

Pieces:
- :class:`Intervention`, :class:`Event`, :class:`TickResult`: the interface vocabulary.
- :class:`Environment` / :class:`Agent`: the two protocols (reset with a seed; ``tick`` /
  ``act``).
- :class:`TickEnvironment`: a base class with a clock, an arrival-ordered event queue
  (:class:`EventQueue`) and persistent timed actions (:class:`TimedActions`), so a subclass
  only writes the state transition. Events are scheduled for an arrival tick and handed out
  exactly at that tick, never earlier.
- :func:`run_episode`: the loop above, returning the discounted return and an event timeline
  of plain ``(tick, kind, name, payload)`` rows ready for the warehouse.

Guaranteed: the loop rejects an environment that returns an event stamped with a tick other
than the one being delivered (an event can neither arrive early nor be back-dated); given the
same seed, environment and agent classes, an episode (timeline, utilities, return) is
identical, because every random draw comes from generators seeded by :func:`episode_seeds`.

Not guaranteed: admissibility of intervention sets is checked only by the environment that
defines it (the base class checks names against ``action_names``); payloads must be JSON
serialisable to appear in the timeline (anything else is written with ``repr``). Time is
discrete; the paper's continuous-time extension is not implemented.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

EVENT = "event"
INTERVENTION = "intervention"
UTILITY = "utility"


@dataclass(frozen=True)
class Intervention:
    """One atomic action ``a in A`` triggered at a tick; ``args`` are its parameters."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"an intervention needs a non-empty name, got {self.name!r}")


@dataclass(frozen=True)
class Event:
    """One observation event, stamped with the tick at which it reaches the agent."""

    tick: int
    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TickResult:
    """What one environment tick returns: ``O_{t+1}``, ``u_t`` and the end flag."""

    events: tuple[Event, ...]
    utility: float
    done: bool


class Environment(Protocol):
    def reset(self, seed: int) -> tuple[Event, ...]:
        """Start an episode; return the events available at tick 0 (``O_0``)."""
        ...

    def tick(self, interventions: Sequence[Intervention]) -> TickResult:
        """Apply the intervention set triggered now and advance the clock by one tick."""
        ...


class Agent(Protocol):
    def reset(self, seed: int) -> None:
        ...

    def act(self, tick: int, events: tuple[Event, ...], utility: float) -> Sequence[Intervention]:
        """Consume the events that arrived at ``tick`` and the last tick's utility; return
        the intervention set for this tick (possibly empty)."""
        ...

    def finish(self, tick: int, events: tuple[Event, ...], utility: float) -> None:
        """See the final events and utility of an episode (learning agents update here)."""
        ...


class EventQueue:
    """Events waiting for their arrival tick; ties keep scheduling order (deterministic)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, str, Mapping[str, Any]]] = []
        self._count = 0

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, tick: int, kind: str, payload: Mapping[str, Any] | None = None) -> None:
        heapq.heappush(self._heap, (int(tick), self._count, kind, dict(payload or {})))
        self._count += 1

    def pop_due(self, now: int) -> tuple[Event, ...]:
        """Remove and return the events whose arrival tick is ``now`` (earlier ones are a bug:
        they should have been popped at their own tick)."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            tick, _, kind, payload = heapq.heappop(self._heap)
            if tick < now:
                raise RuntimeError(f"event {kind!r} for tick {tick} was never delivered (now {now})")
            out.append(Event(tick, kind, payload))
        return tuple(out)


@dataclass
class TimedAction:
    """A persistent action: it keeps running for ``remaining`` more ticks with no new
    intervention (§3.1, Dynamics) unless interrupted."""

    name: str
    duration: int
    remaining: int
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def progress(self) -> int:
        return self.duration - self.remaining


class TimedActions:
    """The set of persistent actions running in a state, advanced one tick at a time."""

    def __init__(self) -> None:
        self._running: dict[str, TimedAction] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._running

    def __len__(self) -> int:
        return len(self._running)

    def get(self, name: str) -> TimedAction | None:
        return self._running.get(name)

    def start(self, name: str, duration: int, **args: Any) -> TimedAction:
        if not (isinstance(duration, (int, np.integer)) and duration >= 0):
            raise ValueError(f"timed action {name!r}: duration must be an int >= 0, got {duration!r}")
        if name in self._running:
            raise ValueError(f"timed action {name!r} is already running; interrupt it first")
        action = TimedAction(name, int(duration), int(duration), dict(args))
        self._running[name] = action
        return action

    def interrupt(self, name: str) -> TimedAction | None:
        """Stop a running action; return it (with its progress) or None if it was not running."""
        return self._running.pop(name, None)

    def advance(self) -> list[TimedAction]:
        """One tick of progress for every running action; return (and remove) those that are
        now complete, in start order. A zero-duration action completes on its first advance."""
        done = []
        for name, action in list(self._running.items()):
            action.remaining = max(action.remaining - 1, 0)
            if action.remaining == 0:
                done.append(self._running.pop(name))
        return done


class TickEnvironment:
    """Base class for EP environments: clock, event queue, timed actions and RNG.

    Subclasses set ``action_names`` and implement ``_start()`` (initial state; may ``emit``
    events for tick 0) and ``_transition(interventions) -> utility`` (one tick of dynamics from
    ``now`` to ``now + 1``; events emitted there arrive at ``now + 1`` or later), and may
    override ``_finished()``. ``horizon`` ends the episode after that many ticks.
    """

    action_names: frozenset[str] = frozenset()

    def __init__(self, horizon: int) -> None:
        if not (isinstance(horizon, int) and horizon >= 1):
            raise ValueError(f"horizon must be an int >= 1, got {horizon!r}")
        self.horizon = horizon
        self.now = 0
        self.rng = np.random.default_rng(0)
        self.queue = EventQueue()
        self.actions = TimedActions()
        self._started = False

    # -- for subclasses
    def emit(self, kind: str, payload: Mapping[str, Any] | None = None,
             at: int | None = None) -> None:
        """Schedule an observation event; ``at`` defaults to the next tick (during a
        transition) or tick 0 (during ``_start``)."""
        arrival = (self.now + 1 if self._started else 0) if at is None else int(at)
        earliest = self.now + 1 if self._started else 0
        if arrival < earliest:
            raise ValueError(f"event {kind!r} scheduled for tick {arrival}, but the earliest "
                             f"tick it can reach the agent is {earliest}")
        self.queue.schedule(arrival, kind, payload)

    def _start(self) -> None:
        raise NotImplementedError

    def _transition(self, interventions: Sequence[Intervention]) -> float:
        raise NotImplementedError

    def _finished(self) -> bool:
        return False

    # -- the Environment protocol
    def reset(self, seed: int) -> tuple[Event, ...]:
        self.rng = np.random.default_rng(seed)
        self.now = 0
        self.queue = EventQueue()
        self.actions = TimedActions()
        self._started = False
        self._start()
        self._started = True
        return self.queue.pop_due(0)

    def tick(self, interventions: Sequence[Intervention]) -> TickResult:
        interventions = tuple(interventions)
        for item in interventions:
            if not isinstance(item, Intervention):
                raise TypeError(f"an intervention set holds Intervention objects, got {item!r}")
            if item.name not in self.action_names:
                raise ValueError(f"unknown intervention {item.name!r}; this environment accepts "
                                 f"{sorted(self.action_names)}")
        utility = float(self._transition(interventions))
        self.now += 1
        events = self.queue.pop_due(self.now)
        done = self._finished() or self.now >= self.horizon
        return TickResult(events, utility, done)


def episode_seeds(seed: int) -> tuple[int, int]:
    """The (environment, agent) seeds of an episode: two independent children of ``seed``."""
    env_ss, agent_ss = np.random.SeedSequence(seed).spawn(2)
    return int(env_ss.generate_state(1)[0]), int(agent_ss.generate_state(1)[0])


@dataclass(frozen=True)
class TimelineRow:
    """One line of an episode timeline: what happened at which tick."""

    tick: int
    kind: str  # EVENT, INTERVENTION or UTILITY
    name: str
    payload: str  # JSON

    def as_dict(self) -> dict[str, Any]:
        return {"tick": self.tick, "kind": self.kind, "name": self.name, "payload": self.payload}


@dataclass(frozen=True)
class Episode:
    seed: int
    ticks: int
    utilities: tuple[float, ...]
    discounted_return: float
    timeline: tuple[TimelineRow, ...]

    def rows(self, **columns: Any) -> list[dict[str, Any]]:
        """The timeline as plain dict rows, each extended with ``columns`` (ids, method...)."""
        return [{**columns, "seed": self.seed, **row.as_dict()} for row in self.timeline]


def _json(payload: Mapping[str, Any]) -> str:
    return json.dumps(dict(payload), sort_keys=True, default=repr)


def discounted_return(utilities: Sequence[float], discount: float) -> float:
    """``sum_t discount^t u_t`` (§3.1, cumulative utility)."""
    return float(sum(u * discount**t for t, u in enumerate(utilities)))


def run_episode(env: Environment, agent: Agent, seed: int, horizon: int,
                discount: float = 1.0, log: bool = True) -> Episode:
    """Run one EP episode of at most ``horizon`` ticks (the environment may end it earlier).

    Raises ValueError if the environment hands out an event stamped with a tick other than the
    current one (early or late delivery breaks the EP timing contract).
    """
    if not (isinstance(horizon, int) and horizon >= 1):
        raise ValueError(f"horizon must be an int >= 1, got {horizon!r}")
    if not (0.0 < discount <= 1.0) or math.isnan(discount):
        raise ValueError(f"discount must be in (0, 1], got {discount!r}")
    env_seed, agent_seed = episode_seeds(seed)
    events = env.reset(env_seed)
    agent.reset(agent_seed)
    timeline: list[TimelineRow] = []
    utilities: list[float] = []
    utility = 0.0

    def record(tick: int, events: tuple[Event, ...]) -> None:
        for ev in events:
            if ev.tick != tick:
                raise ValueError(f"event {ev.kind!r} stamped for tick {ev.tick} was delivered at "
                                 f"tick {tick}; events must be delivered exactly at arrival")
            if log:
                timeline.append(TimelineRow(tick, EVENT, ev.kind, _json(ev.payload)))

    record(0, events)
    t = 0
    done = False
    while t < horizon and not done:
        chosen = tuple(agent.act(t, events, utility))
        if log:
            timeline.extend(TimelineRow(t, INTERVENTION, a.name, _json(a.args)) for a in chosen)
        result = env.tick(chosen)
        utility = result.utility
        utilities.append(utility)
        if log:
            timeline.append(TimelineRow(t, UTILITY, "u", json.dumps(utility)))
        t += 1
        events, done = result.events, result.done
        record(t, events)
    agent.finish(t, events, utility)
    return Episode(seed, t, tuple(utilities), discounted_return(utilities, discount),
                   tuple(timeline))
