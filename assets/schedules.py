"""Jobs and schedules: the nightly evaluation over a configurable benchmark list.

``WEFT_NIGHTLY_BENCHMARKS`` (comma-separated, default ``gsm8k,math500``) names the benchmark
partitions evaluated every night at 02:00; each becomes one run of ``eval_job`` with a run key
per day and benchmark, so a schedule tick that is retried never evaluates twice.
"""

from __future__ import annotations

import os

import dagster as dg

from assets.evaluation import benchmark_partitions, eval_samples, eval_scores
from eval.benchmarks import BENCHMARKS

DEFAULT_NIGHTLY = ("gsm8k", "math500")

eval_job = dg.define_asset_job(
    "eval_job",
    selection=dg.AssetSelection.assets(eval_samples, eval_scores),
    partitions_def=benchmark_partitions,
    description="Generate, grade and score one benchmark partition.",
)

ingest_job = dg.define_asset_job(
    "ingest_job",
    selection=dg.AssetSelection.groups("ingest"),
    description="Ingest every configured source and rebuild `problems`.",
)


def nightly_benchmarks() -> list[str]:
    raw = os.environ.get("WEFT_NIGHTLY_BENCHMARKS", "")
    names = [n.strip() for n in raw.split(",") if n.strip()] or list(DEFAULT_NIGHTLY)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise ValueError(
            f"WEFT_NIGHTLY_BENCHMARKS names unknown benchmarks {unknown}; known: {sorted(BENCHMARKS)}"
        )
    return names


@dg.schedule(job=eval_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
             description="Nightly evaluation of the configured benchmark list (02:00 UTC).")
def nightly_eval(context: dg.ScheduleEvaluationContext):
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    for bench in nightly_benchmarks():
        yield dg.RunRequest(run_key=f"{day}/{bench}", partition_key=bench, tags={"weft/nightly": day})
