"""The Engagement Process interface (paper §3.1, §3.3, §4, App. B.1): ticks, intervention
sets, admissible sets, persistent timed actions, deliberation latency, observation event sets,
per-tick utility, discount and horizon.

An EP is run as a loop over ticks ``t = 0 .. H-1``. At tick ``t`` the agent has received the
event set ``O_t`` and the utility ``u_{t-1}`` (App. B.1 history) and returns an intervention set
``A_t``: empty, one atomic action, or several at once, chosen among the sets admissible in the
current state (§3.3). The environment then advances one tick, ``s_{t+1} ~ T(. | s_t, A_t)``, and
returns ``O_{t+1}``, ``u_t`` and whether the episode ended. The cumulative utility is
``sum_t gamma^t u_t`` over the ticks actually run (§3.1, Utility).

Pieces:
- :class:`Intervention`, :class:`Event`, :class:`TickResult`: the interface vocabulary.
- :class:`ActionSpec`, :class:`AdmissibleSets`: the intervention-set space of the current state
  (§3.3, App. B.1): which atomic actions, with which arguments, how many at once.
- :class:`Environment` / :class:`Agent`: the two protocols (reset with a seed; ``tick`` /
  ``act``). An agent with a ``connect(interface)`` method is handed an :class:`Interface` at
  the start of every episode and may ask it, at any tick, for the admissible sets and for its
  own pending decisions; nothing else about the state.
- :class:`TickEnvironment`: a base class with a clock, an arrival-ordered event queue
  (:class:`EventQueue`), persistent timed actions (:class:`TimedActions`), admissibility checks
  and deliberation latency (below), so a subclass only writes the state transition. Events
  are scheduled for an arrival tick and handed out exactly at that tick, never earlier.
- Deliberation latency (§3.3 pending computations, §4 components with different latencies,
  §5.1.1 "EP advances global time during deliberation"): an intervention that takes ``d``
  ticks to decide. Its latency is the environment's :meth:`TickEnvironment.decision_latency`
  for it (a cost of the action itself, e.g. a deliberation mode) plus the agent's own
  ``Intervention.latency`` (e.g. the tokens of an LLM's reply). Decided at tick ``t`` with
  latency ``d >= 1``, it is held as a :class:`PendingDecision` while the environment keeps
  evolving, and is triggered at tick ``t + d``: handed to the transition of that tick, first in
  the set, with ``latency`` set to ``d`` so the environment can tell it from a fresh one. The
  environment may cancel a pending decision (:meth:`TickEnvironment.cancel_decision`).
- :func:`run_episode`: the loop above, returning the discounted return and an event timeline
  of plain ``(tick, kind, name, payload)`` rows ready for the warehouse: ``decision`` rows at
  the tick a latency was started, ``intervention`` rows at the tick an action was triggered.
- Multi-rate composition (§3-4) is :class:`eval.engagement.compose.Subsystems`; generic agents
  that read nothing but the interface are in :mod:`eval.engagement.agents`.

Guaranteed: the loop rejects an environment that returns an event stamped with a tick other
than the one being delivered (an event can neither arrive early nor be back-dated); a
:class:`TickEnvironment` rejects an intervention set that its :meth:`~TickEnvironment.admissible`
sets do not contain, naming the rule broken, before any state changes; given the same seed,
environment and agent classes, an episode (timeline, utilities, return) is identical, because
every random draw comes from generators seeded by :func:`episode_seeds`.

Not guaranteed: an argument whose spec has ``extra_args`` is checked only by the environment
that applies it; a landed decision is not re-checked against the admissible sets of its
trigger tick (the environment decides what a stale decision means, or cancels it); decisions
still pending when the episode ends are dropped. Payloads must be JSON serialisable to appear
in the timeline (anything else is written with ``repr``). Time is discrete; the paper's
continuous-time extension is not implemented.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

EVENT = "event"
INTERVENTION = "intervention"
UTILITY = "utility"
DECISION = "decision"


def _is_count(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class Intervention:
    """One atomic action ``a in A`` triggered at a tick; ``args`` are its parameters.

    ``latency`` is the number of ticks the agent itself spends deciding it (0: instantaneous);
    the environment may add its own (see the module docstring). On a landed decision it is
    the total latency the decision waited.
    """

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    latency: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"an intervention needs a non-empty name, got {self.name!r}")
        if not _is_count(self.latency):
            raise ValueError(f"intervention {self.name!r}: latency is a whole number of ticks "
                             f">= 0, got {self.latency!r}")


@dataclass(frozen=True)
class ActionSpec:
    """One atomic action admissible in the current state (§3.3).

    ``choices`` are the argument mappings it may take, in a stable order (generic agents pick
    among them); with ``extra_args`` any other arguments are admissible too and checked by the
    environment when applied (free numbers such as a reminder delay). ``rule`` says, for error
    messages, what the environment requires of this action; ``needs`` names an action that
    must be in the same set (e.g. starting other work while generating needs ``interrupt``).
    """

    name: str
    choices: tuple[Mapping[str, Any], ...] = ({},)
    extra_args: bool = False
    rule: str = ""
    needs: str | None = None  # admissible only in a set that also holds this action

    def options(self) -> tuple[Intervention, ...]:
        """The concrete interventions this spec offers, one per choice."""
        return tuple(Intervention(self.name, dict(c)) for c in self.choices)

    def allows(self, item: Intervention) -> bool:
        return item.name == self.name and (
            self.extra_args or any(dict(item.args) == dict(c) for c in self.choices))


@dataclass(frozen=True)
class AdmissibleSets:
    """The intervention-set space of the current state (§3.3, App. B.1).

    A set is admissible when every intervention in it is allowed by one of ``actions``, it
    holds at most ``max_size`` interventions (None: no bound), no action name twice when
    ``distinct``, and it is non-empty unless ``allow_empty``. Order inside a set does not
    matter to admissibility. ``rule`` (optional) is added to every error message: the
    environment's own statement of what it admits.
    """

    actions: tuple[ActionSpec, ...] = ()
    max_size: int | None = 1
    distinct: bool = True
    allow_empty: bool = True
    rule: str = ""

    def __post_init__(self) -> None:
        names = [a.name for a in self.actions]
        if len(names) != len(set(names)):
            raise ValueError(f"admissible sets list an action twice: {sorted(names)}")
        if self.max_size is not None and not (_is_count(self.max_size) and self.max_size >= 1):
            raise ValueError(f"max_size must be None or an int >= 1, got {self.max_size!r}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.actions)

    def spec(self, name: str) -> ActionSpec | None:
        return next((a for a in self.actions if a.name == name), None)

    def options(self) -> tuple[Intervention, ...]:
        """Every concrete single intervention offered now, in spec order."""
        return tuple(o for a in self.actions for o in a.options())

    def problem(self, interventions: Sequence[Intervention]) -> str | None:
        """None when ``interventions`` is admissible, else what is wrong with it."""
        found = self._problem(tuple(interventions))
        return found if found is None or not self.rule else f"{found} ({self.rule})"

    def _problem(self, items: tuple[Intervention, ...]) -> str | None:
        if not items:
            return None if self.allow_empty else (
                "the empty intervention set is not admissible here; choose one of "
                f"{sorted(self.names)}")
        if self.max_size is not None and len(items) > self.max_size:
            return (f"{len(items)} interventions at once, at most {self.max_size} are "
                    "admissible here")
        if self.distinct and len({i.name for i in items}) != len(items):
            return f"an action appears twice in one set: {[i.name for i in items]}"
        for item in items:
            spec = self.spec(item.name)
            if spec is None:
                return (f"{item.name!r} is not admissible now; admissible actions: "
                        f"{sorted(self.names)}")
            if not spec.allows(item):
                rule = f" ({spec.rule})" if spec.rule else ""
                return (f"{item.name} with arguments {dict(item.args)} is not admissible now"
                        f"{rule}; admissible arguments: {[dict(c) for c in spec.choices]}")
            if spec.needs is not None and all(i.name != spec.needs for i in items):
                rule = f" ({spec.rule})" if spec.rule else ""
                return f"{item.name} is admissible now only together with {spec.needs}{rule}"
        return None

    def __contains__(self, interventions: Sequence[Intervention]) -> bool:
        return self.problem(interventions) is None

    def sets(self, up_to: int | None = None) -> Iterator[tuple[Intervention, ...]]:
        """Every admissible set built from the offered options with at most ``up_to``
        interventions (None: ``max_size``), smallest first (the empty set first when
        admissible). The count grows combinatorially with the size."""
        options = self.options()
        top = len(options) if self.max_size is None else min(self.max_size, len(options))
        top = top if up_to is None else min(top, up_to)
        for size in range(0 if self.allow_empty else 1, top + 1):
            for combo in itertools.combinations(options, size):
                if self.problem(combo) is None:
                    yield combo


@dataclass(frozen=True)
class Event:
    """One observation event, stamped with the tick at which it reaches the agent."""

    tick: int
    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TickResult:
    """What one environment tick returns: ``O_{t+1}``, ``u_t`` and the end flag.

    An environment with deliberation latency also says what happened to the set it was given:
    ``applied`` are the interventions triggered at this tick (landed decisions first, then
    the instantaneous ones; None: exactly the set given), ``deferred`` those that started a
    latency (with their total latency)."""

    events: tuple[Event, ...]
    utility: float
    done: bool
    applied: tuple[Intervention, ...] | None = None
    deferred: tuple[Intervention, ...] = ()


@dataclass(frozen=True)
class PendingDecision:
    """An intervention being decided: decided at ``decided_at``, triggered at ``trigger_at``."""

    intervention: Intervention
    decided_at: int
    trigger_at: int


class Environment(Protocol):
    def reset(self, seed: int) -> tuple[Event, ...]:
        """Start an episode; return the events available at tick 0 (``O_0``)."""
        ...

    def tick(self, interventions: Sequence[Intervention]) -> TickResult:
        """Apply the intervention set triggered now and advance the clock by one tick."""
        ...


class Agent(Protocol):
    """An EP agent. Optionally it has ``connect(interface: Interface)``, called by
    :func:`run_episode` after ``reset``, to ask for admissible sets during the episode."""

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
    """Base class for EP environments: clock, event queue, timed actions, admissibility,
    deliberation latency and RNG.

    Subclasses set ``action_names`` and implement ``_start()`` (initial state; may ``emit``
    events for tick 0) and ``_transition(interventions) -> utility`` (one tick of dynamics from
    ``now`` to ``now + 1``; events emitted there arrive at ``now + 1`` or later), and may
    override ``_finished()``. ``horizon`` ends the episode after that many ticks.

    Optional overrides: ``admissible()`` (the sets admissible in the current state; default:
    any set of ``action_names`` with any arguments), ``decision_latency(intervention)`` (ticks
    this environment charges for deciding it; default 0) and ``_decided(intervention)`` (called
    once per accepted intervention at the tick it is decided, with its total latency, before
    the transition; for bookkeeping such as "which mode was chosen with how much slack").
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
        self._pending: list[PendingDecision] = []
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

    def _decided(self, intervention: Intervention) -> None:
        return None

    def decision_latency(self, intervention: Intervention) -> int:
        """Ticks this environment charges for deciding ``intervention`` (default 0)."""
        return 0

    def admissible(self) -> AdmissibleSets:
        """The intervention sets admissible now (default: any of ``action_names``, any
        arguments, several at once)."""
        return AdmissibleSets(tuple(ActionSpec(n, extra_args=True)
                                    for n in sorted(self.action_names)),
                              max_size=None, distinct=False)

    def pending_decisions(self) -> tuple[PendingDecision, ...]:
        """Decisions not yet triggered, in the order they were decided."""
        return tuple(self._pending)

    def cancel_decision(self, name: str) -> PendingDecision | None:
        """Drop the pending decision on action ``name`` (None if there is none)."""
        for i, pending in enumerate(self._pending):
            if pending.intervention.name == name:
                return self._pending.pop(i)
        return None

    # -- the Environment protocol
    def reset(self, seed: int) -> tuple[Event, ...]:
        self.rng = np.random.default_rng(seed)
        self.now = 0
        self.queue = EventQueue()
        self.actions = TimedActions()
        self._pending = []
        self._started = False
        self._start()
        self._started = True
        return self.queue.pop_due(0)

    def _check(self, interventions: tuple[Intervention, ...]) -> None:
        for item in interventions:
            if not isinstance(item, Intervention):
                raise TypeError(f"an intervention set holds Intervention objects, got {item!r}")
            if item.name not in self.action_names:
                raise ValueError(f"unknown intervention {item.name!r}; this environment accepts "
                                 f"{sorted(self.action_names)}")
        problem = self.admissible().problem(interventions)
        if problem is not None:
            raise ValueError(f"tick {self.now}: {problem}")

    def tick(self, interventions: Sequence[Intervention]) -> TickResult:
        interventions = tuple(interventions)
        self._check(interventions)
        landed = tuple(p.intervention for p in self._pending if p.trigger_at == self.now)
        self._pending = [p for p in self._pending if p.trigger_at != self.now]
        now_set, deferred = list(landed), []
        for item in interventions:
            extra = self.decision_latency(item)
            if not _is_count(extra):
                raise ValueError(f"decision_latency({item.name!r}) must be an int >= 0, got "
                                 f"{extra!r}")
            latency = int(item.latency + extra)
            if latency != item.latency:
                item = replace(item, latency=latency)
            self._decided(item)
            if latency == 0:
                now_set.append(item)
            else:
                if any(p.intervention.name == item.name for p in self._pending):
                    raise ValueError(f"tick {self.now}: a decision on {item.name!r} is already "
                                     "pending; wait for it or cancel it first")
                self._pending.append(PendingDecision(item, self.now, self.now + latency))
                deferred.append(item)
        applied = tuple(now_set)
        utility = float(self._transition(applied))
        self.now += 1
        events = self.queue.pop_due(self.now)
        done = self._finished() or self.now >= self.horizon
        return TickResult(events, utility, done, applied, tuple(deferred))


