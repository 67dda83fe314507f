"""Digital assistant with asynchronous emails (paper §5.2.1, App. D, Tables 17 and 19).

One episode: the assistant writes one workplace main task (replayed from a cached output, one
tick per generated token, 0.05 time units per token, so 20 ticks per time unit) while emails
arrive as a Poisson process (rate 0.2 per time unit) with an urgency (high / medium / low,
probabilities 0.4 / 0.4 / 0.2) and a deadline (slack uniform in 5-15 / 15-25 / 25-35 units).
The assistant is one worker doing one timed activity at a time: ``generate`` (a persistent,
interruptible action over the current main-task unit), ``check_inbox``, ``open``, ``handle``
(1.0), ``remind`` (0.1), ``resume`` (return to the main task, 0.1) and ``wait``; ``interrupt``
stops generation at once and ``ignore`` drops an email at once. Generation resumes where it
stopped (the partial output is kept, as in the paper's replay). Triage (the triage model's turn,
0.2 units) is the deliberation latency of the decision it produces (:mod:`.core`): the agent
sends ``handle``, ``remind`` or ``ignore`` with ``latency`` = 0.2 units right after opening the
email, and it is triggered 0.2 units later; the worker does nothing else meanwhile (the only
admissible set while a decision is pending is the empty one).

Interfaces (App. D "Compared decision interfaces"); they share the environment, email stream,
main-task outputs, triage policy and scoring, and differ only in when emails reach the agent:

- ``agentloop`` (the paper's Step): no email events; the agent checks the inbox only after the
  current main-task unit finishes (and every ``idle_wait`` units once the main task is done).
- ``poll`` (Patch): as AgentLoop, plus generation stops at every multiple of ``poll_interval``
  (15 units) on the clock to check the inbox, process it and resume.
- ``ep``: the environment pushes an ``email`` event at each arrival tick and a ``reminder``
  event when a reminder falls due; the agent interrupts generation, opens, triages, acts and
  resumes.

Scoring (Table 19; formulas (1)-(4) were lost in our copy, these are our reading of the text):
utility = 0.4 x progress units + 0.8 x [main task complete] + 0.4 x on-time handled emails
- 0.5 x timed-out emails - 0.005 x focus switches - 0.005 x main-stream interruptions, paid on
the tick they happen. Progress units are ``target_steps`` x generated / total main tokens in both
settings. An email times out when its deadline passes before its handling completes (late
handling earns 0). Main score M = progress / target_steps; email score E = sum of urgency
weights (1.2 / 0.5 / 0.1) of on-time emails over the weights of all scored emails (1.0 when
there are none); balanced = 0.6 M + 0.4 E - 0.5 |M - E|. Emails whose deadline lies beyond the
horizon and that were not handled are left out of the email score and timeout rate.
First-response latency is the time from arrival to the tick the agent opens the email; an email
never opened counts until the end of the episode (censored). A focus switch is any change
between main-task work and email work (``resume`` back, or the first email activity after
main-task work). The paper's per-email "action recommendation distribution" is not modelled:
the triage policy sees the email itself. Each email may be deferred with a reminder at most
once; a second ``remind`` decision is handled instead (our rule, so episodes cannot stall).

Not guaranteed: the paper's numbers (different main tasks, emails, triage model and the lost
formulas); the direction of Table 3 is what the tests and the CLI check.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from eval.engagement.core import (
    ActionSpec,
    AdmissibleSets,
    Event,
    Intervention,
    TickEnvironment,
    run_episode,
)
from eval.engagement.deliberation import sub_seed
from eval.engagement.texts import EMAILS, MAIN_TASKS, URGENCIES, TaskSpec, scripted_units
from eval.metrics import CI, bootstrap_ci, bootstrap_ratio_ci

_log = logging.getLogger(__name__)

AGENTLOOP, POLL, EP = "agentloop", "poll", "ep"
METHODS = (AGENTLOOP, POLL, EP)
SINGLE, MILESTONES = "single", "milestones"
TICKS_PER_UNIT = 20  # 0.05 time units per generated token (Table 17)

HANDLE, REMIND, IGNORE = "handle", "remind", "ignore"
ACTIVITIES = ("generate", "check_inbox", "open", "handle", "remind", "resume", "wait")
EMAIL_WORK = frozenset({"check_inbox", "open", "handle", "remind", IGNORE})


@dataclass(frozen=True)
class AssistantConfig:
    """Table 17 environment and Table 19 scoring; ``milestone_tokens``, ``poll_interval`` of
    AgentLoop's idle checks (``idle_wait``) and the episode counts are our choices."""

    horizon_units: float = 90.0
    arrival_rate: float = 0.2
    urgency_probs: tuple[float, float, float] = (0.4, 0.4, 0.2)
    slack_units: tuple[tuple[float, float], ...] = ((5, 15), (15, 25), (25, 35))
    target_steps: int = 4
    milestone_tokens: tuple[int, int] = (250, 350)  # scripted main-task outputs
    check_units: float = 0.1
    open_units: float = 0.1
    handle_units: float = 1.0
    remind_units: float = 0.1
    resume_units: float = 0.1
    triage_units: float = 0.2
    poll_interval: float = 15.0
    idle_wait: float = 1.0
    progress_reward: float = 0.4
    completion_bonus: float = 0.8
    on_time_reward: float = 0.4
    late_reward: float = 0.0
    timeout_penalty: float = 0.5
    switch_penalty: float = 0.005
    interrupt_penalty: float = 0.005
    urgency_weights: tuple[float, float, float] = (1.2, 0.5, 0.1)
    balanced_main_weight: float = 0.6
    balanced_gap_penalty: float = 0.5
    setting: str = MILESTONES
    n_seeds: int = 20
    episodes_per_seed: int = 5
    seed: int = 42

    def __post_init__(self) -> None:
        if self.setting not in (SINGLE, MILESTONES):
            raise ValueError(f"setting must be {SINGLE!r} or {MILESTONES!r}, got {self.setting!r}")
        if not math.isclose(sum(self.urgency_probs), 1.0):
            raise ValueError(f"urgency_probs must sum to 1, got {self.urgency_probs}")
        if self.horizon_units <= 0 or self.arrival_rate < 0 or self.poll_interval <= 0:
            raise ValueError("horizon_units and poll_interval must be > 0, arrival_rate >= 0")
        if self.n_seeds < 1 or self.episodes_per_seed < 1:
            raise ValueError("n_seeds and episodes_per_seed must be >= 1")

    def ticks(self, units: float) -> int:
        return max(1, round(units * TICKS_PER_UNIT))

    @property
    def horizon(self) -> int:
        return round(self.horizon_units * TICKS_PER_UNIT)


