"""What a researcher sees of an evaluation run: progress lines in the run log, a preview of the
samples in the asset's metadata, and advice naming the registry entry when a registered endpoint
is down. Against a scripted OpenAI-compatible HTTP server (exact expected answers)."""

import dagster as dg

from assets import evaluation, ingest
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sandbox_resource import SandboxResource
from tests.assets.eval_config import eval_samples_config
from warehouse import Warehouse

ALL = [*ingest.SOURCE_ASSETS, ingest.problems, evaluation.eval_samples, evaluation.eval_scores]


def _resources(base_url: str, model: str) -> dict:
    return {"llm": LLMResource(base_url=base_url, model=model, max_concurrency=2, timeout_s=60),
            "warehouse": WarehouseResource(), "grader": GraderResource(processes=1),
            "sandbox": SandboxResource()}


def _evaluate(res, model, instance, **config):
    from eval.models import ModelSpec, register_model

    register_model(ModelSpec(model_id=model, kind="endpoint", base_url=res["llm"].base_url,
                             served_model=res["llm"].model))
    instance.add_dynamic_partitions("models", [model])
    return dg.materialize(ALL, selection=["eval_samples"],
                          partition_key=dg.MultiPartitionKey({"benchmark": "gsm8k", "model": model}),
                          resources=res, run_config={"ops": {"eval_samples": {"config": eval_samples_config(**config)}}},
                          instance=instance, raise_on_error=False)


def _ingest(res, instance):
    cfg = {"ops": {"gsm8k_problems": {"config": {"limit": 4}}}}
    assert dg.materialize(ALL, selection=["gsm8k_problems", "problems"], resources=res,
                          run_config=cfg, instance=instance).success


def test_eval_run_logs_progress_and_previews_samples(weft_home, shared_data):
    from pipelines.llm.testing import FakeLLMServer

    instance = dg.DagsterInstance.ephemeral()
    with FakeLLMServer(models=("scripted",)) as server:
        res = _resources(server.base_url, "scripted")
        _ingest(res, instance)
        problems = sorted(Warehouse().read("problems", partition="gsm8k").to_pylist(),
                          key=lambda p: p["problem_id"])
        # the first problem is answered wrong (gold + "1"), the others right
        answers = {p["problem"]: p["answer"] + ("1" if i == 0 else "") for i, p in enumerate(problems)}

        def responder(body, index):
            prompt = body["messages"][-1]["content"]
            answer = next(a for q, a in answers.items() if q in prompt)
            return f"Reasoning that runs on for a while.\nSo the result is \\boxed{{{answer}}}."

        server.responder = responder
        result = _evaluate(res, "scripted", instance, limit=4, max_tokens=32)
    assert result.success
    logs = [e.message or "" for e in instance.all_logs(result.run_id)]
    progress = [m for m in logs if "generate gsm8k" in m and "4/4 done" in m]
    assert progress and "0 failed" in progress[-1] and "tokens/s" in progress[-1]
    assert "eta" in progress[-1]
    assert any(m.startswith("grading 4 gsm8k samples") and "done in" in m for m in logs)
    event = next(e for e in result.get_asset_materialization_events())
    preview = event.materialization.metadata["samples_preview"].value
    ids = {p["problem_id"] for p in problems}
    rows = [line for line in preview.splitlines() if line.split(" | ")[0][2:] in ids]
    wrong_id, gold = problems[0]["problem_id"], problems[0]["answer"]
    assert rows[0].startswith(f"| {wrong_id} |") and f"| {gold}1 | {gold} | no |" in rows[0]
    assert len(rows) == 4 and sum(r.endswith("| yes |") for r in rows) == 3
    assert "4 samples (1 wrong)" in preview
    text = " ".join(problems[0]["problem"].split())
    assert f"| {wrong_id} | {text[:40]}" in rows[0]  # the problem's own text, not the template


def test_unreachable_registered_endpoint_gets_registry_advice(weft_home, shared_data):
    from pipelines.llm.testing import FakeLLMServer

    instance = dg.DagsterInstance.ephemeral()
    with FakeLLMServer(models=("scripted",)) as server:
        _ingest(_resources(server.base_url, "scripted"), instance)
    res = _resources("http://127.0.0.1:9/v1", "gone")
    result = _evaluate(res, "gone-model", instance, limit=2)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    error = str(failure.event_specific_data.error)
    assert "model 'gone-model' is registered as the endpoint http://127.0.0.1:9/v1" in error
    assert "python -m eval.models remove gone-model" in error
    assert "WEFT_BASE_URL" not in error  # the registry, not the env, says where the model is
