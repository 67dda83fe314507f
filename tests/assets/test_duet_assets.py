"""`duet_sweep` (assets/duet.py): the orchestration with a recording trainer launcher and a fake
evaluation (fast), and a real tiny sweep on the embedded model (slow: real TRL through Dagster
Pipes, each checkpoint served by the local vLLM server and graded on GSM8K problems)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import dagster as dg
import pytest

import assets.duet as duet_assets
from assets.duet import duet_sweep
from assets.resources import GraderResource, LLMResource, WarehouseResource
from assets.training import TrainerLauncher
from training.callbacks import metrics_row
from training.config import load_config
from warehouse import Lineage, Warehouse


class RecordingTrainer(TrainerLauncher):
    """Resolves each arm's config like the real script, writes made-up train_metrics rows for
    it (DUET arms log duet/* keys and take half the seconds) and reports a checkpoint."""

    def launch(self, context, kind, recipe, overrides, extras=None):
        config = load_config(recipe, overrides, expect_kind=kind)
        ck = config.checkpoint_id
        duet = config.method == "duet"
        seconds = 2.0 if duet else 4.0
        rows = []
        for step in range(1, config.max_steps + 1):
            logs = {"loss": 0.0, "tokens_generated": 100}
            if duet:
                logs.update({"duet/lambda": 0.1 * step, "duet/n_q_mean": 3.0,
                             "duet/tokens_generated": 100 * config.duet.budget_fraction,
                             "duet/abort_rate": 0.5})
            rows.append(metrics_row(logs, checkpoint_id=ck, kind="grpo", step=step, epoch=None,
                                    step_seconds=seconds, steps=1))
        Warehouse().write("train_metrics", rows, lineage=Lineage(run_id=context.run_id),
                          partition=ck)
        context.log.info(f"launched {json.dumps(list(overrides))}")
        meta = {"checkpoint_id": dg.MetadataValue.text(ck),
                "checkpoint_path": dg.MetadataValue.path(f"/models/{ck}")}
        return SimpleNamespace(get_materialize_result=lambda: dg.MaterializeResult(metadata=meta))


def _resources(trainer: TrainerLauncher | None = None):
    return {"trainer": trainer or RecordingTrainer(), "warehouse": WarehouseResource(),
            "llm": LLMResource(), "grader": GraderResource(processes=1)}


def test_sweep_orchestration_rows_metadata_and_plot(weft_home, monkeypatch):
    evaluated = []

    def fake_evaluate(context, outcome, config, wh, llm, grader):
        evaluated.append(outcome.checkpoint_id)
        outcome.accuracy, outcome.accuracy_ci = 0.25, (0.0, 0.5)
        outcome.benchmark, outcome.eval_problems = config.benchmark, config.eval_limit

    monkeypatch.setattr(duet_assets, "evaluate_arm", fake_evaluate)
    run_config = {"ops": {"duet_sweep": {"config": {
        "full_rollouts": 2, "slots": 4, "max_steps": 2, "dataset_limit": 8, "eval_limit": 3}}}}
    result = dg.materialize([duet_sweep], resources=_resources(), run_config=run_config)
    assert result.success
    rows = Warehouse().sql("SELECT * FROM duet_sweep ORDER BY budget_fraction DESC, method "
                           "DESC").to_pylist()
    assert [r["arm"] for r in rows] == ["grpo", "duet-b1", "duet-b0.5", "duet-b0.25"]
    assert len({r["checkpoint_id"] for r in rows}) == 4 and len(evaluated) == 4
    by_arm = {r["arm"]: r for r in rows}
    assert by_arm["grpo"]["train_wall_s"] == pytest.approx(8.0)
    for arm, b in (("duet-b1", 1.0), ("duet-b0.5", 0.5), ("duet-b0.25", 0.25)):
        assert by_arm[arm]["speedup"] == pytest.approx(2.0)  # 4 s vs 2 s per step
        assert by_arm[arm]["token_ratio"] == pytest.approx(200 / (200 * b))
        assert by_arm[arm]["mean_lambda"] == pytest.approx(0.15)
    meta = result.asset_materializations_for_node("duet_sweep")[0].metadata
    assert meta["arms"].value == 4
    assert "data:image/png;base64," in meta["plot"].value
    assert "| 2 | 0.2000 |" in meta["diagnostics/duet-b0.5"].value  # step 2, lambda 0.2
    assert meta["duet/duet-b0.25/lambda"].value == pytest.approx(0.2)
    assert meta["speedup/duet-b1"].value == pytest.approx(2.0)


def test_sweep_refuses_a_recipe_without_duet_before_training(weft_home):
    run_config = {"ops": {"duet_sweep": {"config": {"recipe": "rlvr_grpo.cpu"}}}}
    with pytest.raises(dg.Failure, match="no `duet` mapping"):
        dg.materialize([duet_sweep], resources=_resources(), run_config=run_config)
    assert not Warehouse().partitions("train_metrics")  # nothing was launched


def _gsm8k_problems(limit: int) -> None:
    from pipelines.ingest import load_source

    rows = [p.to_row() for p in load_source("gsm8k", prefer="local", limit=limit).problems]
    Warehouse().write("problems", rows, lineage=Lineage(run_id="test"), partition="gsm8k")


@pytest.mark.slow
def test_tiny_real_sweep_on_the_embedded_model(weft_home, embedded_model_dir, shared_data):
    _gsm8k_problems(2)
    # Two DUET budgets and one step per arm keep it to minutes on a busy CPU; the asset's
    # default sweep is GRPO vs DUET at 1, 1/2 and 1/4.
    run_config = {"ops": {"duet_sweep": {"config": {
        "budgets": [1.0, 0.25], "full_rollouts": 2, "slots": 4, "prompts_per_step": 2,
        "max_steps": 1, "dataset_limit": 8, "max_completion_length": 16, "eval_limit": 2,
        "eval_sampling": {"max_tokens": 32}, "max_concurrency": 2,
        "overrides": [f"model_name_or_path={embedded_model_dir}", 'save_strategy="no"']}}}}
    result = dg.materialize([duet_sweep], resources=_resources(TrainerLauncher()),
                            run_config=run_config)
    assert result.success
    wh = Warehouse()
    rows = {r["arm"]: r for r in wh.sql("SELECT * FROM duet_sweep").to_pylist()}
    assert set(rows) == {"grpo", "duet-b1", "duet-b0.25"}
    for r in rows.values():
        assert r["steps"] == 1 and r["train_wall_s"] > 0 and r["eval_problems"] == 2
        assert 0.0 <= r["accuracy"] <= 1.0
    # Budget fractions reach the controller: the logged budget shrinks with b.
    steps = wh.sql("SELECT checkpoint_id, avg(token_budget) AS budget FROM duet_steps "
                   "GROUP BY checkpoint_id").to_pylist()
    budgets = {s["checkpoint_id"]: s["budget"] for s in steps}
    assert budgets[rows["duet-b0.25"]["checkpoint_id"]] < budgets[rows["duet-b1"]["checkpoint_id"]]
    samples = wh.sql("SELECT DISTINCT checkpoint_id FROM eval_samples").to_pylist()
    assert {s["checkpoint_id"] for s in samples} == {r["checkpoint_id"] for r in rows.values()}
    meta = result.asset_materializations_for_node("duet_sweep")[0].metadata
    assert "diagnostics/duet-b0.25" in meta and "data:image/png" in meta["plot"].value
