"""Tandem RL assets (§3-5 of the paper): train, evaluate on the paper's axes, compare two models.

- ``tandem_checkpoint`` (group ``train``, beside ``grpo_checkpoint``): a Tandem RL run
  (``tandem_grpo*`` recipes) or the KL-to-junior ablation (``kl_junior_grpo*``, §5.2), launched
  through Dagster Pipes by ``assets.training``'s ``TrainerLauncher``; the checkpoint is
  registered as a model. Its junior (the frozen partner) is the run's starting checkpoint
  unless the recipe names another one (§3.2); the path is in the metadata (``junior_path``).
- ``tandem_eval`` (group ``evaluate``): the senior (default: the latest ``tandem_checkpoint``;
  any registered model, e.g. a GRPO baseline, via ``model``) solo (§4.2), the junior solo, and
  the two in handoff mode (§4.3) with the senior starting and with the junior starting. Every
  run writes ordinary ``eval_samples`` / ``eval_scores`` partitions ``<benchmark>|<label>``
  (the team's label is ``eval.handoff_team.handoff_label``), so the leaderboard, ``eval_reports``
  and its paired tests cover them.
- ``tandem_legibility`` (group ``evaluate``): §4.5 junior cross-entropy and distribution
  overlap on the senior's solo outputs (summary figures averaged over every position), §4.4
  marginal drift of the senior from the junior (tables ``tandem_legibility``, ``tandem_drift``,
  ``tandem_summary``, partition :func:`legibility_partition`; views in
  ``warehouse/views/tandem_*_latest.sql``), with the drift
  survival curve (the primary drift figure) and legibility per model as plots in the metadata
  (every model evaluated against the same junior on the benchmark, so a TRL and a GRPO senior
  share one plot). The summary's ``kl`` is the smoothing-free KL on the shared support, beside
  its coverage (``kl_tokens``, ``kl_senior_mass``, ``kl_junior_mass``; see
  ``eval.tandem_metrics``).
- ``tandem_comparison`` (group ``report``): §5.3 paired one-sided tests of model A against
  model B on per-problem handoff pass@k (both starts, each k), cross-entropy and overlap
  (table ``tandem_pairwise``, partition :func:`pairwise_partition`, view
  ``tandem_pairwise_latest``).

Not guaranteed: legibility and drift need the weights (local models only); everything here on
CPU is a smoke-sized run of the paper's protocol, not its numbers.
"""


import base64
from functools import partial
from pathlib import Path
from typing import Any

import dagster as dg

from assets.common import lineage, md_table, now
from assets.ingest import problems
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sampling import SamplingConfig
from assets.training import (
    CheckpointFamily,
    TrainerLauncher,
    _run,
    check_recipe,
    latest_checkpoint,
)
from pipelines.progress import heartbeat
from training.tandem.study import (
    STARTS,
    evaluation_summary,
    legibility_partition,
    pairwise_partition,
    pairwise_tests,
    recipe_method,
    tandem_evaluations,
)
from warehouse.partitions import eval_partition
from warehouse.runs import record_run

DEFAULT_TANDEM_RECIPE = "tandem_grpo.cpu"


class TandemCheckpointConfig(dg.Config):
    # tandem_grpo(.cpu): Tandem RL; kl_junior_grpo(.cpu): the KL-to-junior ablation (§5.2)
    recipe: str = DEFAULT_TANDEM_RECIPE
    overrides: list[str] = []  # key=value, YAML values (e.g. "max_steps=20")
    from_sft: bool = False  # start from the latest sft_checkpoint (the paper starts from base)


TANDEM_FAMILY = CheckpointFamily(
    "tandem_checkpoint", "grpo", DEFAULT_TANDEM_RECIPE, ("math_train_problems",),
    ("tandem_grpo", "kl_junior_grpo"), parent="sft_checkpoint",
    description="Tandem RL or its KL-to-junior ablation on problems with gold answers",
    config=TandemCheckpointConfig)


@dg.asset(
    deps=[dg.AssetKey(name) for name in (*TANDEM_FAMILY.data, TANDEM_FAMILY.parent)],
    group_name="train",
    kinds={"pytorch", "python"},
    description="A Tandem RL checkpoint (senior + frozen junior rollouts, senior-only GRPO loss) "
                "or its KL-to-junior ablation, trained through Dagster Pipes.",
)
def tandem_checkpoint(context: dg.AssetExecutionContext, config: TandemCheckpointConfig,
                      trainer: TrainerLauncher, warehouse: WarehouseResource) -> dg.MaterializeResult:
    from training.model_path import resolve_model

    overrides = list(config.overrides)
    extra: dict[str, Any] = {}
    if config.from_sft:
        path, parent = latest_checkpoint(context, "sft_checkpoint")
        overrides = [f"model_name_or_path={path}", f"parent_checkpoint={parent}", *overrides]
        extra["started_from"] = dg.MetadataValue.path(path)
    resolved = check_recipe("grpo", config.recipe, overrides)
    try:
        method = recipe_method(resolved)
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from exc
    junior = (resolved.tandem.junior if method == "tandem" else "") or ""
    extra["method"] = method
    extra["junior_path"] = resolve_model(junior or resolved.model_name_or_path)
    return _run(context, "grpo", config.recipe, overrides, trainer, warehouse, extra,
                TANDEM_FAMILY)


