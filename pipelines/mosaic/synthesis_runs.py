"""One synthesis run over one source, as the MOSAIC assets and the DeepTool claims run it:
MOSAIC's manager/actor loop with failure injection (DeepTool §2.1, Algorithm 1) or the plain
single-actor baseline of Table 2, on a deterministic slice of a source's problems.

:class:`SourceSynthesis` holds a run's settings (refusing combinations that cannot run) and
names its table and warehouse partition (:func:`mosaic_partition`: MOSAIC rows live under
``<source>/rho=<ρ>``, so runs with different ρ sit side by side); :func:`problem_inputs`
reads the slice; :func:`synthesizer` and :func:`run_synthesis` build and run the agents;
:func:`trajectory_rows`, :func:`summary_table` and :func:`summary_figures` give the rows and
figures the assets write and show.

The caller brings what needs a running system: LLM clients (none for the scripted agents),
sandbox sessions and the grading pool. Nothing here makes a client, opens a sandbox or writes
to the warehouse.

Not guaranteed: that trajectories are complete or correct; failed attempts are kept with their
reason (DeepTool §2.2) and the figures describe what was produced.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.llm import SamplingParams
from pipelines.mosaic import (
    ACTOR_STOP,
    FAILURE_REASONS,
    METHOD_BASELINE,
    METHOD_MOSAIC,
    LLMActor,
    LLMBaselineActor,
    LLMManager,
    MosaicConfig,
    ProblemInput,
    TrajectoryRecord,
    side_by_side,
    synthesize_baseline,
    synthesize_many,
    synthesize_mosaic,
)
from pipelines.mosaic.scripted import SCRIPTED_LABEL, ScriptedActor, ScriptedManager

TABLE_MOSAIC = "mosaic_trajectories"
TABLE_BASELINE = "mosaic_baseline_trajectories"
TABLE_SUMMARY = "mosaic_summary"
SUMMARY_COLUMNS = ["metric", "mosaic", "baseline"]
# "llm": LLM clients play manager and actor (the paper's setting); "scripted": the rule-based
# agents of pipelines.mosaic.scripted walk the reference's calculations (MOSAIC only)
AGENTS = ("llm", "scripted")
FLOAT_METRICS = ("accuracy", "avg_turns", "avg_turns_complete", "perturbation_rate",
                 "recovery_rate", "seconds_per_trajectory")
# the summary figures a run shows, in this order
FIGURES = ("trajectories", "complete", "accuracy", "avg_turns", "avg_turns_complete",
           "early_answers", "deviation_corrections", "perturbation_rate", "recovery_rate",
           "seconds_per_trajectory", "failures")


def mosaic_partition(source: str, rho: float) -> str:
    """The warehouse partition of MOSAIC rows for one source and ρ, e.g. ``gsm8k/rho=0.1``."""
    return f"{source}/rho={float(rho):g}"


@dataclass(frozen=True)
class SourceSynthesis:
    """One run: ``method`` (mosaic or baseline) over the first ``limit`` problems of ``split``
    of ``source`` (ordered by problem id), with T_max ``max_steps``, injection rate ``rho`` and
    ``generation_share`` (MOSAIC only: the baseline runs at ρ = 0), the run's ``seed``, and
    ``concurrency`` trajectories at a time. ``agents`` is ``llm`` or ``scripted`` (MOSAIC
    only); ``actor_base_url``/``actor_model`` put the actor on its own endpoint.
    ``partition_suffix`` is appended to the partitions, so an experiment running its own
    synthesis keeps its rows apart. Raises ValueError on settings that cannot run together."""

    method: str
    source: str
    split: str = "train"
    limit: int | None = 20
    max_steps: int = 6
    rho: float = 0.1
    generation_share: float = 0.5
    seed: int = 0
    concurrency: int = 4
    agents: str = "llm"
    actor_base_url: str = ""
    actor_model: str = ""
    partition_suffix: str = ""

    def __post_init__(self) -> None:
        if self.actor_base_url and not self.actor_model:
            raise ValueError("set actor_model together with actor_base_url")
        if self.agents not in AGENTS:
            raise ValueError(f"agents must be 'llm' or 'scripted', got {self.agents!r}")
        if self.scripted and self.method != METHOD_MOSAIC:
            raise ValueError("the scripted agents play MOSAIC's manager and actor only; the "
                             "baseline synthesizer needs agents: llm")

    @property
    def scripted(self) -> bool:
        return self.agents == "scripted"

    @property
    def is_mosaic(self) -> bool:
        return self.method == METHOD_MOSAIC

    @property
    def table(self) -> str:
        return TABLE_MOSAIC if self.is_mosaic else TABLE_BASELINE

    @property
    def partition(self) -> str:
        """:func:`mosaic_partition` for MOSAIC, the source for the baseline; plus the suffix."""
        base = mosaic_partition(self.source, self.rho) if self.is_mosaic else self.source
        return base + self.partition_suffix

    def mosaic_config(self, exec_timeout_s: float) -> MosaicConfig:
        """The loop's configuration; ``exec_timeout_s`` is the sandbox's limit per cell."""
        return MosaicConfig(max_steps=self.max_steps, rho=self.rho if self.is_mosaic else 0.0,
                            seed=self.seed, exec_timeout_s=exec_timeout_s,
                            generation_share=self.generation_share, concurrency=self.concurrency)

    def labels(self, model_label: str | None) -> tuple[str, str]:
        """(manager, actor) model labels for the rows: the scripted agents' label, or
        ``model_label`` (the manager's endpoint) with the actor's own model when it has one."""
        if self.scripted:
            return SCRIPTED_LABEL, SCRIPTED_LABEL
        manager = str(model_label)
        return manager, self.actor_model or manager


def problem_inputs(wh: Any, source: str, split: str, limit: int | None) -> list[ProblemInput]:
    """The first ``limit`` (None: all) ``split`` problems of ``source``, ordered by problem id;
    ValueError when there are none (the problems assets have not run)."""
    query = "SELECT * FROM problems WHERE source = $s AND split = $split ORDER BY problem_id"
    rows = wh.sql(query, {"s": source, "split": split}).to_pylist()
    if not rows:
        raise ValueError(f"no `{split}` problems for source {source!r}: materialize its "
                         "`<source>_problems` asset and `problems` first")
    return [ProblemInput.from_row(r) for r in (rows[:limit] if limit is not None else rows)]


Synthesizer = Callable[[ProblemInput], Awaitable[TrajectoryRecord]]


def synthesizer(plan: SourceSynthesis, cfg: MosaicConfig, sessions: Any, *,
                manager_client: Any = None, actor_client: Any = None,
                manager_params: SamplingParams | None = None,
                actor_params: SamplingParams | None = None) -> Synthesizer:
    """The coroutine that synthesizes one problem's trajectory: the scripted agents, MOSAIC's
    manager and actor (DeepTool §2.1; the actor stops at its step's end, ``ACTOR_STOP``), or
    the baseline actor, each with ``sessions`` for its code."""
    if plan.scripted:
        scripted_manager, scripted_actor = ScriptedManager(), ScriptedActor()
        return lambda problem: synthesize_mosaic(problem, scripted_manager, scripted_actor,
                                                 sessions, cfg)
    actor_params = dataclasses.replace(actor_params or SamplingParams(), stop=ACTOR_STOP)
    if plan.is_mosaic:
        manager = LLMManager(manager_client, params=manager_params or SamplingParams())
        actor = LLMActor(actor_client, params=actor_params)
        return lambda problem: synthesize_mosaic(problem, manager, actor, sessions, cfg)
    baseline = LLMBaselineActor(actor_client, params=actor_params)
    return lambda problem: synthesize_baseline(problem, baseline, sessions, cfg)


def run_synthesis(inputs: Sequence[ProblemInput], make: Synthesizer, concurrency: int,
                  clients: Iterable[Any] = ()) -> list[TrajectoryRecord]:
    """Every problem's record, in input order, ``concurrency`` at a time; the ``clients``
    (each once) are closed when the run ends, however it ends."""
    async def run() -> list[TrajectoryRecord]:
        try:
            return await synthesize_many(inputs, make, concurrency=concurrency)
        finally:
            for client in {id(c): c for c in clients if c}.values():
                await client.aclose()

    return asyncio.run(run())


def trajectory_rows(records: Sequence[TrajectoryRecord], plan: SourceSynthesis,
                    manager_label: str, actor_label: str) -> list[dict[str, Any]]:
    """One table row per record, with the models that played manager (MOSAIC only) and actor."""
    manager = manager_label if plan.is_mosaic else None
    return [dict(r.to_row(), manager_model=manager, actor_model=actor_label) for r in records]


def summary_table(method: str, source: str, summary: Mapping[str, Any], model: str,
                  rho: float) -> Any:
    """One ``mosaic_summary`` row as a pyarrow table with fixed column types (a rate with no
    data is null, not a null-typed column that would clash with other partitions)."""
    import pyarrow as pa

    columns: dict[str, tuple[Any, pa.DataType]] = {
        "method": (method, pa.string()), "source": (source, pa.string()),
        "model": (model, pa.string()), "rho": (float(rho), pa.float64()),
        "failures_json": (json.dumps(summary["failures"], sort_keys=True), pa.string()),
    }
    for key, value in summary.items():
        if key in FLOAT_METRICS:
            columns[key] = (None if value is None else float(value), pa.float64())
        elif isinstance(value, int):
            columns[key] = (value, pa.int64())
    for reason in FAILURE_REASONS:
        columns[f"failed_{reason}"] = (int(summary["failures"].get(reason, 0)), pa.int64())
    return pa.table({k: pa.array([v], type=t) for k, (v, t) in columns.items()})


def other_summary(wh: Any, method: str, source: str) -> dict[str, Any] | None:
    """The newest stored summary of the other method on ``source`` (MOSAIC: the latest ρ run),
    its failure counts decoded; None when that method has not run there."""
    other = METHOD_BASELINE if method == METHOD_MOSAIC else METHOD_MOSAIC
    found = [r for r in wh.read(TABLE_SUMMARY).to_pylist()
             if r.get("method") == other and r.get("source") == source]
    if not found:
        return None
    row = max(found, key=lambda r: str(r.get("created_at") or ""))
    row["failures"] = json.loads(row.get("failures_json") or "{}")
    return row


def summary_figures(method: str, summary: Mapping[str, Any], calls: int) -> dict[str, Any]:
    """The figures a run shows (:data:`FIGURES`, floats as floats, missing rates left out),
    with its method and number of LLM calls."""
    figures: dict[str, Any] = {"method": method, **{k: summary[k] for k in FIGURES},
                               "llm_calls": calls}
    return {k: (float(v) if isinstance(v, float) else v) for k, v in figures.items()
            if v is not None}


def mosaic_vs_baseline(wh: Any, method: str, source: str,
                       summary: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """MOSAIC's and the baseline's figures on ``source`` side by side (:data:`SUMMARY_COLUMNS`),
    once both have run there; None before."""
    other = other_summary(wh, method, source)
    if other is None:
        return None
    mosaic, baseline = (summary, other) if method == METHOD_MOSAIC else (other, summary)
    return side_by_side(mosaic, baseline)
