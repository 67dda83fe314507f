"""The DUET budget sweep's plain functions (training/duet/sweep.py) and the duet_steps view
(warehouse/views/duet_steps.sql) over real train_metrics rows in a real DuckDB catalog."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from training.callbacks import metrics_row
from training.config import load_config
from training.config_base import WeftGRPOConfig
from training.duet.config import DuetGRPOConfig
from training.duet.sweep import (
    ArmOutcome,
    SweepArm,
    SweepPlan,
    duet_diagnostics,
    plan_arms,
    plot_sweep,
    sweep_rows,
)

RECIPE_DUET = {"budget_fraction": 1.0, "full_rollouts": 2, "n_min": 2, "eps_abort": 0.2,
               "grace": 8, "poll_every": 4}


def test_plan_arms_share_prompts_seed_and_steps_and_set_budgets():
    plan = SweepPlan(full_rollouts=4, prompts_per_step=3, max_steps=5, seed=7, dataset_limit=16,
                     max_completion_length=24, overrides={"learning_rate": 1e-5})
    arms = plan_arms(plan, RECIPE_DUET)
    assert [a.label for a in arms] == ["grpo", "duet-b1", "duet-b0.5", "duet-b0.25"]
    grpo, *duet = arms
    assert grpo.method == "grpo" and grpo.overrides["kind"] == "grpo"
    assert "duet" not in grpo.overrides
    assert grpo.overrides["num_generations"] == 4
    for arm in arms:
        o = arm.overrides
        # Same prompts per generation batch, seed, steps, data and length cap in every arm.
        assert o["per_device_train_batch_size"] // o["num_generations"] == 3
        assert o["per_device_train_batch_size"] % o["num_generations"] == 0
        assert (o["seed"], o["max_steps"], o["dataset_limit"], o["max_completion_length"],
                o["learning_rate"]) == (7, 5, 16, 24, 1e-5)
    assert [a.budget_fraction for a in duet] == [1.0, 0.5, 0.25]
    for arm, b in zip(duet, (1.0, 0.5, 0.25), strict=True):
        assert arm.overrides["num_generations"] == 8  # slots default to 2 x full
        assert arm.overrides["duet"] == {**RECIPE_DUET, "budget_fraction": b, "full_rollouts": 4}


def test_arm_overrides_resolve_through_the_recipe_loader():
    plan = SweepPlan(full_rollouts=2, slots=4, max_steps=1, budgets=(0.5,))
    recipe = load_config("duet_grpo.cpu")
    grpo, duet = plan_arms(plan, recipe.duet)
    assert "kind=grpo" in grpo.override_args()
    plain = load_config("duet_grpo.cpu", grpo.override_args())
    assert type(plain) is WeftGRPOConfig and not hasattr(plain, "duet")
    assert plain.num_generations == 2
    budgeted = load_config("duet_grpo.cpu", duet.override_args())
    assert type(budgeted) is DuetGRPOConfig and budgeted.num_generations == 4
    # the budget and full_rollouts are the arm's; every other setting is the recipe's
    assert asdict(budgeted.duet) == {**asdict(recipe.duet), "budget_fraction": 0.5,
                                     "full_rollouts": 2}
    assert plain.checkpoint_id != budgeted.checkpoint_id


@pytest.mark.parametrize("kwargs, match", [
    ({"budgets": ()}, "budgets"),
    ({"budgets": (0.5, 0.5)}, "distinct"),
    ({"budgets": (0.0,)}, "budgets"),
    ({"full_rollouts": 1}, "full_rollouts"),
    ({"overrides": {"seed": 3}}, "may not set"),
    ({"overrides": {"kind": "duet"}}, "may not set"),
    ({"dataset_limit": 1, "prompts_per_step": 2}, "dataset_limit"),
])
def test_bad_sweep_plans_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SweepPlan(**kwargs)


def test_n_min_above_slots_and_bad_duet_settings_are_refused():
    with pytest.raises(ValueError, match="exceeds the sweep's slots"):
        plan_arms(SweepPlan(full_rollouts=2, slots=2), {**RECIPE_DUET, "n_min": 3})
    with pytest.raises(ValueError, match="unknown duet settings"):
        plan_arms(SweepPlan(), {"budgit": 1})


def _rows(ck, seconds, tokens, duet_logs=None):
    out = []
    for step, (s, t) in enumerate(zip(seconds, tokens, strict=True), start=1):
        logs = {"loss": 0.1, "reward": 0.5, "tokens_generated": t}
        if duet_logs is not None:
            logs.update({f"duet/{k}": v for k, v in duet_logs[step - 1].items()})
        row = metrics_row(logs, checkpoint_id=ck, kind="grpo", step=step, epoch=0.1,
                          step_seconds=s, steps=1)
        out.append(row)
    return out


def _duet_logs(n, lam=0.01, tokens=50.0):
    return [{"lambda": lam * (i + 1), "k1": 4.0, "k2": 10.0, "n_q_min": 2.0, "n_q_mean": 3.0,
             "n_q_max": 4.0, "marker_rate": 0.5, "abort_rate": 0.25, "eps_kept": 1.0,
             "is_weight_mean": 1.5, "tokens_generated": tokens, "token_budget": 60.0,
             "overhead_s": 0.001} for i in range(n)]


def test_sweep_rows_ratios_against_grpo_literal():
    grpo = ArmOutcome(SweepArm("grpo", "grpo", 1.0, {}), "g", "/g",
                      _rows("g", [10.0, 12.0], [200, 220]), accuracy=0.2, accuracy_ci=(0.0, 0.5))
    # DUET counts allocated rollouts only (duet/tokens_generated), not the TRL column that
    # includes one placeholder token per unallocated slot.
    half = ArmOutcome(SweepArm("duet-b0.5", "duet", 0.5, {}), "d", "/d",
                      _rows("d", [4.0, 7.0], [999, 999], _duet_logs(2, tokens=60.0)),
                      accuracy=0.3, accuracy_ci=(0.1, 0.6))
    rows = {r["arm"]: r for r in sweep_rows([grpo, half])}
    assert rows["grpo"]["train_wall_s"] == pytest.approx(22.0)
    assert rows["grpo"]["rollout_tokens"] == 420 and rows["grpo"]["speedup"] == 1.0
    assert rows["duet-b0.5"]["train_wall_s"] == pytest.approx(11.0)
    assert rows["duet-b0.5"]["speedup"] == pytest.approx(22.0 / 11.0)
    assert rows["duet-b0.5"]["rollout_tokens"] == pytest.approx(120.0)
    assert rows["duet-b0.5"]["token_ratio"] == pytest.approx(420 / 120)
    assert rows["duet-b0.5"]["mean_lambda"] == pytest.approx(0.015)
    assert rows["duet-b0.5"]["mean_abort_rate"] == pytest.approx(0.25)
    assert rows["grpo"]["mean_lambda"] is None
    assert rows["duet-b0.5"]["accuracy_ci_high"] == 0.6
    with pytest.raises(ValueError, match="GRPO arm"):
        sweep_rows([half])


def test_duet_arm_reward_is_over_generated_rollouts_not_placeholder_slots():
    # TRL's logged reward (0.5 in every row of _rows) averages every slot, and DUET's
    # unallocated placeholders score 0 there; the sweep row takes duet/reward_mean instead.
    grpo = ArmOutcome(SweepArm("grpo", "grpo", 1.0, {}), "g", "/g", _rows("g", [1.0], [10]))
    logs = _duet_logs(2)
    logs[0].update(reward_mean=0.75, budget_used=0.9)
    logs[1].update(reward_mean=0.25, budget_used=1.3)
    half = ArmOutcome(SweepArm("duet-b0.5", "duet", 0.5, {}), "d", "/d",
                      _rows("d", [1.0, 1.0], [5, 5], logs))
    rows = {r["arm"]: r for r in sweep_rows([grpo, half])}
    assert rows["grpo"]["reward_mean"] == pytest.approx(0.5)
    assert rows["duet-b0.5"]["reward_mean"] == pytest.approx((0.75 + 0.25) / 2)
    assert rows["duet-b0.5"]["mean_budget_used"] == pytest.approx((0.9 + 1.3) / 2)


def test_duet_diagnostics_per_step():
    rows = _rows("d", [1.0, 1.0, 1.0], [1, 1, 1], _duet_logs(3))
    rows.reverse()
    diag = duet_diagnostics(rows)
    assert [d["step"] for d in diag] == [1, 2, 3]
    assert [d["lambda"] for d in diag] == pytest.approx([0.01, 0.02, 0.03])
    assert diag[0]["calibration_chi2"] is None and diag[0]["n_q_max"] == 4.0
    assert duet_diagnostics(_rows("g", [1.0], [5])) == []


def test_plot_sweep_writes_a_png(tmp_path):
    grpo = ArmOutcome(SweepArm("grpo", "grpo", 1.0, {}), "g", "/g", _rows("g", [2.0], [20]),
                      accuracy=0.1, accuracy_ci=(0.0, 0.3), benchmark="gsm8k")
    duet = ArmOutcome(SweepArm("duet-b1", "duet", 1.0, {}), "d", "/d",
                      _rows("d", [1.0], [20], _duet_logs(1)), accuracy=0.2,
                      accuracy_ci=(0.0, 0.4), benchmark="gsm8k")
    path = plot_sweep(sweep_rows([grpo, duet]), tmp_path / "p" / "sweep.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_duet_steps_view_and_readme_query_on_real_duckdb(weft_home):
    from warehouse import Lineage, Warehouse

    wh = Warehouse()
    logs = _duet_logs(2)
    logs[1]["calibration_chi2"] = 0.7
    duet_rows = _rows("duet-run", [3.0, 4.0], [5, 6], logs)
    wh.write("train_metrics", duet_rows, lineage=Lineage(run_id="r1"), partition="duet-run")
    wh.write("train_metrics", _rows("plain-run", [3.0], [5]), lineage=Lineage(run_id="r2"),
             partition="plain-run")
    # The README's column list, as written there.
    got = wh.sql("SELECT checkpoint_id, step, lam, k1, k2, n_q_min, n_q_mean, n_q_max, "
                 "marker_rate, abort_rate, eps_kept, is_weight_mean, tokens_generated, "
                 "token_budget, calibration_chi2, overhead_s, run_id FROM duet_steps "
                 "ORDER BY checkpoint_id, step").to_pylist()
    assert [(r["checkpoint_id"], r["step"]) for r in got] == [("duet-run", 1), ("duet-run", 2)]
    for row, expected in zip(got, logs, strict=True):
        for name, value in expected.items():
            column = "lam" if name == "lambda" else name  # LAMBDA is a DuckDB keyword
            assert row[column] == pytest.approx(value), name
    assert got[0]["calibration_chi2"] is None
    # The README's query: the same values straight from train_metrics.logs_json.
    readme = ("SELECT step, logs_json->>'duet/lambda' AS lam, logs_json->>'duet/n_q_mean' AS n_q, "
              "logs_json->>'duet/abort_rate' AS abort_rate FROM train_metrics "
              "WHERE kind = 'grpo' AND logs_json->>'duet/lambda' IS NOT NULL ORDER BY step")
    out = wh.sql(readme).to_pylist()
    assert [(r["step"], float(r["lam"]), float(r["n_q"]), float(r["abort_rate"])) for r in out] \
        == [(1, 0.01, 3.0, 0.25), (2, 0.02, 3.0, 0.25)]
    assert got[0]["run_id"] == "r1"  # lineage: which run logged the step