@dataclass(frozen=True)
class MainOutput:
    """A cached main-task output: per milestone its text and generated-token count."""

    task_id: str
    units: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        if not self.units or any(n < 1 for _, n in self.units):
            raise ValueError(f"main output {self.task_id!r} needs units of >= 1 token each")

    def for_setting(self, setting: str) -> tuple[tuple[str, int], ...]:
        """Milestones: the units as they are; Single: one unit holding all of them."""
        if setting == MILESTONES:
            return self.units
        return ((" ".join(t for t, _ in self.units), sum(n for _, n in self.units)),)


def scripted_outputs(cfg: AssistantConfig, specs: Sequence[TaskSpec] = MAIN_TASKS) -> list[MainOutput]:
    return [MainOutput(s.task_id, tuple(scripted_units(s, cfg.milestone_tokens, sub_seed(cfg.seed, i))))
            for i, s in enumerate(specs)]


@dataclass
class Email:
    eid: int
    arrival: int
    urgency: str
    deadline: int
    subject: str
    body: str
    opened: int | None = None
    handled: int | None = None
    timed_out: bool = False
    ignored: bool = False
    reminders: int = 0
    reminder_due: int | None = None
    seen: int | None = None  # first tick the agent received it in an event

    def view(self) -> dict[str, Any]:
        return {"id": self.eid, "urgency": self.urgency, "deadline": self.deadline,
                "subject": self.subject, "body": self.body, "reminded": self.reminders > 0}


