"""Evaluation assets: `eval_samples` (generate + grade) → `eval_scores` → `eval_reports`.

``eval_samples`` and ``eval_scores`` are partitioned by (benchmark, model). Models are a
dynamic partition dimension: every model in the registry (``eval.models``: the embedded model,
registered endpoints, checkpoints that training registers) becomes a partition, added by the
``models_sensor`` or the nightly schedule. ``eval_samples`` serves the model if it is a local
folder (on demand, stopped afterwards) or calls its endpoint, samples k completions per problem
in the benchmark's generation mode, grades them with the benchmark's grader, and writes one row
per sample (warehouse partition ``<benchmark>@<model>``, replaced on re-runs); every LLM call is
logged to ``llm_calls``. ``eval_scores`` aggregates avg@k, pass@k and maj@k with bootstrap CIs;
the samples are scored there only (``eval_samples`` does not score them). Both assets and their
checks are light steps (``assets.execution.IN_PROCESS``): ``eval_job``, and any run of these
steps alone, executes them in the run's own process with one set of resources (one warm
grading pool), instead of one new process per step.
The metadata of ``eval_samples`` previews a handful of samples (wrong ones first: problem,
output excerpt, extracted answer, gold, correct; ``warehouse.samples``); ``python -m warehouse
samples`` prints them whole. A registered endpoint that does not answer fails the run with
advice about its registry entry (``eval.models.unreachable_advice``).

Settings a run can change besides sampling: ``extraction`` (the math answer extraction rule,
``strict`` by default, ``flexible`` for lm-eval's last-number rule; stored per row in
``extraction_rule``) and ``use_cache`` (False sends every request to the server instead of
replaying the LLM response cache). The metadata's ``tokens_per_s`` is generation speed only
(``generated_tokens`` over ``generating_s``, 0 when every call was a cache hit);
``cached_calls`` counts the replays.

Reliability: request deadlines, retries, the refused-connection window, the response
byte cap and the whole-batch watchdog come from the ``llm`` resource (deadlines scale with
``max_tokens``); progress (done/total, failures, tokens/s, ETA) goes to the Dagster run log at
least every ``LLMResource.progress_every_s`` (the grading phase logs a heartbeat as often). A
failed generation is not a wrong answer: ``correct`` stays NULL, scores leave it out and count
it (``eval_scores.failed``), and the check ``check_eval_samples_failure_share`` fails when more
than ``max_failure_share`` (default 1 %) of a partition's samples failed. Writes go `llm_calls`
(per run) → `eval_samples` → `runs`; a run that fails still writes its `llm_calls` and a `runs`
row with status ``failed`` and the reason, and ``check_eval_samples_runs_agree`` flags
partitions whose rows come from a run without a successful `runs` row or without `llm_calls`.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import dagster as dg

from assets.common import (
    lineage,
    lineage_metadata,
    md_table,
    now,
    run_record,
    runs_disagreements,
)
from assets.execution import IN_PROCESS
from assets.ingest import problems
from assets.partition_defs import eval_partitions, partition_dims, table_partition
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sampling import SamplingConfig
from assets.sandbox_resource import SandboxResource
from eval.benchmarks import get as get_benchmark
from eval.recorded import Evaluation, evaluate_recorded
from eval.runner import EvalConfig, Plan, plan_evaluation, score
from warehouse.lineage import model_lineage
from warehouse.runs import record_run


class EvalSamplesConfig(dg.Config):
    limit: int | None = 20  # problems per benchmark (deterministic slice); None = all
    # k: samples per problem (None = the benchmark's default k); temperature None: 0.0 for
    # k=1, else 0.6
    sampling: SamplingConfig = SamplingConfig()
    max_concurrency: int = 8
    # generation mode (eval.modes): single | interleaved | budgeted | tool
    mode: str = "single"
    budgets: list[int] = [1000, 2000, 4000, 8000]
    # budgeted prompts: "urgency" (the Engagement paper's four instructions) or "numeric"
    budget_prompt: str = "urgency"
    # budgeted mode: one decoding limit for every budget; None = 4 x the largest budget,
    # capped by the model's context (eval.modes.budget_generation_limit)
    budget_limit: int | None = None
    thinking_caps: list[int] = []
    context_policy: str = "state_preserved"
    max_turns: int = 6
    # latency metrics (interleaved and single modes); "" = the model's own folder, else
    # the embedded model's tokenizer (interleaved only: endpoints need a path for single mode)
    tokenizer_path: str = ""
    # check_eval_samples_failure_share fails when a larger share of samples got no response
    max_failure_share: float = 0.01
    # math answer extraction (eval.extraction.EXTRACTION_RULES): "strict" credits only a stated
    # final answer; "flexible" the last number in the text (lm-eval's GSM8K flexible-extract)
    extraction: str = "strict"
    # False: every request goes to the server (no replay from the LLM response cache)
    use_cache: bool = True





def eval_config(config: EvalSamplesConfig, default_k: int, tokenizer_path: str = "") -> EvalConfig:
    """The evaluation's ``EvalConfig``: its sampling settings and its generation mode."""
    from eval.modes import build_mode

    try:
        mode = build_mode(mode=config.mode, budgets=tuple(config.budgets),
                          budget_limit=config.budget_limit,
                          thinking_caps=tuple(config.thinking_caps),
                          context_policy=config.context_policy, max_turns=config.max_turns,
                          tokenizer_path=config.tokenizer_path or tokenizer_path or None,
                          budget_prompt=config.budget_prompt)
    except ValueError as exc:
        raise dg.Failure(description=f"bad generation mode settings: {exc}") from exc
    return config.sampling.eval_config(default_k=default_k, mode=mode, limit=config.limit,
                                       extraction=config.extraction)


