"""What trained a model, read back from the warehouse (the ``model_lineage`` view) and shown on
the pages of its checkpoint and of the evaluations that score it. The checkpoint rows are built
from real dataset loads (``training.data.load_dataset``, the describe() the training run
records); expected values are written out by hand from the dataset specs."""

import json

import dagster as dg

from assets import evaluation, ingest
from assets.common import lineage_metadata
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.sandbox_resource import SandboxResource
from warehouse import Lineage, Warehouse
from warehouse.lineage import model_lineage


def _checkpoint(wh, checkpoint_id, *, kind, recipe, spec, fallback="", parent=None,
                asset="sft_checkpoint", run_id="run-train-1"):
    from training.data import load_dataset

    data = load_dataset(spec, fallback=fallback, limit=8)
    row = {"checkpoint_id": checkpoint_id, "kind": kind, "status": "complete",
           "path": f"/ckpt/{checkpoint_id}", "base_model": "embedded", "recipe": recipe,
           "parent_checkpoint": parent,
           "dataset_fingerprints": json.dumps({"train": data.describe()}, sort_keys=True),
           "global_step": 4, "train_loss": 0.5, "train_runtime_s": 1.0, "config_json": "{}"}
    wh.write("checkpoints", [row], lineage=Lineage(run_id=run_id, asset=asset,
                                                   partition=checkpoint_id))
    return data


def test_model_lineage_view_follows_each_spec_to_its_table_and_writer(weft_home, shared_data):
    from eval.models import ModelSpec, register_model

    wh = Warehouse()
    # the problems table written by the `problems` asset, partition = source
    from pipelines.ingest import load_source

    rows = [p.to_row() for p in load_source("gsm8k", limit=6).problems]
    wh.write("problems", rows, lineage=Lineage(run_id="run-ingest", asset="problems",
                                               partition="gsm8k"))
    sft = _checkpoint(wh, "sft-a", kind="sft", recipe="demo_sft", spec="builtin:arith_sft")
    _checkpoint(wh, "grpo-b", kind="grpo", recipe="rlvr_grpo", spec="warehouse:problems/gsm8k",
                parent="sft-a", asset="grpo_checkpoint", run_id="run-train-2")
    # problems:<source> loads the ingest source itself: no warehouse table fed it
    _checkpoint(wh, "grpo-d", kind="grpo", recipe="rlvr_grpo", spec="problems:gsm8k",
                asset="grpo_checkpoint")
    # the SxS table is missing: the run falls back to the built-in set, and says so
    _checkpoint(wh, "sxs-c", kind="sft", recipe="sxs_sft.cpu",
                spec="warehouse:sxs_sft_dataset?variant=sxs", fallback="builtin:sxs_sft",
                run_id="run-train-3")
    register_model(ModelSpec(model_id="grpo-b", kind="endpoint", base_url="http://h:1/v1",
                             served_model="grpo-b", checkpoint_id="grpo-b"), wh)

    by_id = {r["model_id"]: r for r in wh.sql("SELECT * FROM model_lineage").to_pylist()}
    assert set(by_id) == {"sft-a", "grpo-b", "sxs-c", "grpo-d", "smollm2-135m-instruct"}
    assert by_id["smollm2-135m-instruct"]["checkpoint_id"] is None      # not trained by weft
    a, b, c = by_id["sft-a"], by_id["grpo-b"], by_id["sxs-c"]
    assert (a["dataset"], a["dataset_rows"], a["dataset_table"]) == ("builtin:arith_sft", 8, None)
    assert a["dataset_fingerprint"] == sft.fingerprint and a["model_kind"] is None
    assert (b["dataset"], b["dataset_rows"], b["dataset_table"], b["dataset_partition"]) == (
        "warehouse:problems/gsm8k", 6, "problems", "gsm8k")
    d = by_id["grpo-d"]
    assert (d["dataset"], d["dataset_table"], d["dataset_partition"]) == (
        "problems:gsm8k", None, None)
    assert (b["parent_checkpoint"], b["trained_by_asset"], b["training_run_id"]) == (
        "sft-a", "grpo_checkpoint", "run-train-2")
    assert b["model_kind"] == "endpoint"                                # the registered row
    assert (c["dataset"], c["dataset_fallback_from"]) == (
        "builtin:sxs_sft", "warehouse:sxs_sft_dataset?variant=sxs")

    assert model_lineage(wh, "smollm2-135m-instruct") is None
    assert model_lineage(wh, "no-such-model") is None
    assert model_lineage(wh, "grpo-b")["dataset_written_by"] == "problems"
    assert model_lineage(wh, "sft-a")["dataset_written_by"] is None

    meta = lineage_metadata(model_lineage(wh, "grpo-b"))
    assert meta["trained_by"] == dg.MetadataValue.asset(dg.AssetKey("grpo_checkpoint"))
    assert meta["trained_on_asset"] == dg.MetadataValue.asset(dg.AssetKey("problems"))
    assert meta["trained_on"] == "warehouse:problems/gsm8k (6 rows)"
    assert meta["started_from_checkpoint"] == "sft-a"
    assert meta["training_run"].value == "[run-trai](/runs/run-train-2)"
    fell_back = lineage_metadata(model_lineage(wh, "sxs-c"))
    assert "fallback from warehouse:sxs_sft_dataset?variant=sxs" in fell_back["trained_on"]
    assert "trained_on_asset" not in fell_back
    assert "no asset fed it" in lineage_metadata(model_lineage(wh, "sft-a"))["trained_on"]
    direct = lineage_metadata(model_lineage(wh, "grpo-d"))
    assert "from the ingest source itself" in direct["trained_on"]
    assert "trained_on_asset" not in direct
    assert lineage_metadata(None) == {}


