"""sft_checkpoint -> grpo_checkpoint materialized for real through Dagster Pipes (subprocesses on
CPU, temp WEFT_HOME), plus the failure paths that must not launch anything."""

import json
from pathlib import Path

import dagster as dg
import pytest
from safetensors.torch import load_file

from assets.resources import WarehouseResource
from assets.training import (
    FAMILIES,
    TRAINING_ASSETS,
    TrainerLauncher,
    data_lineage,
    dataset_asset,
    grpo_checkpoint,
    k8s_client,
    sft_checkpoint,
    start_from_overrides,
    trainer_for,
)
from warehouse import Warehouse


def _weights_differ(a: Path, b: Path) -> bool:
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return any(not wa[k].equal(wb[k]) for k in wa)


def _resources():
    return {"trainer": TrainerLauncher(), "warehouse": WarehouseResource()}


def test_definitions_load():
    defs = dg.Definitions(assets=TRAINING_ASSETS, resources=_resources())
    dg.Definitions.validate_loadable(defs)
    assert defs.resolve_asset_graph().get(dg.AssetKey("grpo_checkpoint")).parent_keys == {
        dg.AssetKey("sft_checkpoint"), dg.AssetKey("math_train_problems")}


def test_each_recipe_family_declares_the_data_it_trains_on():
    """The train group has incoming edges in the code location's graph: each checkpoint asset
    depends on the data its recipes read, and GRPO stages on the SFT checkpoint they start
    from (the recipe files are read independently here, not through the asset code)."""
    from assets.definitions import defs
    from training.config_recipes import read_recipe

    graph = defs.resolve_asset_graph()
    parents = {name: {k.to_user_string() for k in graph.get(dg.AssetKey(name)).parent_keys}
               for name in ("sft_checkpoint", "grpo_checkpoint", "tir_sft_checkpoint",
                            "process_grpo_checkpoint", "tandem_checkpoint", "chain_sft_checkpoint")}
    assert parents == {
        "sft_checkpoint": {"sxs_sft_dataset"},
        "grpo_checkpoint": {"math_train_problems", "sft_checkpoint"},
        "tir_sft_checkpoint": {"tir_sft_dataset"},
        "process_grpo_checkpoint": {"step_instances", "tir_sft_checkpoint"},
        "chain_sft_checkpoint": set(),
        "tandem_checkpoint": {"math_train_problems", "sft_checkpoint"},
    }
    from assets.tandem import TANDEM_FAMILY

    for family in (*FAMILIES, TANDEM_FAMILY):
        for recipe in family.recipes:  # the full (GPU) recipe of the family reads its data
            spec = read_recipe(recipe).values["dataset"]
            # warehouse:<table>[?...] reads <table>; problems:<source> loads the source the
            # ingest asset <source>_problems loads
            target = spec.split(":", 1)[1].split("?")[0] if ":" in spec else spec
            table = (target if spec.startswith("warehouse:") else
                     f"{target}_problems" if spec.startswith("problems:") else spec)
            if not family.data:  # a family on generated data reads no asset
                assert spec.startswith("builtin:"), (family.name, recipe, spec)
                continue
            assert table in family.data, (family.name, recipe, spec)


@pytest.mark.parametrize(("spec", "asset"), [
    ("warehouse:sxs_sft_dataset?variant=sxs", "sxs_sft_dataset"),
    ("warehouse:tir_sft_dataset?rendering=state_discarded", "tir_sft_dataset"),
    ("warehouse:step_instances", "step_instances"),
    ("problems:math_train", "math_train_problems"),
    ("problems:gsm8k_train?n=8", "gsm8k_train_problems"),
    ("warehouse:problems/gsm8k_train", "problems"),
    ("builtin:arith", None),
    ("builtin:sxs_sft", None),
    ("", None),
])
def test_dataset_asset(spec, asset):
    assert dataset_asset(spec) == asset


