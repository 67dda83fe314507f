"""The Dagster code location root: every asset, check, job, schedule and resource of weft.

``WEFT_ENV`` picks the resource set:
- ``local`` (default): the embedded model on a local vLLM server (or ``WEFT_LLM_BASE_URL`` /
  ``WEFT_LLM_MODEL`` when set), warehouse under ``WEFT_HOME``.
- ``cluster``: an OpenAI-compatible endpoint from ``WEFT_LLM_BASE_URL``/``WEFT_LLM_MODEL``
  (e.g. a GPU vLLM server) with the key from ``WEFT_LLM_API_KEY``; secrets only via EnvVar.
"""

from __future__ import annotations

import os

import dagster as dg

from assets import (
    duet,
    engagement,
    ep_training,
    eval_reports,
    evaluation,
    ingest,
    mosaic,
    results,
    schedules,
    sxs,
    tandem,
    training,
)
from assets.execution import weft_executor
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sandbox_resource import SandboxResource


def resources_for(env: str) -> dict[str, dg.ConfigurableResource]:
    if env == "cluster":
        from pipelines.serving import serve_mode

        if serve_mode() == "slurm" and not os.environ.get("WEFT_LLM_BASE_URL"):
            # the embedded model (or local_model_path) served by a vLLM Slurm job
            llm = LLMResource(max_concurrency=64)
        else:
            llm = LLMResource(base_url=dg.EnvVar("WEFT_LLM_BASE_URL"),
                              model=dg.EnvVar("WEFT_LLM_MODEL"),
                              api_key=dg.EnvVar("WEFT_LLM_API_KEY"), max_concurrency=64)
    elif env == "local":
        if os.environ.get("WEFT_LLM_BASE_URL"):
            llm = LLMResource(base_url=dg.EnvVar("WEFT_LLM_BASE_URL"),
                              model=dg.EnvVar("WEFT_LLM_MODEL"))
        else:
            llm = LLMResource()
    else:
        raise ValueError(f"WEFT_ENV must be 'local' or 'cluster', got {env!r}")
    return {"llm": llm, "warehouse": WarehouseResource(), "grader": GraderResource(),
            "sandbox": SandboxResource(), "trainer": training.trainer_for(env)}


defs = dg.Definitions(
    assets=[*ingest.SOURCE_ASSETS, ingest.problems, evaluation.eval_samples, evaluation.eval_scores,
            eval_reports.eval_reports, sxs.traces, sxs.sxs_alignments, sxs.sxs_sft_dataset,
            *mosaic.MOSAIC_ASSETS, *training.TRAINING_ASSETS,
            *duet.DUET_ASSETS,
            *tandem.TANDEM_ASSETS,
            *engagement.EP_ASSETS,
            *ep_training.EP_TRAINING_ASSETS,
            *results.RESULT_ASSETS],
    asset_checks=[
        ingest.check_problems_answers_and_ids,
        evaluation.check_eval_samples_all_graded,
        evaluation.check_eval_samples_runs_agree,
        evaluation.check_eval_scores_within_unit_interval,
        sxs.check_sxs_alignments_consistent,
        sxs.check_sxs_sft_dataset_round_trip,
        eval_reports.check_eval_reports_pairwise_valid,
        *mosaic.MOSAIC_CHECKS,
    ],
    jobs=[schedules.eval_job, schedules.ingest_job, duet.duet_sweep_job,
          ep_training.ep_budget_table_job, *results.RESULT_JOBS],
    schedules=[schedules.nightly_eval],
    sensors=[schedules.models_sensor],
    resources=resources_for(os.environ.get("WEFT_ENV", "local")),
    # light runs (evaluation, scoring, checks) in one process, others one process per step
    executor=weft_executor,
)