FAILURE_SHARE_CHECK = "check_eval_samples_failure_share"


def failure_share_result(samples: list[dict], max_share: float) -> dg.AssetCheckResult:
    """Pass when at most ``max_share`` of the samples failed to generate (``gen_error`` set)."""
    failed = sum(1 for r in samples if r.get("gen_error") is not None)
    share = failed / len(samples) if samples else 1.0
    return dg.AssetCheckResult(
        check_name=FAILURE_SHARE_CHECK, passed=bool(samples) and share <= max_share,
        metadata={"samples": len(samples), "failed": failed, "failure_share": round(share, 4),
                  "max_failure_share": max_share},
        description=None if share <= max_share else
        f"{failed} of {len(samples)} samples got no response ({share:.1%} > {max_share:.1%}); "
        "their scores leave them out. Check the endpoint and re-materialize to retry them.")


def request_bounds(cfg: EvalConfig, plan: Plan) -> tuple[int, int]:
    """(largest max_tokens of one request, number of generation jobs) of a planned evaluation,
    for its request timeouts and batch watchdog."""
    from eval.modes import BUDGET_LIMIT_FACTOR

    max_tokens = cfg.max_tokens
    if cfg.mode.mode == "budgeted":
        max_tokens = max(max_tokens, cfg.mode.budget_limit
                         or BUDGET_LIMIT_FACTOR * max(cfg.mode.budgets))
    return max_tokens, len(plan.jobs)


@dg.asset(
    partitions_def=eval_partitions,
    deps=[problems],
    group_name="evaluate",
    kinds={"python", "parquet"},
    description="One graded row per (problem, sample) for a benchmark and a registered model.",
    op_tags=IN_PROCESS,
    check_specs=[dg.AssetCheckSpec(FAILURE_SHARE_CHECK, asset="eval_samples",
                                   description="At most max_failure_share of the partition's "
                                               "samples failed to generate.")],
)
def eval_samples(context: dg.AssetExecutionContext, config: EvalSamplesConfig,
                 warehouse: WarehouseResource, grader: GraderResource,
                 sandbox: SandboxResource, llm: LLMResource) -> dg.MaterializeResult:
    from eval.models import get_model
    from warehouse.samples import eval_samples_preview

    started = now()
    bench_name, model_id = partition_dims(context)
    bench = get_benchmark(bench_name)
    wh = warehouse.get()
    rows = _problems(wh, bench)
    if not 0.0 <= config.max_failure_share <= 1.0:
        raise dg.Failure(f"max_failure_share must be a share in [0, 1] (0.01 = 1%), "
                         f"got {config.max_failure_share}")
    spec = get_model(model_id, wh)
    cfg = eval_config(config, bench.default_k, tokenizer_path=spec.path)
    plan = plan_evaluation(rows, cfg)
    with _one_writer(context, wh, table_partition(bench.name, model_id), config, started):
        done = _evaluate(context, config, bench, spec, cfg, plan, wh, llm, grader, sandbox,
                         started)
    if done.result.extra.get("budget_limit_warning"):
        context.log.warning(done.result.extra["budget_limit_warning"])
    problem_text = None if bench.private_text else {p["problem_id"]: p["problem"] for p in rows}
    return dg.MaterializeResult(check_results=[
        failure_share_result(done.result.samples, config.max_failure_share)], metadata={
        "model": model_id, **done.summary(),
        "extraction_rule": cfg.extraction if bench.grader == "math" else "n/a",
        "samples_preview": dg.MetadataValue.md(eval_samples_preview(done.result.samples,
                                                                    problems=problem_text)),
        **_trained_from(wh, model_id)})


