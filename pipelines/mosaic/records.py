"""MOSAIC's data: problem inputs, configuration, per-step and per-trajectory records, labelling,
summary figures, and the checks and conversions of the trajectory tables.

A :class:`TrajectoryRecord` is one synthesis attempt (MOSAIC or baseline): its steps (each a
:class:`StepRecord` with the navigation card, overrides and perturbation), its status and
failure reason, and after :func:`label_records` its correctness by the shared grader.
:meth:`TrajectoryRecord.to_row` is the warehouse row of ``mosaic_trajectories`` and
``mosaic_baseline_trajectories``; :func:`expert_trajectories` turns such rows back into expert
trajectories with a training mask, selected by ρ and by the run that wrote them
(:func:`select_rows`), so the paper's setup — ρ = 0.1 trajectories for SFT, ρ = 0.2 for RL
(DeepTool §3.1, App. A.1) — can be built from one table side by side.

Injected steps as training targets: DeepTool §2.2 fine-tunes on the synthesized trajectories as
they are, so a step whose code was deliberately corrupted (Φ_gen, eq. 3) is a training target
like any other; that is the default here (``train_on_injected=True``). ``train_on_injected=False``
keeps such steps in the context only (never imitated), which was weft's earlier behaviour and
stays available. Environment failures (Φ_env, eq. 4) leave the actor's code intact, so their
steps are targets either way.

Figures (:func:`summarize_records`, DeepTool §3.6 Table 2 reports accuracy and "Avg. Turns" of
MOSAIC vs the baseline): ``avg_turns`` is over every attempt (a failed one counts its valid
prefix), ``avg_turns_complete`` over completed trajectories only, the figure comparable to turns
counted on finished trajectories (the paper does not say which it uses; we report both);
``early_answers`` counts trajectories the actor ended with an answer while the card asked for
code (accepted, Algorithm 1).

Not guaranteed: that ``correct`` means more than the grader's verdict on the final answer.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipelines.mosaic.agents import VERDICT_LOGICAL_DEVIATION, NavigationCard
from pipelines.mosaic.inject import (
    ENVIRONMENT,
    ENVIRONMENT_KINDS,
    GENERATION,
    GENERATION_KINDS,
    Perturbation,
)
from pipelines.tir import KIND_ANSWER, KIND_CODE, Step, Trajectory, validate_steps

METHOD_MOSAIC = "mosaic"
METHOD_BASELINE = "baseline"
COMPLETE = "complete"
FAILED = "failed"
FAIL_MANAGER_JSON = "manager_invalid_json"
FAIL_ACTOR_FORMAT = "actor_invalid_format"
FAIL_MAX_STEPS = "max_steps"
FAIL_ENDPOINT = "endpoint_error"
FAIL_SANDBOX = "sandbox_error"
FAILURE_REASONS = (FAIL_MANAGER_JSON, FAIL_ACTOR_FORMAT, FAIL_MAX_STEPS, FAIL_ENDPOINT, FAIL_SANDBOX)


# ---------------------------------------------------------------------------------------------
# Inputs and configuration


@dataclass(frozen=True)
class ProblemInput:
    """One problem to synthesize for: ``reference`` is y* (a worked solution or a trace)."""

    problem_id: str
    source: str
    problem: str
    answer: str
    reference: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ProblemInput:
        """From a ``problems`` row (or ``Problem.to_row()``): the solution is the reference.
        Raises ValueError naming the missing field."""
        missing = [k for k in ("problem_id", "problem", "answer") if not str(row.get(k) or "").strip()]
        if missing:
            raise ValueError(f"problem row lacks {missing}; MOSAIC needs an id, the problem "
                             "text and a gold answer")
        reference = str(row.get("solution") or "").strip()
        if not reference:
            reference = f"(no worked solution available; the final answer is {row['answer']})"
        return cls(str(row["problem_id"]), str(row.get("source") or ""), str(row["problem"]),
                   str(row["answer"]), reference)


@dataclass(frozen=True)
class MosaicConfig:
    """``max_steps`` is T_max; ``rho`` the chance a code step is perturbed (0.1 and 0.2 are the
    reference settings) and ``generation_share`` the chance a perturbation is a generation
    anomaly rather than an environment failure (equal by default); ``seed`` seeds injection per
    problem; ``exec_timeout_s`` is the session's wall-clock limit per cell (quoted by synthetic
    timeouts when the session does not say its own)."""

    max_steps: int = 6
    rho: float = 0.1
    seed: int = 0
    observation_chars: int = 1500
    exec_timeout_s: float = 10.0
    generation_kinds: tuple[str, ...] = GENERATION_KINDS
    environment_kinds: tuple[str, ...] = ENVIRONMENT_KINDS
    generation_share: float = 0.5
    concurrency: int = 4

    def __post_init__(self) -> None:
        if not (isinstance(self.max_steps, int) and self.max_steps >= 1):
            raise ValueError(f"max_steps must be an int >= 1, got {self.max_steps!r}")
        if not (isinstance(self.rho, (int, float)) and 0.0 <= self.rho <= 1.0):
            raise ValueError(f"rho must be a probability in [0, 1] (0.1 and 0.2 are the "
                             f"reference settings), got {self.rho!r}")
        if not self.observation_chars >= 200:
            raise ValueError(f"observation_chars must be >= 200, got {self.observation_chars!r}")
        if not (isinstance(self.generation_share, (int, float)) and 0.0 <= self.generation_share <= 1.0):
            raise ValueError(f"generation_share (the chance a perturbation is a generation "
                             f"anomaly) must be in [0, 1], got {self.generation_share!r}")
        if not self.exec_timeout_s > 0:
            raise ValueError(f"exec_timeout_s must be > 0, got {self.exec_timeout_s!r}")
        if not (isinstance(self.concurrency, int) and self.concurrency >= 1):
            raise ValueError(f"concurrency must be an int >= 1, got {self.concurrency!r}")
        for name, kinds, known in (("generation_kinds", self.generation_kinds, GENERATION_KINDS),
                                   ("environment_kinds", self.environment_kinds, ENVIRONMENT_KINDS)):
            if not kinds or set(kinds) - set(known):
                raise ValueError(f"{name} must be a non-empty subset of {known}, got {kinds!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"max_steps": self.max_steps, "rho": self.rho, "seed": self.seed,
                "observation_chars": self.observation_chars, "exec_timeout_s": self.exec_timeout_s,
                "generation_kinds": list(self.generation_kinds),
                "environment_kinds": list(self.environment_kinds),
                "generation_share": self.generation_share}


# ---------------------------------------------------------------------------------------------
# Records


@dataclass
class StepRecord:
    """One synthesized step and how it came about."""

    step: Step
    card: NavigationCard | None = None
    card_overrides: tuple[str, ...] = ()
    guide_redacted: bool = False
    perturbation: Perturbation | None = None
    error_observed: bool = False
    error_name: str | None = None
    actor_attempts: int = 1
    actor_repairs: tuple[str, ...] = ()
    correction_reason: str | None = None  # why the card is in Correction (None: Progress)
    early_answer: bool = False  # an answer while the card asked for code (Intermediate)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.step.to_dict(),
            "card": self.card.to_dict() if self.card else None,
            "card_overrides": list(self.card_overrides),
            "guide_redacted": self.guide_redacted,
            "perturbation": self.perturbation.to_dict() if self.perturbation else None,
            "error_observed": self.error_observed,
            "error_name": self.error_name,
            "actor_attempts": self.actor_attempts,
            "actor_repairs": list(self.actor_repairs),
            "correction_reason": self.correction_reason,
            "early_answer": self.early_answer,
        }


@dataclass
class TrajectoryRecord:
    """One synthesis attempt: steps, status, failure reason and (after labelling) correctness."""

    method: str
    problem: ProblemInput
    config: MosaicConfig
    steps: list[StepRecord] = field(default_factory=list)
    status: str = COMPLETE
    failure_reason: str | None = None
    failure_detail: str | None = None
    seconds: float = 0.0
    correct: bool | None = None
    grade_method: str | None = None
    grade_error: str | None = None

    @property
    def trajectory_id(self) -> str:
        key = "\x1f".join((self.method, self.problem.source, self.problem.problem_id,
                           json.dumps(self.config.to_dict(), sort_keys=True)))
        return hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]

    @property
    def plain_steps(self) -> list[Step]:
        return [r.step for r in self.steps]

    @property
    def final_answer(self) -> str | None:
        if self.steps and self.steps[-1].step.kind == KIND_ANSWER:
            return self.steps[-1].step.action
        return None

    @property
    def num_turns(self) -> int:
        return len(self.steps)

    @property
    def code_steps(self) -> int:
        return sum(1 for r in self.steps if r.step.kind == KIND_CODE)

    @property
    def perturbed_steps(self) -> int:
        return sum(1 for r in self.steps if r.perturbation is not None)

    @property
    def error_steps(self) -> int:
        return sum(1 for r in self.steps if r.error_observed)

    @property
    def early_answer(self) -> bool:
        """The trajectory ended on an answer the card had not asked for yet."""
        return bool(self.steps) and self.steps[-1].early_answer

    @property
    def correction_steps(self) -> int:
        return sum(1 for r in self.steps if r.correction_reason is not None)

    @property
    def deviation_corrections(self) -> int:
        """Correction steps the manager called for on a logical deviation from y*."""
        return sum(1 for r in self.steps if r.correction_reason == VERDICT_LOGICAL_DEVIATION)

    @property
    def recovered(self) -> bool:
        return bool(self.correct) and self.perturbed_steps > 0

    @property
    def valid(self) -> bool:
        return self.status == COMPLETE and not validate_steps(self.plain_steps)

    def fail(self, reason: str, detail: str | None) -> TrajectoryRecord:
        if reason not in FAILURE_REASONS:
            raise ValueError(f"unknown failure reason {reason!r}; known: {FAILURE_REASONS}")
        self.status, self.failure_reason, self.failure_detail = FAILED, reason, (detail or "")[:500]
        return self

    def to_trajectory(self) -> Trajectory:
        """The trajectory in the shared schema (only for complete records)."""
        if self.status != COMPLETE:
            raise ValueError(f"trajectory {self.trajectory_id} failed ({self.failure_reason}); "
                             "only complete trajectories can be used as expert data")
        meta = {"method": self.method, "correct": self.correct, "perturbed_steps": self.perturbed_steps}
        return Trajectory(self.trajectory_id, self.problem.problem_id, self.problem.source,
                          self.problem.problem, self.problem.answer, tuple(self.plain_steps),
                          json.dumps(meta, sort_keys=True))

    def to_row(self) -> dict[str, Any]:
        kinds = Counter(r.perturbation.mode for r in self.steps if r.perturbation)
        text = None
        if self.valid:
            text = self.to_trajectory().text()
        return {
            "trajectory_id": self.trajectory_id, "method": self.method,
            "problem_id": self.problem.problem_id, "source": self.problem.source,
            "problem": self.problem.problem, "answer": self.problem.answer,
            "status": self.status, "failure_reason": self.failure_reason,
            "failure_detail": self.failure_detail, "valid": self.valid,
            "final_answer": self.final_answer, "correct": self.correct,
            "grade_method": self.grade_method, "grade_error": self.grade_error,
            "num_turns": self.num_turns, "code_steps": self.code_steps,
            "perturbed_steps": self.perturbed_steps,
            "perturbed_generation": kinds.get(GENERATION, 0),
            "perturbed_environment": kinds.get(ENVIRONMENT, 0),
            "error_steps": self.error_steps, "recovered": self.recovered,
            "early_answer": self.early_answer, "correction_steps": self.correction_steps,
            "deviation_corrections": self.deviation_corrections,
            "seconds": round(self.seconds, 3), "rho": float(self.config.rho),
            "max_steps": self.config.max_steps, "seed": self.config.seed,
            "text": text,
            "steps_json": json.dumps([r.to_dict() for r in self.steps], ensure_ascii=False),
        }


# ---------------------------------------------------------------------------------------------
# Labelling and figures

GradePairs = Callable[[list[tuple[str, str]]], list[Any]]  # -> GradeResult-like (correct, method, error)


def label_records(records: Sequence[TrajectoryRecord], grade_pairs: GradePairs) -> None:
    """Set ``correct`` (and the grader's method and error) on every record, in place. Complete
    records are graded by ``grade_pairs`` on (final answer, gold) — pass
    ``GradingPool.grade_many`` or ``eval.graders.grade_many_serial``; failed ones are wrong."""
    todo = [r for r in records if r.status == COMPLETE and r.final_answer is not None]
    grades = grade_pairs([(r.final_answer or "", r.problem.answer) for r in todo]) if todo else []
    if len(grades) != len(todo):
        raise RuntimeError(f"the grader returned {len(grades)} results for {len(todo)} answers")
    for record, grade in zip(todo, grades):
        record.correct = bool(grade.correct)
        record.grade_method = getattr(grade, "method", None)
        record.grade_error = getattr(grade, "error", None)
    for record in records:
        if record.status != COMPLETE:
            record.correct, record.grade_method = False, "none"


def summarize_records(records: Sequence[TrajectoryRecord]) -> dict[str, Any]:
    """Accuracy over all attempts (failed ones count as wrong), average turns over all attempts
    and over completed trajectories, realized perturbation rate (perturbed / code steps),
    recovery rate (correct among trajectories with a perturbation), early answers, Correction
    steps (and those for a logical deviation), failure counts and seconds per trajectory."""
    n = len(records)

    def mean(values: Sequence[float]) -> float | None:
        return sum(values) / len(values) if values else None

    code_steps = sum(r.code_steps for r in records)
    perturbed = sum(r.perturbed_steps for r in records)
    hit = [r for r in records if r.perturbed_steps > 0]
    complete = [r for r in records if r.status == COMPLETE]
    return {
        "trajectories": n,
        "complete": len(complete),
        "valid": sum(1 for r in records if r.valid),
        "correct": sum(1 for r in records if r.correct),
        "accuracy": mean([1.0 if r.correct else 0.0 for r in records]),
        "avg_turns": mean([r.num_turns for r in records]),
        "avg_turns_complete": mean([r.num_turns for r in complete]),
        "early_answers": sum(1 for r in records if r.early_answer),
        "correction_steps": sum(r.correction_steps for r in records),
        "deviation_corrections": sum(r.deviation_corrections for r in records),
        "code_steps": code_steps,
        "error_steps": sum(r.error_steps for r in records),
        "perturbed_steps": perturbed,
        "perturbation_rate": perturbed / code_steps if code_steps else None,
        "perturbed_trajectories": len(hit),
        "recovered": sum(1 for r in hit if r.recovered),
        "recovery_rate": mean([1.0 if r.recovered else 0.0 for r in hit]),
        "failures": dict(sorted(Counter(r.failure_reason for r in records if r.failure_reason).items())),
        "seconds_per_trajectory": mean([r.seconds for r in records]),
    }


SIDE_BY_SIDE = ("trajectories", "accuracy", "avg_turns", "avg_turns_complete",
                "perturbation_rate", "recovery_rate", "complete", "valid", "error_steps",
                "early_answers", "seconds_per_trajectory")


def side_by_side(mosaic: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows ``{metric, mosaic, baseline}`` for the figures both summaries share, then one row
    per failure reason."""
    rows = [{"metric": k, "mosaic": mosaic.get(k), "baseline": baseline.get(k)} for k in SIDE_BY_SIDE]
    reasons = sorted(set(mosaic.get("failures", {})) | set(baseline.get("failures", {})))
    rows += [{"metric": f"failed:{r}", "mosaic": mosaic.get("failures", {}).get(r, 0),
              "baseline": baseline.get("failures", {}).get(r, 0)} for r in reasons]
    return rows


# ---------------------------------------------------------------------------------------------
# Warehouse rows: expert data and validation


def training_mask(steps_json: str, *, train_on_injected: bool = True) -> list[bool]:
    """Per step, whether it is a training target. With ``train_on_injected`` (the paper's
    behaviour, the default) every step is; without it a step whose code was mutated on purpose
    (a generation anomaly) is False: it stays in the context but is never imitated."""
    steps = json.loads(steps_json)
    if train_on_injected:
        return [True] * len(steps)
    return [(s.get("perturbation") or {}).get("mode") != GENERATION for s in steps]


def select_rows(rows: Sequence[Mapping[str, Any]], *, rho: float | None = None,
                run_ids: Sequence[str] = ()) -> list[Mapping[str, Any]]:
    """The rows synthesized with injection rate ``rho`` (None: any) by one of ``run_ids``
    (empty: any run). ρ is compared to 1e-9, so 0.1 selects rows written with ``rho=0.1``.
    Raises ValueError for a ρ outside [0, 1]."""
    if rho is not None and not 0.0 <= float(rho) <= 1.0:
        raise ValueError(f"rho must be in [0, 1] (0.1 and 0.2 are the paper's settings) or "
                         f"None for every ρ, got {rho!r}")
    wanted = set(run_ids)
    return [row for row in rows
            if (rho is None or (row.get("rho") is not None
                                and abs(float(row["rho"]) - float(rho)) < 1e-9))
            and (not wanted or row.get("run_id") in wanted)]


def expert_trajectories(rows: Sequence[Mapping[str, Any]], *, only_correct: bool = True,
                        train_on_injected: bool = True, rho: float | None = None,
                        run_ids: Sequence[str] = ()) -> list[tuple[Trajectory, list[bool]]]:
    """(trajectory, training mask) for every valid row of a trajectories table (correct ones
    only by default) synthesized with ``rho`` by ``run_ids`` (:func:`select_rows`): the expert
    data for SFT and step-wise decomposition. A trajectory id seen twice (the same synthesis
    stored twice) is used once: the row created last."""
    chosen: dict[str, Mapping[str, Any]] = {}
    for row in select_rows(rows, rho=rho, run_ids=run_ids):
        if not row.get("valid") or (only_correct and not row.get("correct")):
            continue
        key = str(row["trajectory_id"])
        seen = chosen.get(key)
        if seen is None or _created(row) >= _created(seen):
            chosen[key] = row
    return [(Trajectory.from_row(dict(row)),
             training_mask(row["steps_json"], train_on_injected=train_on_injected))
            for row in chosen.values()]


def _created(row: Mapping[str, Any]) -> str:
    return str(row.get("created_at") or "")


def validate_trajectory_rows(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Problems with rows of a trajectories table (empty: fine): a known status; complete rows
    valid with a text that parses and validates; failed rows with a known failure reason;
    every row labelled (``correct`` set)."""
    from pipelines.tir import validate_text

    problems: list[str] = []
    for row in rows:
        where = f"trajectory {row.get('trajectory_id', '?')}"
        status = row.get("status")
        if status == COMPLETE:
            text_problems = validate_text(row.get("text") or "")
            if not row.get("valid") or text_problems:
                problems.append(f"{where}: complete but invalid: {'; '.join(text_problems)[:200]}")
        elif status == FAILED:
            if row.get("failure_reason") not in FAILURE_REASONS:
                problems.append(f"{where}: failed without a known failure reason "
                                f"({row.get('failure_reason')!r})")
        else:
            problems.append(f"{where}: unknown status {status!r}")
        if row.get("correct") is None:
            problems.append(f"{where}: not labelled (correct is null)")
    return problems