# ------------------------------------------------------------------ evaluation (§4.2, §4.3)


class TandemEvalConfig(dg.Config):
    model: str = ""  # registered model id of the senior; "" = the latest tandem_checkpoint
    junior: str = ""  # registered model id or local folder; "" = the checkpoint's junior
    benchmark: str = "gsm8k"
    limit: int | None = 20  # problems (deterministic slice); None = all
    # k samples per problem (pass@k for k = 1, 2, 4, ... <= k); max_tokens per answer, a team
    # shares it
    sampling: SamplingConfig = SamplingConfig(k=4, temperature=0.6, top_p=0.95, max_tokens=256)
    schedule: str = "alternate"  # alternate (§4.3) | bernoulli (App. B.3)
    handoff_p: float = 0.5
    starts: list[str] = list(STARTS)
    solo: bool = True  # also evaluate senior and junior alone (§4.2; drift needs the junior's)
    max_concurrency: int = 8


def _model_specs(context: dg.AssetExecutionContext, model: str, junior: str, wh: Any):
    """(senior spec, junior spec) from the config, defaulting to the latest tandem_checkpoint
    (and its junior); an unregistered junior folder is registered (``eval.models.model_for``)."""
    from eval.models import ModelRegistryError, get_model, model_for
    from pipelines.models import embedded_model_dir

    junior_path = ""
    if not model:
        event = context.instance.get_latest_materialization_event(dg.AssetKey("tandem_checkpoint"))
        meta = event.asset_materialization.metadata if event and event.asset_materialization else {}
        if "registered_model" not in meta:
            raise dg.Failure("no registered tandem_checkpoint: materialize tandem_checkpoint "
                             "first, or set `model` to a registered model id")
        model = str(meta["registered_model"].value)
        junior_path = str(meta["junior_path"].value) if "junior_path" in meta else ""
    try:
        return (get_model(model, wh),
                model_for(junior or junior_path or str(embedded_model_dir()), wh,
                          run_id=context.run_id))
    except KeyError as exc:
        raise dg.Failure(str(exc.args[0])) from exc
    except ModelRegistryError as exc:
        raise dg.Failure(f"junior: {exc}") from exc


@dg.asset(
    deps=[tandem_checkpoint, problems],
    group_name="evaluate",
    kinds={"python", "parquet"},
    description="Tandem RL §4.2-4.3: the senior and junior solo and as a handoff team (senior "
                "first, junior first); ordinary eval_samples / eval_scores rows.",
)
def tandem_eval(context: dg.AssetExecutionContext, config: TandemEvalConfig,
                warehouse: WarehouseResource, grader: GraderResource,
                llm: LLMResource) -> dg.MaterializeResult:
    from eval.benchmarks import get as get_benchmark
    from eval.recorded import evaluate_recorded

    started = now()
    wh = warehouse.get()
    bench = get_benchmark(config.benchmark)
    rows = wh.read("problems", partition=bench.source).to_pylist()
    if not rows:
        raise dg.Failure(f"no problems for {bench.name}: materialize `{bench.source}_problems` "
                         "and `problems` first")
    senior_spec, junior_spec = _model_specs(context, config.model, config.junior, wh)
    cfg = config.sampling.eval_config(limit=config.limit)
    try:
        evaluations = tandem_evaluations(
            senior_spec, junior_spec, cfg=cfg, starts=config.starts, schedule=config.schedule, handoff_p=config.handoff_p,
            solo=config.solo)
    except ValueError as exc:
        raise dg.Failure(f"bad handoff settings: {exc}") from exc
    context.log.info("tandem_eval on " + bench.name + ": "
                     + ", ".join(f"{e.label} ({e.cfg.mode.mode})" for e in evaluations))
    done = evaluate_recorded(
        {"senior": senior_spec, "junior": junior_spec}, evaluations, bench=bench, problems=rows,
        wh=wh, run_id=context.run_id, config=config.model_dump(), started_at=started,
        make_client=partial(llm.client_for, max_tokens=cfg.max_tokens,
                            progress=context.log.info, max_concurrency=config.max_concurrency),
        pool_factory=grader.pool)
    summary = evaluation_summary(done, cfg.k)
    return dg.MaterializeResult(metadata={
        "model": senior_spec.model_id, "junior": junior_spec.model_id, "benchmark": bench.name,
        "results": md_table(summary, ["model", "mode", "samples", "failed", "pass@1",
                                      f"pass@{cfg.k}", "senior_share"]),
        **{f"{r['model']} pass@1": float(r["pass@1"]) for r in summary
           if r["pass@1"] is not None}})