class Interface:
    """What an agent may ask between ticks (§3.3): the intervention sets admissible in the
    current state and its own pending decisions. Read-only; nothing else about the state."""

    def __init__(self, env: Environment) -> None:
        self._env = env

    @property
    def now(self) -> int:
        return int(getattr(self._env, "now", 0))

    def admissible(self) -> AdmissibleSets:
        ask = getattr(self._env, "admissible", None)
        if ask is None:
            raise TypeError(f"{type(self._env).__name__} does not describe its admissible "
                            "intervention sets; give it an admissible() method (TickEnvironment "
                            "has one)")
        return ask()

    def pending(self) -> tuple[PendingDecision, ...]:
        ask = getattr(self._env, "pending_decisions", None)
        return () if ask is None else tuple(ask())


def episode_seeds(seed: int) -> tuple[int, int]:
    """The (environment, agent) seeds of an episode: two independent children of ``seed``."""
    env_ss, agent_ss = np.random.SeedSequence(seed).spawn(2)
    return int(env_ss.generate_state(1)[0]), int(agent_ss.generate_state(1)[0])


@dataclass(frozen=True)
class TimelineRow:
    """One line of an episode timeline: what happened at which tick."""

    tick: int
    kind: str  # EVENT, DECISION, INTERVENTION or UTILITY
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
    connect = getattr(agent, "connect", None)
    if connect is not None:
        connect(Interface(env))
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
        result = env.tick(chosen)
        if log:
            applied = chosen if result.applied is None else result.applied
            timeline.extend(TimelineRow(t, DECISION, a.name, _json(
                {"args": dict(a.args), "latency": a.latency})) for a in result.deferred)
            timeline.extend(TimelineRow(t, INTERVENTION, a.name, _json(a.args)) for a in applied)
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
