"""The ``eval_samples`` settings that change how a run is scored and where answers come from:
``extraction`` (the math extraction rule, stored per row) and ``use_cache`` (False: every
request reaches the server). Against a real in-process fake server whose replies show their
working and never state a final answer (strict credits none, flexible all)."""

import re

import dagster as dg

from assets import evaluation, ingest
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sandbox_resource import SandboxResource
from tests.assets.eval_config import eval_samples_config
from warehouse import Warehouse

ALL = [*ingest.SOURCE_ASSETS, ingest.problems, evaluation.eval_samples, evaluation.eval_scores]


def test_extraction_rule_and_cache_switch_reach_the_run(weft_home, shared_data):
    from eval.models import ModelSpec, register_model
    from pipelines.llm.testing import FakeLLMServer

    instance = dg.DagsterInstance.ephemeral()
    with FakeLLMServer(models=("scripted",)) as server:
        res = {"llm": LLMResource(base_url=server.base_url, model="scripted", max_concurrency=2,
                                  timeout_s=60),
               "warehouse": WarehouseResource(), "grader": GraderResource(processes=1),
               "sandbox": SandboxResource()}
        assert dg.materialize(ALL, selection=["gsm8k_problems", "problems"], resources=res,
                              run_config={"ops": {"gsm8k_problems": {"config": {"limit": 3}}}},
                              instance=instance).success
        golds = {p["problem"]: p["answer"]
                 for p in Warehouse().read("problems", partition="gsm8k").to_pylist()}

        def responder(body, index):
            prompt = body["messages"][-1]["content"]
            gold = next(a for q, a in golds.items() if q in prompt)
            return f"Working it out step by step gives 1 + {int(gold) - 1} = {gold}"

        server.responder = responder
        register_model(ModelSpec(model_id="scripted", kind="endpoint", base_url=server.base_url,
                                 served_model="scripted"))
        instance.add_dynamic_partitions("models", ["scripted"])
        key = dg.MultiPartitionKey({"benchmark": "gsm8k", "model": "scripted"})

        def evaluate(**config):
            result = dg.materialize(ALL, selection=["eval_samples"], partition_key=key,
                                    resources=res, instance=instance,
                                    run_config={"ops": {"eval_samples": {"config": eval_samples_config(**config)}}})
            assert result.success
            meta = next(iter(result.get_asset_materialization_events())).materialization.metadata
            rows = Warehouse().read("eval_samples", partition=str(key)).to_pylist()
            return {k: v.value for k, v in meta.items()}, rows

        meta, rows = evaluate(limit=3, max_tokens=32, extraction="flexible")
        assert server.chat_count == 3
        assert [r["correct"] for r in rows] == [True] * 3
        assert {r["extraction_rule"] for r in rows} == {"flexible"}
        assert meta["extraction_rule"] == "flexible" and meta["cached_calls"] == 0
        # by hand: "Working it out step by step gives 1 + N = G" is 12 whitespace words
        assert meta["generated_tokens"] == 36 and meta["tokens_per_s"] > 0

        meta, rows = evaluate(limit=3, max_tokens=32)  # strict, from the cache
        assert server.chat_count == 3
        assert [r["correct"] for r in rows] == [False] * 3
        assert {r["extraction_rule"] for r in rows} == {"strict"}
        assert meta["cached_calls"] == 3
        assert meta["generated_tokens"] == 0 and meta["tokens_per_s"] == 0.0

        meta, rows = evaluate(limit=3, max_tokens=32, use_cache=False)
        assert server.chat_count == 6  # asked again though the answers are cached
        assert meta["cached_calls"] == 0 and meta["generated_tokens"] == 36

        scored = dg.materialize(ALL, selection=["eval_scores"], partition_key=key, resources=res,
                                instance=instance)
        assert scored.success
        scores = Warehouse().read("eval_scores", partition=str(key)).to_pylist()
        assert {s["extraction_rule"] for s in scores} == {"strict"}
        assert next(s["value"] for s in scores if s["metric"] == "avg@k") == 0.0
    assert all(re.fullmatch(r"\d+", g) for g in golds.values())  # integer golds, as assumed
