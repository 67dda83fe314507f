"""Table 5 of the Engagement paper as plain functions (training/ep_budget.py): the arms' plan,
their shared data, the held-out split, the table against hand-worked values, the paired tests
against closed forms, and the ``ep_budget_table`` view over real DuckDB."""

from __future__ import annotations

import math

import pytest

from training.config import load_config
from training.ep_budget import (
    ARM_BASE,
    ARM_EP,
    EvaluatedArm,
    TablePlan,
    config_mismatches,
    heldout_problems,
    paired_tests,
    plan_arms,
    table_rows,
    training_examples,
    wide_rows,
)


def _sample(pid, budget, correct, tokens, index=0, error=None):
    return {"model": "m", "benchmark": "ep_heldout", "problem_id": pid, "sample_index": index,
            "budget": budget, "correct": None if error else correct, "tokens_used": tokens,
            "completion_tokens": tokens + 1, "generation_limit": 192, "gen_error": error}


# Four problems, budgets 16 and 48. EP-aware: short answers; RLVR: long answers.
EP_SAMPLES = [
    _sample("p1", 16, True, 10), _sample("p2", 16, True, 16), _sample("p3", 16, True, 30),
    _sample("p4", 16, False, 5),
    _sample("p1", 48, True, 40), _sample("p2", 48, True, 50), _sample("p3", 48, False, 20),
    _sample("p4", 48, True, 48),
]
RLVR_SAMPLES = [
    _sample("p1", 16, True, 40), _sample("p2", 16, False, 60), _sample("p3", 16, True, 12),
    _sample("p4", 16, True, 90),
    _sample("p1", 48, True, 40), _sample("p2", 48, True, 44), _sample("p3", 48, True, 100),
    _sample("p4", 48, False, 10),
]
# base: two samples per problem at budget 16 (averaged per problem first), one failed sample
BASE_SAMPLES = [
    _sample("p1", 16, True, 10, 0), _sample("p1", 16, False, 20, 1),
    _sample("p2", 16, True, 16, 0), _sample("p2", 16, True, 17, 1),
    _sample("p3", 16, False, 4, 0), _sample("p3", 16, False, 8, 1),
    _sample("p4", 16, True, 2, 0), _sample("p4", 16, None, 0, 1, error="timeout"),
]


def _evaluated():
    return [EvaluatedArm("rlvr", "ck-rlvr", RLVR_SAMPLES, recipe="rlvr_grpo.cpu",
                         checkpoint_id="ck-rlvr", train_cap=48, train={"steps": 2}),
            EvaluatedArm(ARM_EP, "ck-ep", EP_SAMPLES, recipe="budget_grpo.cpu",
                         checkpoint_id="ck-ep", train_cap=48, train={"steps": 2}),
            EvaluatedArm(ARM_BASE, "base-model", BASE_SAMPLES)]


def test_table_rows_equal_a_hand_worked_table():
    rows = table_rows(_evaluated(), n_boot=200)
    got = {(r["arm"], r["budget"]): r for r in rows}
    # worked by hand from the samples above (BS: correct and tokens <= B; Acc: correct;
    # Tok: mean tokens_used; per-problem means first)
    expected = {
        (ARM_EP, 16): (2 / 4, 3 / 4, (10 + 16 + 30 + 5) / 4),
        (ARM_EP, 48): (2 / 4, 3 / 4, (40 + 50 + 20 + 48) / 4),
        ("rlvr", 16): (1 / 4, 3 / 4, (40 + 60 + 12 + 90) / 4),
        ("rlvr", 48): (2 / 4, 3 / 4, (40 + 44 + 100 + 10) / 4),
        # base, per problem: BS p1 (1+0)/2, p2 (1+0)/2 (17 > 16), p3 0, p4 1; Acc p2 1;
        # the failed sample of p4 is not an answer
        (ARM_BASE, 16): ((0.5 + 0.5 + 0 + 1) / 4, (0.5 + 1 + 0 + 1) / 4,
                         (15 + 16.5 + 6 + 2) / 4),
    }
    assert set(got) == set(expected)
    for key, (bs, acc, tok) in expected.items():
        r = got[key]
        assert r["budgeted_success"] == pytest.approx(bs)
        assert r["accuracy"] == pytest.approx(acc)
        assert r["mean_tokens"] == pytest.approx(tok)
        assert r["n_problems"] == 4
        for name in ("budgeted_success", "accuracy", "mean_tokens"):
            assert r[f"{name}_ci_low"] <= r[name] <= r[f"{name}_ci_high"]
    assert got[(ARM_BASE, 16)]["failed"] == 1 and got[(ARM_BASE, 16)]["n_samples"] == 7
    # the paper's row order: base, RLVR, EP-aware
    assert [r["arm"] for r in rows] == [ARM_BASE, "rlvr", "rlvr", ARM_EP, ARM_EP]
    wide, columns = wide_rows(rows)
    assert columns[4:] == ["BS@16", "BS@48", "Acc@16", "Acc@48", "Tok@16", "Tok@48"]
    ep = next(w for w in wide if w["arm"] == ARM_EP)
    assert ep["BS@16"].startswith("0.500 [") and ep["Tok@48"].startswith("39.5 [")


