"""Grading model-written programs against code benchmarks' own tests. Candidate code only ever
runs in the sandbox, and only to compute values; every verdict is decided on the host.

:func:`grade_code` takes a candidate (a completion, a whole program, or a model answer with a
fenced code block) and a problem as a plain dict with the benchmark file's fields. Functions are
graded in three steps (HumanEval, MBPP+, LiveCodeBench functional tests):

1. **Recording** (trusted code only, once per task and process, like the MBPP+ reference
   answers): in a fresh jail of its own (never a warm runner that later runs candidates: its
   memory would keep remnants), the canonical solution runs under the benchmark's own test with
   the entry point wrapped by a recorder (``random`` seeded first): the arguments of every
   call the test makes (encoded before the call) and the canonical answers. The recording is
   replayed on the host at once with the canonical answers; a HumanEval task whose test does not
   pass that way is an error, an MBPP+ ``assertion`` block that does not (it uses names only
   the solution imports) is left out and counted in ``ignored_tests``.
2. **Candidate run** (:func:`pipelines.sandbox.harness.relay_program`): the candidate's code,
   without any test code or expected value, runs in a child process forked by a trusted parent;
   it is called on the recorded arguments (and on MBPP+'s inputs, LiveCodeBench's JSON
   arguments) and only its return values come back, as plain data (exact builtin types). On a
   warm :class:`~pipelines.sandbox.SandboxPool` the runner's fork server, which preloaded the
   relay module, is that trusted parent (``SandboxPool.run_relay``): the same child code and
   payload line, one fork and one program compile less.
3. **Verdict on the host**: HumanEval's ``check`` (the prompt and the test, benchmark code,
   never the candidate's) is replayed with a stand-in for the candidate that checks each call
   has the recorded arguments and returns the candidate's answer to it, so tests that accept
   many answers (``find_zero``) stay correct; MBPP+ answers are compared with the canonical
   ones (``atol``, or 1e-6 when the reference holds floats and ``atol`` is 0), then its
   ``assertion`` block is replayed the same way as ``check``; LiveCodeBench answers are compared
   with the JSON expected values. The replay has its own ``random`` (seeded like the recording),
   so threads grading at once never disturb each other.

LiveCodeBench stdin tests run the whole program on each input and compare its stdout line by
line (token-wise decimal equality as a second chance, as LiveCodeBench does); the output kept
is capped at twice the expected output plus 16 KiB. Problems without a starter have no function
to call, so their functional tests are ignored; and the 12 foreign tests that the locally
stored copy appends to every problem are dropped (:func:`clean_livecodebench_tests`);
``ignored_tests`` counts both.

What a completion can do to its score: compute its return values (any plain data: ``None``,
``bool``, ``int``, ``float``, ``str``, ``bytes``, ``bytearray``, ``complex``, and lists,
tuples, sets, frozensets and dicts of them; numpy values and the stdlib's dict subclasses are
converted). What it cannot do: run code during the comparison (an object with its own
``__eq__``, an ``int``/``str`` subclass or any other object is "not plain data", a failed
call); patch ``abs``, ``math.fabs`` or anything else the test uses (the test runs in another
process, on the host); skip, replace or trace ``check`` (it is not in its process); read the
test or the expected values (they are not in its program, its memory or its files); print a
result line or write one into another process (its fds 0, 1 and 2 are ``/dev/null`` and a
pipe its parent drains, and every process holding the real stdout is non-dumpable); turn a
crash, an early exit, a kill of its parent or a flood of output into anything but a failed
item with its reason. One MBPP+ exception: where the reference answer itself is not plain data
(a few tasks return ``re.Match`` objects), an answer of the same type and ``repr`` counts.

:func:`grade_code_many` grades many candidates on a :class:`~pipelines.sandbox.SandboxPool`;
every item gets a :class:`CodeGradeResult`, also when grading it raised.

Not guaranteed: evalplus' per-test time limits (one wall-clock limit per program here: the
``timeout_s`` given, raised for MBPP+ tasks whose canonical solution itself needs longer to 3x
its time + 1 s); a verdict for a candidate whose answers make the test call the function with
arguments that were never recorded (it fails, with that reason); that the host replay stops
within :data:`eval.code_replay.REPLAY_TIMEOUT_S` when one operation of the benchmark's own test
on the candidate's (size-capped) answer is slow (the limit, CPU time of the replaying
thread, is checked at each call of the stand-in); the guarantees above on the
plain-subprocess fallback (the candidate runs as the grading user; see
:mod:`pipelines.sandbox.harness`).
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

from eval.code_replay import (
    Recording,
    RecordingError,
    parse_recording,
    recording_program,
    replay,
)
from pipelines.sandbox import (
    E2BUnavailable,
    ExecResult,
    Limits,
    LocalSandbox,
    SandboxPool,
    SandboxUnavailable,
    render_observation,
)
from pipelines.sandbox.harness import (
    DIGEST_ABOVE,
    NOT_FOUND,
    Digest,
    RelayOutcome,
    call_result,
    encode_call,
    marker_nonce,
    new_marker,
    read_payload,
    read_relay,
    relay_program,
    values_match,
)
from pipelines.settings import require_data_dir

HUMANEVAL, MBPPPLUS, LIVECODEBENCH = "humaneval", "mbppplus", "livecodebench"
BENCHMARKS = (HUMANEVAL, MBPPPLUS, LIVECODEBENCH)
DEFAULT_TIMEOUT_S = 10.0
EXPECTED_TIMEOUT_S = 120.0
SLOW_FACTOR = 3.0
GRADER_OUTPUT_BYTES = 64 * 1024 * 1024  # for the trusted recording runs only
# A candidate's results may take RESULTS_FACTOR times the bytes of the reference answers (at
# least MIN_RESULTS_BYTES); a stdin program's output 2x the expected output plus STDOUT_SLACK.
RESULTS_FACTOR = 4
MIN_RESULTS_BYTES = 256 * 1024
STDOUT_SLACK = 16 * 1024
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
    the deciding run (truncated); ``tests_*`` count the benchmark's test cases.
    ``ungradable`` marks an item the grader could not use at all (a malformed problem, a
    reference solution that cannot be recorded, a problem with no test): it is failed, and
    its reason starts with ``grading failed:``; an RL reward scores it as unscorable."""

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
    ungradable: bool = False


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
# recording the benchmark's own tests (trusted code only: no candidate runs here)


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def humaneval_source(candidate: str, problem: dict) -> str:
    """The candidate's module: the prompt, then the candidate (a whole definition of the entry
    point replaces the prompt's stub and can use its imports and helpers; a bare body continues
    the prompt). The benchmark's test is not part of it."""
    entry = problem["entry_point"]
    code = extract_code(candidate, entry)
    return problem["prompt"] + ("\n\n" if _defines(code, entry) else "") + code


