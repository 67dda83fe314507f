"""`ep_budget_table`: the Engagement paper's Table 5 (Engagement Process §5.3,
App. F, Table 25) for the embedded model: train the EP-aware arm (``budget_grpo.cpu``: reward 1
only when correct and within the requested token budget) and the RLVR arms
(``rlvr_grpo.cpu``: correctness only, at the EP arm's generation cap and, by default, at twice
it -- the RLVR-8K / RLVR-16K analogues) on the same prompts, budget assignments, seed and steps;
then evaluate the base model and every checkpoint in budgeted mode on the same held-out
problems with the same budgets and decoding limit.

Budgets: the EP recipe's, or, when ``budget_percentiles`` is set, measured at run time from the
start (``training.ep_budget.measure_budgets``: the start sampled once per training prompt at the
EP recipe's sampling settings, the budgets fixed percentiles of its answer lengths). The
measured budgets become the EP arm's ``budgets`` override (its prompts' budget assignments and
urgency words, which the RLVR arms read as stored rows, and its reward's limits) and the
evaluation's budgets; the lengths, percentiles and budgets are in the metadata and in every
``ep_budget_scores`` row.

The plan, data, table and tests are plain functions of ``training.ep_budget`` (one run's checks,
data and rows: ``training.ep_budget_table``); the evaluation samples with ``sampling``
(``assets.sampling``: k, temperature 0.6, top-p 0.95 as in App. F); training runs
``python -m training.grpo`` through the ``trainer`` resource (Dagster Pipes), and each model is
served and evaluated by the path ``eval_samples`` uses (``eval.recorded.evaluate_recorded``),
its rows recorded as ordinary ``llm_calls`` / ``eval_samples`` / ``eval_scores`` / `runs` under
``ep_heldout@<model>``. Results: table ``ep_budget_scores`` (one row per arm and budget: BS@B,
Acc@B, Tok@B with bootstrap CIs), table ``ep_budget_tests`` (EP-aware vs each other arm on the
smallest budget: paired one-sided t-test and bootstrap on per-problem BS and tokens), and the
view ``ep_budget_table`` (Table 5's columns, ``warehouse/views/ep_budget_table.sql``); the
metadata shows the table as markdown and a plot of BS@B and Tok@B against the budget.

Not guaranteed: that a few CPU GRPO steps on a 135M model show the paper's effect; the CIs and
p-values in the metadata say what the rows can support.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Any

import dagster as dg

from assets.common import md_table, now, run_record
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sampling import SamplingConfig
from assets.training import TrainerLauncher, check_recipe, launch_arm, start_from_overrides
from eval.report_plots import png_md
from training.arms import Arm
from training.ep_budget import (
    ARM_BASE,
    TABLE,
    TESTS_TABLE,
    TRAIN_TABLE,
    BudgetMeasure,
    EvaluatedArm,
    TablePlan,
    budget_rule_columns,
    measure_budgets,
    paired_tests,
    plan_arms,
    plot_table,
    table_rows,
    wide_rows,
    with_budgets,
)
from training.ep_budget_table import (
    TESTS_COLUMNS,
    TableData,
    base_spec,
    check_arm_configs,
    check_ep_budgets,
    decoding_limit,
    ep_arm,
    ep_heldout_benchmark,
    eval_budgets,
    evaluated_arm,
    generation_limit,
    smallest_budget_figures,
    stamped_rows,
    table_data,
    table_id,
    table_plan,
    typed_scores,
)


class EpBudgetTableConfig(dg.Config):
    """``seed`` is the table's one seed: every arm's training, the bootstrap and the
    evaluation's sampling (``sampling.seed`` must be left unset or equal it). Every budget is
    decoded to one limit, ``budget_limit`` (App. F), so ``sampling.max_tokens`` is not read."""

    ep_recipe: str = "budget_grpo.cpu"  # a recipe with the budget reward and budgets
    rlvr_recipe: str = "rlvr_grpo.cpu"  # a correctness-only recipe
    rlvr_cap_factors: list[float] = [1.0, 2.0]  # RLVR arms' caps / the EP cap (8K, 16K analogues)
    max_steps: int = 4
    seed: int = 0
    dataset_limit: int | None = 64
    max_completion_length: int | None = None  # the EP arm's training cap; None: the recipe's
    overrides: list[str] = []  # key=value for every arm (e.g. "learning_rate=1e-5")
    # a checkpoint asset (e.g. "sft_checkpoint") whose latest materialization every arm (and
    # the base row) starts from; "" = the recipes' model
    start_from: str = ""
    heldout_dataset: str = ""  # test problems; "" = the EP recipe's dataset (training's left out)
    heldout_seed: int = 1000
    heldout_n: int = 32
    budgets: list[int] = []  # evaluation budgets; [] = the EP arm's (recipe's or measured)
    # [] = the EP recipe's budgets; else the budgets are these percentiles (ascending, 0-100)
    # of the start's answer lengths on the training prompts, measured at run time
    # (training.ep_budget.measure_budgets), for training and evaluation alike
    budget_percentiles: list[float] = []
    budget_limit: int | None = None  # one decoding limit for every budget; None = 4 x largest
    # k samples per problem and budget; App. F: temperature 0.6, top-p 0.95
    sampling: SamplingConfig = SamplingConfig(k=1, temperature=0.6, top_p=0.95)
    evaluate_base: bool = True
    n_boot: int = 5000
    max_concurrency: int = 8


@contextmanager
def _failures() -> Iterator[None]:
    """A ValueError of the plain code (a ``DatasetError`` too) as a failure of the asset."""
    try:
        yield
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from exc


def checked_arms(plan: TablePlan, train_spec: str, ep_config: Any) -> list[Arm]:
    """The arms, each resolved (bad recipes fail before anything runs) and checked to share the
    GRPO settings, seed, steps and data size."""
    with _failures():
        arms = plan_arms(plan, ep_config, train_spec)
    configs = {arm.label: check_recipe("grpo", arm.recipe, arm.override_args()) for arm in arms}
    with _failures():
        check_arm_configs(plan, configs)
    return arms


def _sampling(config: EpBudgetTableConfig, limit: int) -> SamplingConfig:
    """``config.sampling`` with the table's one seed and the budgeted decoding limit."""
    if config.sampling.seed not in (0, config.seed):
        raise dg.Failure(description=f"sampling.seed ({config.sampling.seed}) differs from "
                                     f"seed ({config.seed}): the table samples with its one "
                                     "seed; set `seed`")
    return config.sampling.model_copy(update={"seed": config.seed, "max_tokens": limit})


