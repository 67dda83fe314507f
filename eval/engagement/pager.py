"""A small example environment written only against the EP interface (:mod:`.core`): an
on-call pager.

Pages arrive at ticks drawn from a Poisson process (``rate`` per tick) or from a fixed
``schedule`` of ``(arrival tick, deadline tick)``; each is pushed as a ``page`` event at its
arrival tick (id, deadline). The agent may ``answer(page=i)`` an arrived, open page while not
already answering (the admissible sets say exactly which); reading the page before deciding
costs ``think_ticks`` (the environment's deliberation latency for ``answer``), and answering is
a persistent timed action of ``answer_ticks`` that progresses on empty intervention sets. A page
answered by its deadline pays ``reward`` and emits ``answered``; a page whose deadline passes
first costs ``penalty`` and emits ``expired``, and a pending decision or a running answer on it
is dropped. Every tick spent answering costs ``busy_cost``.

It exists to show (and test) that a new environment needs only ``_start``, ``_transition``,
``admissible`` and, for latency, ``decision_latency``: the generic agents of :mod:`.agents`
run on it unchanged, and :class:`~eval.engagement.compose.Subsystems` can run several at
different rates. Not a paper experiment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eval.engagement.core import ActionSpec, AdmissibleSets, Intervention, TickEnvironment

ANSWER = "answer"
PAGE, ANSWERED, EXPIRED = "page", "answered", "expired"


@dataclass(frozen=True)
class PagerConfig:
    horizon: int = 60
    rate: float = 0.1  # pages per tick (ignored with a schedule)
    slack: tuple[int, int] = (4, 12)  # deadline - arrival, drawn uniformly (inclusive)
    think_ticks: int = 1
    answer_ticks: int = 3
    reward: float = 1.0
    penalty: float = 1.0
    busy_cost: float = 0.0
    schedule: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        if self.horizon < 1 or self.answer_ticks < 1 or self.think_ticks < 0:
            raise ValueError("horizon and answer_ticks must be >= 1, think_ticks >= 0")
        if not 0 <= self.rate <= 1:
            raise ValueError(f"rate is a probability per tick, got {self.rate}")
        if not 1 <= self.slack[0] <= self.slack[1]:
            raise ValueError(f"slack must be (lo, hi) with 1 <= lo <= hi, got {self.slack}")
        for arrival, deadline in self.schedule or ():
            if not 0 <= arrival < deadline:
                raise ValueError(f"scheduled page {(arrival, deadline)}: need 0 <= arrival < "
                                 "deadline")


class PagerEnv(TickEnvironment):
    """The pager (see the module docstring)."""

    action_names = frozenset({ANSWER})

    def __init__(self, cfg: PagerConfig = PagerConfig()) -> None:
        super().__init__(cfg.horizon)
        self.cfg = cfg
        self.pages: list[tuple[int, int]] = []
        self.outcome: dict[int, str] = {}

    def _start(self) -> None:
        cfg = self.cfg
        if cfg.schedule is not None:
            self.pages = sorted(cfg.schedule)
        else:
            arrivals = [t for t in range(cfg.horizon) if self.rng.random() < cfg.rate]
            slacks = self.rng.integers(cfg.slack[0], cfg.slack[1] + 1, size=len(arrivals))
            self.pages = [(t, t + int(s)) for t, s in zip(arrivals, slacks, strict=True)]
        self.outcome = {}
        for i, (arrival, deadline) in enumerate(self.pages):
            self.emit(PAGE, {"id": i, "deadline": deadline}, at=arrival)

    def open_pages(self) -> list[int]:
        return [i for i, (arrival, _) in enumerate(self.pages)
                if arrival <= self.now and i not in self.outcome]

    def admissible(self) -> AdmissibleSets:
        """``answer`` an arrived, open page, one at a time; nothing while answering or
        deciding."""
        rule = "answer an arrived, open page while not answering or deciding"
        if ANSWER in self.actions or self.pending_decisions():
            return AdmissibleSets((), rule=rule)
        choices = tuple({"page": i} for i in self.open_pages())
        return AdmissibleSets((ActionSpec(ANSWER, choices, rule=rule),) if choices else (),
                              rule=rule)

    def decision_latency(self, intervention: Intervention) -> int:
        return self.cfg.think_ticks

    def _transition(self, interventions: Sequence[Intervention]) -> float:
        cfg, u = self.cfg, 0.0
        for item in interventions:
            page = int(item.args["page"])
            if page in self.outcome:  # expired while the decision was pending
                continue
            self.actions.start(ANSWER, cfg.answer_ticks, page=page)
        if ANSWER in self.actions:
            u -= cfg.busy_cost
        for done in self.actions.advance():
            page = done.args["page"]
            if self.pages[page][1] >= self.now + 1:
                self.outcome[page] = ANSWERED
                u += cfg.reward
                self.emit(ANSWERED, {"id": page})
        for i, (_, deadline) in enumerate(self.pages):
            if deadline == self.now + 1 and i not in self.outcome:
                self.outcome[i] = EXPIRED
                u -= cfg.penalty
                self.emit(EXPIRED, {"id": i})
                running = self.actions.get(ANSWER)
                if running is not None and running.args["page"] == i:
                    self.actions.interrupt(ANSWER)
                pending = [p for p in self.pending_decisions()
                           if int(p.intervention.args["page"]) == i]
                if pending:
                    self.cancel_decision(ANSWER)
        return u
