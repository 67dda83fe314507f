"""One Table 5 run's plain parts (training/ep_budget_table.py): the plan and the checks that
refuse a design unlike the paper's before anything trains, the evaluation's budgets and its
one decoding limit, the base model's spec, and the rows and figures written and shown."""

from types import SimpleNamespace

import pyarrow as pa
import pytest

from eval.modes import BUDGET_LIMIT_FACTOR
from training.arms import Arm
from training.ep_budget import ARM_EP
from training.ep_budget_table import (
    base_spec,
    check_arm_configs,
    check_ep_budgets,
    decoding_limit,
    ep_arm,
    ep_heldout_benchmark,
    eval_budgets,
    evaluated_arm,
    generation_limit,
    smallest_budget_figures,
    stamped_rows,
    table_id,
    table_plan,
    typed_scores,
)


def _settings(**kw):
    base = {"ep_recipe": "budget_grpo.cpu", "rlvr_recipe": "rlvr_grpo.cpu",
            "rlvr_cap_factors": [1.0, 2.0], "max_steps": 4, "seed": 0, "dataset_limit": 64,
            "max_completion_length": None, "overrides": []}
    return SimpleNamespace(**{**base, **kw})


def test_the_plan_and_the_ep_arm_it_resolves():
    plan = table_plan(_settings(overrides=["learning_rate=2.0e-5"], seed=3))
    assert plan.rlvr_cap_factors == (1.0, 2.0) and plan.overrides == {"learning_rate": 2.0e-5}
    arm = ep_arm(plan)
    assert (arm.label, arm.recipe) == ("ep", "budget_grpo.cpu")
    assert arm.overrides == {"learning_rate": 2.0e-5, "seed": 3, "max_steps": 4,
                             "dataset_limit": 64}
    assert "dataset_limit" not in ep_arm(table_plan(_settings(dataset_limit=None))).overrides
    for bad in ({"rlvr_cap_factors": []}, {"max_steps": 0}, {"overrides": ["no_equals_sign"]}):
        with pytest.raises(ValueError, match="bad ep_budget_table config"):
            table_plan(_settings(**bad))


def test_designs_unlike_the_papers_are_refused():
    plan = table_plan(_settings())
    check_ep_budgets(plan, SimpleNamespace(budgets=[16, 48]))
    with pytest.raises(ValueError, match="'budget_grpo.cpu' has no budgets"):
        check_ep_budgets(plan, SimpleNamespace(budgets=[]))

    def cfg(**kw):
        return SimpleNamespace(**{"budgets": [], "learning_rate": 1e-5, "seed": 0,
                                  "max_steps": 4, "dataset_limit": 64, **kw})

    check_arm_configs(plan, {ARM_EP: cfg(budgets=[16]), "rlvr": cfg()})
    with pytest.raises(ValueError, match="'rlvr_grpo.cpu' has budgets"):
        check_arm_configs(plan, {ARM_EP: cfg(budgets=[16]), "rlvr": cfg(budgets=[16])})
    with pytest.raises(ValueError, match="would not train alike: learning_rate: "):
        check_arm_configs(plan, {ARM_EP: cfg(budgets=[16]), "rlvr": cfg(learning_rate=1.0)})


def test_budgets_and_one_decoding_limit():
    assert eval_budgets([], [48, 16, 16]) == [16, 48]  # the recipe's, sorted, once each
    assert eval_budgets([32], [16]) == [32]
    with pytest.raises(ValueError, match="budgets must be positive token counts"):
        eval_budgets([0, 16], [16])
    assert decoding_limit(None, [16, 48]) == BUDGET_LIMIT_FACTOR * 48
    assert decoding_limit(100, [16, 48]) == 100
    assert table_id("budget_grpo.cpu", {"a": 1}) == table_id("budget_grpo.cpu", {"a": 1})
    assert table_id("r", {"a": 1}) != table_id("r", {"a": 2})
    assert table_id("r", {"a": 1}).startswith("r-") and len(table_id("r", {})) == 2 + 8
    bench = ep_heldout_benchmark()
    assert (bench.name, bench.grader) == ("ep_heldout", "math")


def test_the_base_model_is_the_embedded_one_or_a_model_folder(tmp_path):
    assert base_spec("embedded").model_id == base_spec("embedded").served_model
    with pytest.raises(ValueError, match="is not a model folder"):
        base_spec(str(tmp_path / "nothing"))
    folder = tmp_path / "org model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    spec = base_spec(str(folder))
    assert (spec.model_id, spec.kind, spec.path) == ("org--model", "local", str(folder))


def _row(arm, budget, bs, limit=64, **kw):
    return {"arm": arm, "budget": budget, "budgeted_success": bs, "generation_limit": limit,
            "checkpoint_id": None, "steps": None, "train_wall_s": None, **kw}


def test_rows_written_and_figures_shown():
    rows = [_row("base", 16, 0.25), _row("base", 48, 0.5, limit=None),
            _row("ep_aware", 16, 1, checkpoint_id="ck")]
    stamped = stamped_rows(rows, "t1", "warehouse:x/1", "builtin:arith#seed=1000")
    assert stamped[0] == {**rows[0], "table_id": "t1", "train_data": "warehouse:x/1",
                          "heldout": "builtin:arith#seed=1000"}
    assert smallest_budget_figures(rows, [48, 16]) == {"BS@16/base": 0.25, "BS@16/ep_aware": 1.0}
    assert generation_limit(rows) == 64
    table = typed_scores(rows[:2])  # base alone: its training columns are None everywhere
    assert table.schema.field("steps").type == pa.int64()
    assert table.schema.field("checkpoint_id").type == pa.string()
    assert table.schema.field("train_wall_s").type == pa.float64()
    assert table.schema.field("budgeted_success").type == pa.float64()
    arm = Arm("rlvr", "rlvr_grpo.cpu", {"max_completion_length": 96})
    done = evaluated_arm(arm, "ck1", [{"x": 1}], [{"step": 1, "seconds_per_step": 2.0}])
    assert (done.arm, done.model, done.checkpoint_id, done.train_cap, done.recipe) == (
        "rlvr", "ck1", "ck1", 96, "rlvr_grpo.cpu")
    assert done.train["steps"] == 1 and done.train["train_wall_s"] == 2.0