def _problems(wh: Any, bench: Any) -> list[dict[str, Any]]:
    rows = wh.read("problems", partition=bench.source).to_pylist()
    if not rows:
        raise dg.Failure(f"no problems for {bench.name}: materialize `{bench.source}_problems` "
                         "and `problems` first")
    return rows


@contextmanager
def _one_writer(context: dg.AssetExecutionContext, wh: Any, partition: str,
                config: EvalSamplesConfig, started: Any) -> Iterator[None]:
    """Hold the evaluation partition's lock (``warehouse.locks``) for the block: a second run
    of the same partition is refused at once, with a failed `runs` row naming the holder."""
    from warehouse.locks import PartitionBusy, partition_lock

    try:
        with partition_lock("eval_samples", partition, context.run_id):
            yield
    except PartitionBusy as busy:
        record_run(wh, lineage(context, config.model_dump(), partition=partition),
                   started_at=started, rows_written=0, config=config.model_dump(),
                   status="failed", error=str(busy))
        raise dg.Failure(description=str(busy)) from busy


def _evaluate(context: dg.AssetExecutionContext, config: EvalSamplesConfig, bench: Any,
              spec: Any, cfg: EvalConfig, plan: Plan, wh: Any, llm: LLMResource,
              grader: GraderResource, sandbox: SandboxResource, started: Any) -> Any:
    """The planned evaluation through the recorded path (``eval.recorded``)."""
    max_tokens, n_jobs = request_bounds(cfg, plan)
    settings = llm.client_settings(max_tokens, requests=n_jobs,
                                   max_concurrency=config.max_concurrency)
    context.log.info(f"evaluating {spec.model_id} on {bench.name}: "
                     f"{len(plan.problems)} problems x k={cfg.k} "
                     f"({n_jobs} generations; request timeout {settings['timeout_s']:.0f}s, "
                     f"batch watchdog {settings['batch_timeout_s']:.0f}s)")
    needs_sandbox = bench.grader == "code" or cfg.mode.mode == "tool"
    if bench.grader != "code":
        grader.warm()  # the grading workers start while the answers are generated
    try:
        (done,) = evaluate_recorded(
            {spec.model_id: spec}, [Evaluation(spec.model_id, cfg, spec.model_id,
                                               checkpoint_id=spec.checkpoint_id or None,
                                               plan=plan)],
            bench=bench, problems=plan.problems, wh=wh, run_id=context.run_id,
            config=config.model_dump(), started_at=started, write_scores=False,
            make_client=partial(llm.client_for, max_tokens=max_tokens, requests=n_jobs,
                                progress=context.log.info,
                                max_concurrency=config.max_concurrency,
                                use_cache=config.use_cache),
            pool_factory=grader.pool, sandbox=sandbox.get_pool() if needs_sandbox else None,
            progress=context.log.info, heartbeat_s=llm.progress_every_s)
    except Exception as exc:
        context.log.error(f"eval_samples failed (its LLM calls and a failed `runs` row are "
                          f"recorded): {type(exc).__name__}: {exc}")
        raise
    return done


