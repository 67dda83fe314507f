"""Table 5's run configs (assets/results/budget_results.py): the CPU scale measures its budgets
from the chain SFT start at fixed percentiles and judges at the smallest; both scales validate
against the claim job's config schema."""

import dagster as dg

from assets.results.budget_results import TABLE5
from training.ep_budget import BUDGET_PERCENTILES


def _table(scale):
    return TABLE5.scales[scale]["ep_budget_table"]["config"]


def test_cpu_budgets_come_from_the_starts_length_percentiles():
    cpu = _table("cpu")
    assert cpu["budget_percentiles"] == [25.0, 50.0, 75.0] == list(BUDGET_PERCENTILES)
    assert "budgets" not in cpu  # measured, never numbers fixed in the config
    assert cpu["start_from"] == "chain_sft_checkpoint"
    assert "dataset=builtin:chain" in cpu["overrides"]
    # every training prompt once: steps x prompts per step (16 completions / 4 rollouts)
    assert cpu["max_steps"] * 16 // 4 == cpu["dataset_limit"]


def test_paper_scale_keeps_the_papers_budgets():
    assert "budget_percentiles" not in _table("paper")


def test_both_scales_validate_against_the_job_schema():
    from assets.definitions import defs

    job = defs.resolve_job_def("ep_budget_claim_job")
    for scale in ("cpu", "paper"):
        result = dg.validate_run_config(job, {"scale": scale})
        table = result["ops"]["ep_budget_table"]["config"]
        assert table["budget_percentiles"] == _table(scale).get("budget_percentiles", [])


def test_the_start_is_measured_up_to_the_cap_its_arm_trains_with():
    """The budgets are the start's answer-length percentiles sampled up to the EP arm's own
    cap: the CPU config's max_completion_length, not the recipe's (a smaller recipe cap cut
    the answers and put the 75th percentile above it)."""
    from assets.ep_training import EpBudgetTableConfig
    from assets.training import check_recipe
    from training.ep_budget_table import ep_arm, table_plan

    cfg = EpBudgetTableConfig(**TABLE5.scales["cpu"]["ep_budget_table"]["config"])
    plan = table_plan(cfg)
    ep_config = check_recipe("grpo", plan.ep_recipe, ep_arm(plan).override_args())
    assert ep_config.max_completion_length == cfg.max_completion_length == 128