def evaluate_model(context: dg.AssetExecutionContext, spec: Any, problems: list[dict],
                   config: EpBudgetTableConfig, budgets: list[int], wh: Any, llm: LLMResource,
                   grader: GraderResource) -> list[dict[str, Any]]:
    """Serve ``spec`` and evaluate it in budgeted mode on ``problems`` through the one
    recorded-evaluation path (``eval.recorded.evaluate_recorded``: rows under
    ``ep_heldout@<model>``); returns the ``eval_samples`` rows."""
    from eval.modes import build_mode
    from eval.recorded import Evaluation, evaluate_recorded

    limit = decoding_limit(config.budget_limit, budgets)
    try:
        mode = build_mode(mode="budgeted", budgets=tuple(budgets), budget_limit=limit)
    except ValueError as exc:
        raise dg.Failure(description=f"bad evaluation settings: {exc}") from exc
    cfg = _sampling(config, limit).eval_config(mode=mode)
    label = spec.model_id
    context.log.info(f"evaluating {label}: {len(problems)} held-out problems x budgets {budgets}")
    (done,) = evaluate_recorded(
        {label: spec}, [Evaluation(label, cfg, label, checkpoint_id=spec.checkpoint_id or None)],
        bench=ep_heldout_benchmark(), problems=problems, wh=wh, run_id=context.run_id,
        config=config.model_dump(),
        make_client=partial(llm.client_for, max_tokens=limit,
                            requests=len(problems) * len(budgets) * cfg.k,
                            progress=context.log.info, max_concurrency=config.max_concurrency),
        pool_factory=grader.pool, progress=context.log.info)
    return done.result.samples


def _setup(config: EpBudgetTableConfig, budgets: tuple[int, ...] | None = None,
           ) -> tuple[TablePlan, Any, TableData, list[Arm], list[int]]:
    """(plan, the EP recipe resolved, the data, the arms, the evaluation budgets), every check
    done before anything trains; ``budgets`` (measured) replace the EP recipe's."""
    if config.budget_percentiles and config.budgets:
        raise dg.Failure(description="set budgets or budget_percentiles, not both: measured "
                                     "budgets are also the evaluation's")
    with _failures():
        plan = replace(table_plan(config), budgets=budgets)
    ep_config = check_recipe("grpo", plan.ep_recipe,
                             with_budgets(ep_arm(plan), plan.budgets).override_args())
    with _failures():
        check_ep_budgets(plan, ep_config)
        data = table_data(ep_config, config.heldout_dataset, config.heldout_n,
                          config.heldout_seed)
    arms = checked_arms(plan, data.train_spec, ep_config)
    with _failures():
        budgets = eval_budgets(config.budgets, ep_config.budgets)
    _sampling(config, decoding_limit(config.budget_limit, budgets))
    return plan, ep_config, data, arms, budgets


def start_budgets(context: dg.AssetExecutionContext, config: EpBudgetTableConfig,
                  ep_config: Any) -> BudgetMeasure:
    """The budgets measured from the start ``ep_config`` trains from (its model, training
    prompts and sampling settings) at ``config.budget_percentiles``."""
    context.log.info(f"measuring the start's answer lengths ({ep_config.model_name_or_path}) "
                     f"for budgets at percentiles {config.budget_percentiles}")
    with _failures():
        measure = measure_budgets(ep_config, config.budget_percentiles)
    context.log.info(f"budgets {list(measure.budgets)} from percentiles "
                     f"{[round(v, 2) for v in measure.values]} of {len(measure.lengths)} answers "
                     f"({measure.truncated} cut at {measure.cap} tokens)")
    return measure


