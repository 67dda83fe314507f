"""The `code` reward against the real bubblewrap sandbox: verdicts for good, wrong, broken,
endless and hostile programs; None for problems that cannot be graded; one warm pool reused
across calls; the time bound of a call; agreement with the evaluation grader."""

import json
import time
import uuid
from pathlib import Path

import pytest

from eval.code_grader import extract_code, grade_code_many, load_benchmark
from pipelines.sandbox import SandboxPool
from training import rewards as R
from training.code_tasks import all_generated_problems

CHAT = lambda text: [{"role": "assistant", "content": text}]
TIMEOUT_S = 1.5

# Two tasks from the generator: their canonical solutions are in the problem.
PROBLEMS = {pid: problem for pid, _text, problem in all_generated_problems()}
SUM3 = PROBLEMS["code-sum_multiples-3"]
BASE2 = PROBLEMS["code-to_base-2"]

GOOD = "def sum_multiples_of_3(nums):\n    total = 0\n    for x in nums:\n        if x % 3 == 0:\n            total += x\n    return total\n"
FENCED_GOOD = f"Here is my solution.\n\n```python\n{GOOD}```\n\nIt adds the multiples of 3."


def _hostile_write(marker: Path) -> str:
    """A right answer that also tries to create ``marker`` on the host, two ways."""
    return (f"import os\nos.system('mkdir -p {marker.parent} && touch {marker}')\n"
            f"try:\n    open({str(marker)!r} + '.py', 'w').write('x')\nexcept OSError:\n"
            f"    pass\n" + GOOD)


CASES = [  # (name, completion, expected reward)
    ("correct, fenced", FENCED_GOOD, 1.0),
    ("correct, bare code", GOOD, 1.0),
    ("correct, chat message", CHAT(FENCED_GOOD), 1.0),
    ("wrong: sums everything", "def sum_multiples_of_3(nums):\n    return sum(nums)\n", 0.0),
    ("wrong: misses negatives",
     "def sum_multiples_of_3(nums):\n    return sum(x for x in nums if x > 0 and x % 3 == 0)\n",
     0.0),
    ("wrong name", GOOD.replace("sum_multiples_of_3", "sum_of_threes"), 0.0),
    ("syntax error", "def sum_multiples_of_3(nums:\n    return 0\n", 0.0),
    ("no code at all", "I am not sure how to do this.", 0.0),
    ("empty", "", 0.0),
    ("endless loop", "def sum_multiples_of_3(nums):\n    while True:\n        pass\n", 0.0),
    ("endless loop at import", "while True:\n    pass\n" + GOOD, 0.0),
    ("always-equal object",
     ("class Same:\n    def __eq__(self, other):\n        return True\n"
     "    def __hash__(self):\n        return 0\n"
     "def sum_multiples_of_3(nums):\n    return Same()\n"), 0.0),
    ("int subclass equal to everything",
     ("class Yes(int):\n    def __eq__(self, other):\n        return True\n"
     "def sum_multiples_of_3(nums):\n    return Yes(0)\n"), 0.0),
    ("exits before the tests", "import sys\nsys.exit(0)\n" + GOOD, 0.0),
    ("hard exit in the function",
     "import os\ndef sum_multiples_of_3(nums):\n    os._exit(0)\n", 0.0),
    ("prints a fake result",
     "print('[[\"ok\", 0]]')\ndef sum_multiples_of_3(nums):\n    return 0\n", 0.0),
    ("runs a shell command and returns its status",
     "import os\ndef sum_multiples_of_3(nums):\n    return os.system('echo pwned')\n", 0.0),
    ("memory bomb", "def sum_multiples_of_3(nums):\n    x = [0] * (10 ** 10)\n    return 0\n",
     0.0),
    # values the host cannot render or compare cheaply are failed items, never unscorable
    ("an int past the host's digit limit",
     "def sum_multiples_of_3(nums):\n    return 10 ** 5000\n", 0.0),
    ("a negative int past the host's digit limit",
     "def sum_multiples_of_3(nums):\n    return -(7 ** 6000)\n", 0.0),
    ("a set of ints that share one hash",
     "def sum_multiples_of_3(nums):\n    return {i * (2 ** 61 - 1) for i in range(2000)}\n",
     0.0),
    ("dict keys that share one hash",
     "def sum_multiples_of_3(nums):\n    return {float(2 ** (61 * k)): 0 for k in range(16)}\n",
     0.0),
    ("tuples that share one hash",
     ("def sum_multiples_of_3(nums):\n"
      "    return {(i * (2 ** 61 - 1), 0) for i in range(2000)}\n"), 0.0),
]


@pytest.fixture(scope="module")
def reward():
    fn = R.get_code_reward(timeout_s=TIMEOUT_S, workers=2)
    yield fn
    fn.close()


