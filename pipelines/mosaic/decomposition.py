"""Step-wise decomposition of expert TIR trajectories into process-supervised training instances.

From an expert trajectory τ* = (x, [s*_1..s*_T]) — a correct MOSAIC trajectory or a real one
ingested by ``pipelines.ingest.trajectories`` — :func:`decompose` makes one :class:`StepInstance` per step
t = 1..T: the context Q_t = (x, H*_{t-1}) is the problem and the ground-truth history of the
steps before t (thoughts, code and interpreter outputs), the target L_t = (thought*_t,
action*_t) is step t without its observation. Rows (:meth:`StepInstance.to_row`) carry the
prompt as chat messages (``pipelines.tir.context_messages``) and the columns the action-centric
process reward reads: ``reference_action``, ``reference_kind``, ``is_last_step``.

Which steps become instances is the caller's choice (``assets.mosaic.step_instances`` applies
the training mask of ``pipelines.mosaic.expert_trajectories``): by default, as in the
paper, a MOSAIC step whose code was corrupted on purpose (Φ_gen, eq. 3) is a target like any
other, because τ* is the synthesized trajectory itself; the trajectories are chosen by ρ and run
there (the paper decomposes ρ = 0.2 data for RL, §3.1).

Guarantees: T valid steps give exactly T instances, instance t holds exactly steps 1..t-1 as its
history, and the last instance is the only one whose target is an answer. An invalid trajectory
is refused with the validator's problems (:func:`decompose`) or reported per trajectory
(:func:`decompose_many`). Not guaranteed: that the expert steps are good targets (a correct final
answer does not make every intermediate step useful).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.tir import (
    KIND_ANSWER,
    STATE_PRESERVED,
    TIR_SYSTEM_PROMPT,
    Step,
    TIRFormatError,
    Trajectory,
    action_process_reward,
    check_steps,
    context_messages,
    serialize_output,
    steps_to_dicts,
)


@dataclass(frozen=True)
class StepInstance:
    """Context Q_t = (problem, history) and target L_t = (thought, action) of step ``step_index``."""

    trajectory_id: str
    problem_id: str
    source: str
    problem: str
    answer: str
    step_index: int
    num_steps: int
    history: tuple[Step, ...]
    target: Step

    @property
    def instance_id(self) -> str:
        return f"{self.trajectory_id}-{self.step_index:02d}"

    @property
    def is_last_step(self) -> bool:
        return self.step_index == self.num_steps

    def prompt(self, rendering: str = STATE_PRESERVED,
               system_prompt: str = TIR_SYSTEM_PROMPT) -> list[dict[str, str]]:
        return context_messages(self.problem, self.history, rendering, system_prompt)

    def to_row(self, rendering: str = STATE_PRESERVED,
               system_prompt: str = TIR_SYSTEM_PROMPT) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "trajectory_id": self.trajectory_id,
            "problem_id": self.problem_id,
            "source": self.source,
            "step_index": self.step_index,
            "num_steps": self.num_steps,
            "is_last_step": self.is_last_step,
            "rendering": rendering,
            "prompt": self.prompt(rendering, system_prompt),
            "reference_thought": self.target.thought,
            "reference_action": self.target.action,
            "reference_kind": self.target.kind,
            "reference_output": serialize_output(self.target),
            "answer": self.answer,
            "history_json": json.dumps(steps_to_dicts(self.history), ensure_ascii=False),
        }


def decompose(trajectory: Trajectory) -> list[StepInstance]:
    """One instance per step; raises :class:`TIRFormatError` if the trajectory is invalid."""
    steps = check_steps(trajectory.steps)
    total = len(steps)
    return [
        StepInstance(
            trajectory_id=trajectory.trajectory_id, problem_id=trajectory.problem_id,
            source=trajectory.source, problem=trajectory.problem, answer=trajectory.answer,
            step_index=t, num_steps=total, history=tuple(steps[: t - 1]),
            target=Step(steps[t - 1].thought, steps[t - 1].kind, steps[t - 1].action),
        )
        for t in range(1, total + 1)
    ]


@dataclass
class DecomposeResult:
    instances: list[StepInstance]
    refused: list[tuple[str, str]]  # (trajectory_id, reason)


def decompose_many(trajectories: Iterable[Trajectory]) -> DecomposeResult:
    """Decompose every trajectory; invalid ones are listed in ``refused`` with the reason."""
    result = DecomposeResult([], [])
    for trajectory in trajectories:
        try:
            result.instances.extend(decompose(trajectory))
        except TIRFormatError as exc:
            result.refused.append((trajectory.trajectory_id, str(exc)))
    return result


def validate_instance_rows(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Problems with step-instance rows (empty: fine): the last step and only it targets an
    answer, and each row's reference output earns the full process reward against its own
    reference action (so the reward and the data agree on the schema)."""
    problems: list[str] = []
    for row in rows:
        where = f"instance {row.get('instance_id', '?')}"
        last = bool(row.get("is_last_step"))
        if (row.get("reference_kind") == KIND_ANSWER) != last:
            problems.append(f"{where}: reference_kind={row.get('reference_kind')!r} but "
                            f"is_last_step={last}")
            continue
        if row.get("step_index") != row.get("num_steps") and last:
            problems.append(f"{where}: is_last_step set on step {row.get('step_index')} of "
                            f"{row.get('num_steps')}")
        try:
            reward = action_process_reward(row.get("reference_output") or "",
                                           row.get("reference_action") or "",
                                           row.get("reference_kind") or "", last)
        except (TypeError, ValueError) as exc:
            problems.append(f"{where}: {exc}")
            continue
        if reward != 1.0:
            problems.append(f"{where}: the reference output scores {reward:.3f}, not 1.0, "
                            "against its own reference action")
    return problems


def summarize_instances(instances: Sequence[StepInstance]) -> dict[str, Any]:
    """Counts for UI metadata: instances, trajectories, answer targets, positions, history size."""
    n = len(instances)
    return {
        "instances": n,
        "trajectories": len({i.trajectory_id for i in instances}),
        "answer_targets": sum(1 for i in instances if i.target.kind == KIND_ANSWER),
        "code_targets": sum(1 for i in instances if i.target.kind != KIND_ANSWER),
        "mean_history_steps": (sum(len(i.history) for i in instances) / n) if n else None,
        "by_source": dict(sorted(Counter(i.source for i in instances).items())),
        "by_num_steps": {str(k): v for k, v in sorted(Counter(i.num_steps for i in instances).items())},
    }