def _evaluated(context: dg.AssetExecutionContext, config: EpBudgetTableConfig, ep_config: Any,
               trained: list, problems: list[dict], budgets: list[int], wh: Any,
               llm: LLMResource, grader: GraderResource) -> list[EvaluatedArm]:
    """The base model (when ``evaluate_base``) and every trained arm, evaluated alike."""
    from eval.models import ModelSpec

    evaluated: list[EvaluatedArm] = []
    if config.evaluate_base:
        with _failures():
            spec = base_spec(ep_config.model_name_or_path)
        evaluated.append(EvaluatedArm(ARM_BASE, spec.model_id, evaluate_model(
            context, spec, problems, config, budgets, wh, llm, grader)))
    for arm, ck, path, metrics in trained:
        spec = ModelSpec(model_id=ck, kind="local", path=path, served_model=ck,
                         checkpoint_id=ck)
        samples = evaluate_model(context, spec, problems, config, budgets, wh, llm, grader)
        evaluated.append(evaluated_arm(arm, ck, samples, metrics))
    return evaluated


def _metadata(rows: list[dict[str, Any]], tests: list[dict[str, Any]], skipped: list,
              trained: list, data: TableData, budgets: list[int], table: str,
              measure: BudgetMeasure | None) -> dict[str, Any]:
    from pipelines.settings import weft_home

    plot = plot_table(rows, weft_home() / "reports" / "ep_budget_table" / f"{table}.png")
    wide, columns = wide_rows(rows)
    return {
        "table_id": table, "arms": len(wide), "heldout_problems": len(data.problems),
        "budgets": dg.MetadataValue.json(budgets),
        "generation_limit": generation_limit(rows),
        "table": md_table(wide, columns),
        "paired_tests": md_table(tests, TESTS_COLUMNS),
        "plot": dg.MetadataValue.md(png_md(plot)),
        "plot_path": dg.MetadataValue.path(str(plot)),
        "checkpoint_ids": dg.MetadataValue.json({a.label: ck for a, ck, _, _ in trained}),
        "train_data": data.train_spec, "tests_skipped": len(skipped),
        "budget_rule": dg.MetadataValue.json(
            measure.summary() if measure else {"budget_source": "recipe"}),
        **smallest_budget_figures(rows, budgets),
    }


@dg.asset(
    group_name="train",
    kinds={"pytorch", "python"},
    description="Engagement paper Table 5: EP-aware vs RLVR GRPO arms (same data, budgets, "
                "seed, steps), base and checkpoints evaluated in budgeted mode on the same "
                "held-out problems; rows in ep_budget_scores / ep_budget_tests, view "
                "ep_budget_table.",
)
def ep_budget_table(context: dg.AssetExecutionContext, config: EpBudgetTableConfig,
                    trainer: TrainerLauncher, warehouse: WarehouseResource, llm: LLMResource,
                    grader: GraderResource) -> dg.MaterializeResult:
    started = now()
    if config.start_from:
        config = config.model_copy(update={"overrides": start_from_overrides(
            context, config.start_from, list(config.overrides))})
    plan, ep_config, data, arms, budgets = _setup(config)
    measure = None
    if config.budget_percentiles:
        measure = start_budgets(context, config, ep_config)
        plan, ep_config, data, arms, budgets = _setup(config, measure.budgets)
    wh = warehouse.get()
    table = table_id(plan.ep_recipe, config.model_dump())
    # the table's own `runs` row (failed when an arm fails); each evaluation records its own
    with run_record(context, wh, config.model_dump(), partition=table,
                    started_at=started) as rec:
        rec.write(TRAIN_TABLE, data.examples, partition=data.train_id, counted=False)
        trained = []
        for arm in arms:
            context.log.info(f"Table 5 arm {arm.label}: {arm.recipe}, {plan.max_steps} steps, "
                             f"cap {arm.overrides['max_completion_length']}")
            trained.append((arm, *launch_arm(context, trainer, wh, arm.label, arm.recipe,
                                             arm.override_args())))
        evaluated = _evaluated(context, config, ep_config, trained, data.problems, budgets, wh,
                               llm, grader)
        with _failures():
            rows = table_rows(evaluated, seed=config.seed)
            tests, skipped = paired_tests(evaluated, n_boot=config.n_boot, seed=config.seed)
        rows = stamped_rows(rows, table, data.train_spec,
                            f"{data.heldout_spec}#seed={config.heldout_seed}")
        rec.write(TABLE, budget_rule_columns(typed_scores(rows), measure))
        if tests:
            rec.write(TESTS_TABLE, [dict(t, table_id=table) for t in tests], counted=False)
    for s in skipped:
        context.log.warning(f"paired test skipped: {s}")
    return dg.MaterializeResult(metadata=_metadata(rows, tests, skipped, trained, data,
                                                   budgets, table, measure))


EP_TRAINING_ASSETS = [ep_budget_table]
ep_budget_table_job = dg.define_asset_job(
    "ep_budget_table_job", selection=[ep_budget_table],
    description="Engagement paper Table 5 for the embedded model: train EP-aware and RLVR arms, "
                "evaluate them and the base model in budgeted mode (configure steps, arms and "
                "the held-out slice in the run config of ep_budget_table).")
