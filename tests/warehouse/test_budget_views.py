"""The budget_curve and eff_curve views (migration 003) over budget_scores / eff_scores.

budget_curve must give exactly what eval.budget.budget_curve gives on the same sample rows
(per-problem means, bootstrap CIs) and what a hand computation gives for the point values.
"""

import datetime as dt

import pytest

from eval.budget import budget_curve, budget_score_rows, eff_score_rows
from warehouse import Warehouse

# budget 100 -- problem a: (correct, 80), (correct, 150); problem b: (wrong, 20)
#   per problem: a: BS 1/2, Acc 1, Tok 115; b: BS 0, Acc 0, Tok 20
#   -> BS@100 = 1/4, Acc@100 = 1/2, Tok@100 = 67.5 (a per-sample average gives 1/3, 2/3, 83.3)
# budget 200 -- a: (correct, 180); b: (correct, 250) -> BS 1/2, Acc 1, Tok 215
SAMPLES = [
    ("a", 0, 100, True, 80), ("a", 1, 100, True, 150), ("b", 0, 100, False, 20),
    ("a", 0, 200, True, 180), ("b", 0, 200, True, 250),
]
HAND = {100: (0.25, 0.5, 67.5), 200: (0.5, 1.0, 215.0)}


def _sample_rows():
    return [{"model": "m", "benchmark": "gsm8k", "problem_id": p, "sample_index": i,
             "budget": b, "correct": c, "completion_tokens": t + 1, "tokens_used": t,
             "generation_limit": 800, "mode": "budgeted"} for p, i, b, c, t in SAMPLES]


def test_budget_curve_view_equals_eval_budget_and_the_hand_values(tmp_path):
    wh = Warehouse(tmp_path)
    wh.write("eval_samples", _sample_rows(), partition="gsm8k|m")
    samples = wh.sql("SELECT * FROM eval_samples").to_pylist()
    wh.write("budget_scores", budget_score_rows(samples, n_boot=400, seed=1), partition="all")
    view = wh.sql("SELECT * FROM budget_curve ORDER BY budget").to_pylist()
    expected = budget_curve([(p, b, c, t) for p, _, b, c, t in SAMPLES], n_boot=400, seed=1)
    assert [r["budget"] for r in view] == [100, 200]
    for row, point in zip(view, expected):
        assert (row["budgeted_success"], row["accuracy"], row["mean_tokens"]) == HAND[row["budget"]]
        assert (row["n_problems"], row["generation_limit"]) == (2, 800)
        assert row["n_samples"] == point.n_samples
        assert (row["budgeted_success_ci_low"], row["budgeted_success_ci_high"]) == (
            point.success_ci_low, point.success_ci_high)
        assert (row["accuracy_ci_low"], row["accuracy_ci_high"]) == (
            point.accuracy_ci_low, point.accuracy_ci_high)
        assert (row["mean_tokens_ci_low"], row["mean_tokens_ci_high"]) == (
            point.mean_tokens_ci_low, point.mean_tokens_ci_high)


def test_budget_curve_view_keeps_the_latest_row_per_budget(tmp_path):
    wh = Warehouse(tmp_path)
    rows = budget_score_rows(_sample_rows(), n_boot=50)
    old = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    stale = [dict(r, budgeted_success=0.9, created_at=old) for r in rows]
    wh.write("budget_scores", stale, partition="old-run")
    wh.write("budget_scores", rows, partition="all")
    view = wh.sql("SELECT budget, budgeted_success FROM budget_curve ORDER BY budget").to_pylist()
    assert view == [{"budget": 100, "budgeted_success": 0.25},
                    {"budget": 200, "budgeted_success": 0.5}]


def test_views_exist_on_an_empty_warehouse(tmp_path):
    wh = Warehouse(tmp_path)
    assert wh.sql("SELECT * FROM budget_curve").num_rows == 0
    assert wh.sql("SELECT * FROM eff_curve").num_rows == 0


def test_eff_curve_view_closed_form(tmp_path):
    # baseline (cap 0): p1 right, p2 wrong -> A_base = 1/2; cap 32: both right, 100 and 300
    # tokens -> A = 1, C = 200 -> Eff = (1 - 1/2) / 200 * 1000 = 2.5
    samples = [{"model": "m", "benchmark": "gsm8k", "problem_id": p, "sample_index": 0,
                "thinking_cap": cap, "budget": None, "correct": c, "completion_tokens": t}
               for cap, p, c, t in [(0, "p1", True, 10), (0, "p2", False, 10),
                                    (32, "p1", True, 100), (32, "p2", True, 300)]]
    wh = Warehouse(tmp_path)
    rows, missing = eff_score_rows(samples, n_boot=100)
    wh.write("eff_scores", rows, partition="all")
    (row,) = wh.sql("SELECT * FROM eff_curve").to_pylist()
    assert missing == [] and row["thinking_cap"] == 32 and row["baseline"] == "m@thinking_cap=0"
    assert row["eff"] == pytest.approx(2.5)
    assert (row["accuracy"], row["baseline_accuracy"], row["mean_tokens"]) == (1.0, 0.5, 200.0)
