"""How the RL rewards grade: once per completion per step, with the benchmark's own grader, and
within a stated bound per call from any thread (sympy bombs and megabyte outputs included).

The grader runs in worker processes (``training.verdicts``); grader calls are counted at the
one place every reward's grading goes through, ``Verdicts._grade_batch``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from eval.graders import grade
from training import rewards as R
from training import verdicts as V

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def graded_items(monkeypatch) -> list[int]:
    """Sizes of the batches sent to the grader, in order."""
    calls: list[int] = []
    original = V.Verdicts._grade_batch

    def spy(self, items, *args, **kwargs):
        calls.append(len(items))
        return original(self, items, *args, **kwargs)

    monkeypatch.setattr(V.Verdicts, "_grade_batch", spy)
    return calls


# ------------------------------------------------------------------ one verdict per step


def test_rewards_of_one_build_grade_each_completion_once_per_step(graded_items):
    specs = R.parse_reward_specs(["outcome", "length_penalty", "budget"])
    funcs, _ = R.build_rewards(specs, num_generations=2)
    batch = {"prompts": ["p", "p", "q", "q"],
             "completions": ["\\boxed{1}", "\\boxed{2}", "so \\boxed{1}", "\\boxed{1}"],
             "answer": ["1"] * 4, "budget": [100] * 4}
    step1 = [fn(trainer_state=SimpleNamespace(global_step=1), **batch) for fn in funcs]
    assert step1[0] == [1.0, 0.0, 1.0, 1.0]  # outcome
    assert step1[2] == [1.0, 0.0, 1.0, 1.0]  # budget: correct and within budget
    assert graded_items == [3]  # 3 distinct completions, graded once for the three rewards
    step2 = [fn(trainer_state=SimpleNamespace(global_step=2), **batch) for fn in funcs]
    assert step2 == step1
    assert graded_items == [3, 3]  # a new step grades again


def test_granularity_shares_the_outcome_verdicts(graded_items):
    specs = R.parse_reward_specs([{"name": "outcome", "answer_format": "sxs", "weight": 0.0},
                                  "granularity"])
    funcs, _ = R.build_rewards(specs, num_generations=2)
    batch = {"prompts": ["p", "p"], "answer": ["4", "4"],
             "completions": ["<think>a</think><speak>\\boxed{4}</speak>",
                             "<think>a b</think><speak>\\boxed{5}</speak>"]}
    state = SimpleNamespace(global_step=7)
    assert funcs[0](trainer_state=state, **batch) == [1.0, 0.0]
    shaped = funcs[1](trainer_state=state, **batch)
    assert shaped[0] > shaped[1]
    assert graded_items == [2]


def test_separate_builds_do_not_share_and_the_cache_is_bounded(graded_items, monkeypatch):
    batch = {"completions": ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"], "answer": ["1"] * 3}
    (a,), _ = R.build_rewards(R.parse_reward_specs(["outcome"]), num_generations=2)
    (b,), _ = R.build_rewards(R.parse_reward_specs(["outcome"]), num_generations=2)
    a(**batch)
    b(**batch)
    assert graded_items == [3, 3]
    monkeypatch.setattr(V, "MAX_CACHED", 2)  # without a trainer state: emptied when over the cap
    a(**batch)
    assert graded_items == [3, 3, 3]


# ------------------------------------------------------------------ multiple choice


MCQ = [
    ("(A).", "A", 1.0),
    ("B)", "B", 1.0),
    ("The answer is C", "C", 1.0),
    ("\\boxed{D}", "D", 1.0),
    ("\\boxed{D}", "A", 0.0),
    ("Because it is hard", "B", 0.0),
    ("The answer is (B).", "(b)", 1.0),
]


@pytest.mark.parametrize("text, gold, expected", MCQ)
def test_outcome_reward_grades_multiple_choice_with_the_benchmark_grader(text, gold, expected):
    fn = R.get_outcome_reward("boxed", grader="choice")
    assert fn(completions=[text], answer=[gold]) == [expected]
    assert expected == float(grade("choice", text, gold).correct)  # evaluation's grader
    assert fn.__name__ == "outcome_boxed_choice"


def test_a_recipe_names_the_grader():
    specs = R.parse_reward_specs([{"name": "outcome", "grader": "choice"},
                                  {"name": "length_penalty", "grader": "choice"}])
    funcs, _ = R.build_rewards(specs, num_generations=2)
    out = [fn(prompts=["p", "p"], completions=["B)", "so (A)."], answer=["B", "B"])
           for fn in funcs]
    assert out[0] == [1.0, 0.0]
    assert out[1] == [0.5, -0.5]  # correct and shorter; wrong and longer
    with pytest.raises(ValueError, match="unknown grader kind 'essay'"):
        R.build_rewards(R.parse_reward_specs([{"name": "outcome", "grader": "essay"}]),
                        num_generations=2)


def test_a_gold_the_choice_grader_cannot_use_is_not_scorable():
    fn = R.get_outcome_reward("boxed", grader="choice")
    assert fn(completions=["\\boxed{A}", "\\boxed{A}"], answer=["Z", "A"]) == [None, 1.0]
    with pytest.raises(ValueError, match="cannot use the gold"):
        R.is_correct("\\boxed{A}", "Z", grader="choice")


# ------------------------------------------------------------------ bounded from any thread


BOMBS = [
    "\\boxed{9^{9^{9^9}}}",
    "\\boxed{10000000!}",
    "\\boxed{" + "\\frac{1}{" * 2000 + "2" + "}" * 4000 + "}",
    "\\boxed{" * 150_000,  # about 1 MB
]


def test_a_group_of_bombs_graded_from_a_thread_finishes_under_a_hard_limit():
    """Liveness check, not a timing assertion: the child process is killed after 90 s. The
    stated bound for this call, once the pool is up, is call_bound_s(5, P, 1): 8 s with P = 2
    grading processes, 12 s with one."""
    code = textwrap.dedent("""
        import json, sys, threading
        from training.rewards import get_outcome_reward
        bombs = json.loads(sys.stdin.read())
        fn = get_outcome_reward("boxed", timeout_s=1)
        out = {}
        def call():
            out["values"] = fn(completions=["so \\\\boxed{7}"] + bombs,
                               answer=["7"] + ["2"] * len(bombs))
        thread = threading.Thread(target=call)
        thread.start()
        thread.join()
        print(json.dumps(out["values"]))
    """)
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, input=json.dumps(BOMBS),
                              capture_output=True, text=True, timeout=90, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("a reward call over sympy bombs did not return within 90 s")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [1.0] + [0.0] * len(BOMBS)
    assert V.call_bound_s(5, 2, 1) == 8.0 and V.call_bound_s(5, 1, 1) == 12.0
