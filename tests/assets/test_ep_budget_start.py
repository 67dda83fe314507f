"""`ep_budget_table` with budgets measured from the start (``budget_percentiles``): the measured
budgets become the EP-aware arm's training budgets (its stored prompts, which the RLVR arms read,
and its reward) and the evaluation's, and the lengths, percentiles and budgets are recorded in
the metadata and the score rows. A recording trainer, a scripted evaluation and a scripted
sampler stand in for TRL, the server and the start model."""

from __future__ import annotations

import json
from types import SimpleNamespace

import dagster as dg
import numpy as np
import pytest

import assets.ep_training as ep_assets
from assets.ep_training import ep_budget_table
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.training import TrainerLauncher
from training.config import load_config
from training.ep_budget import measure_budgets
from warehouse import Warehouse

LAUNCHED: list = []
EVALUATED: list = []
SAMPLED: list = []
# the start's answer lengths on the 8 training prompts
LENGTHS = [22, 31, 18, 40, 27, 35, 25, 29]


class RecordingTrainer(TrainerLauncher):
    """Resolves each arm's config like the real script and reports a checkpoint."""

    def launch(self, context, kind, recipe, overrides, extras=None):
        config = load_config(recipe, overrides, expect_kind=kind)
        LAUNCHED.append(config)
        meta = {"checkpoint_id": dg.MetadataValue.text(config.checkpoint_id),
                "checkpoint_path": dg.MetadataValue.path(f"/models/{config.checkpoint_id}")}
        return SimpleNamespace(get_materialize_result=lambda: dg.MaterializeResult(metadata=meta))


def scripted_evaluation(context, spec, problems, config, budgets, wh, llm, grader):
    EVALUATED.append(list(budgets))
    return [{"model": spec.model_id, "benchmark": "ep_heldout", "problem_id": p["problem_id"],
             "sample_index": 0, "budget": b, "correct": True, "tokens_used": 20,
             "completion_tokens": 21, "generation_limit": 4 * max(budgets), "gen_error": None}
            for p in problems for b in budgets]


def scripted_measure(ep_config, percentiles):
    def sample(model, prompts, **settings):
        SAMPLED.append((model, len(prompts), settings))
        return LENGTHS[: len(prompts)]

    return measure_budgets(ep_config, percentiles, sample=sample)


def _resources():
    return {"trainer": RecordingTrainer(), "warehouse": WarehouseResource(),
            "llm": LLMResource(), "grader": GraderResource(processes=1)}


def test_measured_budgets_train_the_ep_arm_and_are_recorded(weft_home, monkeypatch):
    LAUNCHED.clear(), EVALUATED.clear(), SAMPLED.clear()
    monkeypatch.setattr(ep_assets, "evaluate_model", scripted_evaluation)
    monkeypatch.setattr(ep_assets, "measure_budgets", scripted_measure)
    run_config = {"ops": {"ep_budget_table": {"config": {
        "max_steps": 2, "dataset_limit": 8, "heldout_n": 5, "n_boot": 200, "evaluate_base": False,
        "budget_percentiles": [25, 50, 75], "rlvr_cap_factors": [1.0],
        "overrides": ["temperature=0.9"]}}}}
    result = dg.materialize([ep_budget_table], resources=_resources(), run_config=run_config)
    assert result.success
    # independent: numpy's linear percentiles of the lengths, rounded up
    expected = [int(np.ceil(np.percentile(LENGTHS, q))) for q in (25, 50, 75)]
    assert expected == [25, 28, 32]
    ((model, n_prompts, settings),) = SAMPLED  # the start, once per training prompt
    assert model == "embedded" and n_prompts == 8
    assert settings["temperature"] == 0.9 and settings["max_new_tokens"] == 48
    ep, rlvr = LAUNCHED
    assert ep.budgets == expected and [r["name"] for r in ep.rewards] == ["budget"]
    assert rlvr.budgets is None
    stored = Warehouse().read("ep_budget_train",
                              partition=rlvr.dataset.split("/", 1)[1]).to_pylist()
    assert sorted({r["budget"] for r in stored}) == expected
    assert EVALUATED == [expected, expected]
    rows = Warehouse().sql("SELECT arm, budget, budget_source, budget_percentile, "
                           "budget_percentile_value, start_lengths FROM ep_budget_scores "
                           "ORDER BY arm_order, budget").to_pylist()
    assert [r["budget"] for r in rows] == expected * 2
    assert [r["budget_percentile"] for r in rows] == [25.0, 50.0, 75.0] * 2
    assert rows[0]["budget_percentile_value"] == pytest.approx(np.percentile(LENGTHS, 25))
    assert {r["budget_source"] for r in rows} == {"start_percentiles"}
    assert json.loads(rows[0]["start_lengths"]) == LENGTHS
    meta = result.asset_materializations_for_node("ep_budget_table")[0].metadata
    rule = meta["budget_rule"].value
    assert rule["budgets"] == expected and rule["start_lengths"] == LENGTHS
    assert rule["budget_percentiles"] == [25.0, 50.0, 75.0]
    assert f"BS@{expected[0]}/ep_aware" in meta


def test_recipe_budgets_are_recorded_as_such(weft_home, monkeypatch):
    LAUNCHED.clear()
    monkeypatch.setattr(ep_assets, "evaluate_model", scripted_evaluation)
    run_config = {"ops": {"ep_budget_table": {"config": {
        "max_steps": 2, "dataset_limit": 8, "heldout_n": 5, "n_boot": 200,
        "evaluate_base": False, "rlvr_cap_factors": [1.0]}}}}
    result = dg.materialize([ep_budget_table], resources=_resources(), run_config=run_config)
    assert result.success and LAUNCHED[0].budgets == [16, 32, 48]
    rows = Warehouse().sql("SELECT budget_source, budget_percentile FROM ep_budget_scores"
                           ).to_pylist()
    assert {(r["budget_source"], r["budget_percentile"]) for r in rows} == {("recipe", None)}


def test_budgets_and_percentiles_together_are_refused(weft_home):
    LAUNCHED.clear()
    run_config = {"ops": {"ep_budget_table": {"config": {
        "budgets": [16], "budget_percentiles": [25, 50, 75]}}}}
    with pytest.raises(dg.Failure, match="not both"):
        dg.materialize([ep_budget_table], resources=_resources(), run_config=run_config)
    assert LAUNCHED == []
