"""Table 5's budgets from the start (training/ep_budget.py): the percentile rule against numpy and
hand-worked values, the measurement's inputs (the training prompts without budget words, the EP
recipe's sampling settings), the measured budgets reaching the EP-aware arm's prompts and reward
while the RLVR arms stay correctness-only, the columns that record the rule, the claim judged at
the smallest budget, and the real sampler on the embedded model (slow)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from training.config import load_config
from training.ep_budget import (
    ARM_EP,
    BUDGET_PERCENTILES,
    BUDGET_RULE_COLUMNS,
    BudgetMeasure,
    TablePlan,
    answer_length,
    budget_rule_columns,
    measure_budgets,
    percentile,
    percentile_budgets,
    plan_arms,
    sample_answer_lengths,
    training_examples,
)


def _numpy_budgets(lengths, qs):
    """The rule in numpy's words: ceil of the linear-interpolation percentile, then each budget
    at least one above the previous."""
    out = []
    for q in qs:
        b = max(1, int(np.ceil(np.percentile(np.asarray(lengths, float), q, method="linear"))))
        out.append(max(b, out[-1] + 1) if out else b)
    return tuple(out)


def test_percentiles_match_hand_worked_values():
    # ranks (n-1)q/100 over 10 20 30 40: 0.75 -> 17.5, 1.5 -> 25, 2.25 -> 32.5
    assert [percentile([40, 10, 30, 20], q) for q in (25, 50, 75)] == [17.5, 25.0, 32.5]
    assert percentile([7], 25) == 7.0 and percentile([3, 9], 0) == 3 and percentile([3, 9], 100) == 9
    assert percentile_budgets([40, 10, 30, 20], (25, 50, 75)) == (18, 25, 33)
    # equal lengths: the percentiles tie, the budgets still step by one token
    assert percentile_budgets([20] * 9, (25, 50, 75)) == (20, 21, 22)
    # an exact whole-token percentile is not rounded up
    assert percentile_budgets([1, 2, 3, 4, 5], (25, 50, 75)) == (2, 3, 4)


@pytest.mark.parametrize("seed", range(20))
def test_percentile_rule_matches_numpy_on_drawn_lengths(seed):
    rng = np.random.default_rng(seed)
    lengths = [int(x) for x in rng.integers(1, 120, size=int(rng.integers(1, 80)))]
    qs = sorted({float(q) for q in rng.uniform(0, 100, size=3)})
    for q in qs:
        assert percentile(lengths, q) == pytest.approx(np.percentile(lengths, q))
    assert percentile_budgets(lengths, qs) == _numpy_budgets(lengths, qs)


def test_bad_percentiles_and_no_lengths_are_refused():
    with pytest.raises(ValueError, match="distinct and ascending"):
        percentile_budgets([1, 2, 3], (50, 25))
    with pytest.raises(ValueError, match="distinct and ascending"):
        percentile_budgets([1, 2, 3], ())
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1, 2], 101)
    with pytest.raises(ValueError, match="no answers"):
        percentile_budgets([], (25,))


def test_answer_length_stops_at_the_first_end_id():
    assert answer_length([5, 6, 2, 0, 0], [2]) == 2
    assert answer_length([2, 5], [2]) == 0
    assert answer_length([5, 6, 7], [2]) == 3  # cut at the cap: every token counts


class _Sampler:
    """Records what it is asked and answers with fixed lengths."""

    def __init__(self, lengths):
        self.lengths, self.calls = lengths, []

    def __call__(self, model, prompts, **settings):
        self.calls.append((model, prompts, settings))
        return self.lengths[: len(prompts)]


def test_measure_samples_the_training_prompts_at_the_recipes_settings():
    ep = load_config("budget_grpo.cpu", ["dataset_limit=8", "seed=3", "max_completion_length=64"])
    lengths = [30, 10, 63, 20, 50, 40, 64, 5]
    sampler = _Sampler(lengths)
    measure = measure_budgets(ep, (25, 50, 75), sample=sampler)
    ((model, prompts, settings),) = sampler.calls
    assert model == ep.model_name_or_path
    # the EP arm's prompts as it trains on them once its budgets are set: measured from the
    # stand-in ranks, they match the rows built with the measured budgets
    trained = training_examples(load_config("budget_grpo.cpu", [
        "dataset_limit=8", "seed=3", "max_completion_length=64", "budgets=[18, 35, 54]"]))
    assert prompts == [r["prompt"] for r in trained]
    assert len({r["prompt"][-1]["content"] for r in trained}) == 8
    assert settings == {"temperature": ep.temperature, "top_p": ep.top_p, "top_k": ep.top_k or 0,
                        "max_new_tokens": 64, "seed": 3, "threads": ep.torch_threads}
    assert measure.budgets == _numpy_budgets(lengths, (25, 50, 75)) == (18, 35, 54)
    assert measure.lengths == tuple(lengths) and measure.truncated == 1 and measure.cap == 64
    assert measure.values == pytest.approx([17.5, 35.0, 53.25])
    summary = measure.summary()
    assert summary["budgets"] == [18, 35, 54] and summary["start_lengths"] == lengths


def test_measure_refuses_budgets_the_cap_would_hide():
    ep = load_config("budget_grpo.cpu", ["dataset_limit=4", "max_completion_length=32"])
    with pytest.raises(ValueError, match="raise max_completion_length"):
        measure_budgets(ep, (25, 50, 75), sample=_Sampler([32, 32, 32, 32]))


def test_measured_budgets_reach_the_ep_arms_prompts_and_reward_only():
    plan = TablePlan(max_steps=2, dataset_limit=9, budgets=(18, 35, 53))
    ep = load_config("budget_grpo.cpu", ["max_steps=2", "dataset_limit=9"])
    arms = plan_arms(plan, ep, "warehouse:ep_budget_train/abc")
    configs = {a.label: load_config(a.recipe, a.override_args(), expect_kind="grpo")
               for a in arms}
    assert configs[ARM_EP].budgets == [18, 35, 53]
    assert [r["name"] for r in configs[ARM_EP].rewards] == ["budget"]
    # the budget reward reads each row's `budget`: every row got one of the measured budgets
    rows = training_examples(configs[ARM_EP])
    assert sorted({r["budget"] for r in rows}) == [18, 35, 53]
    assert [sum(r["budget"] == b for r in rows) for b in (18, 35, 53)] == [3, 3, 3]
    for label, cfg in configs.items():
        if label != ARM_EP:
            assert cfg.budgets is None and [r["name"] for r in cfg.rewards] == ["outcome"]
    with pytest.raises(ValueError, match="budgets"):
        TablePlan(budgets=(0, 10))


def _scores(budgets):
    return pa.table({"arm": ["ep_aware"] * len(budgets), "budget": pa.array(budgets, pa.int64())})


def test_the_rule_columns_record_where_each_budget_came_from():
    measure = BudgetMeasure(model="/m", lengths=(10, 20, 30, 40), percentiles=(25.0, 50.0, 75.0),
                            values=(17.5, 25.0, 32.5), budgets=(18, 25, 33), cap=48, truncated=0)
    table = budget_rule_columns(_scores([25, 18, 33]), measure)
    rows = table.to_pylist()
    assert [r["budget_percentile"] for r in rows] == [50.0, 25.0, 75.0]
    assert [r["budget_percentile_value"] for r in rows] == [25.0, 17.5, 32.5]
    assert {r["budget_source"] for r in rows} == {"start_percentiles"}
    assert json.loads(rows[0]["start_lengths"]) == [10, 20, 30, 40]
    with pytest.raises(ValueError, match="leave `budgets` empty"):
        budget_rule_columns(_scores([16]), measure)
    recipe = budget_rule_columns(_scores([16, 32]), None)
    assert recipe.column("budget_source").to_pylist() == ["recipe", "recipe"]
    assert recipe.schema.field("budget_percentile").type == pa.float64()
    assert set(BUDGET_RULE_COLUMNS) <= set(recipe.column_names)


def test_the_default_percentiles_put_the_smallest_budget_at_the_lower_quartile():
    assert BUDGET_PERCENTILES == (25.0, 50.0, 75.0)


@pytest.mark.slow
def test_the_real_sampler_counts_the_embedded_models_answer_tokens(embedded_model_dir):
    prompts = [[{"role": "user", "content": "What is 2 + 3? Answer with one number."}],
               [{"role": "user", "content": "Say hello in three words."}],
               [{"role": "user", "content": "Name a colour."}],
               [{"role": "user", "content": "What is 4 - 1?"}]]
    args = {"temperature": 1.0, "seed": 0, "threads": 1}
    full = sample_answer_lengths(str(embedded_model_dir), prompts, max_new_tokens=48, **args)
    assert len(full) == 4 and all(0 <= n <= 48 for n in full)
    assert any(n < 48 for n in full)  # some answer ended before the cap
    # the same seed draws the same first tokens: a 5-token cap cuts every answer at 5
    cut = sample_answer_lengths(str(embedded_model_dir), prompts, max_new_tokens=5, **args)
    assert cut == [min(n, 5) for n in full]