def test_code_reward_runs_in_the_real_jail(reward):
    assert reward.__name__ == "code" and reward.required_columns == ("code_problem",)
    assert reward.pool.get().isolation == "bwrap"


def test_code_reward_table(reward):
    completions = [c for _, c, _ in CASES]
    out = reward(completions=completions, code_problem=[json.dumps(SUM3)] * len(CASES))
    got = {name: value for (name, _, _), value in zip(CASES, out)}
    assert got == {name: expected for name, _, expected in CASES}


def test_a_hostile_program_changes_nothing_on_the_host(reward, tmp_path):
    marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
    out = reward(completions=[_hostile_write(marker)], code_problem=[json.dumps(SUM3)])
    # the program ran (it still defines the right function) but wrote nowhere on the host
    assert out == [1.0]
    assert not marker.exists() and not Path(f"{marker}.py").exists()


def test_each_row_is_graded_against_its_own_problem(reward):
    base2 = "def to_base_2(n):\n    return bin(n)[2:]\n"
    out = reward(completions=[GOOD, base2, base2, GOOD],
                 code_problem=[json.dumps(SUM3), json.dumps(BASE2), SUM3, BASE2])  # dicts too
    assert out == [1.0, 1.0, 0.0, 0.0]


def test_endless_loops_finish_within_the_stated_bound(reward):
    loop = "def sum_multiples_of_3(nums):\n    while True:\n        pass\n"
    reward(completions=[GOOD], code_problem=[json.dumps(SUM3)])  # reference outputs known now
    n = 6
    start = time.monotonic()
    out = reward(completions=[loop] * n, code_problem=[json.dumps(SUM3)] * n)
    elapsed = time.monotonic() - start
    assert out == [0.0] * n
    assert elapsed <= R.code_call_bound_s(n, 2, TIMEOUT_S)
    # and the limit was really enforced per program: 3 waves of 2 workers, each ~TIMEOUT_S
    assert elapsed >= 3 * TIMEOUT_S * 0.9


@pytest.mark.parametrize("value, why", [
    (None, "expected a JSON object"),
    ("", "not JSON"),
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
    (json.dumps({"question": "what?"}), "cannot tell the benchmark"),
    (json.dumps({k: v for k, v in SUM3.items() if k != "entry_point"}), "needs ['entry_point']"),
    (json.dumps({k: v for k, v in SUM3.items() if k != "canonical_solution"}),
     "needs ['canonical_solution']"),
    (json.dumps({**SUM3, "base_input": "1, 2"}), "must be a list"),
    (json.dumps({"benchmark": "humaneval", "prompt": "def f():\n", "entry_point": "f"}),
     "needs ['test']"),
])
def test_unparseable_problems_are_none_with_a_reason(reward, value, why, caplog):
    problem, reason = R.parse_code_problem(value)
    assert problem is None and why in reason
    with caplog.at_level("WARNING", logger="training.rewards"):
        out = reward(completions=[GOOD, GOOD], code_problem=[value, json.dumps(SUM3)])
    assert out == [None, 1.0]  # the good row in the same batch is still graded
    assert why in caplog.text


def test_a_reference_solution_that_fails_makes_only_its_rows_none(reward, caplog):
    broken = {**SUM3, "task_id": "broken", "entry_point": "g",
              "canonical_solution": "def g(nums:\n"}  # the reference does not even compile
    with caplog.at_level("WARNING", logger="training.rewards"):
        out = reward(completions=["def g(nums):\n    return 0\n", GOOD],
                     code_problem=[json.dumps(broken), json.dumps(SUM3)])
    assert out == [None, 1.0]
    assert "broken" in caplog.text and "never closed" in caplog.text  # the grader's reason


@pytest.mark.parametrize("extra", [
    {"assertion": ""},  # no input and no assertion: nothing to run
    # an assertion that needs a name only the reference imports: the grader leaves it out
    {"assertion": "assert re.match('b', f('a'))", "entry_point": "f",
     "canonical_solution": "import re\ndef f(s):\n    return re.sub('a', 'b', s)\n"},
])
def test_a_problem_with_no_test_left_scores_none_not_a_pass(reward, extra, caplog):
    problem = {**SUM3, "task_id": "untested", "base_input": [], **extra}
    with caplog.at_level("WARNING", logger="training.rewards"):
        out = reward(completions=["def f(s):\n    return 'anything'\n", GOOD],
                     code_problem=[json.dumps(problem), json.dumps(SUM3)])
    assert out == [None, 1.0]
    assert "untested: grading failed" in caplog.text and "nothing to grade" in caplog.text


def test_missing_column_names_it():
    fn = R.get_code_reward()
    with pytest.raises(KeyError, match="code_problem"):
        fn(completions=[GOOD], answer=["3"])