class AssistantEnv(TickEnvironment):
    """The email-and-main-task world; ``method`` only decides whether emails are pushed."""

    action_names = frozenset({*ACTIVITIES, "interrupt", IGNORE})

    def __init__(self, cfg: AssistantConfig, outputs: Sequence[MainOutput], method: str,
                 stream: Sequence[tuple[int, str, int]] | None = None) -> None:
        """``stream`` (for scripted timelines) replaces the Poisson arrivals by fixed
        ``(arrival tick, urgency, deadline tick)`` emails."""
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if not outputs:
            raise ValueError("at least one main-task output is needed (see scripted_outputs)")
        super().__init__(cfg.horizon)
        self.cfg, self.outputs, self.method = cfg, list(outputs), method
        self.push = method == EP
        self.stream = None if stream is None else [tuple(e) for e in stream]
        for arrival, urgency, deadline in self.stream or ():
            if urgency not in URGENCIES or not 1 <= arrival <= deadline:
                raise ValueError(f"stream email {(arrival, urgency, deadline)}: need an urgency "
                                 f"in {URGENCIES} and 1 <= arrival tick <= deadline tick")

    def _start(self) -> None:
        cfg = self.cfg
        self.output = self.outputs[int(self.rng.integers(len(self.outputs)))]
        self.units = list(self.output.for_setting(cfg.setting))
        self.total_tokens = sum(n for _, n in self.units)
        self.unit, self.unit_done, self.tokens_done = 0, 0, 0
        self.emails: list[Email] = []
        t = 0.0
        for arrival, urgency, deadline in self.stream or ():
            subject, body = EMAILS[urgency][0]
            self.emails.append(Email(len(self.emails), arrival, urgency, deadline, subject, body))
            if self.push:
                self.emit("email", self.emails[-1].view(), at=arrival)
        while cfg.arrival_rate > 0 and self.stream is None:
            t += float(self.rng.exponential(1.0 / cfg.arrival_rate))
            if t >= cfg.horizon_units:
                break
            u = int(self.rng.choice(3, p=cfg.urgency_probs))
            lo, hi = cfg.slack_units[u]
            slack = float(self.rng.uniform(lo, hi))
            subject, body = EMAILS[URGENCIES[u]][int(self.rng.integers(len(EMAILS[URGENCIES[u]])))]
            arrival = max(1, math.ceil(t * TICKS_PER_UNIT))
            email = Email(len(self.emails), arrival, URGENCIES[u],
                          arrival + round(slack * TICKS_PER_UNIT), subject, body)
            self.emails.append(email)
            if self.push:
                self.emit("email", email.view(), at=arrival)
        self.activity: dict[str, Any] | None = None
        self.focus = "main"
        self.switches = self.interruptions = self.resumptions = 0
        self.stopped_mid_unit = False

    # -- the interface
    def admissible(self) -> AdmissibleSets:
        """What the assistant may do now (one worker): nothing while a decision is pending or
        an activity other than generation runs; while generating, ``interrupt`` alone or with
        the next activity; when idle, one activity. Email actions name emails the agent has
        been shown (pushed, or listed by an inbox check); ``remind`` only once per email."""
        if self.pending_decisions():
            return AdmissibleSets((), rule="the assistant is deciding (triage); wait for it")
        if self.activity is not None and self.activity["name"] != "generate":
            return AdmissibleSets((), rule=f"the assistant is busy with "
                                           f"{self.activity['name']!r} until it is done")
        generating = self.activity is not None
        needs = "interrupt" if generating else None
        rule = "the assistant is busy generating: interrupt it first" if generating else ""
        shown = [e for e in self.emails if e.seen is not None and e.seen <= self.now]

        def spec(name: str, choices=({},), extra: bool = False) -> ActionSpec:
            return ActionSpec(name, tuple(choices), extra, rule, needs)

        specs = []
        if self.focus == "main" and self.unit < len(self.units) and not generating:
            specs.append(spec("generate", extra=True))
        if self.focus != "main":
            specs.append(spec("resume"))
        specs.append(spec("check_inbox"))
        if shown:
            ids = [{"email": e.eid} for e in shown]
            specs += [spec("open", ids), spec(HANDLE, ids), spec(IGNORE, ids)]
            remindable = [{"email": e.eid, "after_units": 5.0} for e in shown if e.reminders < 1]
            if remindable:
                specs.append(spec(REMIND, remindable, extra=True))
        specs.append(spec("wait", extra=True))
        if generating:
            specs.insert(0, ActionSpec("interrupt"))
        return AdmissibleSets(tuple(specs), max_size=2 if generating else 1)

    # -- helpers
    def _email(self, args: dict[str, Any]) -> Email:
        eid = args.get("email")
        if not isinstance(eid, int) or not 0 <= eid < len(self.emails) \
                or self.emails[eid].arrival > self.now:
            raise ValueError(f"no arrived email with id {eid!r} at tick {self.now}")
        return self.emails[eid]

    def visible(self) -> list[dict[str, Any]]:
        """What an inbox check shows: arrived, unhandled, not ignored, and not waiting for a
        reminder that is not yet due (emails past their deadline still show)."""
        return [e.view() for e in self.emails
                if e.arrival <= self.now and e.handled is None and not e.ignored
                and (e.reminder_due is None or e.reminder_due <= self.now)]

    def _deliver(self, kind: str, payload: dict[str, Any]) -> None:
        self.emit(kind, payload)
        for v in payload.get("emails", []):
            e = self.emails[v["id"]]
            e.seen = self.now + 1 if e.seen is None else e.seen

    def _begin(self, item: Intervention) -> float:
        cfg, name, args = self.cfg, item.name, dict(item.args)
        if self.activity is not None:
            raise ValueError(f"cannot start {name!r} at tick {self.now}: the assistant is still "
                             f"busy with {self.activity['name']!r} (interrupt generation first)")
        penalty = 0.0
        if name == "generate":
            if self.unit >= len(self.units):
                raise ValueError("the main task is already complete; nothing to generate")
            if self.focus != "main":
                raise ValueError("generate after email work needs a 'resume' first")
            if self.unit_done > 0:
                self.resumptions += 1
            left = self.units[self.unit][1] - self.unit_done
            limit = args.get("max_ticks")
            duration = left if limit is None else max(1, min(int(limit), left))
        elif name == "wait":
            duration = max(1, int(args.get("ticks", 1)))
        else:
            if name in EMAIL_WORK and self.focus == "main":
                self.focus, self.switches, penalty = "email", self.switches + 1, cfg.switch_penalty
            if name == "resume":
                if self.focus == "main":
                    raise ValueError("resume only returns from email work to the main task")
                self.focus, self.switches, penalty = "main", self.switches + 1, cfg.switch_penalty
            units = {"check_inbox": cfg.check_units, "open": cfg.open_units,
                     "handle": cfg.handle_units, "remind": cfg.remind_units,
                     "resume": cfg.resume_units}[name]
            duration = cfg.ticks(units)
            if name in ("open", "handle", "remind"):
                email = self._email(args)
                if name == "open" and email.opened is None:
                    email.opened = self.now
                if name == "remind":
                    if email.reminders >= 1:
                        raise ValueError(f"email {email.eid} was already deferred once; handle "
                                         "or ignore it")
                    after = float(args.get("after_units", 5.0))
                    email.reminders += 1
                    email.reminder_due = self.now + duration + cfg.ticks(max(after, 0.05))
                    if self.push:
                        self.emit("reminder", email.view() | {"reminded": True},
                                  at=email.reminder_due)
        self.activity = {"name": name, "left": duration, "args": args}
        return penalty

    def _interrupt(self) -> float:
        if self.activity is None or self.activity["name"] != "generate":
            raise ValueError(f"interrupt at tick {self.now}: nothing is being generated")
        self.activity = None
        self.interruptions += 1
        return -self.cfg.interrupt_penalty

    def _ignore(self, item: Intervention) -> float:
        email = self._email(dict(item.args))
        email.ignored = True
        if self.focus == "main":
            self.focus, self.switches = "email", self.switches + 1
            return -self.cfg.switch_penalty
        return 0.0

    def _transition(self, interventions: Sequence[Intervention]) -> float:
        cfg, u = self.cfg, 0.0
        for item in interventions:
            if item.name == "interrupt":
                u += self._interrupt()
            elif item.name == IGNORE:
                u += self._ignore(item)
            else:
                u -= self._begin(item)
        act = self.activity
        if act is not None:
            act["left"] -= 1
            if act["name"] == "generate":
                self.unit_done += 1
                self.tokens_done += 1
                u += cfg.progress_reward * cfg.target_steps / self.total_tokens
                if self.unit_done == self.units[self.unit][1]:
                    self.unit, self.unit_done = self.unit + 1, 0
                    complete = self.unit == len(self.units)
                    u += cfg.completion_bonus if complete else 0.0
                    self.activity = None
                    self.emit("done", {"activity": "generate", "unit_complete": True,
                                       "main_complete": complete})
                elif act["left"] == 0:
                    self.activity = None
                    self.interruptions += 1
                    u -= cfg.interrupt_penalty
                    self.emit("done", {"activity": "generate", "unit_complete": False,
                                       "main_complete": False})
            elif act["left"] == 0:
                self.activity = None
                payload: dict[str, Any] = {"activity": act["name"]}
                if act["name"] == "handle":
                    email = self.emails[act["args"]["email"]]
                    email.handled = self.now + 1
                    on_time = email.handled <= email.deadline and not email.timed_out
                    u += cfg.on_time_reward if on_time else cfg.late_reward
                    payload["email"] = email.eid
                if act["name"] == "check_inbox":
                    payload["emails"] = self.visible()
                self._deliver("done", payload)
        for e in self.emails:  # deadlines falling on the tick we are about to reach
            if e.deadline == self.now + 1 and e.handled is None and not e.timed_out:
                e.timed_out = True
                u -= cfg.timeout_penalty
        return u

    def tick(self, interventions: Sequence[Intervention]):
        result = super().tick(interventions)
        for ev in result.events:  # pushed email / reminder events reach the agent now
            if ev.kind in ("email", "reminder"):
                e = self.emails[ev.payload["id"]]
                e.seen = ev.tick if e.seen is None else e.seen
        return result

    def metrics(self) -> dict[str, float]:
        """Episode figures for the Table 3 columns (see the module docstring)."""
        cfg, end = self.cfg, self.now
        weights = dict(zip(URGENCIES, cfg.urgency_weights, strict=True))
        scored = [e for e in self.emails if e.deadline <= end or e.handled is not None]
        on_time = [e for e in scored if e.handled is not None and e.handled <= e.deadline]
        w_all = sum(weights[e.urgency] for e in scored)
        email_score = 1.0 if w_all == 0 else sum(weights[e.urgency] for e in on_time) / w_all
        main = min(self.tokens_done / self.total_tokens, 1.0)
        w = cfg.balanced_main_weight
        arrived = [e for e in self.emails if e.arrival <= end]
        delays = [((e.opened if e.opened is not None else end) - e.arrival) / TICKS_PER_UNIT
                  for e in arrived]
        return {"main": main, "email": email_score,
                "balanced": w * main + (1 - w) * email_score - cfg.balanced_gap_penalty * abs(main - email_score),
                "emails": float(len(arrived)), "scored": float(len(scored)),
                "on_time": float(len(on_time)),
                "timeouts": float(sum(e.timed_out for e in scored)),
                "latency_sum": float(sum(delays)), "main_complete": float(self.unit >= len(self.units)),
                "switches": float(self.switches), "interruptions": float(self.interruptions),
                "resumptions": float(self.resumptions)}