_RECORDINGS: dict[str, Recording | Exception] = {}
_RECORDING_LOCKS: dict[str, threading.Lock] = {}
_RECORDING_GUARD = threading.Lock()


def _recording(key_parts: list, make, sandbox: Any) -> Recording:
    key = hashlib.sha256(json.dumps(key_parts).encode()).hexdigest()
    with _RECORDING_GUARD:
        lock = _RECORDING_LOCKS.setdefault(key, threading.Lock())
    with lock:
        if key not in _RECORDINGS:
            try:
                _RECORDINGS[key] = make(sandbox if sandbox is not None else _default_sandbox())
            except (RecordingError, ValueError) as exc:  # a run that failed is tried again
                _RECORDINGS[key] = exc
        found = _RECORDINGS[key]
    if isinstance(found, Exception):
        raise found
    return found


def _record(box: Any, *, task: Any, setup: str, entry: str, test_setup: str, test_run: str,
            test: str | None, fixed_calls: list, digest_above: int = 0,
            must_replay: bool) -> Recording:
    marker = new_marker()
    program = recording_program(setup, entry, test, fixed_calls, marker, digest_above)
    # A fresh jail of its own, never a pool's warm runner: a runner's heap keeps remnants of
    # the programs it was sent, and the candidates it runs later must find none of this one.
    cold = box.backend if isinstance(box, SandboxPool) else box
    result = cold.run(program, limits=_limits(box, EXPECTED_TIMEOUT_S, GRADER_OUTPUT_BYTES))
    payload, why = read_payload(result.stdout, marker)
    if payload is NOT_FOUND:
        raise RuntimeError(f"the canonical solution of {task} did not run: "
                           f"{_failed_run(result) if not result.ok else why}")
    return parse_recording(payload, task=task, entry=entry, test_setup=test_setup,
                           test_run=test_run, seconds=result.duration_s,
                           must_replay=must_replay and test is not None)


