"""`duet_sweep`: the DUET paper's budget sweep (DUET §4.1, §4.3,
Figure 9) on one recipe: GRPO at the full budget, then DUET at each budget fraction (default
full, half and quarter), same prompts, seed and step count; each checkpoint evaluated on a
benchmark slice; one ``duet_sweep`` row per arm; a plot of speedup against budget and of
accuracy against wall clock, and every DUET arm's per-step diagnostics, in the metadata.

The arms and the figures are plain functions of ``training.duet.sweep``. Training runs
``python -m training.grpo`` through the ``trainer`` resource (Dagster Pipes; the script writes
``train_metrics`` and ``checkpoints`` itself). Each checkpoint is evaluated by
the path ``eval_samples`` uses (``eval.recorded.evaluate_recorded``: served on a local vLLM
server, generated and graded by ``eval.runner.evaluate``, and recorded as ``llm_calls``,
``eval_samples``, ``eval_scores`` and a `runs` row under ``<benchmark>@<checkpoint>``) like
any evaluation. The per-step diagnostics are also a SQL view, ``duet_steps``
(``warehouse/views/duet_steps.sql``), and their means per arm are ``duet_sweep`` columns.

``start_from`` names the checkpoint asset every arm starts from. Its one upstream edge besides
``problems`` is ``chain_sft_checkpoint``, the start of the DUET claim's CPU run
(``assets.results.budget_results``), so that claim's job trains the start before the sweep;
a sweep started from another asset still shows the edge.

Not guaranteed: checkpoints are not registered as models (the models sensor would evaluate
each on the whole suite); speedups are only comparable within one sweep (one machine, one load).
"""

import base64
from functools import partial
from pathlib import Path
from typing import Any

import dagster as dg

from assets.common import md_table, now, run_record
from assets.ingest import problems
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sampling import SamplingConfig
from assets.training import (
    TrainerLauncher,
    check_recipe,
    latest_checkpoint,
    launch_arm,
    start_from_overrides,
)
from training.duet.sweep import (
    DEFAULT_BUDGETS,
    SWEEP_TABLE,
    ArmOutcome,
    SweepArm,
    SweepPlan,
    duet_diagnostics,
    plan_arms,
    plot_sweep,
    sweep_rows,
)
from warehouse import config_hash

DIAGNOSTIC_COLUMNS = ["step", "lambda", "k1", "k2", "abort_at", "n_q_min", "n_q_mean",
                      "n_q_max", "marker_rate", "abort_rate", "cap_cut_rate", "eps_kept",
                      "is_weight_mean", "tokens_generated", "token_budget", "budget_used",
                      "calibration_chi2", "k_refit"]
SWEEP_COLUMNS = ["arm", "budget_fraction", "steps", "train_wall_s", "speedup", "tokens_per_step",
                 "token_ratio", "accuracy", "accuracy_ci_low", "accuracy_ci_high",
                 "mean_n_q_mean", "mean_abort_rate", "mean_marker_rate", "mean_budget_used",
                 "checkpoint_id"]
# The start of the DUET claim's CPU run (assets.results.budget_results): multi-step chains, so
# answers are long and variable enough for the marker-gated abort to act. The edge orders it
# before the sweep in the claim's job, which materializes it.
CPU_START = "chain_sft_checkpoint"


class DuetSweepConfig(dg.Config):
    recipe: str = "duet_grpo.cpu"  # a GRPO recipe with a `duet` mapping
    budgets: list[float] = list(DEFAULT_BUDGETS)  # DUET budget fractions b
    full_rollouts: int = 8  # GRPO's rollouts per prompt = the full budget (paper §4.1)
    slots: int | None = None  # DUET's rollout slots per prompt (n_max); None: 2 x full
    prompts_per_step: int = 2
    max_steps: int = 4
    dataset_limit: int | None = 64
    max_completion_length: int | None = None  # None: the recipe's
    seed: int = 0
    overrides: list[str] = []  # key=value for every arm (e.g. "learning_rate=1e-5")
    # key=value DUET settings for every DUET arm, over the recipe's `duet` mapping (e.g.
    # "grace=16"); budget_fraction and full_rollouts are the sweep's own
    duet_settings: list[str] = []
    # a checkpoint asset (e.g. "sft_checkpoint", "chain_sft_checkpoint") whose latest
    # materialization every arm starts from (recorded as each arm's parent_checkpoint, so the
    # held-out problems leave out what the start trained on too); "" = the recipe's model
    start_from: str = ""
    evaluate: bool = True
    benchmark: str = "gsm8k"
    eval_limit: int | None = 20  # problems (deterministic slice)
    eval_sampling: SamplingConfig = SamplingConfig(k=1, temperature=0.0, max_tokens=256)
    max_concurrency: int = 8


