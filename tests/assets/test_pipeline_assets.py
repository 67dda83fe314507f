"""Materialize the ingest → evaluate chain: against a scripted fake endpoint (fast, exact
expected scores) and against the real local vLLM server with the embedded model."""

import json
import time

import dagster as dg
import pytest

from assets import evaluation, ingest
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sandbox_resource import SandboxResource
from tests.assets.eval_config import eval_samples_config
from warehouse import Warehouse

ALL = [*ingest.SOURCE_ASSETS, ingest.problems, evaluation.eval_samples, evaluation.eval_scores,
       ingest.check_problems_answers_and_ids, evaluation.check_eval_samples_all_graded,
       evaluation.check_eval_scores_within_unit_interval]


def _resources(base_url: str, model: str) -> dict:
    return {"llm": LLMResource(base_url=base_url, model=model, max_concurrency=4, timeout_s=120),
            "warehouse": WarehouseResource(), "grader": GraderResource(processes=2),
            "sandbox": SandboxResource()}


def _ingest(resources, sources, limit):
    cfg = {"ops": {f"{s}_problems": {"config": {"limit": limit}} for s in sources}}
    return dg.materialize(ALL, selection=[f"{s}_problems" for s in sources] + ["problems"],
                          resources=resources, run_config=cfg,
                          instance=dg.DagsterInstance.ephemeral())


def _evaluate(resources, bench, model, **config):
    from eval.models import ModelSpec, register_model

    register_model(ModelSpec(model_id=model, kind="endpoint", base_url=resources["llm"].base_url,
                             served_model=resources["llm"].model))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("models", [model])
    return dg.materialize(ALL, selection=["eval_samples", "eval_scores"],
                          partition_key=dg.MultiPartitionKey({"benchmark": bench, "model": model}),
                          resources=resources, run_config={"ops": {"eval_samples": {"config": eval_samples_config(**config)}}},
                          instance=instance, raise_on_error=False)


def _check_results(result):
    return {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data.passed
            for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}


def test_chain_with_scripted_endpoint_gives_exact_scores(weft_home, shared_data):
    from pipelines.llm.testing import FakeLLMServer

    with FakeLLMServer(models=("scripted",)) as server:
        res = _resources(server.base_url, "scripted")
        result = _ingest(res, ["gsm8k", "reasoning_gym"], limit=8)
        assert result.success
        assert _check_results(result)["check_problems_answers_and_ids"] is True
        wh = Warehouse()
        problems = wh.read("problems", partition="gsm8k").to_pylist()
        assert len(problems) == 8
        # answer problems with an even position in the sorted id order correctly
        order = sorted(problems, key=lambda p: p["problem_id"])
        gold = {p["problem"]: (p["answer"] if i % 2 == 0 else p["answer"] + "1") for i, p in enumerate(order)}

        def responder(body, index):
            prompt = body["messages"][-1]["content"]
            answer = next(a for q, a in gold.items() if q in prompt)
            return f"Some reasoning.\nSo the result is \\boxed{{{answer}}}."

        server.responder = responder
        result = _evaluate(res, "gsm8k", "scripted", limit=6, k=2, temperature=0.7, max_tokens=64, seed=3)
        assert result.success
        checks = _check_results(result)
        assert checks == {"check_eval_samples_all_graded": True, "check_eval_scores_within_unit_interval": True,
                          "check_eval_samples_failure_share": True}
        samples = wh.sql("SELECT * FROM eval_samples").to_pylist()
        assert len(samples) == 12 and all(s["correct"] is not None for s in samples)
        # one spelling: the rows, their run records and calls hold Dagster's partition key
        key = dg.MultiPartitionKey({"benchmark": "gsm8k", "model": "scripted"})
        assert result.dagster_run.tags["dagster/partition"] == str(key) == "gsm8k|scripted"
        for table in ("eval_samples", "eval_scores", "llm_calls"):
            assert wh.sql(f"SELECT DISTINCT partition FROM {table}").column(
                "partition").to_pylist() == [str(key)], table
        joined = wh.sql(
            "SELECT s.metric, s.run_id, r.run_id AS runs_run_id, r.status FROM eval_scores s "
            "JOIN runs r USING (partition) WHERE r.asset = 'eval_scores'").to_pylist()
        assert len(joined) == wh.sql("SELECT count(*) AS n FROM eval_scores").to_pylist()[0]["n"]
        assert {(j["run_id"], j["runs_run_id"], j["status"]) for j in joined} == {
            (result.run_id, result.run_id, "success")}
        assert wh.sql("SELECT count(*) AS n FROM runs WHERE partition = $p AND asset IN "
                      "('eval_samples', 'eval_scores')", {"p": result.dagster_run.tags[
                          "dagster/partition"]}).to_pylist() == [{"n": 2}]
        scores = {(r["metric"], r["k"]): r for r in wh.sql("SELECT * FROM eval_scores").to_pylist()}
        assert scores[("avg@k", 2)]["value"] == pytest.approx(0.5)
        assert scores[("pass@k", 1)]["value"] == pytest.approx(0.5)
        assert scores[("avg@k", 2)]["ci_low"] <= 0.5 <= scores[("avg@k", 2)]["ci_high"]
        calls = wh.sql("SELECT count(*) AS n, sum(CASE WHEN cached THEN 1 ELSE 0 END) AS c FROM llm_calls").to_pylist()[0]
        assert calls["n"] == 12
        # re-materializing replays from the cache and replaces rows instead of adding them
        requests_before = server.chat_count
        assert _evaluate(res, "gsm8k", "scripted", limit=6, k=2, temperature=0.7, max_tokens=64, seed=3).success
        assert server.chat_count == requests_before
        assert wh.sql("SELECT count(*) AS n FROM eval_samples").to_pylist()[0]["n"] == 12
        assert wh.sql("SELECT count(*) AS n FROM llm_calls WHERE cached").to_pylist()[0]["n"] == 12
        runs = wh.sql("SELECT DISTINCT asset FROM runs ORDER BY 1").column("asset").to_pylist()
        assert {"eval_samples", "eval_scores", "gsm8k_problems", "problems"} <= set(runs)


