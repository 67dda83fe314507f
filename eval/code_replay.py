"""Recording a code benchmark's own test with its canonical solution, and replaying that test
on the host with a candidate's answers: how :mod:`eval.code_grader` keeps test code out of the
candidate's process.

- :func:`recording_program` is a trusted program (benchmark code only) for the sandbox: the
  canonical solution, its results on fixed inputs, then the test with the entry point's name
  bound to a recorder that keeps each call's arguments (encoded before the call, as plain data)
  and answer. ``random`` is seeded with :data:`RECORD_SEED` first.
- :func:`parse_recording` turns its output into a :class:`Recording` and replays it on the host
  with the canonical answers at once: a test that does not pass that way is not replayable.
- :func:`replay` runs the test on the host (the prompt or setup and the test: benchmark code,
  never the candidate's) with a stand-in for the candidate: call ``i`` must have the recorded
  arguments and gets the candidate's decoded answer to call ``i``. The test gets a ``random``
  module of its own, seeded like the recording, so replays in several threads (or other users
  of ``random`` in the process) never disturb each other. Its time limit counts the CPU time
  of the replaying thread (``time.thread_time``), so a loaded host, or other grading threads
  holding the GIL, never turn a correct answer into a failure.

Not guaranteed: a verdict when the candidate's answers lead the test to call the function with
arguments that were never recorded (the replay fails, with that reason); that the replay stops
within :data:`REPLAY_TIMEOUT_S` inside one slow operation of the test itself (the limit is
checked at each call of the stand-in; answers are size-capped before they get here); a bound
on the wall time of a test that waits without using CPU (benchmark tests do not).
"""

from __future__ import annotations

import builtins
import copy
import json
import random
import time
import types
from dataclasses import dataclass
from typing import Any

from pipelines.sandbox.harness import (
    CallResult,
    EncodedCalls,
    call_result,
    canonical_json,
    function_source,
    plain_decode,
    plain_encode,
)

RECORD_SEED = 20_240_601  # ``random`` is seeded with this before a test is recorded/replayed
# CPU seconds of the replaying thread: normal replays take milliseconds; inside the reward
# path's per-item slack. CPU time, not wall time: a verdict must not depend on the host's load.
# 1 s was too tight: in the test suite, the canonical replay of HumanEval/53 (105 calls) once
# counted more than 1 s (cause not pinned down; a garbage collection of a large process's heap,
# for one, runs in the replaying thread and counts).
REPLAY_TIMEOUT_S = 5.0


class RecordingError(RuntimeError):
    """A recording that can never be used (the same on every attempt)."""


_RECORDING_SOURCE = r'''
import json as __weft_json
import random as __weft_random


def __weft_describe(exc):
    return (type(exc).__name__ + ": " + str(exc))[:300]


__weft_fixed = []
for __weft_call in __weft_json.loads(__WEFT_FIXED):
    __weft_args, __weft_kwargs = __weft_plain_decode(__weft_call)
    try:
        __weft_fixed.append(__weft_plain_encode(
            globals()[__WEFT_ENTRY](*__weft_args, **__weft_kwargs), __WEFT_DIGEST_ABOVE))
    except BaseException as __weft_exc:
        __weft_fixed.append(["error", __weft_describe(__weft_exc)])
__weft_calls = []
__weft_real = globals()[__WEFT_ENTRY]


def __weft_recorder(*args, **kwargs):
    key = __weft_plain_encode((args, kwargs))  # before the call: a snapshot of the arguments
    try:
        out = __weft_real(*args, **kwargs)
    except BaseException as exc:
        __weft_calls.append([key, ["error", __weft_describe(exc)]])
        raise
    __weft_calls.append([key, __weft_plain_encode(out)])
    return out


__weft_error = None
if __WEFT_TEST is not None:
    __weft_ns = dict(globals())
    __weft_ns[__WEFT_ENTRY] = __weft_recorder  # the test's calls, not the solution's own
    __weft_random.seed(__WEFT_SEED)
    try:
        exec(compile(__WEFT_TEST, "test", "exec"), __weft_ns)
    except BaseException as __weft_exc:
        __weft_error = __weft_describe(__weft_exc)
print("\n" + __WEFT_MARKER + __weft_json.dumps(
    {"fixed": __weft_fixed, "calls": __weft_calls, "error": __weft_error}), flush=True)
'''


def recording_program(setup: str, entry: str, test: str | None, fixed_calls: list,
                      marker: str, digest_above: int = 0) -> str:
    """A trusted program (benchmark code only): run ``setup`` (the canonical solution and what
    it needs), the entry point on each of ``fixed_calls``, then ``test`` with the entry point's
    name bound to a recorder; print the fixed results and each recorded call (its arguments'
    encoding before the call, and the encoded result) after ``marker``."""
    consts = (f"__WEFT_FIXED = {json.dumps(fixed_calls)!r}\n__WEFT_ENTRY = {entry!r}\n"
              f"__WEFT_DIGEST_ABOVE = {int(digest_above)}\n__WEFT_TEST = {test!r}\n"
              f"__WEFT_SEED = {RECORD_SEED}\n__WEFT_MARKER = {marker!r}\n")
    return "\n".join([setup, "", function_source(plain_encode, "__weft_plain_encode"),
                      function_source(plain_decode, "__weft_plain_decode"), consts,
                      _RECORDING_SOURCE])


