"""MOSAIC assets: synthesized and real tool-integrated trajectories, the TIR SFT dataset, and the
step instances for process-supervised GRPO.

- ``mosaic_trajectories`` / ``mosaic_baseline_trajectories`` (partitioned by source dataset):
  synthesize one trajectory per problem of that source (a deterministic slice of the train
  split) with ``pipelines.mosaic`` — manager/actor with failure injection, or the plain baseline
  — grade them, and write one row per trajectory (table of the same name), every LLM call to
  ``llm_calls`` and one summary row per method and source to ``mosaic_summary``. MOSAIC rows go
  to the warehouse partition ``<source>/rho=<ρ>`` (``pipelines.mosaic.synthesis_runs``), so runs with
  different ρ (the paper's 0.1 for SFT, 0.2 for RL) live side by side; a rerun with the same ρ
  replaces its rows. The UI shows accuracy, average turns (all attempts and completed ones),
  realized perturbation rate, recovery rate, early answers and failure counts, MOSAIC and
  baseline side by side once both exist for a source.
- ``tir_trajectories``: the real TIR trajectories under ``WEFT_DATA_DIR/tir`` in the same schema
  (``pipelines.ingest.trajectories``), rejects to ``rejects``.
- ``tir_sft_dataset``: SFT rows in both renderings (state preserved / state discarded) from the
  correct MOSAIC trajectories and the real ones. Deliberately mutated steps are targets like any
  other step (DeepTool §2.2 trains on the trajectories as synthesized); ``train_on_injected:
  false`` keeps them in the context only.
- ``step_instances``: one row per step of the expert trajectories
  (``pipelines.mosaic.decomposition``).
  Both select their MOSAIC trajectories by ρ (``mosaic_rho``) and by run (``mosaic_run_ids``),
  e.g. ``mosaic_rho: 0.1`` for SFT and ``mosaic_rho: 0.2`` for step instances.

The computation lives in ``pipelines.mosaic.synthesis_runs`` (one synthesis run) and
``pipelines.mosaic.expert_data`` (expert selection, SFT rows, step instances); checks call the
pure validators of the pipelines modules. Run configs set the agents' decoding as
``manager: {temperature, top_p, max_tokens}`` and ``actor: {...}`` (``assets.sampling``).
"""


from collections.abc import Sequence
from typing import Any

import dagster as dg

from assets.common import lineage, md_table, now, run_record
from assets.ingest import problems
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sampling import SamplingConfig
from assets.sandbox_resource import SandboxResource
from pipelines.llm import SamplingParams
from pipelines.mosaic import ProblemInput, label_records, session_factory, summarize_records
from pipelines.mosaic.expert_data import (
    expert_items,
    masked_steps,
    origins,
    sft_dataset_rows,
    sft_rendering_problems,
    step_instance_rows,
    steps_histogram,
    tir_text_problems,
)
from pipelines.mosaic.synthesis_runs import (
    SUMMARY_COLUMNS,
    TABLE_BASELINE,
    TABLE_MOSAIC,
    TABLE_SUMMARY,
    SourceSynthesis,
    mosaic_vs_baseline,
    problem_inputs,
    run_synthesis,
    summary_figures,
    summary_table,
    synthesizer,
    trajectory_rows,
)
from warehouse.runs import record_run

MOSAIC_SOURCES: tuple[str, ...] = ("gsm8k", "math", "deepscaler", "dapo_math_17k", "reasoning_gym")
TIR_SOURCE_NAMES: tuple[str, ...] = ("mathcoder", "tora")
mosaic_partitions = dg.StaticPartitionsDefinition(list(MOSAIC_SOURCES))


class MosaicSynthesisConfig(dg.Config):
    """Shared by both synthesis assets (the baseline ignores the manager and injection fields).
    ``actor_base_url``/``actor_model`` put the actor on another endpoint than the manager. Code
    runs in sessions of the ``sandbox`` resource, with its limits (e.g. ``timeout_s``).
    ``seed`` is the run's one seed: injection draws and both agents' sampling (their nested
    ``seed`` must be left unset or equal it); each agent samples one reply per step."""

    limit: int | None = 20
    split: str = "train"
    max_steps: int = 6
    rho: float = 0.1
    generation_share: float = 0.5
    seed: int = 0
    # pipelines.mosaic.MANAGER_MAX_TOKENS; greedy
    manager: SamplingConfig = SamplingConfig(temperature=0.0, top_p=1.0, max_tokens=640)
    actor: SamplingConfig = SamplingConfig(temperature=0.7, top_p=1.0, max_tokens=384)
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


