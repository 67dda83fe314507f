"""`ep_budget_table`: the Engagement paper's Table 5 (Engagement Process §5.3,
App. F, Table 25) for the embedded model: train the EP-aware arm (``budget_grpo.cpu``: reward 1
only when correct and within the requested token budget) and the RLVR arms
(``rlvr_grpo.cpu``: correctness only, at the EP arm's generation cap and, by default, at twice
it -- the RLVR-8K / RLVR-16K analogues) on the same prompts, budget assignments, seed and steps;
then evaluate the base model and every checkpoint in budgeted mode on the same held-out
problems with the same budgets and decoding limit.

The plan, data, table and tests are plain functions of ``training.ep_budget``; training runs
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

from functools import partial
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa

from assets.common import md_table, now, run_record
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.training import TrainerLauncher, check_recipe, launch_arm, start_from_overrides
from training.arms import Arm, train_summary
from training.ep_budget import (
    ARM_BASE,
    ARM_EP,
    HELDOUT_BENCHMARK,
    HELDOUT_TEMPLATE,
    TABLE,
    TESTS_TABLE,
    TRAIN_TABLE,
    EvaluatedArm,
    TablePlan,
    config_mismatches,
    heldout_problems,
    paired_tests,
    plan_arms,
    plot_table,
    table_rows,
    training_examples,
    wide_rows,
)
from warehouse import config_hash

TESTS_COLUMNS = ["budget", "statistic", "alternative", "arm_a", "arm_b", "n", "mean_a", "mean_b",
                 "diff", "ci_low", "ci_high", "p_ttest", "p_bootstrap"]


class EpBudgetTableConfig(dg.Config):
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
    budgets: list[int] = []  # evaluation budgets; [] = the EP recipe's
    budget_limit: int | None = None  # one decoding limit for every budget; None = 4 x largest
    k: int = 1  # samples per problem and budget
    temperature: float = 0.6  # App. F: temperature 0.6, top-p 0.95
    top_p: float = 0.95
    evaluate_base: bool = True
    n_boot: int = 5000
    max_concurrency: int = 8


def table_plan(config: EpBudgetTableConfig) -> TablePlan:
    from training.config_recipes import RecipeError, parse_overrides

    try:
        extra = parse_overrides(list(config.overrides))
        return TablePlan(ep_recipe=config.ep_recipe, rlvr_recipe=config.rlvr_recipe,
                         rlvr_cap_factors=tuple(config.rlvr_cap_factors),
                         max_steps=config.max_steps, seed=config.seed,
                         dataset_limit=config.dataset_limit,
                         max_completion_length=config.max_completion_length, overrides=extra)
    except (RecipeError, ValueError) as exc:
        raise dg.Failure(description=f"bad ep_budget_table config: {exc}") from exc


def checked_arms(plan: TablePlan, train_spec: str, ep_config: Any) -> list[Arm]:
    """The arms, each resolved (bad recipes fail before anything runs) and checked to share the
    GRPO settings, seed, steps and data size."""
    try:
        arms = plan_arms(plan, ep_config, train_spec)
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from exc
    configs = {arm.label: check_recipe("grpo", arm.recipe, arm.override_args()) for arm in arms}
    rlvr_with_budget = [a for a, c in configs.items() if a != ARM_EP and c.budgets]
    if rlvr_with_budget:
        raise dg.Failure(description=f"recipe {plan.rlvr_recipe!r} has budgets: the RLVR arms "
                                     "must reward correctness only (e.g. rlvr_grpo.cpu)")
    mismatches = config_mismatches(configs)
    if mismatches:
        raise dg.Failure(description="the arms would not train alike: " + "; ".join(mismatches))
    return arms


def base_spec(model: str):
    """The untrained model's ModelSpec: the embedded model's (reusing its default server) or a
    local folder's."""
    from eval.models import ModelSpec, embedded_spec, safe_model_id
    from pipelines.models import embedded_model_dir
    from training.model_path import EMBEDDED

    path = str(Path(model).expanduser())
    if model == EMBEDDED or Path(path).resolve() == Path(embedded_model_dir()).resolve():
        return embedded_spec()
    if not (Path(path) / "config.json").is_file():
        raise dg.Failure(f"base model {model!r} is not a model folder; the table serves it "
                         "locally (set model_name_or_path to a folder or `embedded`)")
    model_id = safe_model_id(Path(path).name)
    return ModelSpec(model_id=model_id, kind="local", path=path, served_model=model_id)


