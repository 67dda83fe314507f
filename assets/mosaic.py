"""MOSAIC assets: synthesized and real tool-integrated trajectories, the TIR SFT dataset, and the
step instances for process-supervised GRPO.

- ``mosaic_trajectories`` / ``mosaic_baseline_trajectories`` (partitioned by source dataset):
  synthesize one trajectory per problem of that source (a deterministic slice of the train
  split) with ``pipelines.mosaic`` — manager/actor with failure injection, or the plain baseline
  — grade them, and write one row per trajectory (table of the same name), every LLM call to
  ``llm_calls`` and one summary row per method and source to ``mosaic_summary``. MOSAIC rows go
  to the warehouse partition ``<source>/rho=<ρ>`` (:func:`mosaic_partition`), so runs with
  different ρ (the paper's 0.1 for SFT, 0.2 for RL) live side by side; a rerun with the same ρ
  replaces its rows. The UI shows accuracy, average turns (all attempts and completed ones),
  realized perturbation rate, recovery rate, early answers and failure counts, MOSAIC and
  baseline side by side once both exist for a source.
- ``tir_trajectories``: the real TIR trajectories under ``WEFT_DATA_DIR/tir`` in the same schema
  (``pipelines.ingest.tir``), rejects to ``rejects``.
- ``tir_sft_dataset``: SFT rows in both renderings (state preserved / state discarded) from the
  correct MOSAIC trajectories and the real ones. Deliberately mutated steps are targets like any
  other step (DeepTool §2.2 trains on the trajectories as synthesized); ``train_on_injected:
  false`` keeps them in the context only.
- ``step_instances``: one row per step of the expert trajectories
  (``pipelines.mosaic.decomposition``).
  Both select their MOSAIC trajectories by ρ (``mosaic_rho``) and by run (``mosaic_run_ids``),
  e.g. ``mosaic_rho: 0.1`` for SFT and ``mosaic_rho: 0.2`` for step instances.

Checks call the pure validators of the pipelines modules.
"""


import asyncio
import json
from collections import Counter
from typing import Any

import dagster as dg

from assets.common import lineage, md_table, now, run_record
from assets.ingest import problems
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sandbox_resource import SandboxResource
from warehouse.runs import record_run

MOSAIC_SOURCES: tuple[str, ...] = ("gsm8k", "math", "deepscaler", "dapo_math_17k", "reasoning_gym")
TIR_SOURCE_NAMES: tuple[str, ...] = ("mathcoder", "tora")
mosaic_partitions = dg.StaticPartitionsDefinition(list(MOSAIC_SOURCES))

TABLE_MOSAIC = "mosaic_trajectories"
TABLE_BASELINE = "mosaic_baseline_trajectories"
TABLE_SUMMARY = "mosaic_summary"
SUMMARY_COLUMNS = ["metric", "mosaic", "baseline"]


class MosaicSynthesisConfig(dg.Config):
    """Shared by both synthesis assets (the baseline ignores the manager and injection fields).
    ``actor_base_url``/``actor_model`` put the actor on another endpoint than the manager. Code
    runs in sessions of the ``sandbox`` resource, with its limits (e.g. ``timeout_s``)."""

    limit: int | None = 20
    split: str = "train"
    max_steps: int = 6
    rho: float = 0.1
    generation_share: float = 0.5
    seed: int = 0
    manager_temperature: float = 0.0
    manager_max_tokens: int = 640  # pipelines.mosaic.MANAGER_MAX_TOKENS
    actor_temperature: float = 0.7
    actor_max_tokens: int = 384
    concurrency: int = 4
    actor_base_url: str = ""
    actor_model: str = ""
    # "llm": the `llm` resource plays manager and actor (the paper's setting); "scripted": the
    # rule-based agents of pipelines.mosaic.scripted walk the reference's calculations (MOSAIC
    # only; for experiments about training on MOSAIC data when no capable LLM is at hand)
    agents: str = "llm"


class TIRTrajectoriesConfig(dg.Config):
    limit: int | None = None
    decontaminate: bool = True