def _agent_params(sampling: SamplingConfig, role: str, seed: int) -> SamplingParams:
    """One agent's request settings: one reply per step, sampled with the run's ``seed``
    (DeepTool §2.1). ValueError on other settings."""
    if sampling.resolved_k() != 1:
        raise ValueError(f"{role}.k: the {role} samples one reply per step; leave k unset or 1, "
                         f"got {sampling.k}")
    if sampling.seed not in (0, seed):
        raise ValueError(f"{role}.seed ({sampling.seed}) differs from seed ({seed}): the run "
                         "samples with its one seed; set `seed`")
    return SamplingParams(temperature=sampling.resolved_temperature(), top_p=sampling.top_p,
                          max_tokens=sampling.max_tokens, seed=seed)


def _plan(config: MosaicSynthesisConfig, method: str, source: str, partition_suffix: str
          ) -> SourceSynthesis:
    return SourceSynthesis(
        method=method, source=source, split=config.split, limit=config.limit,
        max_steps=config.max_steps, rho=config.rho, generation_share=config.generation_share,
        seed=config.seed, concurrency=config.concurrency, agents=config.agents,
        actor_base_url=config.actor_base_url, actor_model=config.actor_model,
        partition_suffix=partition_suffix)


def _clients(context: dg.AssetExecutionContext, rec: Any, llm: LLMResource,
             config: MosaicSynthesisConfig, plan: SourceSynthesis) -> tuple[Any, Any]:
    """(manager, actor) clients, tracked by the run record: the same client unless the actor
    has its own endpoint; none for the scripted agents (no local server is started)."""
    if plan.scripted:
        return None, None
    # both agents' deadlines scale with each request's prompt (the trajectory so far)
    settings = {"progress": context.log.info, "per_request_timeout": True}
    manager = rec.track(llm.client(config.manager.max_tokens, **settings))
    manager.check_reachable()
    actor = manager
    if config.actor_base_url:
        actor = rec.track(llm.client_for(config.actor_base_url, config.actor_model,
                                         llm.api_key or None, max_tokens=config.actor.max_tokens,
                                         **settings))
        actor.check_reachable()
    return manager, actor


def synthesize_source(context: dg.AssetExecutionContext, config: MosaicSynthesisConfig,
                      llm: LLMResource, wh: Any, grader: GraderResource, sandbox: SandboxResource,
                      method: str, source: str, *, partition_suffix: str = "",
                      inputs: Sequence[ProblemInput] | None = None
                      ) -> tuple[list[dict[str, Any]], dict[str, Any], int]:
    """Synthesize (``method`` mosaic or baseline) one trajectory per problem of ``source``
    (the deterministic slice ``config.limit`` of ``config.split``), grade them and write them
    as one recorded run: the trajectories to their table under
    ``pipelines.mosaic.synthesis_runs.mosaic_partition`` (the source for the baseline), the
    summary to ``mosaic_summary``; returns (rows, summary, LLM calls). ``partition_suffix`` is
    appended to both partitions, so an experiment that runs its own synthesis
    (``mosaic_recovery_claim``) keeps its rows apart from the assets'. ``inputs`` gives the
    problems instead (problems that are not in the warehouse, e.g. built-in ones; ``source``
    then only names the partition)."""
    started = now()
    try:
        if inputs is None:
            inputs = problem_inputs(wh, source, config.split, config.limit)
        elif not inputs:
            raise ValueError(f"no problems given to synthesize for {source!r}")
        plan = _plan(config, method, source, partition_suffix)
        manager_params = _agent_params(config.manager, "manager", config.seed)
        actor_params = _agent_params(config.actor, "actor", config.seed)
    except ValueError as exc:
        raise dg.Failure(str(exc)) from exc
    cfg = plan.mosaic_config(exec_timeout_s=sandbox.timeout_s)
    with run_record(context, wh, config.model_dump(), partition=plan.partition,
                    calls_name=plan.table, started_at=started) as rec:
        manager_client, actor_client = _clients(context, rec, llm, config, plan)
        manager_label, actor_label = plan.labels(None if plan.scripted else llm.model_label())
        sessions = session_factory(sandbox.get_pool(), timeout_s=None)  # the resource's limits
        context.log.info(f"{method}: {len(inputs)} {source} problems, T_max={cfg.max_steps}, "
                         f"rho={cfg.rho}, manager={manager_label}, actor={actor_label}")
        make = synthesizer(plan, cfg, sessions, manager_client=manager_client,
                           actor_client=actor_client, manager_params=manager_params,
                           actor_params=actor_params)
        records = run_synthesis(inputs, make, cfg.concurrency, (manager_client, actor_client))
        with grader.pool() as pool:
            label_records(records, lambda pairs: pool.grade_many(pairs, kind="math"))
        rows = trajectory_rows(records, plan, manager_label, actor_label)
        table = TABLE_MOSAIC if plan.is_mosaic else TABLE_BASELINE
        rec.write(table, rows, partition=plan.partition)  # after the run's llm_calls
        summary = summarize_records(records)
        rec.write(TABLE_SUMMARY, summary_table(method, source, summary, actor_label, cfg.rho),
                  partition=f"{method}/{plan.partition}", counted=False)
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
    meta = summary_figures(method, summary, calls)
    meta["failures"] = dg.MetadataValue.json(meta["failures"])
    side_by_side = mosaic_vs_baseline(wh, method, source, summary)
    if side_by_side is not None:
        meta["mosaic_vs_baseline"] = md_table(side_by_side, SUMMARY_COLUMNS)
    meta["trajectories_preview"] = dg.MetadataValue.md(mosaic_preview(rows, table))
    return dg.MaterializeResult(metadata=meta)


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
    return dg.MaterializeResult(metadata={
        "trajectories": total,
        "by_source": dg.MetadataValue.json(counts),
        "steps_histogram": dg.MetadataValue.json(
            steps_histogram(wh.read("tir_trajectories").to_pylist())),
    })


