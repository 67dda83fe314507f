"""A code location for the execution tests (not a test module): weft's ingest and evaluation
assets, their checks and ``eval_job`` under the code location's own default executor
(``assets.execution.weft_executor``), with an ``llm`` resource for the endpoint in
``EVAL_LOCATION_BASE_URL`` (a fake server the test starts) serving ``scripted``."""

import os

import dagster as dg

from assets import evaluation, ingest, schedules
from assets.execution import weft_executor
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sandbox_resource import SandboxResource

defs = dg.Definitions(
    assets=[*ingest.SOURCE_ASSETS, ingest.problems, evaluation.eval_samples,
            evaluation.eval_scores],
    asset_checks=[evaluation.check_eval_samples_all_graded,
                  evaluation.check_eval_samples_runs_agree,
                  evaluation.check_eval_scores_within_unit_interval],
    jobs=[schedules.eval_job],
    resources={"llm": LLMResource(base_url=os.environ.get("EVAL_LOCATION_BASE_URL", "http://127.0.0.1:9/v1"),
                                  model="scripted", max_concurrency=4, timeout_s=60),
               "warehouse": WarehouseResource(), "grader": GraderResource(processes=1),
               "sandbox": SandboxResource()},
    executor=weft_executor,
)