class ExpertDataConfig(dg.Config):
    """Which expert trajectories feed SFT / decomposition. ``mosaic_rho`` keeps the MOSAIC
    trajectories synthesized with that ρ (None: every ρ); ``mosaic_run_ids`` those written by
    these runs (empty: every run). ``train_on_injected`` (the paper's behaviour) makes steps
    with deliberately mutated code training targets; false keeps them in the context only.
    ``real_limit`` caps the real ones per source (CPU-sized runs); ``rendering`` applies to
    step-instance prompts."""

    include_mosaic: bool = True
    include_real: bool = True
    only_correct: bool = True
    mosaic_rho: float | None = None
    mosaic_run_ids: list[str] = []
    train_on_injected: bool = True
    real_limit: int | None = None
    rendering: str = "state_preserved"


# ---------------------------------------------------------------------------------------------
# Synthesis


def mosaic_partition(source: str, rho: float) -> str:
    """The warehouse partition of MOSAIC rows for one source and ρ, e.g. ``gsm8k/rho=0.1``."""
    return f"{source}/rho={float(rho):g}"


def _problem_inputs(wh, source: str, split: str, limit: int | None):
    from pipelines.mosaic import ProblemInput

    query = "SELECT * FROM problems WHERE source = $s AND split = $split ORDER BY problem_id"
    rows = wh.sql(query, {"s": source, "split": split}).to_pylist()
    if not rows:
        raise dg.Failure(f"no `{split}` problems for source {source!r}: materialize its "
                         "`<source>_problems` asset and `problems` first")
    return [ProblemInput.from_row(r) for r in (rows[:limit] if limit is not None else rows)]


def synthesize_source(context: dg.AssetExecutionContext, config: MosaicSynthesisConfig,
                      llm: LLMResource, wh: Any, grader: GraderResource, sandbox: SandboxResource,
                      method: str, source: str, *, partition_suffix: str = ""
                      ) -> tuple[list[dict[str, Any]], dict[str, Any], int]:
    """Synthesize (``method`` mosaic or baseline) one trajectory per problem of ``source``
    (the deterministic slice ``config.limit`` of ``config.split``), grade them and write them
    as one recorded run: the trajectories to their table under :func:`mosaic_partition` (the
    source for the baseline), the summary to ``mosaic_summary``; returns (rows, summary, LLM
    calls). ``partition_suffix`` is appended to both partitions, so an experiment that runs
    its own synthesis (``mosaic_recovery_claim``) keeps its rows apart from the assets'."""
    from pipelines.llm import SamplingParams
    from pipelines.mosaic import (
        ACTOR_STOP,
        METHOD_MOSAIC,
        LLMActor,
        LLMBaselineActor,
        LLMManager,
        MosaicConfig,
        label_records,
        session_factory,
        summarize_records,
        synthesize_baseline,
        synthesize_many,
        synthesize_mosaic,
    )
    from pipelines.mosaic.scripted import SCRIPTED_LABEL, ScriptedActor, ScriptedManager

    started = now()
    inputs = _problem_inputs(wh, source, config.split, config.limit)
    cfg = MosaicConfig(max_steps=config.max_steps, rho=config.rho if method == METHOD_MOSAIC else 0.0,
                       seed=config.seed, exec_timeout_s=sandbox.timeout_s,
                       generation_share=config.generation_share, concurrency=config.concurrency)
    table = TABLE_MOSAIC if method == METHOD_MOSAIC else TABLE_BASELINE
    part = (mosaic_partition(source, cfg.rho) if method == METHOD_MOSAIC else source) \
        + partition_suffix
    if config.actor_base_url and not config.actor_model:
        raise dg.Failure("set actor_model together with actor_base_url")
    if config.agents not in ("llm", "scripted"):
        raise dg.Failure(f"agents must be 'llm' or 'scripted', got {config.agents!r}")
    scripted = config.agents == "scripted"
    if scripted and method != METHOD_MOSAIC:
        raise dg.Failure("the scripted agents play MOSAIC's manager and actor only; the "
                         "baseline synthesizer needs agents: llm")
    # both agents' deadlines scale with each request's prompt (the trajectory so far)
    settings = {"progress": context.log.info, "per_request_timeout": True}
    with run_record(context, wh, config.model_dump(), partition=part, calls_name=table,
                    started_at=started) as rec:
        # the scripted agents make no LLM call: no client, so no local server is started
        manager_client = None if scripted else rec.track(
            llm.client(config.manager_max_tokens, **settings))
        if manager_client is not None:
            manager_client.check_reachable()
        actor_client = manager_client
        if config.actor_base_url and not scripted:
            actor_client = rec.track(llm.client_for(
                config.actor_base_url, config.actor_model, llm.api_key or None,
                max_tokens=config.actor_max_tokens, **settings))
            actor_client.check_reachable()
        manager_label = SCRIPTED_LABEL if scripted else llm.model_label()
        actor_label = SCRIPTED_LABEL if scripted else config.actor_model or manager_label
        sessions = session_factory(sandbox.get_pool(), timeout_s=None)  # the resource's limits
        actor_params = SamplingParams(temperature=config.actor_temperature,
                                      max_tokens=config.actor_max_tokens, seed=config.seed,
                                      stop=ACTOR_STOP)
        context.log.info(f"{method}: {len(inputs)} {source} problems, T_max={cfg.max_steps}, "
                         f"rho={cfg.rho}, manager={manager_label}, actor={actor_label}")
        if scripted:
            scripted_manager, scripted_actor = ScriptedManager(), ScriptedActor()

            def make(problem):
                return synthesize_mosaic(problem, scripted_manager, scripted_actor, sessions, cfg)
        elif method == METHOD_MOSAIC:
            manager = LLMManager(manager_client, params=SamplingParams(
                temperature=config.manager_temperature, max_tokens=config.manager_max_tokens,
                seed=config.seed))
            actor = LLMActor(actor_client, params=actor_params)

            def make(problem):
                return synthesize_mosaic(problem, manager, actor, sessions, cfg)
        else:
            baseline = LLMBaselineActor(actor_client, params=actor_params)

            def make(problem):
                return synthesize_baseline(problem, baseline, sessions, cfg)

        async def run():
            try:
                return await synthesize_many(inputs, make, concurrency=cfg.concurrency)
            finally:
                for client in {id(c): c for c in (manager_client, actor_client) if c}.values():
                    await client.aclose()

        records = asyncio.run(run())
        with grader.pool() as pool:
            label_records(records, lambda pairs: pool.grade_many(pairs, kind="math"))
        rows = [dict(r.to_row(), manager_model=manager_label if method == METHOD_MOSAIC else None,
                     actor_model=actor_label) for r in records]
        rec.write(table, rows, partition=part)  # after the run's llm_calls; runs row last
        summary = summarize_records(records)
        rec.write(TABLE_SUMMARY, _summary_table(method, source, summary, actor_label, cfg.rho),
                  partition=f"{method}/{part}", counted=False)
    return rows, summary, len(rec.calls)