@pytest.mark.parametrize("args, match", [
    ({"timeout_s": 0}, "timeout_s"), ({"timeout_s": True}, "timeout_s"),
    ({"workers": 0}, "workers"), ({"workers": 1.5}, "workers"),
])
def test_bad_factory_arguments(args, match):
    for factory in (R.get_code_reward, R.get_code_tests_reward):
        with pytest.raises(ValueError, match=match):
            factory(**args)


def test_pool_is_made_once_and_reused_across_calls():
    fn = R.get_code_reward(timeout_s=TIMEOUT_S, workers=2)
    try:
        assert fn.pool.created == 0  # nothing started before the first call
        fn(completions=[GOOD, GOOD, FENCED_GOOD], code_problem=[json.dumps(SUM3)] * 3)
        pool = fn.pool.get()
        runners = list(pool._runners)
        runs = sum(r.runs for r in runners)
        fn(completions=[GOOD, "def sum_multiples_of_3(n):\n    return 1\n"],
           code_problem=[json.dumps(SUM3)] * 2)
        assert fn.pool.created == 1 and fn.pool.get() is pool
        assert pool._runners == runners and len(runners) == 2  # the same warm jails
        assert sum(r.runs for r in pool._runners) == runs + 2  # one run per program, no cold jail
        assert all(r.restarts == 0 for r in runners)
    finally:
        fn.close()
    assert pool._closed and fn.pool._pool is None
    try:  # a closed reward starts a fresh pool when called again
        assert fn(completions=[GOOD], code_problem=[json.dumps(SUM3)]) == [1.0]
        assert fn.pool.created == 2
    finally:
        fn.close()


def test_code_tests_is_the_share_of_tests_passed():
    fn = R.get_code_tests_reward(timeout_s=TIMEOUT_S)
    try:
        # correct except on the empty list (an edge input) and on inputs with no multiple of 3
        odd = "def sum_multiples_of_3(nums):\n    return sum(x for x in nums if x % 3 == 0) or None\n"
        out = fn(completions=[GOOD, odd, "syntax (("], code_problem=[json.dumps(SUM3)] * 3)
    finally:
        fn.close()
    assert fn.__name__ == "code_tests"
    assert out[0] == 1.0 and out[2] == 0.0 and 0.0 < out[1] < 1.0
    n = len(SUM3["base_input"])
    assert out[1] * n == pytest.approx(round(out[1] * n))  # a whole number of tests passed


def _eval_verdicts(completions, problems, partial=False):
    """What code evaluation decides (eval.runner.grade's code path: extract_code, then
    grade_code_many) on its own pool."""
    with SandboxPool(workers=2) as pool:
        results = grade_code_many([extract_code(c, p.get("entry_point"))
                                   for c, p in zip(completions, problems)],
                                  problems, pool=pool, timeout_s=TIMEOUT_S)
    if partial:
        return [r.tests_passed / r.tests_total for r in results]
    return [float(r.passed) for r in results]


def test_reward_agrees_with_the_evaluation_grader(reward, shared_data):
    mbpp = {row["task_id"]: row for row in load_benchmark("mbppplus")}
    real = [mbpp[t] for t in ("Mbpp/2", "Mbpp/3", "Mbpp/4")]
    generated = [SUM3, BASE2, PROBLEMS["code-dedupe-last"]]
    completions, problems = [], []
    for problem in real + generated:
        entry = problem["entry_point"]
        for candidate in (
                f"```python\n{problem['canonical_solution']}\n```",
                f"def {entry}(*args):\n    return None\n",
                f"def {entry}(*args):\n    return args[0]\n",
                f"def {entry}(*args:\n",
                f"import sys\nsys.exit(0)\n{problem['canonical_solution']}",
                (f"class S:\n    def __eq__(self, o):\n        return True\ndef {entry}(*a):\n"
                "    return S()\n")):
            completions.append(candidate)
            problems.append(problem)
    got = reward(completions=completions, code_problem=[json.dumps(p) for p in problems])
    assert got == _eval_verdicts(completions, problems)
    assert got.count(1.0) == len(real + generated)  # the canonical ones, nothing else
    partial = R.get_code_tests_reward(timeout_s=TIMEOUT_S)
    try:
        shares = partial(completions=completions, code_problem=problems)
    finally:
        partial.close()
    assert shares == pytest.approx(_eval_verdicts(completions, problems, partial=True))


def test_code_is_a_verifier_for_the_degenerate_group_filter(reward):
    specs = R.parse_reward_specs([{"name": "code_tests"}, {"name": "code", "weight": 0.0}])
    assert R.correctness_reward_index(specs) == 1  # code_tests is a share, not a verdict
    with pytest.raises(ValueError, match="tells correct from wrong"):
        R.correctness_reward_index(specs[:1])
    out = reward(completions=[GOOD, "x = ("], code_problem=[SUM3, SUM3])
    assert R.verdicts(out) == [True, False]
    assert R.degenerate_groups(R.verdicts(out), 2) == [False]
