"""The Table 5 claim (training/ep_budget_claims.py) judges budgeted success at the smallest budget
of the newest table: per-problem "correct and within the budget" at that budget, paired by
problem, against hand-counted values; larger budgets, where the arms compare the other way, are
not what it reads."""

from __future__ import annotations

import pytest

from training.ep_budget import ARM_EP, HELDOUT_BENCHMARK
from training.ep_budget_claims import table5_claims
from warehouse import Lineage, Warehouse

PIDS = [f"q{i}" for i in range(10)]
# measured budgets of a run (e.g. the start's 25th, 50th and 75th length percentiles)
BUDGETS = (18, 25, 33)


def _samples(model, run_id, tokens):
    """Every answer right; ``tokens[budget][problem]`` tokens used."""
    rows = [{"model": model, "benchmark": HELDOUT_BENCHMARK, "problem_id": p, "sample_index": 0,
             "correct": True, "budget": b, "tokens_used": tokens[b][p]}
            for b in BUDGETS for p in PIDS]
    Warehouse().write("eval_samples", rows, lineage=Lineage(
        run_id=run_id, asset="eval_samples", partition=f"{HELDOUT_BENCHMARK}@{model}"))


def test_the_claim_judges_at_the_smallest_budget(weft_home):
    # at 18 tokens EP-aware fits on 8 of 10 problems, RLVR on 2 (difference 0.6); at 25 and 33
    # RLVR fits everywhere and EP-aware nowhere (a judge at those budgets would read -1)
    ep = {18: {p: (15 if i < 8 else 30) for i, p in enumerate(PIDS)},
          25: {p: 40 for p in PIDS}, 33: {p: 40 for p in PIDS}}
    rl = {18: {p: (16 if i < 2 else 22) for i, p in enumerate(PIDS)},
          25: {p: 20 for p in PIDS}, 33: {p: 20 for p in PIDS}}
    _samples("ck-ep", "e1", ep)
    _samples("ck-rl", "e2", rl)
    wh = Warehouse()
    wh.write("ep_budget_scores", [
        {"arm": arm, "model": model, "budget": b, "table_id": "t1"}
        for arm, model in ((ARM_EP, "ck-ep"), ("rlvr", "ck-rl")) for b in BUDGETS],
        partition="t1")
    (row,) = table5_claims(wh)
    assert row["metric"] == "BS@18"
    assert row["reference"] == "rlvr" and row["treatment"] == ARM_EP
    assert row["reference_value"] == pytest.approx(0.2)
    assert row["treatment_value"] == pytest.approx(0.8)
    assert row["diff"] == pytest.approx(0.6) and row["n"] == 10
    assert row["n_discordant"] == 6