def test_an_evaluation_page_names_what_trained_the_model(weft_home, shared_data):
    from eval.models import ModelSpec, register_model
    from pipelines.llm.testing import FakeLLMServer

    wh = Warehouse()
    _checkpoint(wh, "ckpt-x", kind="sft", recipe="demo_sft", spec="builtin:arith_sft",
                run_id="train-run-x")
    assets = [*ingest.SOURCE_ASSETS, ingest.problems, evaluation.eval_samples,
              evaluation.eval_scores]
    instance = dg.DagsterInstance.ephemeral()
    with FakeLLMServer(models=("ckpt-x",)) as server:
        server.responder = lambda body, index: "The answer is 3."
        res = {"llm": LLMResource(base_url=server.base_url, model="ckpt-x", timeout_s=60),
               "warehouse": WarehouseResource(), "grader": GraderResource(processes=1),
               "sandbox": SandboxResource()}
        assert dg.materialize(assets, selection=["gsm8k_problems", "problems"], resources=res,
                              run_config={"ops": {"gsm8k_problems": {"config": {"limit": 2}}}},
                              instance=instance).success
        register_model(ModelSpec(model_id="ckpt-x", kind="endpoint", base_url=server.base_url,
                                 served_model="ckpt-x", checkpoint_id="ckpt-x"), wh)
        instance.add_dynamic_partitions("models", ["ckpt-x", "plain"])
        key = dg.MultiPartitionKey({"benchmark": "gsm8k", "model": "ckpt-x"})
        result = dg.materialize(assets, selection=["eval_samples", "eval_scores"],
                                partition_key=key, resources=res, instance=instance,
                                run_config={"ops": {"eval_samples": {"config": {
                                    "limit": 2, "sampling": {"max_tokens": 16}}}}})
        assert result.success
        for node in ("eval_samples", "eval_scores"):
            (mat,) = result.asset_materializations_for_node(node)
            assert mat.metadata["trained_by"] == dg.MetadataValue.asset(
                dg.AssetKey("sft_checkpoint"))
            assert mat.metadata["trained_on"].value.startswith("builtin:arith_sft (8 rows")
            assert mat.metadata["training_run"].value == "[train-ru](/runs/train-run-x)"
        # a model weft did not train gets no training links
        register_model(ModelSpec(model_id="plain", kind="endpoint", base_url=server.base_url,
                                 served_model="ckpt-x"), wh)
        plain = dg.materialize(assets, selection=["eval_samples"], instance=instance,
                               partition_key=dg.MultiPartitionKey({"benchmark": "gsm8k",
                                                                   "model": "plain"}),
                               resources=res, run_config={"ops": {"eval_samples": {"config": {
                                   "limit": 2, "sampling": {"max_tokens": 16}}}}})
        (mat,) = plain.asset_materializations_for_node("eval_samples")
        assert "trained_by" not in mat.metadata and "trained_on" not in mat.metadata
