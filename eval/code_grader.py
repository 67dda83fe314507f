"""Grading model-written programs against code benchmarks' own tests, always in the sandbox.

:func:`grade_code` takes a candidate (a completion, a whole program, or a model answer with a
fenced code block) and a problem as a plain dict with the benchmark file's fields:

- **HumanEval** (``prompt``, ``test``, ``entry_point``): the program is the prompt, the
  candidate (a function body continuing the prompt, or a whole definition of the entry point),
  the test code and ``check(entry_point)``; it passes when every assertion holds.
- **MBPP+** (``base_input``, ``plus_input``, ``atol``, ``assertion``): the candidate is called
  on every input; the expected values are the canonical solution's return values on the same
  inputs, computed once per task in the sandbox (or taken from ``expected_outputs`` when the
  problem carries them); float results are compared with ``atol`` (1e-6 when the expected value
  holds floats and ``atol`` is 0); then the ``assertion`` block must pass too.
- **LiveCodeBench** (``tests`` with ``testtype`` ``stdin`` or ``functional``, ``starter_code``):
  stdin tests run the program on each input and compare stdout line by line (token-wise decimal
  equality as a second chance, as LiveCodeBench does); functional tests call the starter's
  ``Solution`` method with the JSON arguments and compare with the JSON expected value.
  Problems without a starter have no function to call, so their functional tests are ignored;
  and the 12 foreign tests that the locally stored copy appends to every problem are dropped
  (:func:`clean_livecodebench_tests`); ``ignored_tests`` counts both.

Return values and verdicts are decided on the host from the program's output (see
:mod:`pipelines.sandbox.harness`), so an early ``sys.exit(0)`` never passes.
:func:`grade_code_many` grades many candidates on a :class:`~pipelines.sandbox.SandboxPool`.

Not guaranteed: evalplus' per-test time limits (one wall-clock limit per program here: the
``timeout_s`` given, raised for MBPP+ tasks whose canonical solution itself needs longer to 3x
its time + 1 s); that a candidate written to attack the harness from inside its own process
cannot fake a pass.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from pipelines.sandbox import ExecResult, Limits, LocalSandbox, SandboxPool, render_observation
from pipelines.sandbox.harness import (
    CODEC_SOURCE,
    NOT_FOUND,
    decode_value,
    find_payload,
    new_marker,
    values_match,
)
from pipelines.settings import require_data_dir

HUMANEVAL, MBPPPLUS, LIVECODEBENCH = "humaneval", "mbppplus", "livecodebench"
BENCHMARKS = (HUMANEVAL, MBPPPLUS, LIVECODEBENCH)
DEFAULT_TIMEOUT_S = 10.0
EXPECTED_TIMEOUT_S = 120.0
SLOW_FACTOR = 3.0
GRADER_OUTPUT_BYTES = 64 * 1024 * 1024
BENCHMARK_FILES = {HUMANEVAL: "humaneval.jsonl.gz", MBPPPLUS: "mbppplus.jsonl",
                   LIVECODEBENCH: "livecodebench_279.json"}
# sha256(input + "\0" + output)[:16] of the functional tests that the stored LiveCodeBench copy
# (rllm's livecodebench.json) appends to all 279 problems; they belong to none of them.
LCB_FOREIGN_TESTS = frozenset({
    "64c52c95372daf39", "466334869ffdd7b0", "27aff523c271ba2d", "2257edfdf1d924b1",
    "c32e44a4ebd8668d", "383e140f7082ab12", "56f8a2e2e2822b54", "d9eb02a8318ff6fd",
    "da1141f8c9567fc8", "decf379fe22b2f55", "a21c4368904f8e67", "3f42e3dabc56653e"})
# Imports LeetCode-style solutions take for granted.
LCB_PRELUDE = ("from typing import *\nfrom collections import *\nfrom heapq import *\n"
               "from bisect import *\nfrom itertools import *\nfrom functools import *\n"
               "import math, string, re, sys, random, operator, collections, heapq, bisect\n"
               "sys.setrecursionlimit(1 << 16)\n")
_FENCE_RE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_METHOD_RE = re.compile(r"def\s+([A-Za-z_]\w*)\s*\(\s*self\b")


@dataclass(frozen=True)
class CodeGradeResult:
    """One verdict. ``reason`` says why in a sentence; ``details`` holds the observation of
    the deciding run (truncated); ``tests_*`` count the benchmark's test cases."""

    passed: bool
    reason: str
    benchmark: str
    task_id: str | None = None
    tests_total: int = 0
    tests_passed: int = 0
    ignored_tests: int = 0
    timed_out: bool = False
    duration_s: float = 0.0
    details: str = ""


