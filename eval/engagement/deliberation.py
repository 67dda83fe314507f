"""Urgency-aware deliberation (paper §5.1.1, App. C Tables 6–7, Table 1, Tables 8–9, Figs 3–4).

Each task has a deadline, a reward for success, a penalty for failure or timeout, and a
difficulty ``d in [0, 1]``. Before answering, the agent picks one of five deliberation modes;
mode ``m`` has a quality ``q_m`` and a duration ``D_m``. In **EP** timing the deliberation takes
``D_m`` ticks (1 tick = 1 second) during which the clock runs and the deadline approaches; in
**Step** timing it is instantaneous (the task clock does not move; the answer still arrives as an
event at the next interface tick, like a synchronized loop). Both settings are otherwise
identical (App. C: same qualities, durations counted only under EP).

Deliberation time is the interface's deliberation latency (:mod:`.core`), not a mechanism of
this environment: :meth:`DeliberationEnv.decision_latency` charges ``D_m - 1`` ticks for
``deliberate(mode=m)`` under EP (0 under Step), and the answer is given at the end of the tick
in which it is triggered, after that tick's second has passed, so it lands at ``t + D_m`` for a
decision at ``t``. A timeout cancels the pending deliberation.

- Single-task (Table 6): one task per episode whose deadline is a slack drawn from
  ``slack_choices``; the agent observes (slack, difficulty bin).
- Sequential (Table 7): a fixed chain of tasks with absolute deadlines; the gap between
  adjacent deadlines is drawn from ``deadline_gaps``; time spent on one task is lost for the
  next. A task whose deadline has already passed when it comes up times out at once.

Success model (§5.1.1): mode ``m`` on difficulty ``d`` succeeds with probability
``p(m, d) = q_m ** (1 + kappa * d)``: increasing in the mode quality, decreasing in difficulty,
equal to ``q_m`` at ``d = 0``. An answer counts only if it arrives no later than the deadline;
otherwise the task times out when the clock reaches the deadline (its deliberation is dropped).

Learning: tabular Q-learning (§5.1.1) over urgency-conditioned states (urgency level = slack
binned at ``urgency_edges``, difficulty bin; Figs 3–4 condition on urgency), with
``epsilon``-greedy exploration and either a constant step size or the sample-average step
``1 / N(s, a)``. The target of a decision is the discounted utility collected until the next
decision plus ``gamma ** (ticks elapsed) * max_a Q(s', a)`` (per-tick discount, §3.1).

Departures from the paper, with reasons:
- Our copy of the paper lost every number of Tables 6–7 and the exact success formula. The
  defaults below (slacks 2–10 s, durations 1/2/4/6/9 s, qualities 0.55–0.95, kappa 2, reward
  +1, penalty -1, 3 difficulty bins with edges 1/3 and 2/3, urgency edges 3/5/7/9 s, sequential
  chain of 6 tasks with gaps 3/5/7/9 s and per-tick discount 0.99, learning rate 0.1,
  epsilon 0.1, seed 42) are our choices, picked so that only the largest slack fits the
  slowest mode, which is what the paper's reported
  Step->EP timeout rate (79%) and EP mode-5 usage (21%) imply for five slack choices. All are
  fields of :class:`DeliberationConfig`.
- Training episodes default to 20,000 (single) / 30,000 (sequential), evaluation episodes to
  2,000 (lost in our copy).
- ``time_cost`` (utility per elapsed EP second, default 0) is our addition: with it the best
  mode also depends on difficulty, which makes the optimal-policy test sharper.

Not guaranteed: matching the paper's absolute numbers (the configuration differs); Q-learning
finding the optimum with few training episodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from eval.engagement.core import (
    ActionSpec,
    AdmissibleSets,
    Event,
    Intervention,
    TickEnvironment,
    run_episode,
)
from eval.metrics import CI, bootstrap_ci, bootstrap_ratio_ci

EP, STEP = "ep", "step"
TIMINGS = (EP, STEP)
DELIBERATE = "deliberate"
TASK, ANSWER, TIMEOUT = "task", "answer", "timeout"


@dataclass(frozen=True)
class DeliberationConfig:
    """Task model and training settings (paper Tables 6–7; defaults are ours, see module doc)."""

    tasks_per_episode: int = 1
    slack_choices: tuple[int, ...] = (2, 4, 6, 8, 10)  # single task: seconds to the deadline
    deadline_gaps: tuple[int, ...] = (3, 5, 7, 9)  # sequential: seconds between deadlines
    difficulty_edges: tuple[float, ...] = (1 / 3, 2 / 3)
    urgency_edges: tuple[int, ...] = (3, 5, 7, 9)  # slack bins seen by the agent
    mode_durations: tuple[int, ...] = (1, 2, 4, 6, 9)
    mode_qualities: tuple[float, ...] = (0.55, 0.7, 0.8, 0.88, 0.95)
    kappa: float = 2.0
    reward: float = 1.0
    penalty: float = 1.0  # charged as -penalty on failure or timeout
    time_cost: float = 0.0  # our addition: utility charged per elapsed EP second
    discount: float = 1.0  # per tick
    train_episodes: int = 20_000
    eval_episodes: int = 2_000
    alpha: float | None = 0.1  # None: sample-average step 1 / N(s, a)
    epsilon: float = 0.1
    seed: int = 42

    def __post_init__(self) -> None:
        n = len(self.mode_durations)
        if n == 0 or len(self.mode_qualities) != n:
            raise ValueError(f"mode_durations ({n}) and mode_qualities "
                             f"({len(self.mode_qualities)}) must list the same modes")
        if any(d < 1 or int(d) != d for d in self.mode_durations):
            raise ValueError(f"mode durations are whole seconds >= 1, got {self.mode_durations}")
        if any(not 0 < q <= 1 for q in self.mode_qualities):
            raise ValueError(f"mode qualities must lie in (0, 1], got {self.mode_qualities}")
        if self.tasks_per_episode < 1:
            raise ValueError(f"tasks_per_episode must be >= 1, got {self.tasks_per_episode}")
        choices = self.slack_choices if self.tasks_per_episode == 1 else self.deadline_gaps
        if not choices or any(c < 1 for c in choices):
            raise ValueError("slack_choices (single task) / deadline_gaps (sequential) need at "
                             f"least one value >= 1, got {choices}")
        if list(self.urgency_edges) != sorted(set(self.urgency_edges)):
            raise ValueError(f"urgency_edges must be strictly increasing: {self.urgency_edges}")
        if list(self.difficulty_edges) != sorted(self.difficulty_edges) or any(
                not 0 < e < 1 for e in self.difficulty_edges):
            raise ValueError(f"difficulty_edges must be increasing in (0, 1): {self.difficulty_edges}")
        if not 0 < self.discount <= 1:
            raise ValueError(f"discount must be in (0, 1], got {self.discount}")
        if not 0 <= self.epsilon <= 1:
            raise ValueError(f"epsilon must be in [0, 1], got {self.epsilon}")
        if self.alpha is not None and not 0 < self.alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1] or None (1/N step), got {self.alpha}")

    @property
    def n_modes(self) -> int:
        return len(self.mode_durations)

    @property
    def horizon(self) -> int:
        """Ticks that always suffice to finish an episode in either timing."""
        per_task = max(max(self.mode_durations), max(self.slack_choices + self.deadline_gaps))
        return self.tasks_per_episode * (per_task + 1) + 1


SINGLE_TASK = DeliberationConfig()
# Table 7 (values lost in our copy): a chain of 6 tasks, per-tick discount 0.99.
SEQUENTIAL = DeliberationConfig(tasks_per_episode=6, discount=0.99, train_episodes=30_000)


def success_probability(cfg: DeliberationConfig, mode: int, difficulty: float) -> float:
    """``p(m, d) = q_m ** (1 + kappa d)`` for a 0-based mode index (see module doc)."""
    return float(cfg.mode_qualities[mode] ** (1.0 + cfg.kappa * difficulty))


def difficulty_bin(cfg: DeliberationConfig, difficulty: float) -> int:
    return int(np.searchsorted(np.asarray(cfg.difficulty_edges), difficulty, side="right"))


class DeliberationEnv(TickEnvironment):
    """The deliberation task chain as an EP environment; ``timing`` is "ep" or "step".

    Intervention: ``deliberate(mode=m)`` (0-based), admissible while a task is open and no
    deliberation is pending. Events: ``task`` (index, slack, difficulty, bin), ``answer``
    (index, mode, success), ``timeout`` (index). In EP timing a deliberation is a decision with
    latency ``D_m - 1`` (see the module docstring): the agent sends empty intervention sets
    while it runs, and the answer event arrives at tick ``t + D_m``.
    """

    action_names = frozenset({DELIBERATE})

    def __init__(self, cfg: DeliberationConfig, timing: str) -> None:
        if timing not in TIMINGS:
            raise ValueError(f"timing must be one of {TIMINGS}, got {timing!r}")
        super().__init__(cfg.horizon)
        self.cfg = cfg
        self.timing = timing
        self.clock = 0  # task time in seconds: advances with ticks under EP, never under Step
        self.deadlines: list[int] = []
        self.difficulties: list[float] = []
        self.current = 0
        self.outcomes: list[str] = []
        self.decisions: list[tuple[int, int, int, int]] = []  # (slack, bin, mode, task index)

    def _start(self) -> None:
        cfg = self.cfg
        self.clock = 0
        if cfg.tasks_per_episode == 1:
            self.deadlines = [int(self.rng.choice(cfg.slack_choices))]
        else:
            gaps = self.rng.choice(cfg.deadline_gaps, size=cfg.tasks_per_episode)
            self.deadlines = [int(x) for x in np.cumsum(gaps)]
        self.difficulties = [float(x) for x in self.rng.random(cfg.tasks_per_episode)]
        self.current = 0
        self.outcomes = []
        self.decisions = []
        self._utility = 0.0
        self._open_next(at=0)

    def _open_next(self, at: int | None) -> None:
        """Present the next task, expiring those whose deadline has already passed."""
        while self.current < self.cfg.tasks_per_episode:
            k = self.current
            if self.deadlines[k] > self.clock:
                d = self.difficulties[k]
                self.emit(TASK, {"index": k, "slack": self.deadlines[k] - self.clock,
                                 "difficulty": d, "bin": difficulty_bin(self.cfg, d)}, at=at)
                return
            self._resolve(TIMEOUT, at)

    def _resolve(self, outcome: str, at: int | None, **payload: Any) -> None:
        self.outcomes.append(outcome)
        self._utility += self.cfg.reward if outcome == "success" else -self.cfg.penalty
        kind = TIMEOUT if outcome == TIMEOUT else ANSWER
        self.emit(kind, {"index": self.current, **payload}, at=at)
        self.current += 1

    def _open(self) -> bool:
        return self.current < self.cfg.tasks_per_episode and not self.pending_decisions()

    def admissible(self) -> AdmissibleSets:
        """``deliberate`` with one of the modes while a task is open and no deliberation is
        pending; otherwise only the empty set."""
        rule = (f"deliberate needs mode in 0..{self.cfg.n_modes - 1}, and is admissible only "
                "while a task is open and no deliberation is running")
        if not self._open():
            return AdmissibleSets((), rule=rule)
        modes = tuple({"mode": m} for m in range(self.cfg.n_modes))
        return AdmissibleSets((ActionSpec(DELIBERATE, modes, rule=rule),))

    def decision_latency(self, intervention: Intervention) -> int:
        """EP: ``D_m - 1`` ticks of deliberation before the answering tick; Step: none."""
        if self.timing == STEP:
            return 0
        return self.cfg.mode_durations[int(intervention.args["mode"])] - 1

    def _decided(self, intervention: Intervention) -> None:
        k, mode = self.current, int(intervention.args["mode"])
        self.decisions.append((self.deadlines[k] - self.clock,
                               difficulty_bin(self.cfg, self.difficulties[k]), mode, k))

    def _transition(self, interventions: Sequence[Intervention]) -> float:
        cfg = self.cfg
        self._utility = 0.0
        if self.current >= cfg.tasks_per_episode:
            return 0.0
        if self.timing == EP:
            self.clock += 1
            self._utility -= cfg.time_cost
        for item in interventions:  # the answers given at the end of this tick
            mode = int(item.args["mode"])
            ok = bool(self.rng.random() < success_probability(
                cfg, mode, self.difficulties[self.current]))
            self._resolve("success" if ok else "failure", None, mode=mode, success=ok)
            self._open_next(None)
        if self.current < cfg.tasks_per_episode and self.clock >= self.deadlines[self.current]:
            self.cancel_decision(DELIBERATE)
            self._resolve(TIMEOUT, None)
            self._open_next(None)
        return self._utility

    def _finished(self) -> bool:
        return self.current >= self.cfg.tasks_per_episode


def urgency_bin(cfg: DeliberationConfig, slack: int) -> int:
    """Urgency level of a slack: 0 = tightest; bins split at ``urgency_edges``."""
    return int(np.searchsorted(np.asarray(cfg.urgency_edges), slack, side="right"))


def state_key(cfg: DeliberationConfig, payload: dict[str, Any]) -> tuple[int, int]:
    """Tabular state of a task event: (urgency bin of the slack, difficulty bin)."""
    return (urgency_bin(cfg, int(payload["slack"])), int(payload["bin"]))


@dataclass
class QAgent:
    """Tabular Q-learning over deliberation modes (an EP agent: events in, interventions out)."""

    cfg: DeliberationConfig
    learn: bool = True
    q: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    n: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(0)
        self._pending: tuple[Any, int] | None = None  # (state, mode) awaiting its target
        self._gain = 0.0
        self._elapsed = 0

    def values(self, s: tuple[int, int]) -> np.ndarray:
        if s not in self.q:
            self.q[s] = np.zeros(self.cfg.n_modes)
            self.n[s] = np.zeros(self.cfg.n_modes)
        return self.q[s]

    def greedy(self, s: tuple[int, int]) -> int:
        """Best mode in ``s``; ties (and unseen states) go to the fastest mode. Does not add
        unseen states to the table."""
        return int(np.argmax(self.q[s])) if s in self.q else 0

    def reset(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self._pending, self._gain, self._elapsed = None, 0.0, 0

    def _accumulate(self, utility: float) -> None:
        if self._pending is not None:
            self._gain += self.cfg.discount ** self._elapsed * utility
            self._elapsed += 1

    def _update(self, bootstrap: float) -> None:
        if self._pending is None or not self.learn:
            return
        s, a = self._pending
        target = self._gain + self.cfg.discount ** self._elapsed * bootstrap
        self.n[s][a] += 1
        step = self.cfg.alpha if self.cfg.alpha is not None else 1.0 / self.n[s][a]
        self.q[s][a] += step * (target - self.q[s][a])

    def act(self, tick: int, events: tuple[Event, ...], utility: float) -> tuple[Intervention, ...]:
        if tick > 0:
            self._accumulate(utility)
        tasks = [e for e in events if e.kind == TASK]
        if not tasks:
            return ()
        s = state_key(self.cfg, dict(tasks[-1].payload))
        self._update(float(self.values(s).max()) if self.learn else 0.0)
        if self.learn and self.rng.random() < self.cfg.epsilon:
            mode = int(self.rng.integers(self.cfg.n_modes))
        else:
            mode = self.greedy(s)
        self._pending, self._gain, self._elapsed = (s, mode), 0.0, 0
        return (Intervention(DELIBERATE, {"mode": mode}),)

    def finish(self, tick: int, events: tuple[Event, ...], utility: float) -> None:
        self._accumulate(utility)
        self._update(0.0)
        self._pending = None


def sub_seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def train(cfg: DeliberationConfig, timing: str, episodes: int | None = None) -> QAgent:
    """Q-learning in one timing ("ep" or "step"); returns the trained agent."""
    env = DeliberationEnv(cfg, timing)
    agent = QAgent(cfg)
    for i in range(cfg.train_episodes if episodes is None else episodes):
        run_episode(env, agent, sub_seed(cfg.seed, 0, i), env.horizon, cfg.discount, log=False)
    return agent


@dataclass(frozen=True)
class EvalResult:
    """Per-episode figures of one (training, evaluation) pair."""

    returns: np.ndarray
    successes: np.ndarray
    timeouts: np.ndarray
    tasks: np.ndarray
    mode_counts: np.ndarray  # episodes x modes
    decisions: list[tuple[int, int, int, int]]  # (slack, bin, mode, task index) per decision

    def summary(self, n_boot: int = 1000, seed: int = 42) -> dict[str, CI]:
        def mean(values) -> CI:
            return CI(*bootstrap_ci(values, n_boot, seed=seed))

        def ratio(numerators, denominators) -> CI:
            return CI(*bootstrap_ratio_ci(numerators, denominators, n_boot, seed=seed))

        decisions = self.mode_counts.sum(axis=1)
        return {
            "return": mean(self.returns),
            "success": ratio(self.successes, self.tasks),
            "timeout": ratio(self.timeouts, self.tasks),
            "mode5": ratio(self.mode_counts[:, -1], decisions),
        }


def evaluate(cfg: DeliberationConfig, agent: QAgent, timing: str,
             episodes: int | None = None) -> EvalResult:
    """Greedy evaluation of ``agent`` in ``timing``; evaluation seeds are shared by all
    policies, so both trainings face the same tasks."""
    env = DeliberationEnv(cfg, timing)
    frozen = QAgent(cfg, learn=False, q=agent.q, n=agent.n)
    count = cfg.eval_episodes if episodes is None else episodes
    rets, succ, tout, tasks = (np.zeros(count) for _ in range(4))
    modes = np.zeros((count, cfg.n_modes))
    decisions: list[tuple[int, int, int, int]] = []
    for i in range(count):
        ep = run_episode(env, frozen, sub_seed(cfg.seed, 1, i), env.horizon, cfg.discount, log=False)
        rets[i] = ep.discounted_return
        succ[i] = env.outcomes.count("success")
        tout[i] = env.outcomes.count(TIMEOUT)
        tasks[i] = len(env.outcomes)
        for _, _, m, _ in env.decisions:
            modes[i, m] += 1
        decisions.extend(env.decisions)
    return EvalResult(rets, succ, tout, tasks, modes, decisions)


def cross_evaluate(cfg: DeliberationConfig, train_episodes: int | None = None,
                   eval_episodes: int | None = None,
                   agents: dict[str, QAgent] | None = None) -> dict[tuple[str, str], EvalResult]:
    """Train in EP and in Step (unless ``agents`` are given), evaluate each in both
    (Tables 8–9)."""
    if agents is None:
        agents = {t: train(cfg, t, train_episodes) for t in TIMINGS}
    return {(tr, ev): evaluate(cfg, agents[tr], ev, eval_episodes)
            for tr in TIMINGS for ev in TIMINGS}


def with_overrides(cfg: DeliberationConfig, **overrides: Any) -> DeliberationConfig:
    return replace(cfg, **overrides)