def _synthesize(context: dg.AssetExecutionContext, config: MosaicSynthesisConfig, llm: LLMResource,
                warehouse: WarehouseResource, grader: GraderResource, sandbox: SandboxResource,
                method: str) -> dg.MaterializeResult:
    from warehouse.samples import mosaic_preview

    source = context.partition_key
    wh = warehouse.get()
    rows, summary, calls = synthesize_source(context, config, llm, wh, grader, sandbox, method,
                                             source)
    table = TABLE_MOSAIC if method == "mosaic" else TABLE_BASELINE
    return dg.MaterializeResult(metadata={**_metadata(wh, method, source, summary, calls),
                                          "trajectories_preview": dg.MetadataValue.md(
                                              mosaic_preview(rows, table))})


_FLOAT_METRICS = ("accuracy", "avg_turns", "avg_turns_complete", "perturbation_rate",
                  "recovery_rate", "seconds_per_trajectory")


def _summary_table(method: str, source: str, summary: dict[str, Any], model: str, rho: float):
    """One `mosaic_summary` row with fixed column types (a rate with no data is null, not a
    null-typed column that would clash with other partitions)."""
    import pyarrow as pa

    from pipelines.mosaic import FAILURE_REASONS

    columns: dict[str, tuple[Any, pa.DataType]] = {
        "method": (method, pa.string()), "source": (source, pa.string()), "model": (model, pa.string()),
        "rho": (float(rho), pa.float64()),
        "failures_json": (json.dumps(summary["failures"], sort_keys=True), pa.string()),
    }
    for key, value in summary.items():
        if key in _FLOAT_METRICS:
            columns[key] = (None if value is None else float(value), pa.float64())
        elif isinstance(value, int):
            columns[key] = (value, pa.int64())
    for reason in FAILURE_REASONS:
        columns[f"failed_{reason}"] = (int(summary["failures"].get(reason, 0)), pa.int64())
    return pa.table({k: pa.array([v], type=t) for k, (v, t) in columns.items()})


