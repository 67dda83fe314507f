"""Hierarchical patrol with interruptions (paper §5.1.2, App. C Tables 2, 10–14).

An agent patrols checkpoints on a grid in a fixed cycle: navigate to the next checkpoint (one
cell per tick, Manhattan path), then handle it for a number of ticks, then move on. Alarms
appear asynchronously at a distant checkpoint with a deadline; resolving one (navigate there,
then ``resolve_ticks`` of work) pays a reward, letting it expire costs a penalty, and every
tick an alarm is active costs a little. The upper level decides only one thing: keep doing the
routine, or respond to the active alarm (the ``respond`` intervention; the empty intervention
set means "continue"). Navigation, handling phases and alarm resolution are persistent timed
actions that progress with empty intervention sets.

- Module-level (Table 12, Table 2(a)): handling is one module; an interrupted handling keeps
  its done work and resumes after the alarm (the paper's trace shows the abandoned work kept).
- State-level (Table 13, Table 2(b)): handling is split into phases (depth 2: observe, commit;
  depth 3: observe, verify, commit), each with a duration and an interruption cost charged when
  a phase with progress is abandoned; the abandoned phase restarts from zero on return.

Methods (:func:`policies`): ``loop`` re-decides only at module (phase) boundaries and then always
responds; ``patch`` follows Table 10; ``patchpro`` follows the checks of App. C and Table 11;
``ep`` is a tabular Q-learning continue-or-interrupt policy that may decide at every tick from
alarm urgency, current module/phase, remaining phase time, phase progress and distance.

Each tick the environment reports a ``status`` event while an alarm is active (routines are
observable, §5.1.2), and ``alarm`` / ``resolved`` / ``expired`` / ``handled`` events when they
happen. Metrics (App. C): return, resolve rate and expire rate as ratios of aggregate counts,
ticks per alarm (mean ticks from an alarm's appearance to its resolution or expiry), response
latency (ticks from appearance to the respond decision) and interruption cost.

Departures from the paper, with reasons: every number of Tables 10–13 was lost in our copy, so
grid size, checkpoint positions, durations, rewards, probabilities, deadlines, thresholds and
episode counts are our choices (fields of :class:`PatrolConfig`, :class:`PatchParams`). The
PatchPro phase rule combines Table 11's three columns as "respond iff (remaining alarm time <=
urgency threshold or phase progress <= cutoff) and net alarm value >= ratio x interruption
cost", our reading of the text. The EP learner's state bins distance and urgency into the two
slacks "alarm time left minus time to reach and resolve it" now and after finishing the current
phase, which are functions of the paper's inputs (urgency, distance, remaining phase time). The
learner's episodes are single alarms with the kept checkpoint work valued at the checkpoint
reward rate (see :class:`EPQPolicy`), our choice for a learnable signal. Patch responds at a
phase boundary like Loop does (Table 10 lists only within-phase rules; at a boundary nothing
is abandoned).

At most one alarm is active at a time (our choice); an alarm still open at the horizon is left
out of the rates.

What decides EP against PatchPro here (measured over training seeds 0-9, 300 evaluation
episodes each): EP's advantage comes only from situations where PatchPro's hand-set thresholds
(Table 11) pick the wrong side of a trade-off the state exposes. Without distance in EP's state
(urgency and remaining phase time only) EP cannot tell which alarms are reachable and falls
well below PatchPro at depth 2 (App. C lists distance among the decision's inputs); with it,
EP beats PatchPro at depth 2 on every seed. At depth 3 (phases of 6-8 ticks) the two tie: in
this configuration every interruption cost times its ratio stays below the net alarm value, so
PatchPro's cost-value check never binds, and its reachability and finish-first checks already
make the near-optimal choice; training five times longer or learning from whole discounted
patrol episodes did not move EP above it. The depth-3 "EP best" ranking of Table 2(b) is
therefore not reproduced by this configuration; the paper's Table 13 values are unknown.

Not guaranteed: the paper's absolute numbers (the configuration differs); a trained EP policy
beating PatchPro with few training episodes, or at depth 3. Methods are evaluated on the same seeds, but the
alarm stream is not identical across methods: where an alarm may appear depends on the agent's
position (minimum distance), so paired differences are correlated, not exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from eval.engagement.core import Event, Intervention, TickEnvironment, run_episode
from eval.engagement.deliberation import sub_seed
from eval.metrics import CI, bootstrap_ci, bootstrap_ratio_ci

RESPOND = "respond"
NAV, HANDLE, NAV_ALARM, RESOLVE = "nav", "handle", "nav_alarm", "resolve"
ROUTINE = (NAV, HANDLE)
MODULE = "module"


@dataclass(frozen=True)
class Phase:
    name: str
    duration: int
    interrupt_cost: float = 0.0


@dataclass(frozen=True)
class PatrolConfig:
    """Patrol world (Tables 12–13; every default is ours, see the module docstring)."""

    grid: int = 10
    checkpoints: tuple[tuple[int, int], ...] = ((1, 1), (1, 8), (8, 8), (8, 1))
    horizon: int = 400
    phases: tuple[Phase, ...] = (Phase("handle", 20),)
    keep_progress: bool = True  # module level: interrupted handling resumes where it stopped
    checkpoint_reward: float = 5.0
    alarm_prob: float = 0.03
    min_distance: int = 8
    deadline_range: tuple[int, int] = (15, 30)
    resolve_ticks: int = 3
    resolve_reward: float = 50.0
    expire_penalty: float = 25.0
    active_cost: float = 0.5
    discount: float = 1.0  # per tick, within a learning episode (one alarm, see EPQPolicy)
    train_episodes: int = 2_000
    eval_episodes: int = 300
    alpha: float = 0.05
    epsilon: float = 0.3
    seed: int = 42

    def __post_init__(self) -> None:
        if len(self.checkpoints) < 2:
            raise ValueError("a patrol needs at least two checkpoints")
        for x, y in self.checkpoints:
            if not (0 <= x < self.grid and 0 <= y < self.grid):
                raise ValueError(f"checkpoint {(x, y)} lies outside the {self.grid}x{self.grid} grid")
        if not self.phases or any(p.duration < 1 for p in self.phases):
            raise ValueError("handling needs at least one phase, each lasting >= 1 tick")
        lo, hi = self.deadline_range
        if not 1 <= lo <= hi:
            raise ValueError(f"deadline_range must be (lo, hi) with 1 <= lo <= hi, got {lo, hi}")
        if not 0 <= self.alarm_prob <= 1:
            raise ValueError(f"alarm_prob must be a probability, got {self.alarm_prob}")

    @property
    def net_alarm_value(self) -> float:
        """Resolve reward plus the avoided expiration penalty (App. C)."""
        return self.resolve_reward + self.expire_penalty


MODULE_LEVEL = PatrolConfig()
STATE_LEVEL = {
    2: PatrolConfig(phases=(Phase("observe", 8, 5.0), Phase("commit", 12, 20.0)),
                    keep_progress=False, train_episodes=6_000),
    3: PatrolConfig(phases=(Phase("observe", 6, 4.0), Phase("verify", 6, 10.0),
                            Phase("commit", 8, 20.0)), keep_progress=False,
                    train_episodes=6_000),
}


def manhattan(a: tuple[int, int], b: tuple[int, int]) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


class PatrolEnv(TickEnvironment):
    """The patrol world as an EP environment (see module docstring)."""

    action_names = frozenset({RESPOND})

    def __init__(self, cfg: PatrolConfig) -> None:
        super().__init__(cfg.horizon)
        self.cfg = cfg

    # ---------------------------------------------------------------- state
    def _start(self) -> None:
        self.pos = self.cfg.checkpoints[0]
        self.target = 0  # checkpoint index the routine is working on / heading to
        self.phase = 0
        self.phase_done: list[int] = [0] * len(self.cfg.phases)  # kept work per phase
        self.alarm: dict[str, Any] | None = None
        self.stats = {"alarms": 0, "resolved": 0, "expired": 0, "alarm_ticks": 0,
                      "latency": 0, "responses": 0, "interrupt_cost": 0.0, "handled": 0}
        self._begin_routine()

    def _begin_routine(self) -> None:
        cp = self.cfg.checkpoints[self.target]
        if self.pos == cp:
            left = self.cfg.phases[self.phase].duration - self.phase_done[self.phase]
            self.actions.start(MODULE, left, kind=HANDLE)
        else:
            self.actions.start(MODULE, manhattan(self.pos, cp), kind=NAV, to=cp)
        self.fresh = True  # a module boundary: the current module has just begun

    def module(self) -> str:
        current = self.actions.get(MODULE)
        return current.args["kind"] if current is not None else NAV

    def routine_progress(self) -> float:
        """Fraction of the current checkpoint's handling work done (kept work only)."""
        total = sum(p.duration for p in self.cfg.phases)
        done = sum(p.duration for p in self.cfg.phases[:self.phase]) + self.phase_done[self.phase]
        return done / total

    def status(self) -> dict[str, Any]:
        """What the agent observes each tick an alarm is active."""
        current = self.actions.get(MODULE)
        kind = current.args["kind"]
        phase = self.cfg.phases[self.phase]
        alarm = self.alarm
        assert alarm is not None
        dist = manhattan(self.pos, alarm["cell"])
        left = current.remaining
        if kind == NAV:  # finishing the routine's current step = reaching the checkpoint
            after = manhattan(current.args["to"], alarm["cell"])
        else:
            after = dist
        return {
            "module": kind, "phase": self.phase if kind == HANDLE else -1,
            "phase_left": left, "boundary": self.fresh,
            "progress": (self.phase_done[self.phase] / phase.duration) if kind == HANDLE else 0.0,
            "interrupt_cost": (phase.interrupt_cost if kind == HANDLE
                               and self.phase_done[self.phase] > 0 else 0.0),
            "alarm_left": alarm["left"], "distance": dist, "distance_after": after,
            "responding": alarm["responding"],
        }

    # ---------------------------------------------------------------- dynamics
    def _respond(self) -> float:
        alarm = self.alarm
        if alarm is None or alarm["responding"]:
            return 0.0  # nothing to respond to: a no-op, as the primitive allows
        cost = 0.0
        current = self.actions.interrupt(MODULE)
        abandons_work = (current is not None and current.args["kind"] == HANDLE
                         and self.phase_done[self.phase] > 0)
        if abandons_work and not self.cfg.keep_progress:
            cost = self.cfg.phases[self.phase].interrupt_cost
            self.phase_done[self.phase] = 0
        alarm["responding"] = True
        self.stats["latency"] += alarm["age"]
        self.stats["responses"] += 1
        self.stats["interrupt_cost"] += cost
        self.actions.start(MODULE, manhattan(self.pos, alarm["cell"]), kind=NAV_ALARM,
                           to=alarm["cell"])
        self.fresh = True
        return -cost

    def _step_toward(self, goal: tuple[int, int]) -> None:
        x, y = self.pos
        if x != goal[0]:
            x += 1 if goal[0] > x else -1
        elif y != goal[1]:
            y += 1 if goal[1] > y else -1
        self.pos = (x, y)

    def _transition(self, interventions: Sequence[Intervention]) -> float:
        cfg = self.cfg
        utility = 0.0
        if interventions:
            utility += self._respond()
        current = self.actions.get(MODULE)
        self.fresh = False
        if current is not None:
            kind = current.args["kind"]
            if kind in (NAV, NAV_ALARM) and current.remaining > 0:
                self._step_toward(current.args["to"])
            if kind == HANDLE:
                self.phase_done[self.phase] += 1
        for done in self.actions.advance():
            utility += self._complete(done.args["kind"])
        if self.alarm is not None:
            self.alarm["left"] -= 1
            self.alarm["age"] += 1
            utility -= cfg.active_cost
            self.stats["alarm_ticks"] += 1
            if self.alarm["left"] <= 0:
                utility -= cfg.expire_penalty
                self.stats["expired"] += 1
                self.emit("expired", {"cell": list(self.alarm["cell"]),
                                      "routine_progress": self.routine_progress()})
                if self.alarm["responding"]:
                    self.actions.interrupt(MODULE)
                    self.alarm = None
                    self._begin_routine()
                else:
                    self.alarm = None
        if self.alarm is None and self.rng.random() < cfg.alarm_prob:
            self._spawn()
        if self.alarm is not None and not self.alarm["responding"]:
            self.emit("status", self.status())
        return utility

    def _complete(self, kind: str) -> float:
        cfg = self.cfg
        if kind == NAV:
            self._begin_routine()
            return 0.0
        if kind == HANDLE:
            self.phase_done[self.phase] = 0
            self.phase += 1
            if self.phase < len(cfg.phases):
                self.emit("phase_done", {"checkpoint": self.target, "next": self.phase})
                self._begin_routine()
                return 0.0
            self.phase = 0
            self.stats["handled"] += 1
            self.emit("handled", {"checkpoint": self.target})
            self.target = (self.target + 1) % len(cfg.checkpoints)
            self._begin_routine()
            return cfg.checkpoint_reward
        if kind == NAV_ALARM:
            self.actions.start(MODULE, cfg.resolve_ticks, kind=RESOLVE)
            return 0.0
        # RESOLVE finished: the alarm is handled; go back to the routine where it stopped
        assert self.alarm is not None
        self.stats["resolved"] += 1
        self.stats["alarm_ticks"] += 1  # the resolving tick
        self.emit("resolved", {"cell": list(self.alarm["cell"]), "age": self.alarm["age"] + 1,
                               "routine_progress": self.routine_progress()})
        self.alarm = None
        self._begin_routine()
        return cfg.resolve_reward

    def _spawn(self) -> None:
        cfg = self.cfg
        far = [c for c in cfg.checkpoints if manhattan(c, self.pos) >= cfg.min_distance]
        if not far:
            return
        cell = far[int(self.rng.integers(len(far)))]
        lo, hi = cfg.deadline_range
        self.alarm = {"cell": cell, "left": int(self.rng.integers(lo, hi + 1)), "age": 0,
                      "responding": False}
        self.stats["alarms"] += 1
        self.emit("alarm", {"cell": list(cell), "deadline": self.alarm["left"]})

    def _finished(self) -> bool:
        return False

    def close_open_alarm(self) -> None:
        """At the horizon an alarm still open counts as neither resolved nor expired; drop it
        from the alarm count so rates use only decided alarms."""
        if self.alarm is not None:
            self.stats["alarms"] -= 1
            self.stats["alarm_ticks"] -= self.alarm["age"]


