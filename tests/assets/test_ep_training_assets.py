"""`ep_budget_table` (assets/ep_training.py): the orchestration with a recording trainer launcher
and a scripted evaluation (fast), its wiring in the code location, and a real tiny run on the
embedded model (slow: real TRL through Dagster Pipes, every model served by a local vLLM server
and evaluated in budgeted mode)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import dagster as dg
import pytest

import assets.ep_training as ep_assets
from assets.ep_training import ep_budget_table
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.training import TrainerLauncher
from training.callbacks import metrics_row
from training.config import load_config
from warehouse import Lineage, Warehouse


class RecordingTrainer(TrainerLauncher):
    """Resolves each arm's config like the real script, records it, writes made-up
    train_metrics rows and reports a checkpoint."""

    def launch(self, context, kind, recipe, overrides, extras=None):
        config = load_config(recipe, overrides, expect_kind=kind)
        ck = config.checkpoint_id
        rows = [metrics_row({"loss": 0.0, "reward": 0.5, "completions/mean_length": 20.0},
                            checkpoint_id=ck, kind="grpo", step=s, epoch=None, step_seconds=3.0,
                            steps=1) for s in range(1, config.max_steps + 1)]
        Warehouse().write("train_metrics", rows, lineage=Lineage(run_id=context.run_id),
                          partition=ck)
        context.log.info("launched " + json.dumps({"recipe": recipe, "overrides": overrides}))
        LAUNCHED.append(config)
        meta = {"checkpoint_id": dg.MetadataValue.text(ck),
                "checkpoint_path": dg.MetadataValue.path(f"/models/{ck}")}
        return SimpleNamespace(get_materialize_result=lambda: dg.MaterializeResult(metadata=meta))


LAUNCHED: list = []


def scripted_evaluation(context, spec, problems, config, budgets, wh, llm, grader):
    """Budgeted samples by model: EP-aware short and right, RLVR long and right, base wrong."""
    ck = spec.checkpoint_id or ""
    tokens = 4 if ck.startswith("budget_grpo") else 30 if ck else 10
    correct = bool(ck)
    return [{"model": spec.model_id, "benchmark": "ep_heldout", "problem_id": p["problem_id"],
             "sample_index": 0, "budget": b, "correct": correct, "tokens_used": tokens,
             "completion_tokens": tokens + 1, "generation_limit": 4 * max(budgets),
             "gen_error": None} for p in problems for b in budgets]


def _resources(trainer=None):
    return {"trainer": trainer or RecordingTrainer(), "warehouse": WarehouseResource(),
            "llm": LLMResource(), "grader": GraderResource(processes=1)}


def test_table_orchestration_rows_tests_and_metadata(weft_home, monkeypatch):
    LAUNCHED.clear()
    monkeypatch.setattr(ep_assets, "evaluate_model", scripted_evaluation)
    run_config = {"ops": {"ep_budget_table": {"config": {
        "max_steps": 2, "dataset_limit": 8, "heldout_n": 5, "budgets": [16, 48],
        "n_boot": 200}}}}
    result = dg.materialize([ep_budget_table], resources=_resources(), run_config=run_config)
    assert result.success
    # three arms, same seed, steps, data size and GRPO settings; caps 48, 48, 96
    assert [c.checkpoint_id.split("-")[0] for c in LAUNCHED] == [
        "budget_grpo.cpu", "rlvr_grpo.cpu", "rlvr_grpo.cpu"]
    assert [c.max_completion_length for c in LAUNCHED] == [48, 48, 96]
    assert {(c.seed, c.max_steps, c.dataset_limit, c.learning_rate) for c in LAUNCHED} == {
        (0, 2, 8, LAUNCHED[0].learning_rate)}
    train_spec = LAUNCHED[1].dataset
    assert train_spec.startswith("warehouse:ep_budget_train/") and LAUNCHED[2].dataset == train_spec
    wh = Warehouse()
    stored = wh.read("ep_budget_train", partition=train_spec.split("/", 1)[1]).to_pylist()
    assert len(stored) == 8 and {r["budget"] for r in stored} <= {16, 32, 48}

    rows = wh.sql("SELECT arm, budget, budgeted_success, accuracy, mean_tokens, train_cap, steps "
                  "FROM ep_budget_scores ORDER BY arm_order, budget").to_pylist()
    got = {(r["arm"], r["budget"]): r for r in rows}
    assert [r["arm"] for r in rows] == ["base", "base", "rlvr_x2", "rlvr_x2", "rlvr", "rlvr",
                                        "ep_aware", "ep_aware"]
    assert got[("ep_aware", 16)]["budgeted_success"] == 1.0
    assert got[("rlvr", 16)]["budgeted_success"] == 0.0  # 30 tokens > 16
    assert got[("rlvr", 48)]["budgeted_success"] == 1.0
    assert got[("base", 48)]["accuracy"] == 0.0 and got[("base", 48)]["steps"] is None
    assert got[("rlvr_x2", 16)]["train_cap"] == 96 and got[("ep_aware", 16)]["steps"] == 2
    tests = {(t["arm_b"], t["statistic"]): t for t in wh.sql(
        "SELECT * FROM ep_budget_tests").to_pylist()}
    bs = tests[("rlvr", "budgeted_success")]
    assert bs["budget"] == 16 and bs["diff"] == 1.0 and bs["alternative"] == "greater"
    assert bs["p_ttest"] == 0.0  # every difference is 1: zero variance, see eval.compare
    view = wh.sql("SELECT arm, bs_small, bs_large, tok_small FROM ep_budget_table").to_pylist()
    assert [v["arm"] for v in view] == ["base", "rlvr_x2", "rlvr", "ep_aware"]
    meta = result.asset_materializations_for_node("ep_budget_table")[0].metadata
    assert "| ep_aware |" in meta["table"].value and "BS@16" in meta["table"].value
    assert "data:image/png;base64," in meta["plot"].value
    assert meta["BS@16/ep_aware"].value == 1.0 and meta["heldout_problems"].value == 5


def test_a_recipe_without_budgets_fails_before_training(weft_home):
    LAUNCHED.clear()
    run_config = {"ops": {"ep_budget_table": {"config": {"ep_recipe": "rlvr_grpo.cpu"}}}}
    with pytest.raises(dg.Failure, match="has no budgets"):
        dg.materialize([ep_budget_table], resources=_resources(), run_config=run_config)
    assert LAUNCHED == [] and not Warehouse().partitions("train_metrics")


def test_rlvr_recipe_with_budgets_is_refused(weft_home):
    LAUNCHED.clear()
    run_config = {"ops": {"ep_budget_table": {"config": {"rlvr_recipe": "budget_grpo.cpu"}}}}
    with pytest.raises(dg.Failure):
        dg.materialize([ep_budget_table], resources=_resources(), run_config=run_config)
    assert LAUNCHED == []


def test_job_and_asset_are_in_the_code_location():
    from assets.definitions import defs

    job = defs.resolve_job_def("ep_budget_table_job")
    assert [n.name for n in job.graph.node_defs] == ["ep_budget_table"]
    assert dg.AssetKey("ep_budget_table") in {
        k for a in defs.resolve_asset_graph().assets_defs for k in a.keys}


@pytest.mark.slow
def test_tiny_real_table_on_the_embedded_model(weft_home, embedded_model_dir):
    # 2 steps per arm (EP-aware and one RLVR arm), 8 held-out problems, 2 budgets: minutes on a
    # busy CPU. The asset's default is 4 steps, two RLVR arms and 32 held-out problems.
    run_config = {"ops": {"ep_budget_table": {"config": {
        "max_steps": 2, "dataset_limit": 8, "rlvr_cap_factors": [1.0], "heldout_n": 8,
        "budgets": [16, 48], "max_concurrency": 4, "n_boot": 1000,
        "overrides": [f"model_name_or_path={embedded_model_dir}", 'save_strategy="no"',
                      "dataset=builtin:arith1"]}}}}
    result = dg.materialize([ep_budget_table], resources=_resources(TrainerLauncher()),
                            run_config=run_config)
    assert result.success
    wh = Warehouse()
    rows = wh.sql("SELECT * FROM ep_budget_scores ORDER BY arm_order, budget").to_pylist()
    assert [(r["arm"], r["budget"]) for r in rows] == [
        ("base", 16), ("base", 48), ("rlvr", 16), ("rlvr", 48), ("ep_aware", 16),
        ("ep_aware", 48)]
    for r in rows:
        assert r["n_problems"] == 8 and r["generation_limit"] == 192
        assert 0.0 <= r["budgeted_success"] <= r["accuracy"] <= 1.0
        assert r["mean_tokens"] > 0
    trained = [r for r in rows if r["arm"] != "base"]
    assert all(r["steps"] == 2 and r["train_wall_s"] > 0 for r in trained)
    # every model answered the same problems under the same budgets and decoding limit
    samples = wh.sql("SELECT model, count(*) AS n, count(DISTINCT problem_id) AS problems, "
                     "max(generation_limit) AS lim FROM eval_samples WHERE benchmark = "
                     "'ep_heldout' GROUP BY model").to_pylist()
    assert len(samples) == 3 and {(s["n"], s["problems"], s["lim"]) for s in samples} == {
        (16, 8, 192)}
    tests = wh.sql("SELECT arm_b, statistic, n, p_ttest FROM ep_budget_tests").to_pylist()
    assert {(t["arm_b"], t["statistic"]) for t in tests} == {
        ("base", "budgeted_success"), ("base", "mean_tokens"), ("rlvr", "budgeted_success"),
        ("rlvr", "mean_tokens")}
    meta = result.asset_materializations_for_node("ep_budget_table")[0].metadata
    print("\n" + meta["table"].value + "\n" + meta["paired_tests"].value)
