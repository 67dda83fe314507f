"""A small materialized weft graph for UI-facing tests: a few GSM8K problems evaluated by a
scripted OpenAI-compatible endpoint, the reports, and the SxS chain judged by the same endpoint.

Not a test module (no ``test_`` prefix): imported by the metadata and browser tests. Everything
is written under the current ``WEFT_HOME`` and into the given Dagster instance."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg

from assets import eval_reports, evaluation, ingest, sxs
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sandbox_resource import SandboxResource

MODEL = "scripted"
ASSETS = [*ingest.SOURCE_ASSETS, ingest.problems, evaluation.eval_samples, evaluation.eval_scores,
          eval_reports.eval_reports, sxs.traces, sxs.sxs_alignments, sxs.sxs_sft_dataset]


def responder(body: dict, index: int) -> str:
    """Judge prompts (they ask for a JSON `covered` count) get a level that varies with the
    prefix; evaluation prompts get a boxed answer that is right for some problems."""
    text = json.dumps(body["messages"])
    if "covered" in text:
        prefix = body["messages"][-1]["content"]
        return json.dumps({"covered": 1 if "=" in prefix else 0})
    return f"Let me think.\nSo the answer is \\boxed{{{len(text) % 3}}}."


def materialize_small_graph(instance: dg.DagsterInstance, base_url: str, tokenizer: Path, *,
                            sxs_chain: bool = True) -> dict[str, dg.AssetMaterialization]:
    """Materialize the small graph into ``instance`` (the SxS chain only if ``sxs_chain``);
    {asset name: its latest materialization}."""
    from eval.models import ModelSpec, register_model

    res = {"llm": LLMResource(base_url=base_url, model=MODEL, max_concurrency=4, timeout_s=120),
           "warehouse": WarehouseResource(), "grader": GraderResource(processes=1),
           "sandbox": SandboxResource()}
    out: dict[str, dg.AssetMaterialization] = {}

    def run(selection, **kwargs):
        result = dg.materialize(ASSETS, selection=selection, resources=res, instance=instance,
                                **kwargs)
        assert result.success
        for event in result.get_asset_materialization_events():
            mat = event.step_materialization_data.materialization
            out[mat.asset_key.to_user_string()] = mat

    run(["gsm8k_problems", "problems"],
        run_config={"ops": {"gsm8k_problems": {"config": {"limit": 4}}}})
    register_model(ModelSpec(model_id=MODEL, kind="endpoint", base_url=base_url,
                             served_model=MODEL))
    instance.add_dynamic_partitions("models", [MODEL])
    run(["eval_samples", "eval_scores"],
        partition_key=dg.MultiPartitionKey({"benchmark": "gsm8k", "model": MODEL}),
        run_config={"ops": {"eval_samples": {"config": {
            "limit": 4, "sampling": {"k": 2, "max_tokens": 32, "seed": 0}}}}})
    run(["eval_reports"])
    if not sxs_chain:
        return out
    run(["traces", "sxs_alignments", "sxs_sft_dataset"],
        run_config={"ops": {"traces": {"config": {"limit": 1}},
                            "sxs_alignments": {"config": {"limit": 2, "max_concurrency": 2}},
                            "sxs_sft_dataset": {"config": {"tokenizer_path": str(tokenizer)}}}})
    return out