def _other_summary(wh, method: str, source: str) -> dict[str, Any] | None:
    from pipelines.mosaic import METHOD_BASELINE, METHOD_MOSAIC

    other = METHOD_BASELINE if method == METHOD_MOSAIC else METHOD_MOSAIC
    found = [r for r in wh.read(TABLE_SUMMARY).to_pylist()
             if r.get("method") == other and r.get("source") == source]
    if not found:
        return None
    row = max(found, key=lambda r: str(r.get("created_at") or ""))  # MOSAIC: the latest ρ run
    row["failures"] = json.loads(row.get("failures_json") or "{}")
    return row


def _metadata(wh, method: str, source: str, summary: dict[str, Any], calls: int) -> dict[str, Any]:
    from pipelines.mosaic import METHOD_MOSAIC, side_by_side

    meta: dict[str, Any] = {
        "method": method,
        "trajectories": summary["trajectories"],
        "complete": summary["complete"],
        "accuracy": summary["accuracy"],
        "avg_turns": summary["avg_turns"],
        "avg_turns_complete": summary["avg_turns_complete"],
        "early_answers": summary["early_answers"],
        "deviation_corrections": summary["deviation_corrections"],
        "perturbation_rate": summary["perturbation_rate"],
        "recovery_rate": summary["recovery_rate"],
        "seconds_per_trajectory": summary["seconds_per_trajectory"],
        "failures": dg.MetadataValue.json(summary["failures"]),
        "llm_calls": calls,
    }
    meta = {k: (float(v) if isinstance(v, float) else v) for k, v in meta.items() if v is not None}
    other = _other_summary(wh, method, source)
    if other is not None:
        mosaic, baseline = (summary, other) if method == METHOD_MOSAIC else (other, summary)
        meta["mosaic_vs_baseline"] = md_table(side_by_side(mosaic, baseline), SUMMARY_COLUMNS)
    return meta


@dg.asset(
    partitions_def=mosaic_partitions,
    deps=[problems],
    group_name="mosaic",
    kinds={"python", "parquet"},
    description="MOSAIC manager/actor tool-integrated trajectories with failure injection, graded.",
)
def mosaic_trajectories(context: dg.AssetExecutionContext, config: MosaicSynthesisConfig,
                        llm: LLMResource, warehouse: WarehouseResource, grader: GraderResource,
                        sandbox: SandboxResource) -> dg.MaterializeResult:
    return _synthesize(context, config, llm, warehouse, grader, sandbox, "mosaic")


@dg.asset(
    partitions_def=mosaic_partitions,
    deps=[problems],
    group_name="mosaic",
    kinds={"python", "parquet"},
    description="Baseline tool-integrated trajectories: one actor, plain loop, no manager or injection.",
)
def mosaic_baseline_trajectories(context: dg.AssetExecutionContext, config: MosaicSynthesisConfig,
                                 llm: LLMResource, warehouse: WarehouseResource,
                                 grader: GraderResource,
                                 sandbox: SandboxResource) -> dg.MaterializeResult:
    return _synthesize(context, config, llm, warehouse, grader, sandbox, "baseline")


# ---------------------------------------------------------------------------------------------
# Real TIR data, SFT rows, step instances


@dg.asset(
    group_name="mosaic",
    kinds={"python", "parquet"},
    description="Real tool-integrated trajectories (MathCoder, ToRA) in the TIR schema.",
)
def tir_trajectories(context: dg.AssetExecutionContext, config: TIRTrajectoriesConfig,
                     warehouse: WarehouseResource) -> dg.MaterializeResult:
    from pipelines.ingest import load_tir

    started = now()
    wh = warehouse.get()
    counts: dict[str, dict[str, int]] = {}
    total = 0
    for name in TIR_SOURCE_NAMES:
        result = load_tir(name, limit=config.limit, decontaminate=config.decontaminate)
        lin = lineage(context, config.model_dump(), partition=name)
        total += wh.write("tir_trajectories", [t.to_row() for t in result.trajectories], lineage=lin).rows
        wh.write("rejects", [r.to_row() for r in result.rejects], lineage=lin, partition=f"tir/{name}")
        counts[name] = result.counts()
    record_run(wh, lineage(context, config.model_dump()), started_at=started, rows_written=total,
               config=config.model_dump())
    steps = Counter(int(r["num_steps"]) for r in wh.read("tir_trajectories").to_pylist())
    return dg.MaterializeResult(metadata={
        "trajectories": total,
        "by_source": dg.MetadataValue.json(counts),
        "steps_histogram": dg.MetadataValue.json({str(k): v for k, v in sorted(steps.items())}),
    })


