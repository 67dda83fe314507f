"""A sample with no response is not a wrong answer.

Scores leave failed samples out and count them (``eval_scores.failed``); the asset check
``check_eval_samples_failure_share`` fails when a partition's failure share passes the
threshold. Expected values come from brute force (pass@k by enumerating k-subsets) or plain
arithmetic on the rows, never from the scoring code.
"""

from __future__ import annotations

import itertools

import pytest

from eval.runner import score
from warehouse import Warehouse


def _row(problem: str, index: int, correct: bool | None, failed: bool = False) -> dict:
    return {"problem_id": problem, "sample_index": index, "correct": None if failed else correct,
            "extracted": None if failed else ("4" if correct else "5"),
            "gen_error": "HTTP 500: injected (after 1 attempt)" if failed else None}


def _brute_pass_at_k(flags: list[bool], k: int) -> float:
    subsets = list(itertools.combinations(flags, k))
    return sum(any(s) for s in subsets) / len(subsets)


def test_failed_samples_are_left_out_and_counted():
    # 3 problems x 4 samples; every answered sample is correct, 5 of 12 failed
    rows = [_row("a", 0, True), _row("a", 1, True, failed=True), _row("a", 2, True),
            _row("a", 3, True, failed=True),
            _row("b", 0, True, failed=True), _row("b", 1, True), _row("b", 2, True),
            _row("b", 3, True),
            _row("c", 0, True), _row("c", 1, True, failed=True), _row("c", 2, True, failed=True),
            _row("c", 3, True)]
    scores = {(s["metric"], s["k"]): s for s in score(rows, model_label="m", benchmark="b")}
    avg = scores[("avg@k", 4)]
    assert avg["value"] == 1.0  # right on every answered sample
    assert avg["failed"] == 5 and avg["n_samples"] == 7 and avg["n_problems"] == 3
    assert all(s["failed"] == 5 for s in scores.values())
    # pass@k up to the smallest answered count (2), each problem with its own n
    assert {k for (m, k) in scores if m == "pass@k"} == {1, 2}
    assert scores[("maj@k", 4)]["value"] == 1.0


def test_mixed_answers_match_brute_force_per_problem_counts():
    flags = {"a": [True, False, False], "b": [False, True], "c": [True, True, False, False]}
    rows = []
    for pid, answered in flags.items():
        for i, ok in enumerate(answered):
            rows.append(_row(pid, i, ok))
        for j in range(len(answered), 4):  # the rest of the 4 samples failed
            rows.append(_row(pid, j, None, failed=True))
    scores = {(s["metric"], s["k"]): s for s in score(rows, model_label="m", benchmark="b")}
    expected_avg = sum(sum(f) / len(f) for f in flags.values()) / 3
    assert scores[("avg@k", 4)]["value"] == pytest.approx(expected_avg)
    for k in (1, 2):
        expected = sum(_brute_pass_at_k(f, k) for f in flags.values()) / 3
        assert scores[("pass@k", k)]["value"] == pytest.approx(expected)
    assert scores[("avg@k", 4)]["failed"] == 12 - 9


def test_problem_with_only_failures_drops_out_and_all_failed_gives_no_scores():
    rows = [_row("a", 0, True), _row("a", 1, False), _row("b", 0, None, failed=True),
            _row("b", 1, None, failed=True)]
    avg = next(s for s in score(rows, model_label="m", benchmark="b") if s["metric"] == "avg@k")
    assert avg["n_problems"] == 1 and avg["value"] == 0.5 and avg["failed"] == 2
    assert score(rows[2:], model_label="m", benchmark="b") == []


def test_error_storm_scores_answered_samples_and_fails_the_check(eval_env):
    """80% of requests fail (no retries): the model is right on every answered sample, so
    avg@2 must be 1.0, with the failures counted and the failure-share check failing."""
    eval_env.server.error_rate = 0.8
    result = eval_env.evaluate(llm={"max_retries": 0})
    assert result.success  # the run completes; the check carries the verdict
    wh = Warehouse()
    samples = wh.read("eval_samples").to_pylist()
    failed = [s for s in samples if s["gen_error"] is not None]
    answered = [s for s in samples if s["gen_error"] is None]
    assert len(samples) == 12 and failed and answered
    assert all(s["correct"] is None for s in failed)
    assert all(s["correct"] is True for s in answered)
    scores = {(r["metric"], r["k"]): r for r in wh.read("eval_scores").to_pylist()}
    assert scores[("avg@k", 2)]["value"] == 1.0
    assert scores[("avg@k", 2)]["failed"] == len(failed)
    assert scores[("avg@k", 2)]["n_samples"] == len(answered)
    checks = eval_env.checks(result)
    share = checks["check_eval_samples_failure_share"]
    assert share.passed is False
    assert share.metadata["failed"].value == len(failed)
    assert checks["check_eval_samples_all_graded"].passed is True  # answered ones are graded


def test_failure_share_threshold_is_configurable(eval_env):
    eval_env.server.plan.extend(["500"])  # exactly one of 12 samples fails: 8.3%
    strict = eval_env.evaluate(llm={"max_retries": 0}, selection=("eval_samples",))
    assert eval_env.checks(strict)["check_eval_samples_failure_share"].passed is False
    eval_env.server.plan.extend(["500"])
    lenient = eval_env.evaluate(llm={"max_retries": 0}, selection=("eval_samples",),
                                max_failure_share=0.10, seed=4)
    assert eval_env.checks(lenient)["check_eval_samples_failure_share"].passed is True
    bad = eval_env.evaluate(selection=("eval_samples",), max_failure_share=5)
    assert not bad.success
    failure = next(e for e in bad.all_events if e.event_type_value == "STEP_FAILURE")
    assert "max_failure_share" in str(failure.event_specific_data.error)