def heldout_benchmark():
    from eval.benchmarks import Benchmark

    return Benchmark(HELDOUT_BENCHMARK, "builtin", "math", HELDOUT_TEMPLATE)


def evaluate_model(context: dg.AssetExecutionContext, spec: Any, problems: list[dict],
                   config: EpBudgetTableConfig, budgets: list[int], wh: Any, llm: LLMResource,
                   grader: GraderResource) -> list[dict[str, Any]]:
    """Serve ``spec`` and evaluate it in budgeted mode on ``problems`` through the one
    recorded-evaluation path (``eval.recorded.evaluate_recorded``: rows under
    ``ep_heldout@<model>``); returns the ``eval_samples`` rows."""
    from eval.modes import BUDGET_LIMIT_FACTOR, build_mode
    from eval.recorded import Evaluation, evaluate_recorded
    from eval.runner import EvalConfig

    limit = config.budget_limit or BUDGET_LIMIT_FACTOR * max(budgets)
    try:
        mode = build_mode(mode="budgeted", budgets=tuple(budgets), budget_limit=limit)
        cfg = EvalConfig(k=config.k, temperature=config.temperature, top_p=config.top_p,
                         max_tokens=limit, seed=config.seed, mode=mode)
    except ValueError as exc:
        raise dg.Failure(description=f"bad evaluation settings: {exc}") from exc
    bench = heldout_benchmark()
    label = spec.model_id
    context.log.info(f"evaluating {label}: {len(problems)} held-out problems x budgets {budgets}")
    (done,) = evaluate_recorded(
        {label: spec}, [Evaluation(label, cfg, label, checkpoint_id=spec.checkpoint_id or None)],
        bench=bench, problems=problems, wh=wh, run_id=context.run_id,
        config=config.model_dump(),
        make_client=partial(llm.client_for, max_tokens=limit,
                            requests=len(problems) * len(budgets) * config.k,
                            progress=context.log.info, max_concurrency=config.max_concurrency),
        pool_factory=grader.pool, progress=context.log.info)
    return done.result.samples