# ----------------------------------------------------------------------------- triage
@dataclass(frozen=True)
class Decision:
    action: str  # HANDLE, REMIND or IGNORE
    after_units: float = 0.0

    def __post_init__(self) -> None:
        if self.action not in (HANDLE, REMIND, IGNORE):
            raise ValueError(f"a triage decision is handle, remind or ignore, got {self.action!r}")


Triage = Callable[[dict[str, Any], dict[str, Any]], Decision]


def scripted_triage(email: dict[str, Any], context: dict[str, Any]) -> Decision:
    """A fixed rule: ignore an email past its deadline; defer a low-urgency email with more
    than 10 units of slack to 5 units before its deadline (once); handle everything else."""
    slack = context["slack_units"]
    if slack <= 0:
        return Decision(IGNORE)
    if email["urgency"] == "low" and slack > 10 and not email.get("reminded"):
        return Decision(REMIND, slack - 5)
    return Decision(HANDLE)


class AssistantAgent:
    """The agent side of the three interfaces; all share the triage policy and its costs.

    After opening an email it sends the triage decision (``handle``, ``remind`` or ``ignore``)
    with the triage turn as its deliberation latency, and waits: for the activity's ``done``
    event, or, for ``ignore``, until the decision lands."""

    def __init__(self, cfg: AssistantConfig, method: str, triage: Triage = scripted_triage) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        self.cfg, self.method, self.triage = cfg, method, triage

    def reset(self, seed: int) -> None:
        self.pending: deque[int] = deque()
        self.views: dict[int, dict[str, Any]] = {}
        self.plan: list[Intervention] = []
        self.busy = self.generating = self.main_done = self.check_due = False
        self.free_at: int | None = None  # an `ignore` decision lands then
        self.focus = "main"
        self.progress_units = 0
        self.decisions: list[dict[str, Any]] = []

    def _queue(self, view: dict[str, Any]) -> None:
        self.views[view["id"]] = view
        if view["id"] not in self.pending:
            self.pending.append(view["id"])

    def act(self, tick: int, events: tuple[Event, ...], utility: float) -> list[Intervention]:
        wake = False
        for ev in events:
            if ev.kind in ("email", "reminder"):
                self._queue(dict(ev.payload))
                wake = True
            elif ev.kind == "done":
                self.busy = False
                activity = ev.payload["activity"]
                if activity == "generate":
                    self.generating = False
                    self.progress_units += bool(ev.payload["unit_complete"])
                    self.main_done = bool(ev.payload["main_complete"])
                    self.check_due = self.method != EP
                elif activity == "wait":
                    self.check_due = self.method != EP
                for view in ev.payload.get("emails", []):
                    self._queue(dict(view))
        if self.free_at is not None and tick >= self.free_at:
            self.busy, self.free_at = False, None
        out: list[Intervention] = []
        if self.generating and wake:
            out.append(Intervention("interrupt"))
            self.generating = self.busy = False
        if not self.busy:
            nxt = self._next(tick)
            if nxt is not None:
                out.append(nxt)
                self.busy = True
                self.generating = nxt.name == "generate"
                if nxt.name == IGNORE:
                    self.free_at = tick + nxt.latency
        return out

    def _next(self, tick: int) -> Intervention | None:
        if self.plan:
            return self.plan.pop(0)
        if self.check_due:
            self.check_due = False
            self.focus = "email"
            return Intervention("check_inbox")
        while self.pending:
            eid = self.pending.popleft()
            view = self.views[eid]
            slack = (view["deadline"] - tick) / TICKS_PER_UNIT
            if slack <= 0:
                continue  # past its deadline: nothing left to win
            context = {"slack_units": round(slack, 1), "main_progress": self.progress_units,
                       "target_steps": self.cfg.target_steps, "waiting": len(self.pending)}
            decision = self.triage(view, context)
            if decision.action == REMIND and view.get("reminded"):
                decision = Decision(HANDLE)
            self.decisions.append({"tick": tick, "email": eid, "action": decision.action})
            self.focus = "email"
            args: dict[str, Any] = {"email": eid}
            if decision.action == REMIND:
                args["after_units"] = decision.after_units
            triage = self.cfg.ticks(self.cfg.triage_units)  # the triage model's turn
            self.plan = [Intervention(decision.action, args, latency=triage)]
            return Intervention("open", {"email": eid})
        if not self.main_done:
            if self.focus == "email":
                self.focus = "main"
                return Intervention("resume")
            args: dict[str, Any] = {}
            if self.method == POLL:
                period = self.cfg.ticks(self.cfg.poll_interval)
                args["max_ticks"] = period - tick % period
            return Intervention("generate", args)
        if self.method != EP:
            return Intervention("wait", {"ticks": self.cfg.ticks(self.cfg.idle_wait)})
        return None

    def finish(self, tick: int, events: tuple[Event, ...], utility: float) -> None:
        pass