# ---------------------------------------------------------------------------------------------
# data files and problem kinds


def load_benchmark(name: str, path: str | Path | None = None) -> list[dict]:
    """The rows of a local benchmark file (``humaneval``, ``mbppplus``, ``livecodebench``)."""
    if name not in BENCHMARK_FILES:
        raise ValueError(f"unknown code benchmark {name!r}; known: {sorted(BENCHMARK_FILES)}")
    file = Path(path) if path else require_data_dir() / "benchmarks" / BENCHMARK_FILES[name]
    if not file.is_file():
        raise FileNotFoundError(f"benchmark file {file} not found (set WEFT_DATA_DIR)")
    opener = gzip.open if file.suffix == ".gz" else open
    with opener(file, "rt", encoding="utf-8") as handle:
        if file.suffix == ".json":
            rows = json.load(handle)
        else:
            rows = [json.loads(line) for line in handle if line.strip()]
    for row in rows:
        row.setdefault("benchmark", name)
    return rows


def detect_benchmark(problem: dict) -> str:
    """The benchmark a problem dict belongs to, from ``benchmark`` or from its fields."""
    if not isinstance(problem, dict):
        raise TypeError(f"problem_meta must be a dict, got {type(problem).__name__}")
    named = (str(problem.get("benchmark") or "").lower().replace("-", "").replace("_", "")
             .replace("+", "plus"))
    for name in BENCHMARKS:
        if named.startswith(name) or (named and name.startswith(named)):
            return name
    if "base_input" in problem or "plus_input" in problem:
        return MBPPPLUS
    if "test" in problem and "entry_point" in problem and "prompt" in problem:
        return HUMANEVAL
    if isinstance(problem.get("tests"), (list, str)):
        return LIVECODEBENCH
    raise ValueError("cannot tell the benchmark of this problem: expected HumanEval fields "
                     "(prompt, test, entry_point), MBPP+ fields (base_input, plus_input, "
                     "canonical_solution, entry_point) or LiveCodeBench fields (tests, "
                     f"starter_code); got keys {sorted(problem)[:12]}")


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The code in a model answer: a fenced block (the one defining ``entry_point`` if any,
    else the longest), or the whole text when there is no fence."""
    blocks = [body for lang, body in _FENCE_RE.findall(text or "")
              if lang.lower() in ("", "python", "py", "python3")]
    if not blocks:
        return text or ""
    if entry_point:
        defining = [b for b in blocks if re.search(rf"def\s+{re.escape(entry_point)}\s*\(", b)]
        if defining:
            return defining[-1]
    return max(blocks, key=len)


def clean_livecodebench_tests(tests: list[dict], has_starter: bool) -> tuple[list[dict], int]:
    """(usable tests, number ignored): drops the stored copy's foreign tests and, for problems
    without a starter (stdin programs), the functional tests that have no function to call."""
    kept, dropped = [], 0
    for test in tests:
        digest = hashlib.sha256(
            (str(test.get("input", "")) + "\0" + str(test.get("output", ""))).encode()
        ).hexdigest()[:16]
        functional = test.get("testtype") == "functional"
        if digest in LCB_FOREIGN_TESTS or (functional and not has_starter):
            dropped += 1
        else:
            kept.append(test)
    return kept, dropped


# ---------------------------------------------------------------------------------------------
# programs


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def humaneval_program(candidate: str, problem: dict, marker: str) -> str:
    entry = problem["entry_point"]
    code = extract_code(candidate, entry)
    # A whole definition is appended after the prompt (it replaces the prompt's stub and can
    # use the prompt's imports and helpers); a bare body continues the prompt.
    body = problem["prompt"] + ("\n\n" if _defines(code, entry) else "") + code
    return (f"{body}\n\n{problem['test']}\n\ncheck({entry})\n"
            f"print({marker!r} + 'true', flush=True)\n")


def _call_harness(marker: str, calls: str, inputs: list, after: str = "") -> str:
    return (f"{CODEC_SOURCE}\n"
            f"import json as __weft_json, copy as __weft_copy\n"
            f"__weft_inputs = __weft_json.loads({json.dumps(inputs)!r})\n"
            f"__weft_results = []\n"
            f"for __weft_args in __weft_inputs:\n"
            f"    try:\n"
            f"        __weft_out = {calls}\n"
            f"        __weft_results.append(['ok', __weft_pack(__weft_out)])\n"
            f"    except BaseException as __weft_exc:\n"
            f"        __weft_results.append(['error', type(__weft_exc).__name__ + ': '"
            f" + str(__weft_exc)[:300]])\n"
            f"{after}"
            f"__weft_emit({marker!r}, __weft_results)\n")


def mbpp_program(code: str, problem: dict, inputs: list, marker: str, *,
                 with_assertion: bool) -> str:
    entry = problem["entry_point"]
    after = ""
    if with_assertion and (problem.get("assertion") or "").strip():
        after = ("try:\n"
                 f"    exec('import math\\n' + {problem['assertion']!r}, globals())\n"
                 "    __weft_results.append(['assertion', 'ok'])\n"
                 "except BaseException as __weft_exc:\n"
                 "    __weft_results.append(['assertion', type(__weft_exc).__name__ + ': '"
                 " + str(__weft_exc)[:300]])\n")
    calls = f"globals()[{entry!r}](*__weft_copy.deepcopy(__weft_args))"
    return f"{code}\n\n{_call_harness(marker, calls, inputs, after)}"


def lcb_functional_program(code: str, method: str, inputs: list, marker: str) -> str:
    calls = f"getattr(globals()['Solution'](), {method!r})(*__weft_args)"
    return f"{LCB_PRELUDE}\n{code}\n\n{_call_harness(marker, calls, inputs)}"


# ---------------------------------------------------------------------------------------------
# grading


def _limits(box: Any, timeout_s: float) -> Limits:
    """The sandbox's own limits (so a warm pool's runners fit them) with the grader's time
    limit and a large output cap (expected outputs can be big)."""
    base = getattr(box, "limits", None)
    base = base if isinstance(base, Limits) else Limits()
    return base.with_(timeout_s=timeout_s, cpu_s=None, max_output_bytes=GRADER_OUTPUT_BYTES)


def _failed_run(result: ExecResult) -> str:
    if result.timed_out:
        return f"timed out ({result.error.value if result.error else 'limit exceeded'})"
    if result.memory_exceeded:
        return "exceeded the memory limit"
    if result.output_truncated:
        return "printed more output than the sandbox keeps"
    if result.error is not None:
        return f"{result.error.name}: {result.error.value}"[:300]
    return f"exited with status {result.exit_code} before finishing the tests"


_DEFAULT: list = []
_DEFAULT_LOCK = threading.Lock()


def _default_sandbox():
    with _DEFAULT_LOCK:
        if not _DEFAULT:
            _DEFAULT.append(LocalSandbox())
        return _DEFAULT[0]


def grade_code(candidate: str, problem_meta: dict, sandbox: Any = None,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> CodeGradeResult:
    """Run ``candidate`` against the problem's tests in the sandbox (anything with
    ``run(code, stdin=None, limits=None)``: a LocalSandbox, a SandboxPool, an E2BSandbox)."""
    if not isinstance(candidate, str):
        raise TypeError(f"candidate must be a str, got {type(candidate).__name__}")
    kind = detect_benchmark(problem_meta)
    box = sandbox if sandbox is not None else _default_sandbox()
    start = time.monotonic()
    task = problem_meta.get("task_id") or problem_meta.get("question_id")
    if kind == HUMANEVAL:
        verdict = _grade_humaneval(candidate, problem_meta, box, timeout_s)
    elif kind == MBPPPLUS:
        verdict = _grade_mbpp(candidate, problem_meta, box, timeout_s)
    else:
        verdict = _grade_lcb(candidate, problem_meta, box, timeout_s)
    return CodeGradeResult(benchmark=kind, task_id=None if task is None else str(task),
                           duration_s=time.monotonic() - start, **verdict)


def _grade_humaneval(candidate: str, problem: dict, box, timeout_s: float) -> dict:
    for key in ("prompt", "test", "entry_point"):
        if key not in problem:
            raise ValueError(f"HumanEval problem lacks {key!r}")
    marker = new_marker()
    program = humaneval_program(candidate, problem, marker)
    result = box.run(program, limits=_limits(box, timeout_s))
    passed = result.ok and find_payload(result.stdout, marker) is True
    return {"passed": passed, "reason": "passed" if passed else _failed_run(result),
            "tests_total": 1, "tests_passed": int(passed), "timed_out": result.timed_out,
            "details": "" if passed else render_observation(result, 2000)}


_EXPECTED: dict[str, tuple[list, float]] = {}
_EXPECTED_LOCKS: dict[str, threading.Lock] = {}
_EXPECTED_GUARD = threading.Lock()


def mbpp_inputs(problem: dict) -> list:
    return list(problem.get("base_input") or []) + list(problem.get("plus_input") or [])


def mbpp_expected(problem: dict, sandbox: Any = None) -> tuple[list, float]:
    """(the canonical solution's encoded results on all inputs, seconds it took), computed once
    per task and process; ``expected_outputs`` in the problem is used as is (taking 0 s)."""
    if problem.get("expected_outputs") is not None:
        return list(problem["expected_outputs"]), 0.0
    inputs = mbpp_inputs(problem)
    key = hashlib.sha256(json.dumps([problem.get("canonical_solution"), problem["entry_point"],
                                     inputs]).encode()).hexdigest()
    with _EXPECTED_GUARD:
        lock = _EXPECTED_LOCKS.setdefault(key, threading.Lock())
    with lock:
        if key not in _EXPECTED:
            box = sandbox if sandbox is not None else _default_sandbox()
            marker = new_marker()
            program = mbpp_program(problem["canonical_solution"], problem, inputs, marker,
                                   with_assertion=False)
            result = box.run(program, limits=_limits(box, EXPECTED_TIMEOUT_S))
            payload = find_payload(result.stdout, marker)
            if payload is NOT_FOUND:
                raise RuntimeError(f"the canonical solution of {problem.get('task_id')} did not "
                                   f"run: {_failed_run(result)}")
            _EXPECTED[key] = (payload, result.duration_s)
        return _EXPECTED[key]


def _grade_mbpp(candidate: str, problem: dict, box, timeout_s: float) -> dict:
    for key in ("entry_point", "canonical_solution"):
        if key not in problem and not (key == "canonical_solution"
                                       and problem.get("expected_outputs") is not None):
            raise ValueError(f"MBPP+ problem lacks {key!r}")
    inputs = mbpp_inputs(problem)
    expected, reference_s = mbpp_expected(problem, box)
    code = extract_code(candidate, problem["entry_point"])
    marker = new_marker()
    # Slow tasks get the time their canonical solution needed, with a margin.
    limit_s = max(timeout_s, SLOW_FACTOR * reference_s + 1.0)
    result = box.run(mbpp_program(code, problem, inputs, marker, with_assertion=True),
                     limits=_limits(box, limit_s))
    payload = find_payload(result.stdout, marker)
    total = len(inputs) + (1 if (problem.get("assertion") or "").strip() else 0)
    base = {"tests_total": total, "timed_out": result.timed_out}
    if payload is NOT_FOUND or not isinstance(payload, list):
        return {**base, "passed": False, "reason": _failed_run(result), "tests_passed": 0,
                "details": render_observation(result, 2000)}
    atol = float(problem.get("atol") or 0)
    passed, first_bad = 0, None
    for i, (got, exp) in enumerate(zip(payload, expected)):
        got_kind, got_value = _entry(got)
        exp_kind, exp_value = _entry(exp)
        ok = (got_kind == exp_kind == "ok" and values_match(got_value, exp_value, atol))
        if ok or (got_kind == exp_kind == "error"):
            passed += 1
        elif first_bad is None:
            first_bad = (f"wrong result on input {i}: got {got_value!r:.200}"
                         if got_kind == "ok" else f"input {i} raised {got_value}")
    assertion = [r for r in payload[len(inputs):] if _entry(r)[0] == "assertion"]
    if assertion:
        if assertion[0][1] == "ok":
            passed += 1
        elif first_bad is None:
            first_bad = f"the assertion block failed: {assertion[0][1]}"
    if len(payload) < len(inputs) and first_bad is None:
        first_bad = "the harness reported fewer results than inputs"
    ok = first_bad is None and passed == total
    return {**base, "passed": ok, "tests_passed": passed,
            "reason": "passed" if ok else first_bad or "failed"}


def _entry(item: Any) -> tuple[str, Any]:
    """(kind, decoded value) of one harness result; ``("invalid", ...)`` for anything else (a
    program can print whatever it likes)."""
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
        return "invalid", item
    if item[0] != "ok":
        return item[0], item[1]
    try:
        return "ok", decode_value(item[1])
    except (ValueError, TypeError, KeyError, AttributeError):
        return "invalid", item[1]


def _lcb_tests(problem: dict) -> tuple[list[dict], int]:
    tests = problem.get("tests")
    if isinstance(tests, str):
        tests = json.loads(tests)
    if not isinstance(tests, list) or not tests:
        raise ValueError("LiveCodeBench problem has no tests")
    return clean_livecodebench_tests(tests, bool((problem.get("starter_code") or "").strip()))


def stdout_matches(got: str, expected: str) -> bool:
    """LiveCodeBench's stdio comparison: stripped lines equal, else tokens equal as decimals."""
    got_lines = [ln.strip() for ln in got.strip().splitlines()]
    exp_lines = [ln.strip() for ln in expected.strip().splitlines()]
    if got_lines == exp_lines:
        return True
    if len(got_lines) != len(exp_lines):
        return False
    for a, b in zip(got_lines, exp_lines):
        if a == b:
            continue
        ta, tb = a.split(), b.split()
        if len(ta) != len(tb):
            return False
        try:
            if any(Decimal(x) != Decimal(y) for x, y in zip(ta, tb)):
                return False
        except InvalidOperation:
            return False
    return True


def _grade_lcb(candidate: str, problem: dict, box, timeout_s: float) -> dict:
    tests, ignored = _lcb_tests(problem)
    starter = (problem.get("starter_code") or "").strip()
    code = extract_code(candidate)
    base = {"tests_total": len(tests), "ignored_tests": ignored}
    if not tests:
        raise ValueError("LiveCodeBench problem has no usable tests after cleaning")
    if starter:
        found = _METHOD_RE.search(starter)
        if not found:
            raise ValueError(f"cannot find the method name in starter_code {starter[:80]!r}")
        marker = new_marker()
        try:
            inputs = [[json.loads(line) for line in t["input"].split("\n") if line.strip()]
                      for t in tests]
        except ValueError as exc:
            raise ValueError("a LiveCodeBench functional test's input must be one JSON value per "
                             f"line (the method's arguments): {exc}") from exc
        result = box.run(lcb_functional_program(code, found.group(1), inputs, marker),
                         limits=_limits(box, timeout_s * max(1, len(tests))))
        payload = find_payload(result.stdout, marker)
        if payload is NOT_FOUND or not isinstance(payload, list):
            return {**base, "passed": False, "reason": _failed_run(result), "tests_passed": 0,
                    "timed_out": result.timed_out, "details": render_observation(result, 2000)}
        passed, first_bad = 0, None
        for i, (got, test) in enumerate(zip(payload, tests)):
            kind, value = _entry(got)
            value = _listify(value) if kind == "ok" else value
            if kind == "ok" and values_match(value, json.loads(test["output"])):
                passed += 1
            elif first_bad is None:
                first_bad = (f"wrong answer on test {i}: got {value!r:.200}" if kind == "ok"
                             else f"test {i} raised {value}")
        ok = first_bad is None and passed == len(tests)
        return {**base, "passed": ok, "tests_passed": passed, "timed_out": False,
                "reason": "passed" if ok else first_bad or "failed"}
    passed = 0
    for i, test in enumerate(tests):
        result = box.run(code, stdin=test["input"], limits=_limits(box, timeout_s))
        if not result.ok:
            return {**base, "passed": False, "tests_passed": passed,
                    "timed_out": result.timed_out, "reason": f"test {i}: {_failed_run(result)}",
                    "details": render_observation(result, 2000)}
        if not stdout_matches(result.stdout, test["output"]):
            return {**base, "passed": False, "tests_passed": passed, "timed_out": False,
                    "reason": f"wrong answer on test {i}",
                    "details": f"expected {test['output'][:300]!r}, got "
                               f"{result.stdout[:300]!r}"}
        passed += 1
    return {**base, "passed": True, "tests_passed": passed, "reason": "passed",
            "timed_out": False}


def _listify(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_listify(x) for x in value]
    if isinstance(value, dict):
        return {k: _listify(v) for k, v in value.items()}
    return value


def grade_code_many(candidates: Sequence[str], problems: Sequence[dict] | dict, *,
                    pool: SandboxPool | None = None, workers: int = 2,
                    timeout_s: float = DEFAULT_TIMEOUT_S) -> list[CodeGradeResult]:
    """Grade many candidates in parallel on warm sandbox workers. ``problems`` is one problem
    for all candidates or one per candidate; results come in the order of ``candidates``. A
    pool is created (and closed) when none is given."""
    problem_list = [problems] * len(candidates) if isinstance(problems, dict) else list(problems)
    if len(problem_list) != len(candidates):
        raise ValueError(f"got {len(candidates)} candidates but {len(problem_list)} problems")
    own = pool is None
    pool = pool or SandboxPool(workers=workers)
    try:
        with ThreadPoolExecutor(max_workers=max(1, pool.workers),
                                thread_name_prefix="weft-grade") as ex:
            return list(ex.map(lambda pair: grade_code(pair[0], pair[1], pool, timeout_s),
                               zip(candidates, problem_list)))
    finally:
        if own:
            pool.close()