def humaneval_recording(problem: dict, sandbox: Any = None) -> Recording:
    """The calls HumanEval's ``check`` makes on the canonical solution (once per task and
    process)."""
    entry = problem["entry_point"]

    def make(box):
        return _record(box, task=problem.get("task_id"),
                       setup=problem["prompt"] + problem["canonical_solution"], entry=entry,
                       test_setup=problem["prompt"] + "\n\n" + problem["test"],
                       test_run=f"check({entry})\n",
                       test=problem["test"] + f"\n\ncheck({entry})\n", fixed_calls=[],
                       must_replay=True)

    return _recording(["humaneval", problem["prompt"], problem["canonical_solution"],
                       problem["test"], entry], make, sandbox)


def mbpp_inputs(problem: dict) -> list:
    return list(problem.get("base_input") or []) + list(problem.get("plus_input") or [])


def _mbpp_assertion(problem: dict) -> str | None:
    text = (problem.get("assertion") or "").strip()
    return f"import math\n{text}\n" if text else None


def mbpp_recording(problem: dict, sandbox: Any = None) -> Recording:
    """The canonical solution's encoded results on every MBPP+ input and the calls its
    ``assertion`` block makes (once per task and process)."""
    entry = problem["entry_point"]
    inputs = mbpp_inputs(problem)
    assertion = _mbpp_assertion(problem)

    def make(box):
        return _record(box, task=problem.get("task_id"), setup=problem["canonical_solution"],
                       entry=entry, test_setup="", test_run=assertion or "", test=assertion,
                       fixed_calls=[encode_call(args) for args in inputs],
                       digest_above=DIGEST_ABOVE, must_replay=False)

    return _recording(["mbppplus", problem.get("canonical_solution"), entry, inputs, assertion],
                      make, sandbox)


# ---------------------------------------------------------------------------------------------
# grading


def _limits(box: Any, timeout_s: float, output_bytes: int) -> Limits:
    """The sandbox's own limits (so a warm pool's runners fit them) with the grader's time
    limit and output cap."""
    base = getattr(box, "limits", None)
    base = base if isinstance(base, Limits) else Limits()
    return base.with_(timeout_s=timeout_s, cpu_s=None, max_output_bytes=int(output_bytes))


