"""The DeepTool / MOSAIC claims (eval/mosaic_claims.py): Table 2's synthesis claim judged on
warehouse rows whose differences are known by construction, and the recovery rule on hand-made
injected tool-mode samples, against counts worked out by hand."""

import numpy as np
import pytest

from eval.claims import ClaimError
from eval.mosaic_claims import (
    newest_run_rows,
    recovery_claim_row,
    recovery_outcome,
    recovery_scores,
    synthesis_claims,
)
from warehouse import Lineage, Warehouse

# ---- Table 2 on synthetic rows ----------------------------------------------------------------


def _traj_rows(pids, correct, turns, *, max_steps=4, seed=0):
    return [{"trajectory_id": f"t-{p}", "problem_id": p, "source": "gsm8k",
             "correct": bool(correct[p]), "num_turns": int(turns[p]), "max_steps": max_steps,
             "seed": seed} for p in pids]


def _write(wh, table, rows, partition, run_id):
    wh.write(table, rows, lineage=Lineage(run_id=run_id, asset=table, partition=partition))


def test_synthesis_claims_pair_mosaic_and_baseline_by_problem(weft_home):
    wh = Warehouse()
    rng = np.random.default_rng(1)
    pids = [f"p{i:02d}" for i in range(40)]
    m_ok = {p: int(x) for p, x in zip(pids, rng.integers(0, 2, 40))}
    b_ok = {p: int(x) for p, x in zip(pids, rng.integers(0, 2, 40))}
    m_turns = {p: int(x) for p, x in zip(pids, rng.integers(3, 6, 40))}
    b_turns = {p: int(x) for p, x in zip(pids, rng.integers(1, 3, 40))}
    _write(wh, "mosaic_trajectories", _traj_rows(pids, m_ok, m_turns), "gsm8k/rho=0.1", "r1")
    _write(wh, "mosaic_baseline_trajectories", _traj_rows(pids, b_ok, b_turns), "gsm8k", "r2")
    # another ρ of the same source: never read by the ρ = 0.1 claim
    _write(wh, "mosaic_trajectories", _traj_rows(pids, {p: 1 for p in pids},
                                                 {p: 9 for p in pids}), "gsm8k/rho=0.2", "r3")
    acc, turns = synthesis_claims(wh, "gsm8k", 0.1, n_boot=2000)
    assert acc["diff"] == pytest.approx(np.mean([m_ok[p] - b_ok[p] for p in pids]))
    assert acc["treatment_value"] == pytest.approx(sum(m_ok.values()) / 40)
    assert acc["reference_value"] == pytest.approx(sum(b_ok.values()) / 40)
    assert turns["diff"] == pytest.approx(np.mean([m_turns[p] - b_turns[p] for p in pids]))
    assert acc["n"] == turns["n"] == 40
    # MOSAIC takes 1 to 4 more turns on every problem: the turns part reproduces
    assert turns["verdict"] == "reproduced" and turns["diff_ci_low"] > 0
    assert acc["section"] == turns["section"] == "Table 2 (gsm8k)"
    assert acc["kind"] == "better" and acc["higher_is_better"]


def test_synthesis_claims_refuse_unpaired_or_unlike_runs(weft_home):
    wh = Warehouse()
    pids = ["a", "b", "c"]
    ones = {p: 1 for p in pids}
    with pytest.raises(ClaimError, match="no MOSAIC trajectories of 'gsm8k' at rho=0.1"):
        synthesis_claims(wh, "gsm8k")
    _write(wh, "mosaic_trajectories", _traj_rows(pids, ones, ones), "gsm8k/rho=0.1", "r1")
    with pytest.raises(ClaimError, match="no baseline trajectories"):
        synthesis_claims(wh, "gsm8k")
    _write(wh, "mosaic_baseline_trajectories", _traj_rows(pids[:2], ones, ones), "gsm8k", "r2")
    with pytest.raises(ClaimError, match="different problems .1 only in MOSAIC"):
        synthesis_claims(wh, "gsm8k")
    _write(wh, "mosaic_baseline_trajectories", _traj_rows(pids, ones, ones, max_steps=6),
           "gsm8k", "r3")
    with pytest.raises(ClaimError, match="different max_steps"):
        synthesis_claims(wh, "gsm8k")


def test_newest_run_rows_keeps_only_the_last_writer():
    rows = [{"run_id": "old", "created_at": "2026-01-01", "x": 1},
            {"run_id": "new", "created_at": "2026-02-01", "x": 2},
            {"run_id": "new", "created_at": "2026-02-01", "x": 3}]
    assert [r["x"] for r in newest_run_rows(rows)] == [2, 3]
    assert newest_run_rows([]) == []


# ---- the recovery rule on hand-made injected samples --------------------------------------


def _sample(pid, index, *, cells, errors, correct, kind="timeout"):
    """An injected tool-mode sample as the evaluation writes it: ``cells`` run, ``errors`` of
    them failed (the injected first cell among them), the failure it met (none without a
    cell) and the verdict."""
    return {"problem_id": pid, "sample_index": index, "cells": cells, "tool_errors": errors,
            "correct": correct, "injected_failure": kind if cells else None}