def test_data_lineage_flags_data_outside_the_graph():
    from types import SimpleNamespace

    sft = next(f for f in FAMILIES if f.name == "sft_checkpoint")
    inside = data_lineage(sft, SimpleNamespace(dataset="warehouse:sxs_sft_dataset?variant=sxs",
                                               dataset_fallback="builtin:sxs_sft"))
    assert inside["dataset_is_upstream"] is True
    assert inside["dataset_fallback"] == "builtin:sxs_sft"
    outside = data_lineage(sft, SimpleNamespace(dataset="warehouse:tir_sft_dataset",
                                                dataset_fallback=""))
    assert outside["dataset_is_upstream"] is False and "dataset_fallback" not in outside


@pytest.mark.slow  # about 65 s on 2 cores; the demo trains through the same Pipes path
def test_sft_then_grpo_through_pipes(weft_home, embedded_model_dir):
    instance = dg.DagsterInstance.ephemeral()
    sft_overrides = [f"model_name_or_path={embedded_model_dir}", "max_steps=2",
                     "per_device_train_batch_size=2", "max_length=96", "dataset=builtin:arith_sft",
                     "dataset_limit=8", 'save_strategy="no"']
    # Shorter completions score higher within a group (length penalty): completions of 24
    # tokens from the tiny model vary in length, so groups carry a signal.
    grpo_overrides = ["max_steps=2", "dataset_limit=8", "max_completion_length=24",
                      'save_strategy="no"',
                      "rewards=[outcome, {name: length_penalty, weight: 1.0}]"]
    run_config = {"ops": {
        "sft_checkpoint": {"config": {"recipe": "sxs_sft.cpu", "overrides": sft_overrides}},
        "grpo_checkpoint": {"config": {"recipe": "rlvr_grpo.cpu", "overrides": grpo_overrides}},
    }}
    result = dg.materialize([sft_checkpoint, grpo_checkpoint], resources=_resources(),
                            run_config=run_config, instance=instance)
    assert result.success
    (sft_mat,) = result.asset_materializations_for_node("sft_checkpoint")
    (grpo_mat,) = result.asset_materializations_for_node("grpo_checkpoint")
    sft_path = Path(sft_mat.metadata["checkpoint_path"].value)
    grpo_path = Path(grpo_mat.metadata["checkpoint_path"].value)
    sft_id = sft_mat.metadata["checkpoint_id"].value
    grpo_id = grpo_mat.metadata["checkpoint_id"].value
    # Pipes carried the script's report: paths under the temp WEFT_HOME, steps, metric table
    assert sft_path.is_relative_to(weft_home) and (sft_path / "model.safetensors").is_file()
    assert grpo_path.is_relative_to(weft_home) and (grpo_path / "model.safetensors").is_file()
    assert sft_mat.metadata["global_step"].value == 2 and grpo_mat.metadata["global_step"].value == 2
    assert "| step |" in grpo_mat.metadata["train_metrics"].value
    assert grpo_mat.metadata["parent_checkpoint"].value == sft_id
    assert grpo_mat.metadata["started_from"].value == str(sft_path)
    assert grpo_mat.metadata["launcher"].value == "subprocess"
    # lineage: the data each run really read, and links to the checkpoint's evaluation partitions
    assert sft_mat.metadata["dataset"].value == "builtin:arith_sft"
    assert sft_mat.metadata["dataset_is_upstream"].value is False  # not sxs_sft_dataset
    assert grpo_mat.metadata["upstream_data"].value == ["math_train_problems"]
    links = grpo_mat.metadata["evaluation_partitions"].value
    assert f"gsm8k|{grpo_id}" in links and "/assets/eval_samples?view=partitions" in links
    # every link opens a partition that exists (not another model's page)
    assert {sft_id, grpo_id} <= set(instance.get_dynamic_partitions("models"))
    # progress lines streamed from the script into the run's log
    messages = [e.message for e in instance.all_logs(result.run_id)]
    assert any(f"{grpo_id} step 2/2" in m for m in messages)
    # parameters changed at both stages
    assert _weights_differ(sft_path, embedded_model_dir)
    assert _weights_differ(grpo_path, sft_path)
    # the scripts wrote the warehouse rows, stamped with this Dagster run
    wh = Warehouse()
    metrics = wh.sql("SELECT checkpoint_id, kind, step, loss, reward_std, run_id, asset FROM "
                     "train_metrics ORDER BY kind, step").to_pylist()
    assert [(m["kind"], m["step"]) for m in metrics] == [("grpo", 1), ("grpo", 2), ("sft", 1), ("sft", 2)]
    assert {m["run_id"] for m in metrics} == {result.run_id}
    assert {m["asset"] for m in metrics} == {"sft_checkpoint", "grpo_checkpoint"}
    assert any(m["reward_std"] and m["reward_std"] > 0 for m in metrics if m["kind"] == "grpo")
    checkpoints = {c["checkpoint_id"]: c for c in wh.read("checkpoints").to_pylist()}
    assert checkpoints[sft_id]["status"] == checkpoints[grpo_id]["status"] == "complete"
    assert checkpoints[grpo_id]["parent_checkpoint"] == sft_id
    assert checkpoints[grpo_id]["base_model"] == str(sft_path)
    assert json.loads(checkpoints[grpo_id]["dataset_fingerprints"])["train"]["spec"] == "builtin:arith"
    runs = wh.read("runs").to_pylist()
    assert {r["asset"] for r in runs} == {"sft_checkpoint", "grpo_checkpoint"}


