"""Embodied scheduling: tutoring plus evolving cooking processes (paper §5.2.2, App. E).

One worker on one clock (one tick = one tutoring token) cooks dishes and tutors. A dish is
prepared (``prep``, holds a stove slot; ``capacity`` slots), cooks on its own, and fires a
signal ``offset`` ticks after its preparation ends (plus Gaussian jitter); it must then be
finished (``finish``, ``finish`` ticks). A critical dish has quality 1 when its finish
completes inside ``[signal, signal + window]`` and 0 otherwise; a soft dish has quality 1 up to
its keep-warm deadline ``signal + keepwarm`` and ``soft_late_quality`` after (flat keep-warm
scoring, App. E). Tutoring problems have token lengths; ``tutor`` runs the current problem
(optionally bounded by ``max_tokens``, a voluntary bound) and keeps its progress when stopped.
The episode ends when every dish and problem is done, or at ``time_budget`` ticks.

Utility (App. E): ``R * (sum of dish qualities + completed problems) - c_time * T - c_switch *
S - c_check * C`` with T elapsed ticks, S kitchen/tutor mode switches and C checks.

Interfaces (App. E "Compared interaction interfaces"), identical except for signal visibility
and who reacts first; outside tutoring every interface shows a signal at its firing tick:

- ``agentloop``: a signal that fires during a tutoring segment is shown at the segment's end.
- ``poll``: during tutoring the runtime checks every ``poll_interval`` ticks (40; each check
  costs ``c_check``) and, when a new signal is found, stops tutoring and shows it.
- ``reflexpatch``: a signal stops tutoring at once and the engine itself starts finishing that
  dish (after a kitchen action in progress); the controller sees the state after the reflex.
- ``ep``: the signal is shown at its firing tick and tutoring is interrupted there; the
  controller decides (finish now, defer a soft dish, resume tutoring).

The controller (:class:`KitchenAgent`) is shared: at every point where control returns it asks
its policy (:func:`scripted_policy` or an LLM, :mod:`.llm_policies`) for one action among the
admissible ones; an LLM's reply tokens are spent as ``think`` ticks first (App. E: the
controller's own tokens consume ticks).

Scripted controller versus LLM controller: with :func:`scripted_policy` the EP controller
finishes a ready critical dish at once, which is the engine's reflex under ``reflexpatch``, so
on critical dishes the two interfaces can only tie; a scripted comparison checks the pipeline
and is labelled as such (:attr:`KitchenResult.controller`, :data:`SCRIPTED_NOTE`), it is not a
Table 4 result. The paper's comparison (Table 4, Tables 20-23) runs every interface
(AgentLoop, Periodic Poll, ReflexPatch, EP) with the same LLM controller: pass
:class:`eval.engagement.llm_policies.LLMController` as ``policy`` to :func:`run_method`, one
controller per interface (its prompt states that interface's rule).

Departures, with reasons: the one-dish and multi-dish ranges of App. E were lost in our copy,
so every range (dish families, tutor lengths, costs, budgets, jitter, sweeps) is ours, in
:data:`DISH_FAMILIES`, :data:`TUTOR_FAMILIES` and :class:`KitchenConfig`. Multi-dish cases use
the paper's three case families as dish orders (what is prepared first), not exact offsets.
Tutoring text is not generated here: time depends only on problem lengths, and no judge
scores tutoring (App. E: tutoring counts by completed problems).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from eval.engagement.core import Event, Intervention, TickEnvironment, run_episode
from eval.engagement.deliberation import sub_seed
from eval.metrics import CI, bootstrap_ci, bootstrap_ratio_ci

_log = logging.getLogger(__name__)

AGENTLOOP, POLL, REFLEX, EP = "agentloop", "poll", "reflexpatch", "ep"
METHODS = (AGENTLOOP, POLL, REFLEX, EP)
ONE, MULTI = "one", "multi"
KITCHEN_ACTIONS = frozenset({"prep", "finish"})


@dataclass(frozen=True)
class DishFamily:
    critical: bool
    prep: tuple[int, int]
    offset: tuple[int, int]
    finish: tuple[int, int]
    window: tuple[int, int]
    keepwarm: tuple[int, int] = (0, 0)


DISH_FAMILIES: dict[str, DishFamily] = {
    "critical_narrow": DishFamily(True, (10, 20), (60, 140), (5, 10), (12, 25)),
    "critical_medium": DishFamily(True, (10, 20), (60, 140), (5, 10), (30, 60)),
    "critical_wide": DishFamily(True, (10, 20), (60, 140), (5, 10), (80, 140)),
    "soft_keepwarm": DishFamily(False, (10, 20), (60, 140), (5, 10), (20, 30), (150, 260)),
}
TUTOR_FAMILIES: dict[str, tuple[int, int]] = {
    "xs": (40, 80), "short": (100, 180), "medium": (200, 320), "long": (350, 500)}
MULTI_CASES: dict[str, tuple[str, ...]] = {  # dish order per case family (App. E)
    "soft_vs_critical_conflict": ("soft_keepwarm", "critical_narrow", "critical_wide"),
    "staggered_criticals": ("critical_medium", "critical_narrow", "soft_keepwarm"),
    "resume_pressure": ("critical_medium", "soft_keepwarm", "critical_narrow"),
}


@dataclass(frozen=True)
class KitchenConfig:
    setting: str = ONE
    poll_interval: int = 40
    time_budget: int = 3000
    jitter_std: float = 5.0
    reward: float = 1.0
    time_cost: float = 0.0005
    switch_cost: float = 0.01
    check_cost: float = 0.005
    soft_late_quality: float = 0.3
    defer_margin: int = 20  # the scripted policy's safety margin before a keep-warm deadline
    multi_dishes: tuple[int, ...] = (2, 3)
    multi_tutors: tuple[int, ...] = (2, 3)
    multi_capacity: tuple[int, ...] = (1, 2)
    cases_per_cell: int = 5
    seed: int = 42

    def __post_init__(self) -> None:
        if self.setting not in (ONE, MULTI):
            raise ValueError(f"setting must be {ONE!r} or {MULTI!r}, got {self.setting!r}")
        if self.poll_interval < 1 or self.time_budget < 1 or self.cases_per_cell < 1:
            raise ValueError("poll_interval, time_budget and cases_per_cell must be >= 1")


@dataclass(frozen=True)
class Dish:
    did: int
    family: str
    critical: bool
    prep: int
    offset: int
    finish: int
    window: int
    keepwarm: int

    def public(self) -> dict[str, Any]:
        """What the controller is told (not the signal offset)."""
        return {"id": self.did, "family": self.family, "critical": self.critical,
                "prep": self.prep, "finish": self.finish, "window": self.window,
                "keepwarm": self.keepwarm}


@dataclass(frozen=True)
class Case:
    case_id: str
    family: str
    capacity: int
    dishes: tuple[Dish, ...]
    tutors: tuple[int, ...]  # token lengths, in order


def _draw(rng, lo_hi: tuple[int, int]) -> int:
    return int(rng.integers(lo_hi[0], lo_hi[1] + 1))


def make_dish(rng, did: int, family: str) -> Dish:
    f = DISH_FAMILIES[family]
    return Dish(did, family, f.critical, _draw(rng, f.prep), _draw(rng, f.offset),
                _draw(rng, f.finish), _draw(rng, f.window), _draw(rng, f.keepwarm))


def make_cases(cfg: KitchenConfig) -> list[Case]:
    """One-dish: every dish family x tutor family, ``cases_per_cell`` each. Multi-dish: every
    (dishes, tutors, capacity) cell x case family, ``cases_per_cell`` each (App. E sweeps)."""
    import numpy as np

    cases = []
    if cfg.setting == ONE:
        for i, dish_family in enumerate(DISH_FAMILIES):
            for j, tutor_family in enumerate(TUTOR_FAMILIES):
                for k in range(cfg.cases_per_cell):
                    rng = np.random.default_rng(sub_seed(cfg.seed, 1, i, j, k))
                    cases.append(Case(f"{dish_family}/{tutor_family}/{k}", dish_family, 1,
                                      (make_dish(rng, 0, dish_family),),
                                      (_draw(rng, TUTOR_FAMILIES[tutor_family]),)))
        return cases
    for n_d in cfg.multi_dishes:
        for n_t in cfg.multi_tutors:
            for cap in cfg.multi_capacity:
                for c, (name, order) in enumerate(MULTI_CASES.items()):
                    for k in range(cfg.cases_per_cell):
                        rng = np.random.default_rng(sub_seed(cfg.seed, 2, n_d, n_t, cap, c, k))
                        fams = [order[i % len(order)] for i in range(n_d)]
                        tutor_fams = list(TUTOR_FAMILIES)[1:]
                        tutors = tuple(_draw(rng, TUTOR_FAMILIES[tutor_fams[int(rng.integers(3))]])
                                       for _ in range(n_t))
                        cases.append(Case(f"{name}/d{n_d}t{n_t}c{cap}/{k}", name, cap,
                                          tuple(make_dish(rng, i, f) for i, f in enumerate(fams)),
                                          tutors))
    return cases


class KitchenEnv(TickEnvironment):
    action_names = frozenset({"prep", "finish", "tutor", "wait", "interrupt"})

    def __init__(self, cfg: KitchenConfig, case: Case, method: str) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        super().__init__(cfg.time_budget)
        self.cfg, self.case, self.method = cfg, case, method

    def _start(self) -> None:
        self.dishes = {d.did: {"dish": d, "state": "raw", "signal": None, "seen": None,
                               "done": None, "quality": 0.0, "finish_start": None,
                               "jitter": round(float(self.rng.normal(0, self.cfg.jitter_std)))}
                       for d in self.case.dishes}
        self.tutor_left = list(self.case.tutors)
        self.tutor_idx = 0
        self.completed = 0
        self.activity: dict[str, Any] | None = None
        self.buffer: list[int] = []  # fired signals not yet shown
        self.reflex_queue: list[int] = []
        self.mode: str | None = None
        self.switches = self.checks = self.interruptions = 0
        self.emit("start", {"dishes": [d.public() for d in self.case.dishes],
                            "tutors": list(self.case.tutors), "capacity": self.case.capacity})

    def _on_stove(self) -> int:
        return sum(d["state"] in ("prepping", "cooking", "ready", "finishing")
                   for d in self.dishes.values())

    def _begin(self, name: str, args: dict[str, Any], reflex: bool = False) -> float:
        """Start an activity; return its switch cost (``c_switch`` on a kitchen/tutor change)."""
        if self.activity is not None:
            raise ValueError(f"cannot start {name!r} at tick {self.now}: busy with "
                             f"{self.activity['name']!r}")
        if name in KITCHEN_ACTIONS:
            d = self.dishes.get(args.get("dish"))
            if d is None:
                raise ValueError(f"no dish {args.get('dish')!r}")
            if name == "prep":
                if d["state"] != "raw":
                    raise ValueError(f"dish {d['dish'].did} is not raw (it is {d['state']})")
                if self._on_stove() >= self.case.capacity:
                    raise ValueError(f"all {self.case.capacity} stove slots are busy")
                d["state"], duration = "prepping", d["dish"].prep
            else:
                if d["state"] != "ready":
                    raise ValueError(f"dish {d['dish'].did} cannot be finished: it is {d['state']}")
                # a reflex starts at the end of this transition, an intervention at its start
                d["state"], d["finish_start"] = "finishing", self.now + int(reflex)
                duration = d["dish"].finish
            mode = "kitchen"
        elif name == "tutor":
            if self.tutor_idx >= len(self.tutor_left):
                raise ValueError("every tutoring problem is already complete")
            left = self.tutor_left[self.tutor_idx]
            bound = args.get("max_tokens")
            duration, mode = (left if bound is None else max(1, min(int(bound), left))), "tutor"
        else:  # wait
            duration, mode = max(1, int(args.get("ticks", 1))), None
        cost = 0.0
        if mode is not None and self.mode is not None and mode != self.mode:
            self.switches += 1
            cost = self.cfg.switch_cost
        self.mode = mode or self.mode
        self.activity = {"name": name, "left": duration, "args": args, "reflex": reflex}
        return cost

    def _stop_tutor(self) -> None:
        self.activity = None
        self.interruptions += 1

    def _show(self, dids: list[int], **extra: Any) -> None:
        for did in dids:
            d = self.dishes[did]
            d["seen"] = self.now + 1
            self.emit("signal", {"dish": did, "fired": d["signal"], **extra})

    def _transition(self, interventions: Sequence[Intervention]) -> float:
        cfg = self.cfg
        u = -cfg.time_cost
        for item in interventions:
            if item.name == "interrupt":
                if self.activity is None or self.activity["name"] != "tutor":
                    raise ValueError(f"interrupt at tick {self.now}: nothing is being tutored")
                self._stop_tutor()
            else:
                u -= self._begin(item.name, dict(item.args))
        act = self.activity
        done_payload: dict[str, Any] | None = None
        if act is not None:
            act["left"] -= 1
            if act["name"] == "tutor":
                self.tutor_left[self.tutor_idx] -= 1
                if self.tutor_left[self.tutor_idx] == 0:
                    self.tutor_idx += 1
                    self.completed += 1
                    u += cfg.reward
            if act["left"] == 0:
                self.activity = None
                done_payload = {"activity": act["name"], **act["args"]}
                if act["name"] == "prep":
                    d = self.dishes[act["args"]["dish"]]
                    d["state"] = "cooking"
                    d["signal"] = self.now + 1 + max(1, d["dish"].offset + d["jitter"])
                elif act["name"] == "finish":
                    d = self.dishes[act["args"]["dish"]]
                    dish, end = d["dish"], self.now + 1
                    d["state"], d["done"] = "done", end
                    if dish.critical:
                        d["quality"] = 1.0 if end <= d["signal"] + dish.window else 0.0
                    else:
                        d["quality"] = 1.0 if end <= d["signal"] + dish.keepwarm \
                            else cfg.soft_late_quality
                    u += cfg.reward * d["quality"]
        fired = [did for did, d in self.dishes.items()
                 if d["state"] == "cooking" and d["signal"] == self.now + 1]
        for did in fired:
            self.dishes[did]["state"] = "ready"
        tutoring = self.activity is not None and self.activity["name"] == "tutor"
        show: list[int] = []
        if self.method in (EP, REFLEX) or not tutoring:
            show = self.buffer + fired
            self.buffer = []
        else:
            self.buffer.extend(fired)
            if self.method == POLL and (self.now + 1) % cfg.poll_interval == 0:
                self.checks += 1
                u -= cfg.check_cost
                if self.buffer:
                    show, self.buffer = self.buffer, []
                    self._stop_tutor()
                    done_payload = {"activity": "tutor", "stopped_by": "poll"}
        if self.method == REFLEX:
            self.reflex_queue.extend(d for d in show if d not in self.reflex_queue)
            if self.reflex_queue and self.activity is not None \
                    and self.activity["name"] == "tutor":
                self._stop_tutor()
                done_payload = {"activity": "tutor", "stopped_by": "reflex"}
            if self.reflex_queue and self.activity is None:
                did = self.reflex_queue.pop(0)
                u -= self._begin("finish", {"dish": did}, reflex=True)
        if done_payload is not None:
            if done_payload["activity"] == "tutor":
                done_payload["tutors"] = list(self.tutor_left)
            if self.activity is not None and self.activity["reflex"]:
                done_payload["busy_with_reflex"] = self.activity["args"]["dish"]
            self.emit("done", done_payload)
        if show:
            busy = self.activity["args"]["dish"] if self.activity is not None \
                and self.activity["reflex"] else None
            self._show(show, busy_with_reflex=busy)
        return u

    def _finished(self) -> bool:
        return (self.activity is None and self.tutor_idx >= len(self.tutor_left)
                and all(d["state"] == "done" for d in self.dishes.values()))

    def metrics(self) -> dict[str, float]:
        ds = list(self.dishes.values())
        crit = [d for d in ds if d["dish"].critical]
        soft = [d for d in ds if not d["dish"].critical]
        fired = [d for d in ds if d["signal"] is not None and d["signal"] <= self.now]
        return {"dish_success": sum(d["quality"] == 1.0 for d in ds), "dishes": len(ds),
                "critical_success": sum(d["quality"] == 1.0 for d in crit),
                "criticals": len(crit), "soft_quality": sum(d["quality"] for d in soft),
                "softs": len(soft), "tutor_done": self.completed, "tutors": len(self.tutor_left),
                "ticks": self.now, "switches": self.switches, "checks": self.checks,
                "interruptions": self.interruptions, "fired": len(fired),
                "visibility_delay": sum((d["seen"] if d["seen"] is not None else self.now)
                                        - d["signal"] for d in fired),
                "finish_delay": sum((d["finish_start"] if d["finish_start"] is not None
                                     else self.now) - d["signal"] for d in fired)}


# ----------------------------------------------------------------------------- controller
Policy = Callable[[dict[str, Any], list[dict[str, Any]]], tuple[int, int]]
"""``policy(state, options) -> (index of the chosen option, think ticks spent)``."""


def scripted_policy(state: dict[str, Any], options: list[dict[str, Any]]) -> tuple[int, int]:
    """The fixed rule used by the scripted variant: finish a ready critical dish (tightest
    window first); finish a ready soft dish when its keep-warm deadline is near or there is
    nothing else to do; prepare a raw dish when a slot is free; otherwise tutor (bounded so a
    deferred soft dish is not missed); otherwise wait. Spends no think ticks."""
    def first(pred) -> int | None:
        hits = [i for i, o in enumerate(options) if pred(o)]
        return min(hits, key=lambda i: options[i].get("deadline", 0)) if hits else None

    for pred in (lambda o: o["action"] == "finish" and o["critical"],
                 lambda o: o["action"] == "finish" and o["urgent"],
                 lambda o: o["action"] == "prep",
                 lambda o: o["action"] == "tutor",
                 lambda o: o["action"] == "finish",
                 lambda o: o["action"] == "wait"):
        choice = first(pred)
        if choice is not None:
            return choice, 0
    return 0, 0


class KitchenAgent:
    """Tracks what the interface has shown and asks ``policy`` at each point control returns."""

    def __init__(self, cfg: KitchenConfig, method: str, policy: Policy = scripted_policy) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        self.cfg, self.method, self.policy = cfg, method, policy

    def reset(self, seed: int) -> None:
        self.busy = self.tutoring = False
        self.plan: list[Intervention] = []
        self.dishes: dict[int, dict[str, Any]] = {}
        self.tutors: list[int] = []
        self.capacity = 1
        self.decisions = 0

    def options(self, tick: int) -> list[dict[str, Any]]:
        """The admissible actions given what the controller has been shown."""
        opts: list[dict[str, Any]] = []
        on_stove = sum(d["state"] != "raw" and d["state"] != "done" for d in self.dishes.values())
        soft_deadline = None
        for did, d in sorted(self.dishes.items()):
            info = d["info"]
            if d["state"] == "ready":
                end = d["fired"] + (info["window"] if info["critical"] else info["keepwarm"])
                urgent = info["critical"] or end - tick - info["finish"] <= self.cfg.defer_margin
                opts.append({"action": "finish", "dish": did, "critical": info["critical"],
                             "deadline": end, "urgent": urgent})
                if not info["critical"]:  # latest tick to start its finish with the margin
                    latest = end - info["finish"] - self.cfg.defer_margin
                    soft_deadline = latest if soft_deadline is None else min(soft_deadline, latest)
            elif d["state"] == "raw" and on_stove < self.capacity:
                opts.append({"action": "prep", "dish": did, "critical": info["critical"]})
        left = next((n for n in self.tutors if n > 0), 0)
        if left:
            bound = None
            if soft_deadline is not None:
                bound = max(1, soft_deadline - tick)
            opts.append({"action": "tutor", "left": left, "max_tokens": bound})
        opts.append({"action": "wait", "ticks": 10})
        return opts

    def act(self, tick: int, events: tuple[Event, ...], utility: float) -> list[Intervention]:
        interrupt = False
        for ev in events:
            p = ev.payload
            if ev.kind == "start":
                self.dishes = {d["id"]: {"info": d, "state": "raw", "fired": None}
                               for d in p["dishes"]}
                self.tutors, self.capacity = list(p["tutors"]), p["capacity"]
            elif ev.kind == "done":
                self.busy = False
                if p["activity"] == "tutor":
                    self.tutoring = False
                    self.tutors = list(p["tutors"])
                if p["activity"] == "finish":
                    self.dishes[p["dish"]]["state"] = "done"
                if p.get("busy_with_reflex") is not None:
                    self._reflex(p["busy_with_reflex"])
            elif ev.kind == "signal":
                d = self.dishes[p["dish"]]
                d["state"], d["fired"] = "ready", p["fired"]
                if p.get("busy_with_reflex") is not None:
                    self._reflex(p["busy_with_reflex"])
                elif self.tutoring and self.method == EP:
                    interrupt = True
        out: list[Intervention] = []
        if interrupt:
            out.append(Intervention("interrupt"))
            idx, start = self._tutor_at
            self.tutors[idx] -= tick - start
            self.busy = self.tutoring = False
        if not self.busy and not self.plan:
            self._decide(tick)
        if not self.busy and self.plan:
            nxt = self.plan.pop(0)
            out.append(nxt)
            self.busy = True
            self.tutoring = nxt.name == "tutor"
            if self.tutoring:
                self._tutor_at = (next(i for i, n in enumerate(self.tutors) if n > 0), tick)
            if nxt.name == "finish":
                self.dishes[nxt.args["dish"]]["state"] = "finishing"
            elif nxt.name == "prep":
                self.dishes[nxt.args["dish"]]["state"] = "cooking"
        return out

    def _reflex(self, did: int) -> None:
        self.busy, self.tutoring = True, False
        self.dishes[did]["state"] = "finishing"

    def _decide(self, tick: int) -> None:
        opts = self.options(tick)
        if len(opts) == 1:
            return  # only waiting is possible: stay idle until an event arrives
        choice, think = self.policy(self._state(tick), opts)
        self.decisions += 1
        opt = opts[choice if 0 <= choice < len(opts) else len(opts) - 1]
        plan = [Intervention("wait", {"ticks": think})] if think > 0 else []
        if opt["action"] in ("finish", "prep"):
            plan.append(Intervention(opt["action"], {"dish": opt["dish"]}))
        elif opt["action"] == "tutor":
            args = {} if opt["max_tokens"] is None else {"max_tokens": opt["max_tokens"]}
            plan.append(Intervention("tutor", args))
        else:
            plan.append(Intervention("wait", {"ticks": opt.get("ticks", 10)}))
        self.plan = plan

    def _state(self, tick: int) -> dict[str, Any]:
        return {"tick": tick, "dishes": self.dishes, "tutors": self.tutors,
                "capacity": self.capacity, "method": self.method}

    def finish(self, tick: int, events: tuple[Event, ...], utility: float) -> None:
        pass


# ----------------------------------------------------------------------------- experiments
SCRIPTED = "scripted"
SCRIPTED_NOTE = ("scripted controller: EP and ReflexPatch react to a critical signal with the "
                 "same rule, so they tie there by construction; a pipeline check, not a result")


def controller_name(policy: Policy) -> str:
    """``"scripted"`` for :func:`scripted_policy`, else the policy's ``name`` attribute (the
    LLM controller gives ``llm:<model>``), else its class name."""
    if policy is scripted_policy:
        return SCRIPTED
    return str(getattr(policy, "name", type(policy).__name__))


@dataclass
class KitchenResult:
    """One interface's episodes. ``controller`` names who chose the actions (``"scripted"``
    or ``llm:<model>``); only an LLM-controlled comparison is a Table 4 result."""

    method: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    timelines: list[list[dict[str, Any]]] = field(default_factory=list)
    controller: str = SCRIPTED

    @property
    def note(self) -> str:
        """:data:`SCRIPTED_NOTE` for a scripted run, else an empty string."""
        return SCRIPTED_NOTE if self.controller == SCRIPTED else ""

    def summary(self, seed: int = 42, n_boot: int = 1000) -> dict[str, CI]:
        """Tables 20 / 22 cells: utility (mean), dish and critical-dish success, soft quality,
        visibility and finish delays (ratios of aggregates), with bootstrap 95% CIs."""
        def mean(values) -> CI:
            return CI(*bootstrap_ci(values, n_boot, seed=seed))

        def ratio(numerators, denominators) -> CI:
            return CI(*bootstrap_ratio_ci(numerators, denominators, n_boot, seed=seed))

        def col(k: str) -> list[float]:
            return [float(r[k]) for r in self.rows]
        return {"utility": mean(col("utility")),
                "dish": ratio(col("dish_success"), col("dishes")),
                "critical": ratio(col("critical_success"), col("criticals")),
                "soft_quality": ratio(col("soft_quality"), col("softs")),
                "visibility_delay": ratio(col("visibility_delay"), col("fired")),
                "finish_delay": ratio(col("finish_delay"), col("fired"))}


def run_method(cfg: KitchenConfig, method: str, policy: Policy = scripted_policy,
               cases: Sequence[Case] | None = None, log: bool = False, *,
               more_policies: Sequence[Policy] = ()) -> KitchenResult:
    """Every case of ``cfg`` under one interface; cases and seeds are shared by all methods.

    ``more_policies``: further controllers of the same kind (e.g. LLM controllers, each with a
    client of its own) to run cases concurrently, one thread per controller; a case runs start
    to end on one controller, its seed is the case's own, and rows come back in case order, so
    the result is the sequential run's (an LLM server that batches requests makes it faster)."""
    result = KitchenResult(method, controller=controller_name(policy))
    todo = list(make_cases(cfg) if cases is None else cases)
    policies = [policy, *more_policies]
    names = {controller_name(p) for p in policies}
    if len(names) > 1:
        raise ValueError(f"run_method: the controllers must be of one kind, got {sorted(names)}")
    started = time.monotonic()
    done = 0

    def one(i: int, case: Case, controller: Policy) -> tuple[dict[str, Any], Any]:
        env, agent = KitchenEnv(cfg, case, method), KitchenAgent(cfg, method, controller)
        ep = run_episode(env, agent, sub_seed(cfg.seed, i), cfg.time_budget, log=log)
        row = {"method": method, "setting": cfg.setting, "case_id": case.case_id,
               "family": case.family, "episode": i, "utility": float(sum(ep.utilities)),
               **env.metrics()}
        return row, ep

    def progress(row: dict[str, Any]) -> None:
        _log.info("kitchen %s (%s, %s): case %d/%d, utility %.2f, %.0fs elapsed", method,
                  cfg.setting, result.controller, done, len(todo), row["utility"],
                  time.monotonic() - started)

    outcomes: list[tuple[dict[str, Any], Any] | None] = [None] * len(todo)
    if len(policies) == 1:
        for i, case in enumerate(todo):
            outcomes[i] = one(i, case, policy)
            done += 1
            progress(outcomes[i][0])
    else:
        import queue
        from concurrent.futures import ThreadPoolExecutor, as_completed

        free: queue.Queue[Policy] = queue.Queue()
        for p in policies:
            free.put(p)

        def on_a_free_controller(i: int, case: Case) -> tuple[dict[str, Any], Any]:
            controller = free.get()
            try:
                return one(i, case, controller)
            finally:
                free.put(controller)

        with ThreadPoolExecutor(max_workers=len(policies),
                                thread_name_prefix=f"kitchen-{method}") as pool:
            futures = {pool.submit(on_a_free_controller, i, case): i
                       for i, case in enumerate(todo)}
            try:
                for future in as_completed(futures):
                    outcomes[futures[future]] = future.result()
                    done += 1
                    progress(outcomes[futures[future]][0])
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    for i, outcome in enumerate(outcomes):
        assert outcome is not None
        row, ep = outcome
        result.rows.append(row)
        if log:
            result.timelines.append(ep.rows(method=method, episode=i))
    return result


def compare(cfg: KitchenConfig, policy: Policy = scripted_policy,
            methods: Sequence[str] = METHODS, log: bool = False) -> dict[str, KitchenResult]:
    cases = make_cases(cfg)
    return {m: run_method(cfg, m, policy, cases, log) for m in methods}
