"""Code benchmarks graded through the real sandbox: canonical solutions pass, wrong ones fail."""

import random

import pytest

from eval.code_grader import (
    LCB_FOREIGN_TESTS,
    clean_livecodebench_tests,
    detect_benchmark,
    extract_code,
    grade_code,
    grade_code_many,
    load_benchmark,
    stdout_matches,
)
from pipelines.sandbox import SandboxPool
from pipelines.sandbox.harness import Digest, decode_value, values_match


@pytest.fixture(scope="module")
def pool(jail):
    with SandboxPool(jail, workers=2) as warm:
        yield warm


@pytest.fixture(scope="module")
def humaneval(shared_data):
    return load_benchmark("humaneval")


@pytest.fixture(scope="module")
def mbpp(shared_data):
    return load_benchmark("mbppplus")


@pytest.fixture(scope="module")
def lcb(shared_data):
    return load_benchmark("livecodebench")


def test_all_humaneval_canonical_solutions_pass(humaneval, pool):
    assert len(humaneval) == 164
    canonical = [p["canonical_solution"] for p in humaneval]
    results = grade_code_many(canonical, humaneval, pool=pool)  # records each task's test once
    failed = [(r.task_id, r.reason) for r in results if not r.passed]
    assert failed == []
    # graded again: one program per candidate, every one on a warm runner, none in a cold jail
    runs_before = sum(r.runs for r in pool._runners)
    assert all(r.passed for r in grade_code_many(canonical, humaneval, pool=pool))
    assert sum(r.runs for r in pool._runners) - runs_before == 164


def test_humaneval_wrong_solutions_fail(humaneval, pool):
    wrong = ["    raise NotImplementedError\n"] * len(humaneval)
    results = grade_code_many(wrong, humaneval, pool=pool)
    assert not any(r.passed for r in results)
    assert all("NotImplementedError" in r.reason for r in results)
    # a plausible but wrong whole-function answer, fenced like a model would write it
    answer = ("Here you go:\n```python\ndef has_close_elements(numbers, threshold):\n"
              "    return any(abs(a - b) <= threshold for a in numbers for b in numbers)\n```")
    verdict = grade_code(answer, humaneval[0], pool)
    assert not verdict.passed and "AssertionError" in verdict.reason


def test_humaneval_accepts_a_whole_function_answer(humaneval, pool):
    answer = ("```python\ndef has_close_elements(numbers, threshold):\n"
              "    s = sorted(numbers)\n"
              "    return any(b - a < threshold for a, b in zip(s, s[1:]))\n```")
    assert grade_code(answer, humaneval[0], pool).passed


def test_early_exit_never_passes(humaneval, mbpp, pool):
    exit_first = "    import sys\n    sys.exit(0)\n"
    assert not grade_code("import os\nos._exit(0)\n", humaneval[0], pool).passed
    assert not grade_code(exit_first, humaneval[0], pool).passed
    assert not grade_code("import sys\nsys.exit(0)\n", mbpp[0], pool).passed


def test_mbpp_sample_canonical_pass_and_wrong_fail(mbpp, pool):
    sample = random.Random(7).sample(mbpp, 20)
    good = grade_code_many([p["canonical_solution"] for p in sample], sample, pool=pool)
    assert [(r.task_id, r.reason) for r in good if not r.passed] == []
    assert all(r.tests_passed == r.tests_total > 0 for r in good)
    wrong = [f"def {p['entry_point']}(*args, **kwargs):\n    return None\n" for p in sample]
    bad = grade_code_many(wrong, sample, pool=pool)
    assert not any(r.passed for r in bad)


@pytest.mark.slow
def test_all_mbpp_canonical_solutions_pass_and_wrong_fail(mbpp, pool):
    good = grade_code_many([p["canonical_solution"] for p in mbpp], mbpp, pool=pool)
    assert [(r.task_id, r.reason) for r in good if not r.passed] == []
    wrong = [f"def {p['entry_point']}(*args, **kwargs):\n    return None\n" for p in mbpp]
    assert not any(r.passed for r in grade_code_many(wrong, mbpp, pool=pool))


def test_mbpp_accepts_numpy_results_equal_to_python_ones(mbpp, pool):
    square = next(p for p in mbpp if p["entry_point"] == "square_perimeter")
    numpy_answer = "import numpy as np\ndef square_perimeter(a):\n    return np.int64(4) * a\n"
    assert grade_code(numpy_answer, square, pool).passed


def test_mbpp_float_tolerance_uses_atol(mbpp, pool):
    problem = next(p for p in mbpp if p["atol"])
    canonical = problem["canonical_solution"]
    assert grade_code(canonical, problem, pool).passed
    entry = problem["entry_point"]
    off = canonical + (f"\n_orig = {entry}\ndef {entry}(*a):\n    r = _orig(*a)\n"
                       "    return r * 1.01 if isinstance(r, float) else r\n")
    assert not grade_code(off, problem, pool).passed


SECOND_LARGEST = ("n = int(input())\na = list(map(int, input().split()))\n"
                  "print(a.index(sorted(a)[-2]) + 1)\n")
MIN_FLIPS = ("class Solution:\n    def minFlips(self, grid: List[List[int]]) -> int:\n"
             "        rows = sum(r[j] != r[-1 - j] for r in grid for j in range(len(r) // 2))\n"
             "        cols = sum(grid[i][j] != grid[-1 - i][j] for j in range(len(grid[0]))"
             " for i in range(len(grid) // 2))\n        return min(rows, cols)\n")