def test_paired_tests_match_closed_forms():
    tests, skipped = paired_tests(_evaluated(), n_boot=2000)
    assert {t["arm_b"] for t in tests} == {ARM_BASE, "rlvr"} and not skipped
    by = {(t["arm_b"], t["statistic"]): t for t in tests}
    bs = by[("rlvr", "budgeted_success")]
    # per-problem success at B=16: EP [1, 1, 0, 0], RLVR [0, 0, 1, 0]; d = [1, 1, -1, 0]
    d = [1, 1, -1, 0]
    mean = sum(d) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 3)
    t = mean / (sd / 2)
    # Student t with 3 degrees of freedom: F(t) = 1/2 + (u / (1 + u^2) + atan(u)) / pi,
    # u = t / sqrt(3)
    u = t / math.sqrt(3)
    p_greater = 1 - (0.5 + (u / (1 + u * u) + math.atan(u)) / math.pi)
    assert bs["budget"] == 16 and bs["alternative"] == "greater" and bs["n"] == 4
    assert bs["diff"] == pytest.approx(0.25) and bs["t"] == pytest.approx(t)
    assert bs["p_ttest"] == pytest.approx(p_greater, rel=1e-9)
    assert 0 < bs["p_bootstrap"] <= 1
    tok = by[("rlvr", "mean_tokens")]
    assert tok["alternative"] == "less"
    assert tok["mean_a"] == pytest.approx(61 / 4) and tok["mean_b"] == pytest.approx(202 / 4)
    assert tok["diff"] == pytest.approx((61 - 202) / 4)


def test_paired_tests_report_what_they_cannot_compare():
    lonely = [EvaluatedArm(ARM_EP, "ck-ep", EP_SAMPLES),
              EvaluatedArm("rlvr", "ck-rlvr", [_sample("zz", 16, True, 3)])]
    tests, skipped = paired_tests(lonely)
    assert tests == [] and len(skipped) == 2 and "0 shared problem" in skipped[0]
    with pytest.raises(ValueError, match="no 'ep_aware' arm"):
        paired_tests(lonely[1:])


def test_plan_arms_train_alike_except_reward_and_cap():
    ep = load_config("budget_grpo.cpu", ["max_steps=2", "dataset_limit=8"])
    plan = TablePlan(max_steps=2, dataset_limit=8)
    arms = plan_arms(plan, ep, "warehouse:ep_budget_train/abc")
    assert [a.label for a in arms] == [ARM_EP, "rlvr", "rlvr_x2"]
    configs = {a.label: load_config(a.recipe, a.override_args(), expect_kind="grpo")
               for a in arms}
    assert config_mismatches(configs) == []
    caps = {k: c.max_completion_length for k, c in configs.items()}
    assert caps == {ARM_EP: ep.max_completion_length, "rlvr": ep.max_completion_length,
                    "rlvr_x2": 2 * ep.max_completion_length}
    assert [s["name"] for s in configs[ARM_EP].rewards] == ["budget"]
    assert [s["name"] for s in configs["rlvr"].rewards] == ["outcome"]
    assert configs["rlvr"].budgets is None
    assert configs["rlvr"].dataset == "warehouse:ep_budget_train/abc"
    assert len({c.checkpoint_id for c in configs.values()}) == 3
    # a mismatch is named: the RLVR recipe's own learning rate, had the plan not copied it
    rlvr_own = load_config("rlvr_grpo.cpu", ["max_steps=2", "dataset_limit=8",
                                             "learning_rate=0.001"])
    assert any(m.startswith("learning_rate:") for m in
               config_mismatches({ARM_EP: configs[ARM_EP], "rlvr": rlvr_own}))