def test_bad_input_rows_go_to_rejects_and_the_run_succeeds(weft_home, tmp_path, monkeypatch):
    data = tmp_path / "data"
    (data / "benchmarks").mkdir(parents=True)
    good = {"question": "What is 2 + 2?", "answer": "2 + 2 = 4\n#### 4"}
    lines = [json.dumps(good).encode(), b"{not json", json.dumps({"question": "No answer here?"}).encode(),
             b'{"question": "caf\xe9 \xff", "answer": "#### 1"}',
             json.dumps({"question": "What is 3 + 3?", "answer": "#### 6"}).encode()]
    (data / "benchmarks" / "gsm8k_test.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    monkeypatch.setenv("WEFT_DATA_DIR", str(data))
    result = _ingest(_resources("http://127.0.0.1:9/v1", "none"), ["gsm8k"], limit=None)
    assert result.success
    wh = Warehouse()
    assert wh.sql("SELECT count(*) AS n FROM problems").to_pylist()[0]["n"] == 2
    rejects = wh.sql("SELECT line, reason FROM rejects ORDER BY line").to_pylist()
    assert len(rejects) == 3
    assert all(r["reason"] for r in rejects)
    text = " ".join(r["reason"].lower() for r in rejects)
    assert "json" in text and "answer" in text and "utf" in text


def test_endpoint_down_fails_fast_with_the_url(weft_home, shared_data):
    res = _resources("http://127.0.0.1:9/v1", "nothing-here")
    assert _ingest(res, ["gsm8k"], limit=3).success
    started = time.monotonic()
    result = _evaluate(res, "gsm8k", "nothing-here", limit=3)
    assert not result.success
    assert time.monotonic() - started < 30
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "127.0.0.1:9" in str(failure.event_specific_data.error)


@pytest.mark.server
def test_chain_against_the_real_local_server(weft_home, shared_data, local_server):
    res = _resources(local_server.base_url, local_server.served_name)
    assert _ingest(res, ["gsm8k", "math500"], limit=5).success
    result = _evaluate(res, "math500", "real-local", limit=3, k=2, temperature=0.6, max_tokens=96, seed=0)
    assert result.success
    assert all(_check_results(result).values())
    wh = Warehouse()
    samples = wh.sql("SELECT * FROM eval_samples").to_pylist()
    assert len(samples) == 6
    assert all(s["output"] and s["completion_tokens"] > 0 and s["gen_error"] is None for s in samples)
    assert all(s["correct"] is not None and s["extraction_method"] for s in samples)
    scores = wh.sql("SELECT metric, k, value FROM latest_scores WHERE benchmark = 'math500'").to_pylist()
    assert {(s["metric"], s["k"]) for s in scores} >= {("avg@k", 2), ("pass@k", 1), ("pass@k", 2), ("maj@k", 2)}
    tokens = wh.sql("SELECT sum(completion_tokens) AS t FROM llm_calls").to_pylist()[0]["t"]
    assert tokens == sum(s["completion_tokens"] for s in samples)


def test_reingesting_identical_data_keeps_downstream_fresh(weft_home, shared_data):
    """Ingest assets report a content hash as their Dagster data version: re-ingesting the same
    rows leaves `problems` FRESH; different rows make it STALE."""
    from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
    from dagster._core.loader import LoadingContextForTest

    resources = _resources("http://127.0.0.1:9/v1", "none")
    defs = dg.Definitions(assets=ALL, resources=resources)
    graph = defs.resolve_asset_graph()

    def run(selection, limit):
        cfg = {"ops": {"gsm8k_problems": {"config": {"limit": limit}}}}
        assert dg.materialize(ALL, selection=selection, resources=resources, run_config=cfg,
                              instance=instance).success
        event = instance.get_latest_materialization_event(dg.AssetKey("gsm8k_problems"))
        return event.asset_materialization.tags["dagster/data_version"]

    def status():
        resolver = CachingStaleStatusResolver(instance, graph, LoadingContextForTest(instance))
        return resolver.get_status(dg.AssetKey("problems"))

    with dg.instance_for_test() as instance:
        first = run(["gsm8k_problems", "problems"], 3)
        assert status() == StaleStatus.FRESH
        assert run(["gsm8k_problems"], 3) == first  # byte-identical re-ingest
        assert status() == StaleStatus.FRESH
        assert run(["gsm8k_problems"], 4) != first  # one more problem: new data
        assert status() == StaleStatus.STALE


def test_a_checkpoint_is_stale_only_when_the_source_it_trains_on_changes(weft_home, shared_data):
    """grpo_checkpoint's recipes read problems:math_train, so its data edge is the ingest asset
    math_train_problems (the code location's real graph), not the merged `problems`: ingesting
    another benchmark (a new `problems` data version) leaves the checkpoint FRESH; new
    math_train rows make it STALE. The checkpoint here keeps the real asset's key and upstream
    edges and skips the training (staleness is decided by the edges and data versions alone)."""
    from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
    from dagster._core.loader import LoadingContextForTest

    from assets.definitions import defs as location

    parents = location.resolve_asset_graph().get(dg.AssetKey("grpo_checkpoint")).parent_keys
    assert dg.AssetKey("problems") not in parents

    @dg.asset(name="grpo_checkpoint", deps=[k for k in parents if k.path != ["sft_checkpoint"]])
    def checkpoint():
        return dg.MaterializeResult(metadata={"checkpoint_id": "ck"})

    resources = _resources("http://127.0.0.1:9/v1", "none")
    assets = [*ALL, checkpoint]
    graph = dg.Definitions(assets=assets, resources=resources).resolve_asset_graph()

    def run(selection, limits):
        cfg = {"ops": {f"{s}_problems": {"config": {"limit": n}} for s, n in limits.items()}}
        assert dg.materialize(assets, selection=selection, resources=resources, run_config=cfg,
                              instance=instance).success

    def version(key):
        event = instance.get_latest_materialization_event(dg.AssetKey(key))
        return event.asset_materialization.tags["dagster/data_version"]

    def status(key):
        resolver = CachingStaleStatusResolver(instance, graph, LoadingContextForTest(instance))
        return resolver.get_status(dg.AssetKey(key))

    with dg.instance_for_test() as instance:
        run(["math_train_problems", "gsm8k_problems", "problems", "grpo_checkpoint"],
            {"math_train": 3, "gsm8k": 3})
        assert status("grpo_checkpoint") == StaleStatus.FRESH
        merged = version("problems")
        run(["aime24_problems", "problems"], {"aime24": 3})  # a benchmark added
        assert version("problems") != merged  # what made the checkpoint Unsynced before
        assert status("grpo_checkpoint") == StaleStatus.FRESH
        run(["math_train_problems"], {"math_train": 3})  # re-ingested, the same rows
        assert status("grpo_checkpoint") == StaleStatus.FRESH
        run(["math_train_problems"], {"math_train": 4})  # one more training problem
        assert status("grpo_checkpoint") == StaleStatus.STALE