@dataclass(frozen=True)
class Recording:
    """What the canonical solution did under the benchmark's own tests, recorded in the
    sandbox: ``fixed`` holds its encoded results on fixed inputs (MBPP+), ``calls`` the encoded
    arguments of each call the test made and ``results`` its answers; ``replayable`` says the
    test passes on the host when replayed with those answers (else it is not used)."""

    fixed: list
    calls: list
    results: list
    seconds: float
    size: int
    replayable: bool
    test_setup: str
    test_run: str


def _compiled(source: str, name: str):
    key = (source, name)
    code = _COMPILED.get(key)
    if code is None:
        code = _COMPILED[key] = compile(source, name, "exec")
    return code


_COMPILED: dict[tuple[str, str], Any] = {}


def parse_recording(payload: Any, *, task: Any, entry: str, test_setup: str, test_run: str,
                    seconds: float, must_replay: bool) -> Recording:
    """A :class:`Recording` from a recording program's payload. Raises
    :class:`RecordingError` when the canonical solution failed its own test, the payload is
    malformed, or (``must_replay``) the test does not pass on the host with the canonical
    answers."""
    try:
        if payload.get("error"):
            raise RecordingError(f"the canonical solution of {task} fails the benchmark's own "
                               f"test: {payload['error']}")
        keys = [key for key, _ in payload["calls"]]
        results = [res for _, res in payload["calls"]]
        fixed = list(payload["fixed"])
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise RecordingError(f"the recording of {task} is malformed: {exc}") from None
    calls = EncodedCalls([enc for kind, enc in keys if kind == "ok"])
    replayable = bool(test_run) and len(calls) == len(keys)
    if replayable:
        why = replay(test_setup, test_run, entry, calls, [call_result(r, None) for r in results])
        replayable = why is None
        if why is not None and must_replay:
            raise RecordingError(f"the benchmark's test of {task} cannot be replayed on the host "
                               f"with the canonical answers: {why}")
    elif must_replay:
        raise RecordingError(f"the benchmark's test of {task} calls the function with arguments "
                           "that are not plain data")
    return Recording(fixed=fixed, calls=calls, results=results, seconds=seconds,
                     size=len(json.dumps(fixed)) + len(json.dumps(results)),
                     replayable=replayable, test_setup=test_setup, test_run=test_run)


class _ReplayStop(BaseException):
    """Ends a replay with a failed verdict (a BaseException, so the test cannot catch it)."""


class _Replayed:
    """The stand-in for the candidate during a replay: the i-th call must have the recorded
    arguments; it returns the candidate's decoded answer to that call (or raises)."""

    def __init__(self, calls: list, answers: list[CallResult], deadline: float) -> None:
        self.keys = (calls.canonical if isinstance(calls, EncodedCalls)
                     else [canonical_json(c) for c in calls])
        self.answers = answers
        self.deadline = deadline
        self.count = 0

    def __call__(self, *args, **kwargs):
        i = self.count
        self.count += 1
        if time.thread_time() > self.deadline:
            raise _ReplayStop(f"the test used more than {REPLAY_TIMEOUT_S:g} s of CPU time on "
                              "the host")
        if i >= len(self.keys):
            raise _ReplayStop("the test called the function more often than when it was "
                              "recorded (an earlier answer differs from the reference one)")
        kind, enc = plain_encode((args, kwargs))
        if kind != "ok" or canonical_json(enc) != self.keys[i]:
            raise _ReplayStop(f"call {i} of the test has other arguments than when it was "
                              "recorded (an earlier answer differs from the reference one)")
        answer = self.answers[i]
        if answer.ok:
            return copy.deepcopy(answer.value)
        raise _ReplayStop(f"call {i}: the function {answer.describe()}")


def _private_random(seed: int) -> types.ModuleType:
    """A ``random`` module of its own for one replay (seeded like the recording), so replays in
    several threads, or other users of ``random`` in this process, never disturb each other."""
    rng = random.Random(seed)
    module = types.ModuleType("random")
    for name, bound in _RANDOM_NAMES:
        setattr(module, name, getattr(rng, name) if bound else getattr(random, name))
    return module


# The public names of ``random``, and whether each is a method of its hidden instance (then
# the private module gets the same method of its own instance): worked out once.
_RANDOM_NAMES = tuple(
    (name, callable(getattr(random.Random(0), name, None))
     and hasattr(getattr(random.Random(0), name, None), "__self__"))
    for name in dir(random) if not name.startswith("_"))
_BUILTINS = dict(vars(builtins))


def replay(setup: str, run: str, entry: str, calls: list,
           answers: list[CallResult]) -> str | None:
    """Run the benchmark's test (trusted code) on the host with the candidate's answers; None
    when it passes, else why not. Never raises for what the test does."""
    private = _private_random(RECORD_SEED)

    def importer(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "random" and level == 0:
            return private
        return builtins.__import__(name, globals, locals, fromlist, level)

    space = {"__name__": "__weft_replay__",
             "__builtins__": dict(_BUILTINS, __import__=importer)}
    stand_in = _Replayed(calls, answers, time.thread_time() + REPLAY_TIMEOUT_S)
    try:
        if setup:
            exec(_compiled(setup, "benchmark"), space)  # noqa: S102 - the benchmark's own code
        space[entry] = stand_in
        exec(_compiled(run, "benchmark"), space)  # noqa: S102
    except _ReplayStop as exc:
        return str(exc)
    except AssertionError as exc:
        return f"the benchmark's test failed (AssertionError{': ' if str(exc) else ''}" \
               f"{str(exc)[:200]})"
    except Exception as exc:  # noqa: BLE001 - whatever the test raises is a failed test
        return f"the benchmark's test raised {type(exc).__name__}: {str(exc)[:200]}"
    return None