def test_plan_rejects_bad_values():
    with pytest.raises(ValueError, match="rlvr_cap_factors"):
        TablePlan(rlvr_cap_factors=())
    with pytest.raises(ValueError, match="may not set"):
        TablePlan(overrides={"max_steps": 3})
    with pytest.raises(ValueError, match="has no budgets"):
        plan_arms(TablePlan(), load_config("rlvr_grpo.cpu", []), "x")


def test_rlvr_arms_read_the_ep_arms_prompts_and_budgets(weft_home):
    from pipelines.formats import budget_instruction
    from training.data import add_budgets, grpo_examples, load_dataset
    from warehouse import Warehouse

    ep = load_config("budget_grpo.cpu", ["dataset_limit=12"])
    examples = training_examples(ep)
    assert len(examples) == 12
    # what training.grpo.run_grpo builds for the EP arm (its data lines, transcribed)
    built = add_budgets(grpo_examples(load_dataset("builtin:arith", limit=12, seed=0).rows,
                                      "boxed"), [16, 32, 48], seed=0)
    assert examples == built
    for ex in examples:  # the urgency words of the example's budget close the user message
        assert ex["prompt"][-1]["content"].endswith(budget_instruction(ex["budget"], ep.budgets))
    assert sorted({ex["budget"] for ex in examples}) == sorted(ep.budgets)
    Warehouse().write("ep_budget_train", examples, partition="fp")
    data = load_dataset("warehouse:ep_budget_train/fp", limit=12)
    rlvr = grpo_examples(data.rows, "boxed")
    assert [r["prompt"] for r in rlvr] == [e["prompt"] for e in examples]
    assert [r["budget"] for r in rlvr] == [e["budget"] for e in examples]
    assert [r["answer"] for r in rlvr] == [e["answer"] for e in examples]


def test_heldout_problems_leave_the_training_problems_out():
    from training.data import builtin_arith, builtin_arith1

    train = builtin_arith1(n=60, seed=0)
    held = heldout_problems("builtin:arith1", 40, 7, train)
    assert len(held) == 40 and len({h["problem_id"] for h in held}) == 40
    assert not {h["problem_id"] for h in held} & {t["problem_id"] for t in train}
    assert not {h["problem"] for h in held} & {t["problem"] for t in train}
    with pytest.raises(ValueError, match="only 0 problems"):
        heldout_problems("builtin:arith?n=8", 4, 0, builtin_arith(n=8, seed=0))


def test_the_view_gives_table_5s_columns(weft_home):
    from training.ep_budget_table import typed_scores
    from warehouse import Lineage, Warehouse

    rows = [dict(r, table_id="t1") for r in table_rows(_evaluated(), n_boot=200)]
    wh = Warehouse()
    wh.write("ep_budget_scores", typed_scores(rows), lineage=Lineage(run_id="r1", partition="t1"))
    view = {r["arm"]: r for r in wh.sql("SELECT * FROM ep_budget_table").to_pylist()}
    assert list(view) == [ARM_BASE, "rlvr", ARM_EP]  # ordered like the paper's table
    ep = view[ARM_EP]
    assert (ep["budget_small"], ep["budget_large"]) == (16, 48)
    assert ep["bs_small"] == pytest.approx(0.5) and ep["bs_large"] == pytest.approx(0.5)
    assert ep["acc_small"] == pytest.approx(0.75)
    assert ep["tok_small"] == pytest.approx(61 / 4) and ep["tok_large"] == pytest.approx(39.5)
    assert view["rlvr"]["bs_small"] == pytest.approx(0.25)
    base = view[ARM_BASE]  # evaluated on one budget only: its large-budget cells are empty
    assert base["bs_small"] == pytest.approx(0.5) and base["bs_large"] is None
    assert ep["bs_small_ci_low"] <= ep["bs_small"] <= ep["bs_small_ci_high"]