def _expert_data(wh: Any, config: ExpertDataConfig):
    """``pipelines.mosaic.expert_data.expert_items``, its errors as failures."""
    try:
        return expert_items(wh, config)
    except ValueError as exc:
        raise dg.Failure(str(exc)) from exc


def _rho_label(config: ExpertDataConfig) -> str:
    return "any" if config.mosaic_rho is None else f"{config.mosaic_rho:g}"


@dg.asset(
    deps=[mosaic_trajectories, tir_trajectories],
    group_name="mosaic",
    kinds={"python", "parquet"},
    description="TIR SFT rows (TRL prompt/completion), both renderings: state preserved and discarded.",
)
def tir_sft_dataset(context: dg.AssetExecutionContext, config: ExpertDataConfig,
                    warehouse: WarehouseResource) -> dg.MaterializeResult:
    from pipelines.tir import RENDERINGS

    started = now()
    wh = warehouse.get()
    items = _expert_data(wh, config)
    written: dict[str, int] = {}
    for rendering in RENDERINGS:
        lin = lineage(context, config.model_dump(), partition=rendering)
        written[rendering] = wh.write("tir_sft_dataset", sft_dataset_rows(items, rendering),
                                      lineage=lin).rows
    record_run(wh, lineage(context, config.model_dump()), started_at=started,
               rows_written=sum(written.values()), config=config.model_dump())
    return dg.MaterializeResult(metadata={
        "trajectories": len(items),
        "rows_per_rendering": dg.MetadataValue.json(written),
        "trajectories_by_origin": dg.MetadataValue.json(origins(items)),
        "masked_mutated_steps": masked_steps(items),
        "train_on_injected": config.train_on_injected,
        "mosaic_rho": _rho_label(config),
    })


@dg.asset(
    deps=[mosaic_trajectories, tir_trajectories],
    group_name="mosaic",
    kinds={"python", "parquet"},
    description="One process-supervised GRPO instance per expert step: context (x, H*_{t-1}), target step t.",
)
def step_instances(context: dg.AssetExecutionContext, config: ExpertDataConfig,
                   warehouse: WarehouseResource) -> dg.MaterializeResult:
    from pipelines.mosaic import summarize_instances
    from pipelines.tir import RENDERINGS

    if config.rendering not in RENDERINGS:
        raise dg.Failure(f"rendering must be one of {RENDERINGS}, got {config.rendering!r}")
    started = now()
    wh = warehouse.get()
    instances = step_instance_rows(_expert_data(wh, config), config.rendering)
    lin = lineage(context, config.model_dump())
    wh.write("step_instances", instances.rows, lineage=lin)
    record_run(wh, lin, started_at=started, rows_written=len(instances.rows),
               config=config.model_dump())
    summary = summarize_instances(instances.kept)
    if instances.refused:
        context.log.warning(f"{len(instances.refused)} trajectories refused: "
                            f"{instances.refused[:3]}")
    return dg.MaterializeResult(metadata={
        "instances": summary["instances"],
        "trajectories": summary["trajectories"],
        "answer_targets": summary["answer_targets"],
        "code_targets": summary["code_targets"],
        "mean_history_steps": float(summary["mean_history_steps"] or 0.0),
        "masked_mutated_steps": instances.masked,
        "train_on_injected": config.train_on_injected,
        "mosaic_rho": _rho_label(config),
        "refused_trajectories": len(instances.refused),
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
    rows = warehouse.get().read("tir_trajectories").to_pylist()
    return _check(tir_text_problems(rows), len(rows))


@dg.asset_check(asset=tir_sft_dataset,
                description="Completions are step outputs; prompts alternate; both renderings have equal rows.")
def check_tir_sft_dataset_well_formed(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    rows = warehouse.get().read("tir_sft_dataset").to_pylist()
    return _check(sft_rendering_problems(rows), len(rows))


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