@dg.asset(
    partitions_def=eval_partitions,
    deps=[eval_samples],
    group_name="evaluate",
    kinds={"python", "duckdb"},
    description="avg@k, pass@k and maj@k with bootstrap 95% CIs per benchmark and model.",
    op_tags=IN_PROCESS,
)
def eval_scores(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    bench, model = partition_dims(context)
    wh = warehouse.get()
    part = table_partition(bench, model)
    with run_record(context, wh, {}, partition=part) as rec:
        samples, scored_run = scored_samples(wh, part, context.run_id)
        scores = score(samples, model_label=model, benchmark=bench)
        if not scores:
            raise dg.Failure(f"every one of the {len(samples)} eval_samples of {bench} / {model} "
                             "failed to generate, so nothing can be scored: check the endpoint "
                             "(the `gen_error` column says why) and re-materialize eval_samples")
        checkpoint = samples[0].get("checkpoint_id")
        rec.write("eval_scores", [dict(s, checkpoint_id=checkpoint) for s in scores])
    meta = {"model": model, "scored_run": scored_run,
            "n_problems": scores[0]["n_problems"], "failed_samples": int(scores[0]["failed"]),
            "scores": md_table(scores, ["metric", "k", "value", "ci_low", "ci_high", "failed"])}
    for s in scores:
        meta[f"{s['metric'].replace('@k', '')}@{s['k']}"] = float(s["value"])
    meta.update(_trained_from(wh, model))
    return dg.MaterializeResult(metadata=meta)


def scored_samples(wh: Any, partition: str, run_id: str) -> tuple[list[dict[str, Any]], str]:
    """(the samples ``eval_scores`` scores, the run that wrote them). A run that evaluated the
    partition itself (its `runs` row for ``eval_samples``) scores its own samples only, and
    fails when another run has replaced them; a run that only scores takes the samples of the
    one run the partition holds."""
    rows = wh.read("eval_samples", partition=partition).to_pylist()
    writers = sorted({r["run_id"] for r in rows})
    evaluated_here = bool(wh.sql(
        "SELECT 1 FROM runs WHERE asset = 'eval_samples' AND partition = $p AND run_id = $r "
        "AND status = 'success' LIMIT 1", {"p": partition, "r": run_id}).to_pylist())
    if evaluated_here:
        own = [r for r in rows if r["run_id"] == run_id]
        if not own:
            raise dg.Failure(f"the eval_samples this run wrote for {partition} were replaced by "
                             f"run(s) {writers} before they were scored; scores come only from "
                             "their own run's samples: materialize eval_scores for that run, or "
                             "this partition again")
        return own, run_id
    if not writers:
        raise dg.Failure(f"no eval_samples for {partition}: materialize eval_samples first")
    if len(writers) > 1:
        raise dg.Failure(f"the eval_samples of {partition} come from several runs {writers}; "
                         "re-materialize eval_samples for this partition")
    return rows, writers[0]


def _trained_from(wh: Any, model_id: str) -> dict[str, Any]:
    """What trained the evaluated model, as links on the evaluation's page (the graph has no
    edge from a checkpoint to the partitions that evaluate it): the training asset, the data
    and the asset that wrote it, the run. Empty for a model weft did not train."""
    return lineage_metadata(model_lineage(wh, model_id))


@dg.asset_check(asset=eval_samples, description="Every sample with a response has been graded "
                                                "(correct is set; failed generations stay NULL).",
                op_tags=IN_PROCESS)
def check_eval_samples_all_graded(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    stats = warehouse.get().sql(
        "SELECT count(*) AS samples, sum(CASE WHEN correct IS NULL AND gen_error IS NULL "
        "THEN 1 ELSE 0 END) AS ungraded FROM eval_samples").to_pylist()[0]
    ungraded = int(stats["ungraded"] or 0)
    return dg.AssetCheckResult(passed=stats["samples"] > 0 and ungraded == 0,
                               metadata={"samples": int(stats["samples"]), "ungraded": ungraded})


@dg.asset_check(asset=eval_samples, description="Each partition's samples come from one run that "
                                                "has a successful `runs` row and `llm_calls`.",
                op_tags=IN_PROCESS)
def check_eval_samples_runs_agree(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    wh = warehouse.get()
    data = wh.sql("SELECT DISTINCT partition, run_id FROM eval_samples").to_pylist()
    runs = wh.sql("SELECT DISTINCT asset, partition, run_id, status FROM runs "
                  "WHERE asset = 'eval_samples'").to_pylist()
    calls = wh.sql("SELECT DISTINCT asset, partition, run_id FROM llm_calls "
                   "WHERE asset = 'eval_samples'").to_pylist()
    problems = runs_disagreements("eval_samples", data, runs, calls)
    listing = "\n".join(f"- {p}" for p in problems[:50]) or "none"
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={"partitions": len({r["partition"] for r in data}), "disagreeing": len(problems),
                  "problems": dg.MetadataValue.md(listing)})


@dg.asset_check(asset=eval_scores, description="Every score and CI bound lies within [0, 1].",
                op_tags=IN_PROCESS)
def check_eval_scores_within_unit_interval(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    stats = warehouse.get().sql(
        "SELECT count(*) AS scores, sum(CASE WHEN value < 0 OR value > 1 OR ci_low < 0 OR ci_high > 1 "
        "OR ci_low > value + 1e-9 OR ci_high < value - 1e-9 OR value IS NULL THEN 1 ELSE 0 END) AS bad "
        "FROM eval_scores").to_pylist()[0]
    bad = int(stats["bad"] or 0)
    return dg.AssetCheckResult(passed=stats["scores"] > 0 and bad == 0,
                               metadata={"scores": int(stats["scores"]), "out_of_range": bad})
