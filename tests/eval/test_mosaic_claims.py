"""The DeepTool / MOSAIC claims (eval/mosaic_claims.py): Table 2's synthesis claim judged on
warehouse rows whose differences are known by construction, and the recovery rule on hand-made
tool-mode samples, against counts worked out by hand."""

import numpy as np
import pytest

from eval.claims import ClaimError
from eval.mosaic_claims import (
    newest_run_rows,
    recovery_claim_row,
    recovery_counts,
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


# ---- the recovery rule on hand-made samples ---------------------------------------------------


def _samples(spec):
    """spec: {problem: [(tool_errors, correct), ...]} -> eval_samples-like rows."""
    return [{"problem_id": p, "sample_index": i, "tool_errors": e, "correct": c}
            for p, items in spec.items() for i, (e, c) in enumerate(items)]


def test_recovery_counts_the_correct_erroring_samples_per_problem():
    counts, erring = recovery_counts(_samples({
        "a": [(1, True), (2, False), (0, True)],  # 2 erroring samples, 1 of them correct
        "b": [(0, True), (0, False)],  # no error: nothing to recover from
        "c": [(3, None)],  # an ungraded answer is not a recovery
        "d": [(1, True)],
    }))
    assert counts == {"a": (1, 2), "b": (0, 0), "c": (0, 1), "d": (1, 1)} and erring == 4
    with pytest.raises(ClaimError, match="needs a tool-mode evaluation"):
        recovery_counts([{"problem_id": "x", "tool_errors": None, "correct": True}])


def test_recovery_claim_compares_rates_of_recovering_over_erroring_samples():
    ref = _samples({"a": [(1, False), (1, False)], "b": [(1, True), (0, True)],
                    "c": [(0, True)], "d": [(2, False)]})
    treat = _samples({"a": [(1, True), (1, False)], "b": [(1, True)],
                      "c": [(1, True)], "d": [(0, True)]})
    row, facts = recovery_claim_row(ref, treat, n_boot=500)
    # by hand: reference 1 of 4 erroring samples correct, treatment 3 of 4; every problem
    # counts (c erred only in the treatment, d only in the reference)
    assert row["reference_value"] == pytest.approx(1 / 4)
    assert row["treatment_value"] == pytest.approx(3 / 4)
    assert row["diff"] == pytest.approx(0.5) and row["n"] == 4
    assert facts["problems"] == 4 and facts["problems_with_errors_in_both"] == 2
    assert facts["erroring_samples_reference"] == 4 and facts["erroring_samples_treatment"] == 4
    assert facts["recovered_samples_reference"] == 1 and facts["recovered_samples_treatment"] == 3
    assert row["reference"] == "SFT rho=0" and row["treatment"] == "SFT rho=0.1"
    no_errors = _samples({"a": [(0, True)], "b": [(0, False)], "c": [(0, True)],
                          "d": [(0, True)]})
    with pytest.raises(ClaimError, match="reference .rho=0. arm hit no interpreter error"):
        recovery_claim_row(no_errors, treat, n_boot=100)


def test_recovery_claim_judges_arms_that_err_on_different_problems():
    """The counts of the CPU run that found no problem erring in both arms: 2 erroring samples
    on 2 problems (reference) and 14 on 12 (treatment), none recovered. Both rates are 0 in
    every resample, so the part is inconclusive (not 'not reproduced'), with a row to show."""
    def errors(spec):  # problem -> erroring samples of 4, none correct
        return _samples({f"p{i}": [(1, False)] * spec.get(i, 0)
                         + [(0, False)] * (4 - spec.get(i, 0)) for i in range(40)})

    ref = errors({0: 1, 1: 1})
    treat = errors({2: 3, **{i: 1 for i in range(3, 14)}})
    row, facts = recovery_claim_row(ref, treat, n_boot=300)
    assert (facts["erroring_samples_reference"], facts["erroring_samples_treatment"]) == (2, 14)
    assert facts["problems_with_errors_in_both"] == 0 and row["n"] == 40
    assert row["reference_value"] == row["treatment_value"] == row["diff"] == 0.0
    assert row["verdict"] == "inconclusive"