@pytest.mark.parametrize("cells, errors, correct, expected", [
    (0, 0, True, (False, False, False)),   # answered without a cell: never met the error
    (1, 1, True, (True, True, False)),     # right anyway, no later cell
    (1, 1, False, (True, False, False)),   # gave up after the failure
    (2, 1, True, (True, True, True)),      # reran the cell and answered right
    (2, 1, False, (True, False, True)),    # reran the cell, answered wrong
    (3, 3, False, (True, False, False)),   # every later cell failed too
    (3, 2, None, (True, False, True)),     # no verdict is not correct
])
def test_recovery_outcome_of_one_sample(cells, errors, correct, expected):
    assert recovery_outcome(_sample("p", 0, cells=cells, errors=errors,
                                    correct=correct)) == expected


def test_recovery_outcome_refuses_samples_of_another_evaluation():
    with pytest.raises(ClaimError, match="needs a tool-mode evaluation"):
        recovery_outcome({"problem_id": "x", "tool_errors": 1, "correct": True})
    with pytest.raises(ClaimError, match="without an injected failure"):
        recovery_outcome({"problem_id": "x", "cells": 2, "tool_errors": 0, "correct": True,
                          "injected_failure": None})


def test_every_sample_is_in_the_denominator_whatever_the_arm_wrote():
    """An arm that writes no cell on a sample scores 0 there and keeps the sample in its
    denominator: each problem's score is over its k samples, the same k in both arms."""
    samples = [_sample("a", 0, cells=2, errors=1, correct=True),
               _sample("a", 1, cells=0, errors=0, correct=True),   # no cell: 0, still counted
               _sample("a", 2, cells=1, errors=1, correct=False),
               _sample("a", 3, cells=2, errors=1, correct=True),
               _sample("b", 0, cells=0, errors=0, correct=True),
               _sample("b", 1, cells=0, errors=0, correct=False)]
    assert recovery_scores(samples) == {"a": 2 / 4, "b": 0.0}


def _arm(spec, kinds=None):
    """spec: {problem: [(cells, errors, correct), ...]}; kinds: {(problem, sample): kind}."""
    kinds = kinds or {}
    return [_sample(p, i, cells=c, errors=e, correct=ok, kind=kinds.get((p, i), "timeout"))
            for p, items in spec.items() for i, (c, e, ok) in enumerate(items)]


def test_recovery_claim_pairs_problems_over_all_their_samples():
    # the treatment met the error on every sample; the reference skipped the cell on three
    # (as a model that learned to write cells less would): the denominators stay 2 per problem
    ref = _arm({"a": [(1, 1, False), (0, 0, True)], "b": [(2, 1, True), (0, 0, False)],
                "c": [(2, 1, True), (2, 1, True)], "d": [(0, 0, True), (1, 1, False)]})
    treat = _arm({"a": [(2, 1, True), (1, 1, False)], "b": [(2, 1, True), (2, 1, True)],
                  "c": [(1, 1, False), (2, 1, True)], "d": [(3, 2, True), (2, 2, False)]})
    row, facts = recovery_claim_row(ref, treat, n_boot=500)
    # by hand, per problem: reference a 0, b 1/2, c 1, d 0 -> mean 3/8;
    # treatment a 1/2, b 1, c 1/2, d 1/2 -> mean 5/8
    assert row["reference_value"] == pytest.approx(3 / 8)
    assert row["treatment_value"] == pytest.approx(5 / 8)
    assert row["diff"] == pytest.approx(2 / 8) and row["n"] == 4
    assert row["reference"] == "SFT rho=0" and row["treatment"] == "SFT rho=0.1"
    assert facts["problems"] == 4 and facts["met_the_same_error_in_both"] == 5
    assert (facts["samples_reference"], facts["samples_treatment"]) == (8, 8)
    assert (facts["met_error_reference"], facts["met_error_treatment"]) == (5, 8)
    assert (facts["wrote_no_cell_reference"], facts["wrote_no_cell_treatment"]) == (3, 0)
    assert (facts["recovered_reference"], facts["recovered_treatment"]) == (3, 5)
    assert (facts["ran_a_later_cell_reference"], facts["ran_a_later_cell_treatment"]) == (3, 5)
    assert (facts["correct_reference"], facts["correct_treatment"]) == (5, 5)


def test_recovery_claim_refuses_arms_that_met_different_errors_or_samples():
    ref = _arm({"a": [(2, 1, True)], "b": [(2, 1, True)]})
    other = _arm({"a": [(2, 1, True)], "b": [(2, 1, True)]}, {("b", 0): "kernel_restart"})
    with pytest.raises(ClaimError, match="met 'timeout' in the reference and 'kernel_restart'"):
        recovery_claim_row(ref, other, n_boot=100)
    with pytest.raises(ClaimError, match="evaluated on different samples"):
        recovery_claim_row(ref, _arm({"a": [(2, 1, True)]}), n_boot=100)
    with pytest.raises(ClaimError, match="holds sample 0 of problem 'a' twice"):
        recovery_claim_row(ref + ref[:1], ref, n_boot=100)
    # a sample without a cell in one arm meets nothing there: no conflict
    fine = _arm({"a": [(0, 0, True)], "b": [(2, 1, True)]})
    row, facts = recovery_claim_row(ref, fine, n_boot=100)
    assert facts["met_the_same_error_in_both"] == 1 and row["n"] == 2