def test_livecodebench_stdin_problem(lcb, pool):
    problem = lcb[0]
    good = grade_code(SECOND_LARGEST, problem, pool)
    assert good.passed and good.tests_total == 2 and good.ignored_tests == 12
    bad = grade_code(SECOND_LARGEST.replace("[-2]", "[-1]"), problem, pool)
    assert not bad.passed and "wrong answer on test 0" in bad.reason
    crash = grade_code("print(undefined_name)", problem, pool)
    assert not crash.passed and "NameError" in crash.reason


def test_livecodebench_functional_problem(lcb, pool):
    problem = next(p for p in lcb if "def minFlips" in p["starter_code"])
    good = grade_code(f"```python\n{MIN_FLIPS}```", problem, pool)
    assert good.passed and good.tests_total == 3 and good.ignored_tests == 12
    bad = grade_code(MIN_FLIPS.replace("min(rows, cols)", "max(rows, cols)"), problem, pool)
    assert not bad.passed and "wrong answer" in bad.reason


def test_clean_livecodebench_tests_drops_foreign_and_uncallable_tests():
    tests = [{"input": "1\n", "output": "1\n", "testtype": "stdin"},
             {"input": '"7"', "output": "1", "testtype": "functional"},
             {"input": "[1]", "output": "2", "testtype": "functional"}]
    kept, dropped = clean_livecodebench_tests(tests, has_starter=False)
    assert kept == tests[:1] and dropped == 2
    kept, dropped = clean_livecodebench_tests(tests, has_starter=True)
    assert kept == [tests[0], tests[2]] and dropped == 1
    assert len(LCB_FOREIGN_TESTS) == 12


@pytest.mark.parametrize("problem,kind", [
    ({"prompt": "p", "test": "t", "entry_point": "f"}, "humaneval"),
    ({"base_input": [], "entry_point": "f"}, "mbppplus"),
    ({"tests": [], "starter_code": ""}, "livecodebench"),
    ({"benchmark": "MBPP+", "prompt": "p", "test": "t", "entry_point": "f"}, "mbppplus"),
    ({"benchmark": "humaneval"}, "humaneval"),
])
def test_detect_benchmark(problem, kind):
    assert detect_benchmark(problem) == kind


def test_detect_benchmark_rejects_unknown_problems():
    with pytest.raises(ValueError, match="cannot tell the benchmark"):
        detect_benchmark({"question": "?"})
    with pytest.raises(TypeError, match="problem_meta must be a dict"):
        detect_benchmark("humaneval")


@pytest.mark.parametrize("text,entry,expected", [
    ("plain = 1", None, "plain = 1"),
    ("```python\na = 1\n```", None, "a = 1\n"),
    ("```\nshort\n```\ntext\n```py\nlonger block\n```", None, "longer block\n"),
    ("```python\ndef g():\n    pass\n```\n```python\ndef f():\n    pass\n```\n```python\nx\n```",
     "f", "def f():\n    pass\n"),
    ("```bash\nls\n```", None, "```bash\nls\n```"),
])
def test_extract_code(text, entry, expected):
    assert extract_code(text, entry) == expected


@pytest.mark.parametrize("out,exp,atol,same", [
    (1, 1, 0, True), ((1, 2), [1, 2], 0, False), ({1, 2}, {2, 1}, 0, True),
    (0.1 + 0.2, 0.3, 0, True), (1.0, 1.1, 0, False), (1.00001, 1.0, 1e-4, True),
    ([1.0, float("nan")], [1.0, float("nan")], 0, True), ("a", "b", 0, False),
    (Digest("ab"), Digest("ab"), 0, True), (Digest("ab"), [1], 0, False),
])
def test_values_match_both_orders(out, exp, atol, same):
    assert values_match(out, exp, atol) is same
    assert values_match(exp, out, atol) is same


def test_decode_value_restores_tagged_types():
    encoded = {"t": "dict", "v": [[{"t": "tuple", "v": [1, 2]}, {"t": "set", "v": [3]}]]}
    assert decode_value(encoded) == {(1, 2): {3}}
    assert decode_value({"t": "int", "v": hex(10 ** 30)}) == 10 ** 30
    with pytest.raises(ValueError, match="unknown value tag"):
        decode_value({"t": "nope", "v": 1})


@pytest.mark.parametrize("got,expected,same", [
    ("3\n", "3", True), ("1 2 \n3\n\n", "1 2\n3", True), ("1.50\n", "1.5\n", True),
    ("1.5\n", "1.6\n", False), ("1\n2\n", "1\n", False), ("abc", "abd", False),
])
def test_stdout_matches(got, expected, same):
    assert stdout_matches(got, expected) is same


class _Pool:
    """Stands in for a pool in the dispatch tests (only its size is read)."""

    workers = 3


def test_many_results_come_in_candidate_order_whichever_finishes_first(monkeypatch):
    import time

    from eval import code_grader

    def grade(candidate, problem, pool, timeout_s):
        time.sleep(random.random() / 100)
        return candidate * 2

    monkeypatch.setattr(code_grader, "_grade_one", grade)
    assert grade_code_many(list(range(40)), {}, pool=_Pool()) == [2 * i for i in range(40)]


def test_many_stops_taking_items_at_a_missing_sandbox(monkeypatch):
    import threading

    from eval import code_grader
    from pipelines.sandbox import SandboxUnavailable

    taken, lock = [], threading.Lock()

    def grade(candidate, problem, pool, timeout_s):
        with lock:
            taken.append(candidate)
        if candidate == 5:
            raise SandboxUnavailable("apt-get install bubblewrap")
        return candidate

    monkeypatch.setattr(code_grader, "_grade_one", grade)
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        grade_code_many(list(range(100)), {}, pool=_Pool())
    assert 5 in taken and len(taken) < 10  # the others stopped after their current item