# ------------------------------------------------------------------ legibility and drift


class TandemLegibilityConfig(dg.Config):
    model: str = ""  # "" = the senior of the latest tandem_eval
    junior: str = ""  # "" = the junior of that tandem_eval
    benchmark: str = ""  # "" = that tandem_eval's benchmark
    max_samples: int = 64  # senior solo outputs scored for legibility (first by problem, index)
    min_count: int = 20  # §4.4 "frequent": occurrences in the junior's own outputs
    smoothing: float = 0.5  # added to a frequent token's two counts in its log-ratio only


def _latest_eval(context: dg.AssetExecutionContext) -> dict[str, str]:
    event = context.instance.get_latest_materialization_event(dg.AssetKey("tandem_eval"))
    meta = event.asset_materialization.metadata if event and event.asset_materialization else {}
    return {k: str(meta[k].value) for k in ("model", "junior", "benchmark") if k in meta}


def write_legibility(context: dg.AssetExecutionContext, wh: Any, config: dict[str, Any],
                     benchmark: str, leg_rows: list[dict[str, Any]],
                     d_rows: list[dict[str, Any]], summary: dict[str, Any], *,
                     started: Any) -> None:
    """Write one senior's §4.4-4.5 rows (partition :func:`legibility_partition`) and
    their `runs` row; no drift rows (nothing frequent in the junior's outputs) clears the
    partition's old ones, with a warning."""
    part = legibility_partition(benchmark, summary["model"], summary["junior"])
    lin = lineage(context, config, partition=part)
    wh.write("tandem_legibility", leg_rows, lineage=lin)
    if d_rows:
        wh.write("tandem_drift", d_rows, lineage=lin)
    else:
        wh.delete_partition("tandem_drift", part)
        context.log.warning(f"no token occurs {summary['min_count']}+ times in the junior's "
                            "outputs: no drift rows (lower min_count or evaluate more problems)")
    wh.write("tandem_summary", [summary], lineage=lin)
    record_run(wh, lin, started_at=started, rows_written=len(leg_rows) + len(d_rows) + 1,
               config=config)


@dg.asset(
    deps=[tandem_eval],
    group_name="evaluate",
    kinds={"pytorch", "parquet"},
    description="Tandem RL §4.4-4.5: junior cross-entropy and overlap on the senior's outputs, "
                "marginal drift from the junior; survival-curve and legibility plots.",
)
def tandem_legibility(context: dg.AssetExecutionContext, config: TandemLegibilityConfig,
                      warehouse: WarehouseResource) -> dg.MaterializeResult:
    from eval.benchmarks import get as get_benchmark
    from eval.models import get_model
    from eval.tandem_metrics import legibility_and_drift, load_pair, summary_figures

    started = now()
    wh = warehouse.get()
    latest = _latest_eval(context)
    model = config.model or latest.get("model", "")
    junior = config.junior or latest.get("junior", "")
    bench = get_benchmark(config.benchmark or latest.get("benchmark", "gsm8k"))
    if not model or not junior:
        raise dg.Failure("no senior/junior: materialize tandem_eval first, or set model and junior")
    try:
        specs = [get_model(m, wh) for m in (model, junior)]
    except KeyError as exc:
        raise dg.Failure(str(exc.args[0])) from exc
    if any(s.kind != "local" for s in specs):
        raise dg.Failure("legibility and drift read the models' weights: both senior and junior "
                         "must be local model folders (registered with --path)")
    samples = _solo_samples(wh, bench.name, (model, junior))
    problems = {p["problem_id"]: p for p in wh.read("problems", partition=bench.source).to_pylist()}
    with heartbeat(f"legibility and drift of {model} against {junior}", context.log.info):
        leg_rows, d_rows, summary = legibility_and_drift(
            load_pair(specs[0].path, specs[1].path), bench, problems, samples[model],
            samples[junior], model=model, junior=junior, max_samples=max(1, config.max_samples),
            min_count=config.min_count, smoothing=config.smoothing)
    summary["checkpoint_id"] = specs[0].checkpoint_id or None
    write_legibility(context, wh, config.model_dump(), bench.name, leg_rows, d_rows, summary,
                     started=started)
    plots = _tandem_plots(wh, bench.name, junior, context.run_id)
    meta: dict[str, Any] = {
        "model": model, "junior": junior, "benchmark": bench.name,
        "survival": md_table([{"threshold": t, "share": s} for t, s in
                              zip(summary["survival_thresholds"], summary["survival"])],
                             ["threshold", "share"]),
        **summary_figures(summary)}
    for name, path in plots.items():
        if path is not None:
            data = base64.b64encode(path.read_bytes()).decode()
            meta[f"plot_{name}"] = dg.MetadataValue.md(f"![{name}](data:image/png;base64,{data})")
    return dg.MaterializeResult(metadata=meta)


