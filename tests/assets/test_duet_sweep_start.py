"""`duet_sweep`'s start and DUET settings (assets/duet.py, training/duet/sweep.py): every arm
starts from the latest `start_from` materialization and records it as its parent (so the
held-out problems leave out what the start trained on), and the sweep's own DUET settings reach
every DUET arm only."""

from __future__ import annotations

import dagster as dg
import pytest

import assets.duet as duet_assets
from assets.duet import duet_sweep
from training.duet.sweep import SweepPlan, plan_arms


def test_sweep_duet_settings_reach_every_duet_arm_and_only_those():
    arms = plan_arms(SweepPlan(budgets=(1.0, 0.5), full_rollouts=4, duet={"grace": 16}),
                     {"grace": 8, "eps_abort": 0.2})
    by_label = {a.label: a.overrides for a in arms}
    assert "duet" not in by_label["grpo"]
    for label, b in (("duet-b1", 1.0), ("duet-b0.5", 0.5)):
        assert by_label[label]["duet"] == {"grace": 16, "eps_abort": 0.2,
                                           "budget_fraction": b, "full_rollouts": 4}
    with pytest.raises(ValueError, match="may not set \\['budget_fraction'\\]"):
        SweepPlan(duet={"budget_fraction": 1.0})


def test_every_arm_starts_from_the_start_and_names_it_as_parent(weft_home, monkeypatch,
                                                                tmp_path):
    from tests.assets.test_duet_assets import RecordingTrainer, _resources

    launched = []

    class Recording(RecordingTrainer):
        def launch(self, context, kind, recipe, overrides, extras=None):
            launched.append(list(overrides))
            return super().launch(context, kind, recipe, overrides, extras)

    start = tmp_path / "start"
    start.mkdir()
    (start / "config.json").write_text("{}")
    instance = dg.DagsterInstance.ephemeral()
    instance.report_runless_asset_event(dg.AssetMaterialization(
        "chain_sft_checkpoint", metadata={"checkpoint_path": dg.MetadataValue.path(str(start)),
                                          "checkpoint_id": "chain_sft.cpu-start"}))
    monkeypatch.setattr(duet_assets, "evaluate_arm", lambda *a, **k: None)
    run_config = {"ops": {"duet_sweep": {"config": {
        "budgets": [0.5], "full_rollouts": 2, "slots": 4, "max_steps": 1, "dataset_limit": 8,
        "evaluate": False, "start_from": "chain_sft_checkpoint",
        "duet_settings": ["grace=4"]}}}}
    result = dg.materialize([duet_sweep], resources=_resources(Recording()),
                            run_config=run_config, instance=instance)
    assert result.success and len(launched) == 2
    for overrides in launched:
        assert f"model_name_or_path={start}" in overrides
        assert "parent_checkpoint=chain_sft.cpu-start" in overrides
    # the DUET arm (launched second) runs with the sweep's grace over the recipe's 8
    assert any(o.startswith("duet=") and '"grace": 4' in o for o in launched[1]), launched[1]
    assert not any(o.startswith("duet=") for o in launched[0])  # plain GRPO