def _expert_data(wh, config: ExpertDataConfig):
    """[(trajectory, training mask, origin)] from the MOSAIC table and the real TIR table."""
    from pipelines.mosaic import expert_trajectories
    from pipelines.tir import Trajectory

    items = []
    if config.include_mosaic:
        rows = wh.read(TABLE_MOSAIC).to_pylist()
        try:
            chosen = expert_trajectories(rows, only_correct=config.only_correct,
                                         train_on_injected=config.train_on_injected,
                                         rho=config.mosaic_rho, run_ids=config.mosaic_run_ids)
        except ValueError as exc:
            raise dg.Failure(str(exc)) from exc
        items += [(t, mask, "mosaic") for t, mask in chosen]
    if config.include_real:
        per_source: Counter[str] = Counter()
        for row in sorted(wh.read("tir_trajectories").to_pylist(), key=lambda r: r["trajectory_id"]):
            if config.real_limit is not None and per_source[row["source"]] >= config.real_limit:
                continue
            per_source[row["source"]] += 1
            trajectory = Trajectory.from_row(row)
            items.append((trajectory, [True] * len(trajectory.steps), "real"))
    if not items:
        raise dg.Failure("no expert trajectories: materialize `mosaic_trajectories` (with some correct "
                         "ones) or `tir_trajectories` first, or enable include_mosaic/include_real; "
                         f"MOSAIC selection: mosaic_rho={config.mosaic_rho}, "
                         f"mosaic_run_ids={list(config.mosaic_run_ids)}")
    return items


@dg.asset(
    deps=[mosaic_trajectories, tir_trajectories],
    group_name="mosaic",
    kinds={"python", "parquet"},
    description="TIR SFT rows (TRL prompt/completion), both renderings: state preserved and discarded.",
)
def tir_sft_dataset(context: dg.AssetExecutionContext, config: ExpertDataConfig,
                    warehouse: WarehouseResource) -> dg.MaterializeResult:
    from pipelines.tir import RENDERINGS, sft_rows

    started = now()
    wh = warehouse.get()
    items = _expert_data(wh, config)
    written: dict[str, int] = {}
    masked = sum(mask.count(False) for _, mask, _ in items)
    for rendering in RENDERINGS:
        rows = []
        for trajectory, mask, origin in items:
            for row in sft_rows(trajectory.problem, trajectory.steps, rendering, train_on=mask):
                row.update(trajectory_id=trajectory.trajectory_id, problem_id=trajectory.problem_id,
                           source=trajectory.source, origin=origin)
                rows.append(row)
        lin = lineage(context, config.model_dump(), partition=rendering)
        written[rendering] = wh.write("tir_sft_dataset", rows, lineage=lin).rows
    record_run(wh, lineage(context, config.model_dump()), started_at=started,
               rows_written=sum(written.values()), config=config.model_dump())
    origins = Counter(origin for _, _, origin in items)
    return dg.MaterializeResult(metadata={
        "trajectories": len(items),
        "rows_per_rendering": dg.MetadataValue.json(written),
        "trajectories_by_origin": dg.MetadataValue.json(dict(origins)),
        "masked_mutated_steps": masked,
        "train_on_injected": config.train_on_injected,
        "mosaic_rho": "any" if config.mosaic_rho is None else f"{config.mosaic_rho:g}",
    })


