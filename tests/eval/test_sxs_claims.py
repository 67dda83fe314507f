"""The SxS judge's quality figures (eval/sxs_claims.py), counted by hand. The latency parts'
rule and pairing are tested in tests/eval/test_latency_formats.py and
tests/assets/test_results_sxs.py."""

import pytest

from eval.sxs_claims import judge_quality


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