# -------------------------------------------------------------------- policies


class _StatusPolicy:
    """Base for patrol agents: look at the tick's last status event, decide to respond."""

    def reset(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def decide(self, status: dict[str, Any]) -> bool:
        raise NotImplementedError

    def act(self, tick: int, events: tuple[Event, ...], utility: float) -> tuple[Intervention, ...]:
        status = [e.payload for e in events if e.kind == "status"]
        if status and self.decide(dict(status[-1])):
            return (Intervention(RESPOND),)
        return ()

    def finish(self, tick: int, events: tuple[Event, ...], utility: float) -> None:
        return None


class LoopPolicy(_StatusPolicy):
    """Decides only at module (phase) boundaries, and then responds to any active alarm."""

    def decide(self, status: dict[str, Any]) -> bool:
        return bool(status["boundary"])


@dataclass(frozen=True)
class PatchParams:
    """Thresholds of Table 10 (Patch) and Table 11 (PatchPro); numbers lost, ours."""

    patch_threshold: int = 12  # Patch: commit (depth 2) / verify (depth 3) respond bound
    very_urgent: int = 8  # PatchPro: respond to any feasible alarm with <= this left
    # PatchPro per phase name: (urgency threshold, progress cutoff, cost ratio)
    phase_rules: dict[str, tuple[int, float, float]] = field(default_factory=lambda: {
        "handle": (30, 1.0, 1.0), "observe": (30, 1.0, 1.0), "verify": (20, 0.6, 1.5),
        "commit": (15, 0.5, 2.0)})


class PatchPolicy(_StatusPolicy):
    """Table 10: decide from the current phase and remaining alarm time only."""

    def __init__(self, cfg: PatrolConfig, params: PatchParams | None = None) -> None:
        self.cfg, self.params = cfg, params or PatchParams()

    def decide(self, status: dict[str, Any]) -> bool:
        if status["module"] == NAV or status["boundary"]:
            return True  # nothing is abandoned: respond as the Loop baseline would
        names = [p.name for p in self.cfg.phases]
        name = names[status["phase"]]
        if name in ("observe", "handle"):
            return True
        if name == "commit" and len(names) == 3:
            return False  # depth 3: finish the commit phase
        return status["alarm_left"] <= self.params.patch_threshold  # commit (2), verify (3)


class PatchProPolicy(_StatusPolicy):
    """App. C / Table 11: feasibility, very-urgent, patrol-navigation and finish-first checks,
    then phase-specific urgency, progress and cost-ratio thresholds."""

    def __init__(self, cfg: PatrolConfig, params: PatchParams | None = None) -> None:
        self.cfg, self.params = cfg, params or PatchParams()

    def decide(self, status: dict[str, Any]) -> bool:
        cfg = self.cfg
        need = status["distance"] + cfg.resolve_ticks
        if need > status["alarm_left"]:
            return False  # cannot be reached in time: skip it
        if status["alarm_left"] <= self.params.very_urgent:
            return True
        if status["module"] == NAV:
            return True  # no phase progress is abandoned
        finish_first = status["phase_left"] + status["distance_after"] + cfg.resolve_ticks
        if finish_first <= status["alarm_left"]:
            return bool(status["boundary"])  # finish the phase; respond at the boundary
        urgency, cutoff, ratio = self.params.phase_rules[cfg.phases[status["phase"]].name]
        worth = cfg.net_alarm_value >= ratio * status["interrupt_cost"]
        return worth and (status["alarm_left"] <= urgency or status["progress"] <= cutoff)


def _bin(x: float, edges: Sequence[float]) -> int:
    return int(np.searchsorted(np.asarray(edges), x, side="right"))


SLACK_EDGES = (0, 3, 6, 11)


def patrol_state(cfg: PatrolConfig, status: dict[str, Any]) -> tuple[int, ...]:
    """EP learner state: module/phase, slack now, slack after the current phase, progress."""
    need = cfg.resolve_ticks
    slack_now = status["alarm_left"] - status["distance"] - need
    slack_after = status["alarm_left"] - status["phase_left"] - status["distance_after"] - need
    return (status["phase"] + 1, _bin(slack_now, SLACK_EDGES), _bin(slack_after, SLACK_EDGES),
            _bin(status["progress"], (0.01, 0.5)), int(status["interrupt_cost"] > 0))


class EPQPolicy(_StatusPolicy):
    """Tabular Q-learning continue(0)-or-interrupt(1) policy, deciding at any tick.

    Decisions happen on ticks with a status event (an alarm is active and not yet answered).
    A decision's target is the discounted utility until the next decision plus
    ``gamma ** ticks * max Q(next)``. A learning episode is one alarm: when it is resolved or
    expires, the target ends with ``checkpoint_reward x routine progress`` (the value of the
    checkpoint work kept) instead of the rest of the patrol. Learning from whole 400-tick
    returns was too noisy to separate the two actions in a few thousand episodes (measured)."""

    def __init__(self, cfg: PatrolConfig, learn: bool = True,
                 q: dict[tuple[int, ...], np.ndarray] | None = None) -> None:
        self.cfg, self.learn = cfg, learn
        self.q: dict[tuple[int, ...], np.ndarray] = {} if q is None else q

    def reset(self, seed: int) -> None:
        super().reset(seed)
        self._pending: tuple[tuple[int, ...], int] | None = None
        self._gain, self._elapsed = 0.0, 0

    def values(self, s: tuple[int, ...]) -> np.ndarray:
        if s not in self.q:
            self.q[s] = np.zeros(2)
        return self.q[s]

    def _update(self, bootstrap: float) -> None:
        if self._pending is None or not self.learn:
            return
        s, a = self._pending
        target = self._gain + self.cfg.discount ** self._elapsed * bootstrap
        self.q[s][a] += self.cfg.alpha * (target - self.q[s][a])

    def act(self, tick: int, events: tuple[Event, ...], utility: float) -> tuple[Intervention, ...]:
        if self._pending is not None and tick > 0:
            self._gain += self.cfg.discount ** self._elapsed * utility
            self._elapsed += 1
        settled = [e.payload for e in events if e.kind in ("resolved", "expired")]
        if settled:  # the alarm is settled: a learning episode ends, valuing routine progress
            self._update(self.cfg.checkpoint_reward * float(settled[-1]["routine_progress"]))
            self._pending = None
        status = [e.payload for e in events if e.kind == "status"]
        if not status:
            return ()
        s = patrol_state(self.cfg, dict(status[-1]))
        if not self.learn:  # greedy, without adding unseen states (they continue)
            return (Intervention(RESPOND),) if self.decide(dict(status[-1])) else ()
        self._update(float(self.values(s).max()))
        if self.rng.random() < self.cfg.epsilon:
            a = int(self.rng.integers(2))
        else:
            a = int(np.argmax(self.values(s)))
        self._pending, self._gain, self._elapsed = (s, a), 0.0, 0
        return (Intervention(RESPOND),) if a == 1 else ()

    def finish(self, tick: int, events: tuple[Event, ...], utility: float) -> None:
        if self._pending is not None:
            self._gain += self.cfg.discount ** self._elapsed * utility
            self._elapsed += 1
        self._update(0.0)
        self._pending = None

    def decide(self, status: dict[str, Any]) -> bool:
        """Greedy choice; an unseen state continues."""
        values = self.q.get(patrol_state(self.cfg, status))
        return values is not None and bool(np.argmax(values) == 1)


def train_ep(cfg: PatrolConfig, episodes: int | None = None) -> EPQPolicy:
    env, agent = PatrolEnv(cfg), EPQPolicy(cfg)
    for i in range(cfg.train_episodes if episodes is None else episodes):
        run_episode(env, agent, sub_seed(cfg.seed, 0, i), cfg.horizon, cfg.discount, log=False)
    return agent


@dataclass(frozen=True)
class PatrolResult:
    returns: np.ndarray
    counts: dict[str, np.ndarray]  # per-episode stats (alarms, resolved, expired, ...)

    def summary(self, n_boot: int = 1000, seed: int = 42) -> dict[str, CI]:
        def mean(values) -> CI:
            return CI(*bootstrap_ci(values, n_boot, seed=seed))

        def ratio(numerators, denominators) -> CI:
            return CI(*bootstrap_ratio_ci(numerators, denominators, n_boot, seed=seed))

        c = self.counts
        return {
            "return": mean(self.returns),
            "resolve": ratio(c["resolved"], c["alarms"]),
            "expire": ratio(c["expired"], c["alarms"]),
            "ticks_per_alarm": ratio(c["alarm_ticks"], c["alarms"]),
            "latency": ratio(c["latency"], c["responses"]),
            "interrupt_cost": mean(c["interrupt_cost"]),
        }


def evaluate(cfg: PatrolConfig, policy: Any, episodes: int | None = None) -> PatrolResult:
    """Run ``policy`` greedily on the shared evaluation seeds (same alarms for every method
    as long as the policies take the same actions; the alarm stream depends on the agent's
    position through the minimum-distance rule)."""
    if isinstance(policy, EPQPolicy):
        policy = EPQPolicy(cfg, learn=False, q=policy.q)
    env = PatrolEnv(cfg)
    n = cfg.eval_episodes if episodes is None else episodes
    rets = np.zeros(n)
    counts: dict[str, list[float]] = {}
    for i in range(n):
        ep = run_episode(env, policy, sub_seed(cfg.seed, 1, i), cfg.horizon, cfg.discount,
                         log=False)
        rets[i] = sum(ep.utilities)  # undiscounted episode return, as the tables report
        env.close_open_alarm()
        for k, v in env.stats.items():
            counts.setdefault(k, []).append(v)
    return PatrolResult(rets, {k: np.asarray(v, dtype=float) for k, v in counts.items()})


def per_seed_returns(cfg: PatrolConfig, seeds: Sequence[int],
                     methods: Sequence[str] | None = None, train_episodes: int | None = None,
                     eval_episodes: int | None = None) -> dict[str, list[float]]:
    """Mean evaluation return per seed for each method of :func:`policies`: for every seed the
    configuration's ``seed`` is replaced (EP's training episodes and the evaluation episodes
    both follow it) and each method gets one number, the mean undiscounted return over the
    evaluation episodes. These are the units of a claim over training seeds (Table 2(b)'s
    ranking); pair them by position."""
    if not seeds:
        raise ValueError("per_seed_returns needs at least one seed")
    out: dict[str, list[float]] = {}
    for seed in seeds:
        seeded = replace(cfg, seed=int(seed))
        found = policies(seeded, train_episodes)
        chosen = list(found) if methods is None else list(methods)
        unknown = [m for m in chosen if m not in found]
        if unknown:
            raise ValueError(f"unknown method(s) {unknown} for this configuration; "
                             f"choose from {sorted(found)}")
        for name in chosen:
            result = evaluate(seeded, found[name], eval_episodes)
            out.setdefault(name, []).append(float(result.returns.mean()))
    return out


def policies(cfg: PatrolConfig, train_episodes: int | None = None) -> dict[str, Any]:
    """Every method of Table 2 for this configuration (EP trained here)."""
    out: dict[str, Any] = {"ep": train_ep(cfg, train_episodes), "loop": LoopPolicy()}
    if not cfg.keep_progress:
        out["patchpro"] = PatchProPolicy(cfg)
        out["patch"] = PatchPolicy(cfg)
    return out


def with_overrides(cfg: PatrolConfig, **overrides: Any) -> PatrolConfig:
    return replace(cfg, **overrides)
