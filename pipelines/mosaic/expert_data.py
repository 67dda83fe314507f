"""The expert trajectories that TIR SFT and process-supervised GRPO learn from (DeepTool §2.2
and §2.3), chosen from the stored MOSAIC trajectories and the real TIR ones, and the rows built
from them: SFT rows in both renderings and one step instance per training step.

:func:`expert_items` selects (trajectory, training mask, origin) triples; :func:`sft_dataset_rows`
and :func:`step_instance_rows` turn them into the rows of ``tir_sft_dataset`` and
``step_instances``; :func:`tir_text_problems` and :func:`sft_rendering_problems` are the checks
of the real trajectories and of the SFT table.

Deliberately mutated MOSAIC steps are training targets like any other (DeepTool §2.2 trains on
the trajectories as synthesized) unless the selection says ``train_on_injected: false``; then
they stay in the context only and their step instances are left out.

Not guaranteed: that the selection is non-empty for a given ρ or run (ValueError says what was
asked for).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pipelines.mosaic import StepInstance, decompose_many, expert_trajectories
from pipelines.mosaic.synthesis_runs import TABLE_MOSAIC
from pipelines.tir import RENDERINGS, Trajectory, sft_rows, validate_sft_rows, validate_text

TABLE_REAL = "tir_trajectories"
ORIGIN_MOSAIC, ORIGIN_REAL = "mosaic", "real"

ExpertItem = tuple[Trajectory, list[bool], str]  # (trajectory, training mask, origin)


class ExpertSelection(Protocol):
    """Which expert trajectories to use: MOSAIC ones (correct only, synthesized with
    ``mosaic_rho`` by ``mosaic_run_ids``; None / empty: any) and real ones (at most
    ``real_limit`` per source, in trajectory-id order)."""

    include_mosaic: bool
    include_real: bool
    only_correct: bool
    mosaic_rho: float | None
    mosaic_run_ids: Sequence[str]
    train_on_injected: bool
    real_limit: int | None


def expert_items(wh: Any, selection: ExpertSelection) -> list[ExpertItem]:
    """(trajectory, training mask, origin) from the MOSAIC table and the real TIR table; a
    real trajectory trains on every step. ValueError when nothing is selected."""
    items: list[ExpertItem] = []
    if selection.include_mosaic:
        rows = wh.read(TABLE_MOSAIC).to_pylist()
        chosen = expert_trajectories(rows, only_correct=selection.only_correct,
                                     train_on_injected=selection.train_on_injected,
                                     rho=selection.mosaic_rho, run_ids=selection.mosaic_run_ids)
        items += [(t, mask, ORIGIN_MOSAIC) for t, mask in chosen]
    if selection.include_real:
        per_source: Counter[str] = Counter()
        for row in sorted(wh.read(TABLE_REAL).to_pylist(), key=lambda r: r["trajectory_id"]):
            if selection.real_limit is not None and per_source[row["source"]] >= selection.real_limit:
                continue
            per_source[row["source"]] += 1
            trajectory = Trajectory.from_row(row)
            items.append((trajectory, [True] * len(trajectory.steps), ORIGIN_REAL))
    if not items:
        raise ValueError("no expert trajectories: materialize `mosaic_trajectories` (with some "
                         "correct ones) or `tir_trajectories` first, or enable "
                         "include_mosaic/include_real; MOSAIC selection: "
                         f"mosaic_rho={selection.mosaic_rho}, "
                         f"mosaic_run_ids={list(selection.mosaic_run_ids)}")
    return items


def masked_steps(items: Sequence[ExpertItem]) -> int:
    """Steps kept out of training (mutated steps with ``train_on_injected: false``)."""
    return sum(mask.count(False) for _, mask, _ in items)


def origins(items: Sequence[ExpertItem]) -> dict[str, int]:
    """How many trajectories came from each origin (mosaic, real)."""
    return dict(Counter(origin for _, _, origin in items))


def sft_dataset_rows(items: Sequence[ExpertItem], rendering: str) -> list[dict[str, Any]]:
    """The TRL prompt/completion rows of every item in ``rendering`` (DeepTool §2.2), one per
    training step, with the trajectory's id, problem id, source and origin."""
    rows = []
    for trajectory, mask, origin in items:
        for row in sft_rows(trajectory.problem, trajectory.steps, rendering, train_on=mask):
            row.update(trajectory_id=trajectory.trajectory_id, problem_id=trajectory.problem_id,
                       source=trajectory.source, origin=origin)
            rows.append(row)
    return rows


@dataclass(frozen=True)
class StepInstances:
    """The step instances of a selection: ``rows`` for the table, the ``kept`` instances,
    how many were ``masked`` out by the training masks, and the ``refused`` trajectories
    (trajectory id, reason)."""

    rows: list[dict[str, Any]]
    kept: list[StepInstance]
    masked: int
    refused: list[tuple[str, str]]


def step_instance_rows(items: Sequence[ExpertItem], rendering: str) -> StepInstances:
    """One step instance per training step of the items (DeepTool §2.3: context x, H*_{t-1},
    target step t) in ``rendering``, each row with its trajectory's origin."""
    origin = {t.trajectory_id: o for t, _, o in items}
    masks = {t.trajectory_id: m for t, m, _ in items}
    result = decompose_many(t for t, _, _ in items)
    kept = [i for i in result.instances if masks[i.trajectory_id][i.step_index - 1]]
    rows = [dict(i.to_row(rendering), origin=origin[i.trajectory_id]) for i in kept]
    return StepInstances(rows, kept, len(result.instances) - len(kept), result.refused)


def steps_histogram(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Trajectories per number of steps, ordered by the number."""
    steps = Counter(int(r["num_steps"]) for r in rows)
    return {str(k): v for k, v in sorted(steps.items())}


def tir_text_problems(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """``<trajectory id>: <problem>`` for every real trajectory whose text does not validate."""
    return [f"{r['trajectory_id']}: {p}" for r in rows for p in validate_text(r["text"])]


def sft_rendering_problems(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Problems with ``tir_sft_dataset`` rows, and whether the renderings' row counts differ."""
    found = validate_sft_rows(list(rows))
    counts = Counter(r["rendering"] for r in rows)
    if len({counts.get(r, 0) for r in RENDERINGS}) != 1:
        found.append(f"renderings have different row counts: {dict(counts)}")
    return found