def test_bad_recipe_fails_in_the_asset_naming_the_field(weft_home):
    run_config = {"ops": {"sft_checkpoint": {"config": {
        "recipe": "sxs_sft.cpu", "overrides": ["learning_rat=1e-5"]}}}}
    result = dg.materialize([sft_checkpoint], resources=_resources(), run_config=run_config,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not result.success
    failure = result.failure_data_for_node("sft_checkpoint")
    assert "unknown field `learning_rat`" in str(failure.error.message) + str(failure.user_failure_data)
    assert not (weft_home / "checkpoints").exists()  # nothing was launched


def test_start_from_points_every_arm_at_the_latest_checkpoint(weft_home):
    with dg.DagsterInstance.ephemeral() as instance:
        context = dg.build_asset_context(instance=instance)
        assert start_from_overrides(context, "", ["a=1"]) == ["a=1"]
        with pytest.raises(dg.Failure, match="materialize sft_checkpoint first"):
            start_from_overrides(context, "sft_checkpoint", ["a=1"])
        for path in ("/ck/old", "/ck/new"):
            instance.report_runless_asset_event(dg.AssetMaterialization(
                "sft_checkpoint", metadata={"checkpoint_path": path, "checkpoint_id": "x"}))
        assert start_from_overrides(context, "sft_checkpoint", ["a=1"]) == [
            "a=1", "model_name_or_path=/ck/new"]


def test_grpo_needs_an_sft_materialization(weft_home):
    result = dg.materialize([grpo_checkpoint], resources=_resources(),
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not result.success
    failure = result.failure_data_for_node("grpo_checkpoint")
    assert "materialize sft_checkpoint first" in str(failure.user_failure_data.description)


def test_cluster_launcher_builds_pods_and_needs_dagster_k8s(monkeypatch):
    launcher = TrainerLauncher(mode="k8s", image="registry/weft:1", gpus=2,
                               weft_home_claim="weft-pvc")
    command = launcher.command("grpo", "sxs_grpo", ["max_steps=5"])
    assert command[:3] == ["python", "-m", "accelerate.commands.launch"]
    assert command[-3:] == ["--recipe", "sxs_grpo", "max_steps=5"]
    settings = launcher.pod_settings()
    assert settings.gpus == 2 and settings.weft_home_claim == "weft-pvc"
    try:
        import dagster_k8s  # noqa: F401
    except ImportError:
        with pytest.raises(dg.Failure, match="pip install dagster-k8s"):
            k8s_client()
    monkeypatch.setenv("WEFT_TRAINER_IMAGE", "img:2")
    monkeypatch.setenv("WEFT_TRAINER_GPUS", "8")
    cluster = trainer_for("cluster")
    assert cluster.mode == "k8s" and cluster.gpus == 8
    assert trainer_for("local").mode == "subprocess"


def test_evaluation_links_state_no_evaluation_state(weft_home):
    """The links are written once, when the checkpoint is materialized: a state such as
    "missing" would be stale as soon as the partition is evaluated."""
    from assets.partition_defs import eval_suite
    from assets.training import evaluation_links

    text = evaluation_links("ck-1")["evaluation_partitions"].value
    assert "missing" not in text.lower()
    assert text.count("](/assets/eval_samples?view=partitions") == len(eval_suite())