@dg.asset(
    deps=[mosaic_trajectories, tir_trajectories],
    group_name="mosaic",
    kinds={"python", "parquet"},
    description="One process-supervised GRPO instance per expert step: context (x, H*_{t-1}), target step t.",
)
def step_instances(context: dg.AssetExecutionContext, config: ExpertDataConfig,
                   warehouse: WarehouseResource) -> dg.MaterializeResult:
    from pipelines.mosaic import decompose_many, summarize_instances
    from pipelines.tir import RENDERINGS

    if config.rendering not in RENDERINGS:
        raise dg.Failure(f"rendering must be one of {RENDERINGS}, got {config.rendering!r}")
    started = now()
    wh = warehouse.get()
    items = _expert_data(wh, config)
    origin = {t.trajectory_id: o for t, _, o in items}
    masks = {t.trajectory_id: m for t, m, _ in items}
    result = decompose_many(t for t, _, _ in items)
    kept = [i for i in result.instances if masks[i.trajectory_id][i.step_index - 1]]
    rows = [dict(i.to_row(config.rendering), origin=origin[i.trajectory_id]) for i in kept]
    lin = lineage(context, config.model_dump())
    wh.write("step_instances", rows, lineage=lin)
    record_run(wh, lin, started_at=started, rows_written=len(rows), config=config.model_dump())
    summary = summarize_instances(kept)
    if result.refused:
        context.log.warning(f"{len(result.refused)} trajectories refused: {result.refused[:3]}")
    return dg.MaterializeResult(metadata={
        "instances": summary["instances"],
        "trajectories": summary["trajectories"],
        "answer_targets": summary["answer_targets"],
        "code_targets": summary["code_targets"],
        "mean_history_steps": float(summary["mean_history_steps"] or 0.0),
        "masked_mutated_steps": len(result.instances) - len(kept),
        "train_on_injected": config.train_on_injected,
        "mosaic_rho": "any" if config.mosaic_rho is None else f"{config.mosaic_rho:g}",
        "refused_trajectories": len(result.refused),
        "by_num_steps": dg.MetadataValue.json(summary["by_num_steps"]),
    })


# ---------------------------------------------------------------------------------------------
# Checks


def _check(problems_found: list[str], rows: int) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=rows > 0 and not problems_found, metadata={
        "rows": rows, "problems": len(problems_found),
        "first_problems": dg.MetadataValue.json(problems_found[:5]),
    })


@dg.asset_check(asset=mosaic_trajectories,
                description="Complete trajectories are valid TIR text, failed ones say why, all are graded.")
def check_mosaic_trajectories_valid(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    from pipelines.mosaic import validate_trajectory_rows

    rows = warehouse.get().read(TABLE_MOSAIC).to_pylist()
    return _check(validate_trajectory_rows(rows), len(rows))


@dg.asset_check(asset=mosaic_baseline_trajectories,
                description="Complete trajectories are valid TIR text, failed ones say why, all are graded.")
def check_mosaic_baseline_trajectories_valid(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    from pipelines.mosaic import validate_trajectory_rows

    rows = warehouse.get().read(TABLE_BASELINE).to_pylist()
    return _check(validate_trajectory_rows(rows), len(rows))


@dg.asset_check(asset=tir_trajectories, description="Every real trajectory parses and validates.")
def check_tir_trajectories_valid(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    from pipelines.tir import validate_text

    rows = warehouse.get().read("tir_trajectories").to_pylist()
    found = [f"{r['trajectory_id']}: {p}" for r in rows for p in validate_text(r["text"])]
    return _check(found, len(rows))


@dg.asset_check(asset=tir_sft_dataset,
                description="Completions are step outputs; prompts alternate; both renderings have equal rows.")
def check_tir_sft_dataset_well_formed(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    from pipelines.tir import RENDERINGS, validate_sft_rows

    rows = warehouse.get().read("tir_sft_dataset").to_pylist()
    found = validate_sft_rows(rows)
    counts = Counter(r["rendering"] for r in rows)
    if len({counts.get(r, 0) for r in RENDERINGS}) != 1:
        found.append(f"renderings have different row counts: {dict(counts)}")
    return _check(found, len(rows))


@dg.asset_check(asset=step_instances,
                description="Only last steps target answers; each reference output earns reward 1.0.")
def check_step_instances_reference_rewards(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    from pipelines.mosaic import validate_instance_rows

    rows = warehouse.get().read("step_instances").to_pylist()
    return _check(validate_instance_rows(rows), len(rows))


MOSAIC_ASSETS = [mosaic_trajectories, mosaic_baseline_trajectories, tir_trajectories,
                 tir_sft_dataset, step_instances]
MOSAIC_CHECKS = [check_mosaic_trajectories_valid, check_mosaic_baseline_trajectories_valid,
                 check_tir_trajectories_valid, check_tir_sft_dataset_well_formed,
                 check_step_instances_reference_rewards]