# ----------------------------------------------------------------------------- experiments
@dataclass
class AssistantResult:
    method: str
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per episode
    timelines: list[list[dict[str, Any]]] = field(default_factory=list)

    def summary(self, seed: int = 42, n_boot: int = 1000) -> dict[str, CI]:
        """Table 3 / 18 cells: means with bootstrap 95% CIs over seeds x episodes; timeout rate
        and latency as ratios of aggregates (resampling episodes)."""
        def mean(values) -> CI:
            return CI(*bootstrap_ci(values, n_boot, seed=seed))

        def ratio(numerators, denominators) -> CI:
            return CI(*bootstrap_ratio_ci(numerators, denominators, n_boot, seed=seed))

        col = lambda k: [r[k] for r in self.rows]
        return {"utility": mean(col("utility")),
                "balanced": mean(col("balanced")),
                "timeout": ratio(col("timeouts"), col("scored")),
                "latency": ratio(col("latency_sum"), col("emails")),
                "main": mean(col("main"))}


def episode_seed(cfg: AssistantConfig, s: int, e: int) -> int:
    return sub_seed(cfg.seed, s, e)


def run_method(cfg: AssistantConfig, outputs: Sequence[MainOutput], method: str,
               triage: Triage = scripted_triage, log: bool = False) -> AssistantResult:
    """Every (seed, episode) of ``cfg`` under one interface; the environment seed depends only
    on (cfg.seed, seed, episode), so all methods see the same tasks and email streams."""
    result = AssistantResult(method)
    env, agent = AssistantEnv(cfg, outputs, method), AssistantAgent(cfg, method, triage)
    started = time.monotonic()
    for s in range(cfg.n_seeds):
        _log.info("assistant %s (%s): seed %d/%d, %.0fs elapsed", method, cfg.setting, s + 1,
                  cfg.n_seeds, time.monotonic() - started)
        for e in range(cfg.episodes_per_seed):
            ep = run_episode(env, agent, episode_seed(cfg, s, e), cfg.horizon, log=log)
            row = {"method": method, "setting": cfg.setting, "seed": s, "episode": e,
                   "task_id": env.output.task_id, "utility": float(sum(ep.utilities)),
                   **env.metrics()}
            result.rows.append(row)
            if log:
                result.timelines.append(ep.rows(method=method,
                                                episode=s * cfg.episodes_per_seed + e))
    return result


def compare(cfg: AssistantConfig, outputs: Sequence[MainOutput] | None = None,
            triage: Triage = scripted_triage, methods: Sequence[str] = METHODS,
            log: bool = False) -> dict[str, AssistantResult]:
    outputs = scripted_outputs(cfg) if outputs is None else outputs
    return {m: run_method(cfg, outputs, m, triage, log) for m in methods}
