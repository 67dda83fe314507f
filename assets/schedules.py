"""Jobs, the nightly evaluation schedule, and the sensor that turns new models into partitions.

The evaluation suite is ``WEFT_EVAL_SUITE`` (comma-separated benchmark names; default
``gsm8k,math500``). Every night at 02:00 UTC ``nightly_eval`` evaluates every registered model
that has not been evaluated on a suite benchmark yet (models added since the last run), and
re-evaluates the baseline models (``WEFT_BASELINE_MODELS``, or models registered with
``baseline=True``; the embedded model is one). ``models_sensor`` watches the model registry
(``eval.models``; training registers each checkpoint there) with one rule: every registered
model without samples on a suite benchmark is evaluated there (the pairs of
``plan_evaluations``, baselines not re-run), whether its partition is new or was added by hand;
a registered model's missing partition is added. Its run keys are per benchmark and model, so it
requests each evaluation once (a failed one is retried by the nightly schedule, whose run keys
are per day, benchmark and model, so a retried tick never evaluates twice).

Both are off until switched on in the UI (Automation). Their runs evaluate the first
``WEFT_NIGHTLY_LIMIT`` problems (by problem id) of each suite benchmark, default 20 (``all``:
whole benchmarks: full GSM8K and MATH-500 for every checkpoint take hours on a CPU), with the
benchmark's default k. Turning the sensor on right after `make demo` queues one such run per
suite benchmark for every registered model without samples there (the demo scores its models
on GSM8K, so MATH-500); turning the schedule on adds, every night, those runs for models never
evaluated on a suite benchmark plus re-runs for the baselines (the embedded model is one).
"""

import os

import dagster as dg

from assets.evaluation import eval_samples, eval_scores
from assets.partition_defs import eval_partitions, eval_suite, model_partitions, table_partition

eval_job = dg.define_asset_job(
    "eval_job",
    selection=dg.AssetSelection.assets(eval_samples, eval_scores),
    partitions_def=eval_partitions,
    description="Generate, grade and score one (benchmark, model) partition.",
    # no executor of its own: every step here is light, so the code location's executor
    # (assets.execution.weft_executor, mode auto) runs the whole run in one process with one
    # warm grading pool, and run config may still pin `in_process` or `multiprocess`
)

ingest_job = dg.define_asset_job(
    "ingest_job",
    selection=dg.AssetSelection.groups("ingest"),
    description="Ingest every configured source and rebuild `problems`.",
)


ENV_NIGHTLY_LIMIT = "WEFT_NIGHTLY_LIMIT"
DEFAULT_NIGHTLY_LIMIT = 20


def nightly_limit() -> int | None:
    """Problems per benchmark for schedule- and sensor-triggered evaluations:
    ``WEFT_NIGHTLY_LIMIT`` (a positive number, or ``all`` for whole benchmarks), default 20 —
    the same deterministic slice as a manual run with the default config."""
    raw = os.environ.get(ENV_NIGHTLY_LIMIT, "").strip()
    if not raw:
        return DEFAULT_NIGHTLY_LIMIT
    if raw.lower() in ("all", "none", "0"):
        return None
    try:
        limit = int(raw)
    except ValueError:
        limit = -1
    if limit < 1:
        raise ValueError(f"{ENV_NIGHTLY_LIMIT}={raw!r} must be a positive number of problems per "
                         f"benchmark (default {DEFAULT_NIGHTLY_LIMIT}) or 'all' for whole "
                         "benchmarks")
    return limit


def nightly_run_config() -> dict:
    return {"ops": {"eval_samples": {"config": {"limit": nightly_limit()}}}}


def plan_evaluations(wh, suite: list[str], *, include_baselines: bool) -> list[tuple[str, str]]:
    """(benchmark, model) pairs to evaluate: never-evaluated pairs, plus baselines if asked."""
    from eval.models import list_models

    done = set(wh.partitions("eval_samples"))
    env_baselines = {m.strip() for m in os.environ.get("WEFT_BASELINE_MODELS", "").split(",") if m.strip()}
    pairs = []
    for spec in list_models(wh):
        baseline = spec.baseline or spec.model_id in env_baselines
        for bench in suite:
            if table_partition(bench, spec.model_id) not in done or (include_baselines and baseline):
                pairs.append((bench, spec.model_id))
    return pairs


def _request(bench: str, model: str, key_prefix: str) -> dg.RunRequest:
    return dg.RunRequest(
        run_key=f"{key_prefix}/{bench}/{model}",
        partition_key=dg.MultiPartitionKey({"benchmark": bench, "model": model}),
        run_config=nightly_run_config(),
        tags={"weft/eval": key_prefix},
    )


@dg.schedule(job=eval_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
             description="Nightly: evaluate new models and re-evaluate baselines on the suite.")
def nightly_eval(context: dg.ScheduleEvaluationContext):
    from warehouse import Warehouse

    wh = Warehouse()
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    pairs = plan_evaluations(wh, eval_suite(), include_baselines=True)
    models = sorted({m for _, m in pairs})
    known = set(context.instance.get_dynamic_partitions(model_partitions.name))
    missing = [m for m in models if m not in known]
    if missing:
        context.instance.add_dynamic_partitions(model_partitions.name, missing)
    if not pairs:
        return dg.SkipReason("every registered model is evaluated on the suite and no baseline is set")
    return [_request(bench, model, day) for bench, model in pairs]


@dg.sensor(job=eval_job, minimum_interval_seconds=60,
           description="A registered model (e.g. a checkpoint from training) without samples "
                       "on a suite benchmark: add its partition if missing and evaluate it "
                       "there.")
def models_sensor(context: dg.SensorEvaluationContext):
    from eval.models import list_models
    from warehouse import Warehouse

    wh = Warehouse()
    known = set(context.instance.get_dynamic_partitions(model_partitions.name))
    pairs = plan_evaluations(wh, eval_suite(), include_baselines=False)
    new = sorted({spec.model_id for spec in list_models(wh)} - known)
    if not pairs and not new:
        return dg.SkipReason("every registered model has a score on every suite benchmark")
    return dg.SensorResult(
        dynamic_partitions_requests=[model_partitions.build_add_request(new)] if new else [],
        run_requests=[_request(bench, model, "new-model") for bench, model in pairs],
    )