def _arrow(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows with every column typed (a column that is None in every row would be untyped)."""
    types = {"checkpoint_id": pa.string(), "recipe": pa.string(), "train_cap": pa.int64(),
             "generation_limit": pa.int64(), "steps": pa.int64(), "train_wall_s": pa.float64(),
             "train_reward": pa.float64(), "train_completion_length": pa.float64()}
    names = list(dict.fromkeys(k for r in rows for k in r))
    fields = [pa.field(n, types[n]) if n in types else
              pa.field(n, pa.array([r.get(n) for r in rows]).type) for n in names]
    return pa.Table.from_pylist(rows, schema=pa.schema(fields))


def _image_md(path: Path) -> str:
    import base64

    return f"![{path.stem}](data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()})"


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
    from pipelines.settings import weft_home
    from training.data import fingerprint
    from training.errors import DatasetError

    started = now()
    if config.start_from:
        config = config.model_copy(update={"overrides": start_from_overrides(
            context, config.start_from, list(config.overrides))})
    plan = table_plan(config)
    wh = warehouse.get()
    ep_config = check_recipe("grpo", plan.ep_recipe, Arm("ep", plan.ep_recipe, {
        **plan.overrides, "seed": plan.seed, "max_steps": plan.max_steps,
        **({"dataset_limit": plan.dataset_limit} if plan.dataset_limit is not None else {}),
    }).override_args())
    if not ep_config.budgets:
        raise dg.Failure(description=f"recipe {plan.ep_recipe!r} has no budgets: the EP-aware "
                                     "arm needs the budget reward (e.g. budget_grpo.cpu)")
    heldout_spec = config.heldout_dataset or ep_config.dataset
    try:
        examples = training_examples(ep_config)
        problems = heldout_problems(heldout_spec, config.heldout_n, config.heldout_seed,
                                    examples)
    except (DatasetError, ValueError) as exc:
        raise dg.Failure(description=str(exc)) from exc
    train_id = fingerprint(examples)
    train_spec = f"warehouse:{TRAIN_TABLE}/{train_id}"
    arms = checked_arms(plan, train_spec, ep_config)
    budgets = sorted(set(config.budgets or ep_config.budgets))
    if any(b <= 0 for b in budgets):
        raise dg.Failure(description=f"budgets must be positive token counts, got {budgets}")
    table_id = f"{plan.ep_recipe}-{config_hash(config.model_dump())[:8]}"
    # the table's own `runs` row (failed when an arm fails); each evaluation records its own
    with run_record(context, wh, config.model_dump(), partition=table_id,
                    started_at=started) as rec:
        rec.write(TRAIN_TABLE, examples, partition=train_id, counted=False)
        evaluated: list[EvaluatedArm] = []
        trained = []
        for arm in arms:
            context.log.info(f"Table 5 arm {arm.label}: {arm.recipe}, {plan.max_steps} steps, "
                             f"cap {arm.overrides['max_completion_length']}")
            trained.append((arm, *launch_arm(context, trainer, wh, arm.label, arm.recipe,
                                             arm.override_args())))
        if config.evaluate_base:
            spec = base_spec(ep_config.model_name_or_path)
            evaluated.append(EvaluatedArm(ARM_BASE, spec.model_id, evaluate_model(
                context, spec, problems, config, budgets, wh, llm, grader)))
        from eval.models import ModelSpec

        for arm, ck, path, metrics in trained:
            spec = ModelSpec(model_id=ck, kind="local", path=path, served_model=ck,
                             checkpoint_id=ck)
            samples = evaluate_model(context, spec, problems, config, budgets, wh, llm, grader)
            evaluated.append(EvaluatedArm(arm.label, ck, samples, recipe=arm.recipe,
                                          checkpoint_id=ck,
                                          train_cap=int(arm.overrides["max_completion_length"]),
                                          train=train_summary(metrics)))
        try:
            rows = table_rows(evaluated, seed=config.seed)
            tests, skipped = paired_tests(evaluated, n_boot=config.n_boot, seed=config.seed)
        except ValueError as exc:
            raise dg.Failure(description=str(exc)) from exc
        extra = {"table_id": table_id, "train_data": train_spec,
                 "heldout": f"{heldout_spec}#seed={config.heldout_seed}"}
        rows = [dict(r, **extra) for r in rows]
        rec.write(TABLE, _arrow(rows))
        if tests:
            rec.write(TESTS_TABLE, [dict(t, table_id=table_id) for t in tests], counted=False)
    for s in skipped:
        context.log.warning(f"paired test skipped: {s}")
    plot = plot_table(rows, weft_home() / "reports" / "ep_budget_table" / f"{table_id}.png")
    wide, columns = wide_rows(rows)
    meta: dict[str, Any] = {
        "table_id": table_id, "arms": len(wide), "heldout_problems": len(problems),
        "budgets": dg.MetadataValue.json(budgets),
        "generation_limit": max(r["generation_limit"] or 0 for r in rows),
        "table": md_table(wide, columns),
        "paired_tests": md_table(tests, TESTS_COLUMNS),
        "plot": dg.MetadataValue.md(_image_md(plot)),
        "plot_path": dg.MetadataValue.path(str(plot)),
        "checkpoint_ids": dg.MetadataValue.json({a.label: ck for a, ck, _, _ in trained}),
        "train_data": train_spec, "tests_skipped": len(skipped),
    }
    smallest = min(budgets)
    for r in rows:
        if r["budget"] == smallest:
            meta[f"BS@{smallest}/{r['arm']}"] = float(r["budgeted_success"])
    return dg.MaterializeResult(metadata=meta)


EP_TRAINING_ASSETS = [ep_budget_table]
ep_budget_table_job = dg.define_asset_job(
    "ep_budget_table_job", selection=[ep_budget_table],
    description="Engagement paper Table 5 for the embedded model: train EP-aware and RLVR arms, "
                "evaluate them and the base model in budgeted mode (configure steps, arms and "
                "the held-out slice in the run config of ep_budget_table).")