def _failed_run(result: ExecResult) -> str:
    if result.timed_out:
        return f"timed out ({result.error.value if result.error else 'limit exceeded'})"
    if result.memory_exceeded:
        return "exceeded the memory limit"
    if result.output_truncated:
        return "printed more output than the grader keeps"
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
    ``run(code, stdin=None, limits=None)``: a LocalSandbox, a SandboxPool, an E2BSandbox).
    Raises for a malformed problem or a benchmark whose canonical solution cannot be
    recorded; :func:`grade_code_many` turns those into failed items."""
    if not isinstance(candidate, str):
        raise TypeError(f"candidate must be a str, got {type(candidate).__name__}")
    kind = detect_benchmark(problem_meta)
    box = sandbox if sandbox is not None else _default_sandbox()
    getattr(box, "isolation", None)  # a sandbox that cannot run says so first (one probe)
    start = time.monotonic()
    task = problem_meta.get("task_id") or problem_meta.get("question_id")
    grader = {HUMANEVAL: _grade_humaneval, MBPPPLUS: _grade_mbpp}.get(kind, _grade_lcb)
    _PHASE.judging = False
    try:
        verdict = grader(candidate, problem_meta, box, timeout_s)
    except (SandboxUnavailable, E2BUnavailable):
        raise
    except Exception as exc:
        if not _PHASE.judging:
            raise  # the problem itself cannot be graded (its caller says so: ungradable)
        # The candidate ran: whatever its answers make the host do (a value it cannot render
        # or compare) is the candidate's failure, never an ungradable problem.
        verdict = {"passed": False, "tests_passed": 0, "timed_out": False,
                   "reason": f"its answers could not be judged: {type(exc).__name__}: "
                             f"{str(exc)[:300]}"}
    finally:
        _PHASE.judging = False
    return CodeGradeResult(benchmark=kind, task_id=None if task is None else str(task),
                           duration_s=time.monotonic() - start, **verdict)


# Whether the grading in this thread has run the candidate (then an exception is its failure).
_PHASE = threading.local()


def _relay(box: Any, source: str, target: tuple, calls: list, timeout_s: float, cap: int,
           digest_count: int = 0) -> tuple[ExecResult, RelayOutcome]:
    """Run ``source`` through the relay harness; the host keeps at most what a payload of
    ``cap`` bytes of results can take (JSON escaping can triple it) and parses no more."""
    marker = new_marker()
    keep = 3 * cap + 64 * 1024
    limits = _limits(box, timeout_s, keep)
    if isinstance(box, SandboxPool) and box.relay_preloaded(limits):
        # A warm runner's fork server is the candidate's trusted parent: no relay program to
        # send, compile or fork (the same child code, the same payload line).
        result = box.run_relay(source, target, calls, nonce=marker_nonce(marker),
                               results_cap=cap, digest_above=DIGEST_ABOVE,
                               digest_count=digest_count, limits=limits)
    else:
        program = relay_program(source, target, calls, results_cap=cap,
                                digest_above=DIGEST_ABOVE, digest_count=digest_count)
        result = box.run(program, stdin=marker_nonce(marker), limits=limits)
    _PHASE.judging = True
    outcome = read_relay(result.stdout, marker, len(calls), max_chars=keep)
    if outcome.problem and not result.ok:
        outcome = RelayOutcome(outcome.results, _failed_run(result), outcome.output)
    return result, outcome


def _results_cap(reference_bytes: int) -> int:
    return max(MIN_RESULTS_BYTES, RESULTS_FACTOR * reference_bytes)


def _details(outcome: RelayOutcome) -> str:
    return f"its output: {outcome.output[:2000]!r}" if outcome.output else ""


def _grade_humaneval(candidate: str, problem: dict, box, timeout_s: float) -> dict:
    for key in ("prompt", "test", "entry_point", "canonical_solution"):
        if key not in problem:
            raise ValueError(f"HumanEval problem lacks {key!r}")
    recording = humaneval_recording(problem, box)
    entry = problem["entry_point"]
    if not recording.calls:  # a test that never calls the function would pass anything
        raise ValueError(f"the HumanEval test of {entry!r} never calls it with the canonical "
                         "solution: nothing to grade")
    result, outcome = _relay(box, humaneval_source(candidate, problem), ("function", entry),
                             recording.calls, timeout_s, _results_cap(recording.size))
    base = {"tests_total": 1, "timed_out": result.timed_out}
    if outcome.problem:
        return {**base, "passed": False, "reason": outcome.problem, "tests_passed": 0,
                "details": _details(outcome)}
    why = replay(recording.test_setup, recording.test_run, entry, recording.calls,
                  outcome.results)
    return {**base, "passed": why is None, "reason": why or "passed",
            "tests_passed": int(why is None), "details": "" if why is None else _details(outcome)}


def _grade_mbpp(candidate: str, problem: dict, box, timeout_s: float) -> dict:
    for key in ("entry_point", "canonical_solution"):
        if key not in problem and not (key == "canonical_solution"
                                       and problem.get("expected_outputs") is not None):
            raise ValueError(f"MBPP+ problem lacks {key!r}")
    entry = problem["entry_point"]
    inputs = mbpp_inputs(problem)
    recording = mbpp_recording(problem, box) if "canonical_solution" in problem else None
    if problem.get("expected_outputs") is not None:
        expected, reference_s = list(problem["expected_outputs"]), 0.0
    else:
        expected, reference_s = recording.fixed, recording.seconds
    use_assertion = recording is not None and recording.replayable
    if not inputs and not use_assertion:  # no test at all would pass anything
        raise ValueError("MBPP+ problem has no inputs (base_input, plus_input) and no assertion "
                         "block the host can replay: nothing to grade")
    calls = [encode_call(args) for args in inputs] + (recording.calls if use_assertion else [])
    code = extract_code(candidate, entry)
    # Slow tasks get the time their canonical solution needed, with a margin.
    limit_s = max(timeout_s, SLOW_FACTOR * reference_s + 1.0)
    reference = len(json.dumps(expected)) + (recording.size if recording else 0)
    result, outcome = _relay(box, code, ("function", entry), calls, limit_s,
                             _results_cap(reference), digest_count=len(inputs))
    total = len(inputs) + int(use_assertion)
    base = {"tests_total": total, "timed_out": result.timed_out,
            "ignored_tests": int(bool(_mbpp_assertion(problem)) and not use_assertion)}
    if outcome.problem:
        return {**base, "passed": False, "reason": outcome.problem, "tests_passed": 0,
                "details": _details(outcome)}
    atol = float(problem.get("atol") or 0)
    passed, first_bad = 0, None
    for i, (got, exp) in enumerate(zip(outcome.results, expected)):
        want = call_result(exp, Digest)
        # A reference answer that is not plain data itself (a few tasks return re.Match
        # objects) is matched by type and repr, as strings on the host.
        if (got.ok and want.ok and values_match(got.value, want.value, atol)) or (
                got.kind == want.kind == "error") or (
                got.kind == want.kind == "bad" and got.value == want.value):
            passed += 1
        elif first_bad is None:
            first_bad = f"input {i}: the function {got.describe()}"
    if use_assertion:
        why = replay("", recording.test_run, entry, recording.calls,
                      outcome.results[len(inputs):])
        if why is None:
            passed += 1
        elif first_bad is None:
            first_bad = f"the assertion block failed: {why}"
    ok = first_bad is None and passed == total
    return {**base, "passed": ok, "tests_passed": passed,
            "reason": "passed" if ok else first_bad or "failed",
            "details": "" if ok else _details(outcome)}


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
        try:
            inputs = [[json.loads(line) for line in t["input"].split("\n") if line.strip()]
                      for t in tests]
            wanted = [json.loads(t["output"]) for t in tests]
        except ValueError as exc:
            raise ValueError("a LiveCodeBench functional test's input must be one JSON value per "
                             f"line (the method's arguments) and its output one JSON value: "
                             f"{exc}") from exc
        reference = sum(len(str(t["output"])) for t in tests)
        result, outcome = _relay(box, f"{LCB_PRELUDE}\n{code}",
                                 ("method", "Solution", found.group(1)),
                                 [encode_call(args) for args in inputs],
                                 timeout_s * max(1, len(tests)), _results_cap(reference))
        if outcome.problem:
            return {**base, "passed": False, "reason": outcome.problem, "tests_passed": 0,
                    "timed_out": result.timed_out, "details": _details(outcome)}
        passed, first_bad = 0, None
        for i, (got, want) in enumerate(zip(outcome.results, wanted)):
            if got.ok and values_match(_listify(got.value), want):
                passed += 1
            elif first_bad is None:
                first_bad = f"wrong answer on test {i}: the method {got.describe()}"
        ok = first_bad is None and passed == len(tests)
        return {**base, "passed": ok, "tests_passed": passed, "timed_out": False,
                "reason": "passed" if ok else first_bad or "failed",
                "details": "" if ok else _details(outcome)}
    passed = 0
    _PHASE.judging = True
    for i, test in enumerate(tests):
        expected = str(test["output"])
        # Output much longer than the expected output is wrong anyway: keep no more than that.
        cap = 2 * len(expected.encode("utf-8")) + STDOUT_SLACK
        result = box.run(code, stdin=test["input"], limits=_limits(box, timeout_s, cap))
        # A cut stdout fails (what was cut could matter); a cut stderr alone does not.
        cut = result.output_truncated and len(result.stdout.encode("utf-8")) >= cap
        if not result.ok or cut:
            return {**base, "passed": False, "tests_passed": passed,
                    "timed_out": result.timed_out, "reason": f"test {i}: {_failed_run(result)}",
                    "details": render_observation(result, 2000)}
        if not stdout_matches(result.stdout, expected):
            return {**base, "passed": False, "tests_passed": passed, "timed_out": False,
                    "reason": f"wrong answer on test {i}",
                    "details": f"expected {expected[:300]!r}, got "
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
    pool is created (and closed) when none is given. Every item gets a result: an item whose
    grading raises (a malformed problem, a canonical solution that cannot be recorded) is a
    failed item with the error as its reason. Only a missing sandbox (``SandboxUnavailable``,
    ``E2BUnavailable``) raises, at once."""
    problem_list = [problems] * len(candidates) if isinstance(problems, dict) else list(problems)
    if len(problem_list) != len(candidates):
        raise ValueError(f"got {len(candidates)} candidates but {len(problem_list)} problems")
    own = pool is None
    pool = pool or SandboxPool(workers=workers)
    # One long-lived task per sandbox worker, each taking the next item in turn (a future per
    # item woke the caller and moved the GIL around for every program: a tenth of the host's
    # time at hundreds of programs a second). The first error stops the taking.
    results: list[CodeGradeResult | None] = [None] * len(candidates)
    items = iter(enumerate(zip(candidates, problem_list)))
    taking = threading.Lock()
    stop: list[BaseException] = []

    def take() -> None:
        while not stop:
            with taking:
                item = next(items, None)
            if item is None:
                return
            index, (candidate, problem) = item
            try:
                results[index] = _grade_one(candidate, problem, pool, timeout_s)
            except BaseException as exc:
                stop.append(exc)
                raise

    try:
        with ThreadPoolExecutor(max_workers=max(1, pool.workers),
                                thread_name_prefix="weft-grade") as ex:
            tasks = [ex.submit(take) for _ in range(max(1, pool.workers))]
            try:
                for task in tasks:
                    task.exception()  # waits for it; the first error is raised below
            except BaseException as exc:  # (an interrupt here): no further item is taken
                stop.append(exc)
                raise
        if stop:
            raise stop[0]
        return results  # type: ignore[return-value]
    finally:
        if own:
            pool.close()


def _grade_one(candidate: Any, problem: Any, pool: Any, timeout_s: float) -> CodeGradeResult:
    start = time.monotonic()
    try:
        return grade_code(candidate, problem, pool, timeout_s)
    except (SandboxUnavailable, E2BUnavailable):
        raise  # no sandbox at all: fail fast with how to get one, not once per item
    except Exception as exc:  # noqa: BLE001 - one bad item never ends the run
        meta = problem if isinstance(problem, dict) else {}
        try:
            kind = detect_benchmark(meta)
        except (TypeError, ValueError):
            kind = str(meta.get("benchmark") or "unknown")
        task = meta.get("task_id") or meta.get("question_id")
        return CodeGradeResult(passed=False, benchmark=kind,
                               task_id=None if task is None else str(task),
                               reason=f"grading failed: {type(exc).__name__}: {str(exc)[:300]}",
                               duration_s=time.monotonic() - start, ungradable=True)