def _solo_samples(wh: Any, benchmark: str, models: tuple[str, ...]) -> dict[str, list[dict]]:
    """Each model's answered solo samples on ``benchmark``; dg.Failure naming a model with none."""
    samples = {m: [r for r in wh.read("eval_samples",
                                       partition=eval_partition(benchmark, m)).to_pylist()
                   if r.get("gen_error") is None and r.get("mode") in (None, "single")]
               for m in models}
    for m, got in samples.items():
        if not got:
            raise dg.Failure(f"no solo eval_samples of {m} on {benchmark}: materialize "
                             "tandem_eval (solo: true) for this senior and junior first")
    return samples


def _tandem_plots(wh: Any, benchmark: str, junior: str, run_id: str) -> dict[str, Path | None]:
    """Survival curves and legibility bars of every model evaluated against this junior."""
    from pipelines.settings import weft_home

    rows = wh.sql("SELECT * FROM tandem_summary_latest WHERE benchmark = $b AND junior = $j "
                  "ORDER BY model", {"b": benchmark, "j": junior}).to_pylist()
    if not rows:
        return {}
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    out = weft_home() / "reports" / "tandem" / run_id
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        ax.plot(r["survival_thresholds"], r["survival"], marker="o", ms=3, label=r["model"])
    ax.set_xlabel("|log q_senior(v) - log q_junior(v)| (nats)")
    ax.set_ylabel("share of frequent junior tokens above")
    ax.set_title(f"drift from {junior} on {benchmark} (§4.4)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    survival_png = out / "drift_survival.png"
    fig.savefig(survival_png, dpi=110)
    plt.close(fig)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 0.4 * len(rows) + 2))
    names = [r["model"] for r in rows]
    ax1.barh(names, [r["junior_ce_nats"] for r in rows], color="#4C72B0")
    ax1.set_xlabel("junior cross-entropy (nats/token, lower = more legible)")
    ax2.barh(names, [r["overlap"] for r in rows], color="#55A868")
    ax2.set_xlabel("distribution overlap (higher = closer)")
    ax2.set_yticks([])
    fig.suptitle(f"junior legibility ({junior}, {benchmark}, §4.5)")
    fig.tight_layout()
    legibility_png = out / "legibility.png"
    fig.savefig(legibility_png, dpi=110)
    plt.close(fig)
    return {"drift_survival": survival_png, "legibility": legibility_png}


# ------------------------------------------------------------------ paired tests (§5.3)


class TandemComparisonConfig(dg.Config):
    model_a: str  # the model claimed better (e.g. the Tandem RL checkpoint)
    model_b: str  # the baseline (e.g. the GRPO or KL-to-junior checkpoint)
    junior: str
    benchmark: str = "gsm8k"
    ks: list[int] = [1, 2, 4]
    schedule: str = "alternate"
    handoff_p: float = 0.5
    n_boot: int = 5000


@dg.asset(
    deps=[tandem_eval, tandem_legibility],
    group_name="report",
    kinds={"python", "duckdb"},
    description="Tandem RL §5.3: paired one-sided tests of model A vs model B on per-problem "
                "handoff pass@k, junior cross-entropy and distribution overlap.",
)
def tandem_comparison(context: dg.AssetExecutionContext, config: TandemComparisonConfig,
                      warehouse: WarehouseResource) -> dg.MaterializeResult:
    started = now()
    wh = warehouse.get()
    a, b, bench = config.model_a, config.model_b, config.benchmark
    out, skipped = pairwise_tests(wh, a, b, config.junior, bench, ks=config.ks,
                                  schedule=config.schedule, handoff_p=config.handoff_p,
                                  n_boot=config.n_boot)
    if not out:
        raise dg.Failure("nothing to compare: " + "; ".join(skipped) + ". Materialize tandem_eval "
                         "and tandem_legibility for both models with the same junior first.")
    lin = lineage(context, config.model_dump(),
                  partition=pairwise_partition(bench, a, b, config.junior))
    wh.write("tandem_pairwise", out, lineage=lin)
    record_run(wh, lin, started_at=started, rows_written=len(out), config=config.model_dump())
    for s in skipped:
        context.log.warning(f"skipped {s}")
    return dg.MaterializeResult(metadata={
        "tests": md_table(out, ["statistic", "starts", "k", "alternative", "n", "mean_a",
                                "mean_b", "diff", "p_ttest", "p_bootstrap"]),
        "skipped": len(skipped)})


TANDEM_ASSETS = [tandem_checkpoint, tandem_eval, tandem_legibility, tandem_comparison]