def sweep_plan(config: DuetSweepConfig) -> SweepPlan:
    from training.config_recipes import RecipeError, parse_overrides

    try:
        extra = parse_overrides(list(config.overrides))
        duet = parse_overrides(list(config.duet_settings))
    except RecipeError as exc:
        raise dg.Failure(description=f"bad sweep overrides: {exc}") from exc
    try:
        return SweepPlan(recipe=config.recipe, budgets=tuple(config.budgets),
                         full_rollouts=config.full_rollouts, slots=config.slots,
                         prompts_per_step=config.prompts_per_step, max_steps=config.max_steps,
                         dataset_limit=config.dataset_limit,
                         max_completion_length=config.max_completion_length, seed=config.seed,
                         overrides=extra, duet=duet)
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from exc


def start_overrides(context: dg.AssetExecutionContext, start_from: str,
                    overrides: list[str]) -> list[str]:
    """``overrides`` plus the start: ``model_name_or_path`` and ``parent_checkpoint`` of the
    latest materialization of the checkpoint asset ``start_from`` (the parent puts the start's
    training problems in each arm's lineage, ``training.heldout.checkpoint_chain``). A start
    never materialized fails naming the asset and the command that makes it."""
    if context.instance.get_latest_materialization_event(dg.AssetKey(start_from)) is None:
        hint = " (`make demo` also trains it)" if start_from == "sft_checkpoint" else ""
        raise dg.Failure(description=(
            f"start_from={start_from!r}: {start_from} has no materialization yet; materialize "
            f"it first: `.venv/bin/weft materialize --select {start_from}`{hint} (the "
            f"duet_budget_claim_job does so itself), or set start_from to '' to start from the "
            "recipe's model"))
    _, parent = latest_checkpoint(context, start_from)
    return [*start_from_overrides(context, start_from, list(overrides)),
            f"parent_checkpoint={parent}"]


def checked_arms(plan: SweepPlan) -> list[SweepArm]:
    """Every arm's resolved config is checked before the first run starts."""
    base = check_recipe("grpo", plan.recipe, [])
    if base.method != "duet":
        raise dg.Failure(description=f"recipe {plan.recipe!r} has no `duet` mapping: the sweep "
                                     "needs a DUET recipe (e.g. duet_grpo or duet_grpo.cpu)")
    try:
        arms = plan_arms(plan, base.duet)
    except ValueError as exc:
        raise dg.Failure(description=f"bad sweep: {exc}") from exc
    for arm in arms:
        check_recipe("grpo", plan.recipe, arm.override_args())
    return arms


def train_arm(context: dg.AssetExecutionContext, trainer: TrainerLauncher, wh: Any,
              plan: SweepPlan, arm: SweepArm) -> ArmOutcome:
    """One arm through the trainer launcher; its ``train_metrics`` rows from the warehouse."""
    checkpoint_id, path, rows = launch_arm(context, trainer, wh, arm.label, plan.recipe,
                                           arm.override_args())
    return ArmOutcome(arm=arm, checkpoint_id=checkpoint_id, path=path, metrics_rows=rows)


def evaluate_arm(context: dg.AssetExecutionContext, outcome: ArmOutcome, config: DuetSweepConfig,
                 wh: Any, llm: LLMResource, grader: GraderResource) -> None:
    """Serve the arm's checkpoint and evaluate it on the benchmark slice through the one
    recorded-evaluation path (``eval.recorded.evaluate_recorded``: rows under
    ``<benchmark>@<checkpoint>`` like any evaluation); sets the outcome's accuracy (avg@1 with
    its bootstrap CI)."""
    from eval.benchmarks import get as get_benchmark
    from eval.models import ModelSpec
    from eval.recorded import Evaluation, evaluate_recorded

    bench = get_benchmark(config.benchmark)
    rows = wh.read("problems", partition=bench.source).to_pylist()
    if not rows:
        raise dg.Failure(f"no problems for {bench.name}: materialize `{bench.source}_problems` "
                         "and `problems` first, or set evaluate: false")
    if bench.grader == "code":
        raise dg.Failure(f"{bench.name} is a code benchmark; the sweep evaluates math or "
                         "multiple-choice benchmarks (e.g. gsm8k)")
    cfg = config.eval_sampling.eval_config(limit=config.eval_limit)
    ck = outcome.checkpoint_id
    spec = ModelSpec(model_id=ck, kind="local", path=outcome.path, served_model=ck,
                     checkpoint_id=ck)
    context.log.info(f"evaluating {ck} on {bench.name} ({cfg.limit or 'all'} problems)")
    (done,) = evaluate_recorded(
        {ck: spec}, [Evaluation(ck, cfg, ck, checkpoint_id=ck)], bench=bench, problems=rows,
        wh=wh, run_id=context.run_id, config=config.model_dump(),
        make_client=partial(llm.client_for, max_tokens=cfg.max_tokens,
                            requests=min(len(rows), cfg.limit or len(rows)),
                            progress=context.log.info, max_concurrency=config.max_concurrency),
        pool_factory=grader.pool)
    avg = next((s for s in done.result.scores if s["metric"] == "avg@k"), None)
    if avg is not None:
        outcome.accuracy = float(avg["value"])
        outcome.accuracy_ci = (float(avg["ci_low"]), float(avg["ci_high"]))
        outcome.eval_problems = int(avg["n_problems"])
    outcome.benchmark = bench.name


