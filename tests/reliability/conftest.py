"""Fixtures for the reliability tests: a misbehaving fake endpoint that answers every GSM8K
problem correctly, the ingested problems, and a helper that materializes the evaluation assets
against it with chosen resource and asset settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dagster as dg
import pytest

from pipelines.llm.testing import FakeLLMServer
from tests.assets.eval_config import eval_samples_config
from warehouse import Warehouse

MODEL = "scripted"


def all_assets() -> list:
    """Imported on use, so the pure tests here do not need the asset layer."""
    from assets import evaluation, ingest

    return [*ingest.SOURCE_ASSETS, ingest.problems, evaluation.eval_samples,
            evaluation.eval_scores, evaluation.check_eval_samples_all_graded,
            evaluation.check_eval_samples_runs_agree,
            evaluation.check_eval_scores_within_unit_interval]


def check_results(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    """{check name: AssetCheckEvaluation} of a materialization."""
    return {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data
            for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}


@dataclass
class EvalEnv:
    server: FakeLLMServer
    gold: dict[str, str]

    checks = staticmethod(check_results)

    def resources(self, **llm: Any) -> dict:
        from assets.resources import GraderResource, LLMResource, WarehouseResource
        from assets.sandbox_resource import SandboxResource

        llm.setdefault("max_concurrency", 4)
        return {"llm": LLMResource(base_url=self.server.base_url, model=MODEL, **llm),
                "warehouse": WarehouseResource(), "grader": GraderResource(processes=1),
                "sandbox": SandboxResource()}

    def evaluate(self, llm: dict | None = None, selection=("eval_samples", "eval_scores"),
                 instance: dg.DagsterInstance | None = None, **config: Any):
        config = {"limit": 6, "k": 2, "temperature": 0.7, "max_tokens": 64, "seed": 3, **config}
        instance = instance or dg.DagsterInstance.ephemeral()
        instance.add_dynamic_partitions("models", [MODEL])
        return dg.materialize(
            all_assets(), selection=list(selection),
            partition_key=dg.MultiPartitionKey({"benchmark": "gsm8k", "model": MODEL}),
            resources=self.resources(**(llm or {})),
            run_config={"ops": {"eval_samples": {"config": eval_samples_config(**config)}}},
            instance=instance, raise_on_error=False)


@pytest.fixture
def eval_env(weft_home, shared_data):
    """A fake endpoint answering every ingested GSM8K problem correctly (6 problems)."""
    from eval.models import ModelSpec, register_model

    with FakeLLMServer(models=(MODEL,)) as server:
        env = EvalEnv(server, {})
        result = dg.materialize(
            all_assets(), selection=["gsm8k_problems", "problems"], resources=env.resources(),
            run_config={"ops": {"gsm8k_problems": {"config": {"limit": 8}}}},
            instance=dg.DagsterInstance.ephemeral())
        assert result.success
        for p in Warehouse().read("problems", partition="gsm8k").to_pylist():
            env.gold[p["problem"]] = p["answer"]

        def responder(body: dict, index: int) -> str:
            prompt = body["messages"][-1]["content"]
            answer = next(a for q, a in env.gold.items() if q in prompt)
            return f"Working it out.\nSo the result is \\boxed{{{answer}}}."

        server.responder = responder
        register_model(ModelSpec(model_id=MODEL, kind="endpoint", base_url=server.base_url,
                                 served_model=MODEL))
        yield env
