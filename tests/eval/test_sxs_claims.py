"""The SxS latency claim's parts (eval/sxs_claims.py) judged from interleaved-mode samples
whose differences are known by construction, and the judge's quality figures counted by hand."""

import numpy as np
import pytest

from eval.claims import ClaimError
from eval.sxs_claims import claims_of, judge_quality
from warehouse import Lineage, Warehouse


def _samples(wh, model, values, run_id, mode="interleaved", partition=None):
    """``values``: problem -> [(correct, abo, airw), ...] one tuple per sample."""
    rows = [{"model": model, "benchmark": "gsm8k", "problem_id": pid, "sample_index": i,
             "mode": mode, "correct": bool(c), "abo": abo, "airw": airw}
            for pid, samples in values.items() for i, (c, abo, airw) in enumerate(samples)]
    wh.write("eval_samples", rows, lineage=Lineage(run_id=run_id, asset="eval_samples",
                                                   partition=partition or f"gsm8k@{model}"))


def test_claim_parts_from_interleaved_samples(weft_home):
    wh = Warehouse()
    rng = np.random.default_rng(1)
    pids = [f"p{i:02d}" for i in range(24)]
    standard = {p: [(int(rng.integers(0, 2)), float(rng.uniform(300, 400)), None)
                    for _ in range(2)] for p in pids}
    standard = {p: [(c, abo, abo - 1) for c, abo, _ in s] for p, s in standard.items()}
    sxs = {p: [(int(rng.integers(0, 2)), float(rng.uniform(50, 150)), float(rng.uniform(10, 60)))
               for _ in range(2)] for p in pids}
    # the standard arm never reached its answer on p00 (both samples), SxS on one sample of p01
    standard["p00"] = [(0, None, None), (0, None, None)]
    sxs["p01"] = [sxs["p01"][0], (0, None, None)]
    _samples(wh, "ck-std", standard, "r1")
    _samples(wh, "ck-sxs", sxs, "r2")
    abo, airw, acc = claims_of(wh, "ck-std", "ck-sxs", "gsm8k", n_boot=2000)[0]

    def per_problem(arm, index):
        out = {}
        for p, samples in arm.items():
            vals = [s[index] for s in samples if s[index] is not None]
            if vals:
                out[p] = sum(vals) / len(vals)
        return out

    for row, index in ((abo, 1), (airw, 2)):
        ref, treat = per_problem(standard, index), per_problem(sxs, index)
        paired = sorted(set(ref) & set(treat))
        assert paired == pids[1:]  # p00 has no standard value; p01 keeps its one SxS sample
        assert row["n"] == 23
        assert row["diff"] == pytest.approx(np.mean([treat[p] - ref[p] for p in paired]))
        assert row["higher_is_better"] is False and row["verdict"] == "reproduced"
    accuracy = {name: {p: np.mean([s[0] for s in arm[p]]) for p in pids}
                for name, arm in (("std", standard), ("sxs", sxs))}
    # Table 1's direction after SFT: standard-CoT SFT is the more accurate arm, so it is this
    # part's treatment and the difference is standard - SxS
    assert acc["n"] == 24 and acc["kind"] == "better" and acc["margin"] is None
    assert (acc["reference"], acc["treatment"]) == ("SxS SFT", "standard-CoT SFT")
    assert (acc["bound_low"], acc["bound_high"]) == (0.0, 1.0)
    assert acc["diff"] == pytest.approx(np.mean([accuracy["std"][p] - accuracy["sxs"][p]
                                                 for p in pids]))
    assert "38.3" in acc["paper_value"] and "62.9" in acc["paper_value"]
    coverage = claims_of(wh, "ck-std", "ck-sxs", "gsm8k", n_boot=200)[1]
    assert coverage["reference_samples_without_speak"] == 2
    assert coverage["treatment_samples_without_speak"] == 1
    assert coverage["abo"] == {"problems_paired": 23, "reference_problems": 23,
                               "treatment_problems": 24}


def test_latency_the_wrong_way_is_not_reproduced(weft_home):
    wh = Warehouse()
    pids = [f"p{i}" for i in range(12)]
    _samples(wh, "ck-std", {p: [(1, 100.0 + i, 99.0 + i)] for i, p in enumerate(pids)}, "r1")
    _samples(wh, "ck-sxs", {p: [(1, 500.0 + i, 400.0)] for i, p in enumerate(pids)}, "r2")
    abo, airw, acc = claims_of(wh, "ck-std", "ck-sxs", "gsm8k", n_boot=500)[0]
    assert abo["diff"] == pytest.approx(400.0) and abo["verdict"] == "not reproduced"
    assert airw["verdict"] == "not reproduced"
    # every problem right in both arms: no variation to compare, whatever the kind
    assert acc["diff"] == 0.0 and acc["verdict"] == "inconclusive"


def test_too_few_answered_problems_is_a_claim_error(weft_home):
    wh = Warehouse()
    _samples(wh, "ck-std", {"a": [(0, None, None)], "b": [(0, 12.0, 11.0)]}, "r1")
    _samples(wh, "ck-sxs", {"a": [(0, 3.0, 2.0)], "b": [(0, 4.0, 1.0)]}, "r2")
    with pytest.raises(ClaimError, match="only 1 held-out problem"):
        claims_of(wh, "ck-std", "ck-sxs", "gsm8k")
    # single-mode rows of the same models are not read
    _samples(wh, "ck-std", {"a": [(0, 5.0, 4.0)], "b": [(0, 12.0, 11.0)]}, "r3", mode="single",
             partition="gsm8k@ck-std/single")
    with pytest.raises(ClaimError, match="only 1 held-out problem"):
        claims_of(wh, "ck-std", "ck-sxs", "gsm8k")


def test_judge_quality_counts_values_shown_before_the_reasoning_wrote_them():
    traces = {"t1": {"problem": "What is 2 + 3?", "reasoning": "Add them.\n\nWe get 5.\n\nCheck.",
                     "response": "The sum is 5.\n\nDone."},
              "t2": {"problem": "What is 6 * 7?", "reasoning": "Multiply.\n\nIt is 42.",
                     "response": "So 42.\n\nAnswer: 42"}}
    alignments = [
        # t1: "The sum is 5." shown after R1 (5 not yet written) -> unsupported; "Done." after R2
        {"trace_id": "t1", "repaired": [1, 2, 2], "judge_model": "m", "collapsed": False,
         "n_visible_segments": 2, "calls_made": 2, "calls_failed": 1},
        # t2: everything at the last block (terminal safeguard): collapsed, nothing early
        {"trace_id": "t2", "repaired": [0, 2], "judge_model": "m", "collapsed": True,
         "n_visible_segments": 1, "calls_made": 1, "calls_failed": 0}]
    q = judge_quality(alignments, traces)
    assert q["judge"] == ["m"] and q["samples"] == 2
    assert q["share_collapsed"] == 0.5 and q["mean_visible_segments"] == 1.5
    assert q["judge_calls"] == 3 and q["share_calls_failed"] == pytest.approx(1 / 3)
    assert q["early_answer_blocks"] == 2 and q["share_early_blocks_unsupported"] == 0.5
    with pytest.raises(ValueError, match="has no row in traces"):
        judge_quality(alignments, {"t1": traces["t1"]})