def _image_md(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f"![{path.stem}](data:image/png;base64,{data})"


def sweep_metadata(rows: list[dict], outcomes: list[ArmOutcome], plot: Path) -> dict[str, Any]:
    """The materialization metadata: the sweep table, the plot, and each DUET arm's per-step
    diagnostics (a table, and the last step's values as numbers)."""
    meta: dict[str, Any] = {
        "arms": len(rows),
        "sweep": md_table(rows, SWEEP_COLUMNS),
        "plot": dg.MetadataValue.md(_image_md(plot)),
        "plot_path": dg.MetadataValue.path(str(plot)),
        "checkpoint_ids": dg.MetadataValue.json({r["arm"]: r["checkpoint_id"] for r in rows}),
    }
    for r in rows:
        if r["method"] == "duet" and r["speedup"] is not None:
            meta[f"speedup/{r['arm']}"] = float(r["speedup"])
        if r["accuracy"] is not None:
            meta[f"accuracy/{r['arm']}"] = float(r["accuracy"])
    for o in outcomes:
        diag = duet_diagnostics(o.metrics_rows)
        if not diag:
            continue
        meta[f"diagnostics/{o.arm.label}"] = md_table(diag, DIAGNOSTIC_COLUMNS)
        for name, value in diag[-1].items():
            if name != "step" and value is not None:
                meta[f"duet/{o.arm.label}/{name}"] = float(value)
    return meta


@dg.asset(
    deps=[problems, dg.AssetKey(CPU_START)],
    group_name="train",
    kinds={"pytorch", "python"},
    description="DUET budget sweep: GRPO at full budget vs DUET at full, half and quarter "
                "budget on one recipe, each checkpoint evaluated; rows in duet_sweep, per-step "
                "diagnostics in duet_steps.",
)
def duet_sweep(context: dg.AssetExecutionContext, config: DuetSweepConfig,
               trainer: TrainerLauncher, warehouse: WarehouseResource, llm: LLMResource,
               grader: GraderResource) -> dg.MaterializeResult:
    from pipelines.settings import weft_home

    started = now()
    if config.start_from:
        config = config.model_copy(update={"overrides": start_overrides(
            context, config.start_from, list(config.overrides))})
    plan = sweep_plan(config)
    arms = checked_arms(plan)
    wh = warehouse.get()
    partition = f"{plan.recipe}-{config_hash(config.model_dump())[:8]}"
    outcomes = []
    # the sweep's own `runs` row (failed when an arm fails); each evaluation records its own
    with run_record(context, wh, config.model_dump(), partition=partition,
                    started_at=started) as rec:
        for arm in arms:
            context.log.info(f"sweep arm {arm.label}: training ({plan.max_steps} steps)")
            outcomes.append(train_arm(context, trainer, wh, plan, arm))
        if config.evaluate:
            for outcome in outcomes:
                evaluate_arm(context, outcome, config, wh, llm, grader)
        rows = sweep_rows(outcomes)
        for r in rows:
            r["sweep"] = partition
            r["recipe"] = plan.recipe
            r["seed"] = plan.seed
        rec.write(SWEEP_TABLE, rows)
    plot = plot_sweep(rows, weft_home() / "reports" / "duet_sweep" / f"{partition}.png")
    return dg.MaterializeResult(metadata={"partition": partition,
                                          **sweep_metadata(rows, outcomes, plot)})


DUET_ASSETS = [duet_sweep]
duet_sweep_job = dg.define_asset_job(
    "duet_sweep_job", selection=[duet_sweep],
    description="The DUET budget sweep (configure budgets, steps and the benchmark slice in the "
                "run config of duet_sweep).")
