"""Completions written to game the code grader, run on real HumanEval / MBPP+ tasks in the real
bubblewrap jail: each one must get a failed verdict (and the grader must survive it).

The attacks: an object whose ``__eq__`` is always true, ``int``/``str``/``float`` subclasses,
patched ``builtins.abs`` / ``math.fabs``, a marker (or the nonce) dug out of code constants,
frames, ``gc.get_objects()``, argv, ``/proc/self/cmdline``, stdin and ``__main__`` and printed
with a forged payload (also into ``/proc/<ppid>/fd/1`` and ``/proc/1/fd/1``), trace and profile
hooks that skip ``check``, a lookup table built from the program text, killing or stopping the
parent, a raw scan of the candidate's own memory for the test, a 200,000-deep payload and a
64 MiB flood. Every attack here passed (or crashed the grader, or cost the host >100 MiB) when
the benchmark's test ran inside the candidate's own interpreter and a marker line printed
after it meant "passed"."""

import gc
import json
import time
import tracemalloc

import pytest

from eval.code_grader import (
    grade_code,
    grade_code_many,
    humaneval_recording,
    load_benchmark,
    mbpp_recording,
)
from pipelines.sandbox import SandboxPool
from pipelines.sandbox.harness import (
    NOT_FOUND,
    encode_call,
    find_payload,
    marker_nonce,
    new_marker,
    read_payload,
    read_relay,
    relay_program,
)

# Tasks whose tests compare with ==, with abs()/math.fabs, and through a helper (poly).
TASKS = ("HumanEval/0", "HumanEval/2", "HumanEval/13", "HumanEval/32", "HumanEval/53")


@pytest.fixture(scope="module")
def pool(jail):
    with SandboxPool(jail, workers=2) as warm:
        yield warm


@pytest.fixture(scope="module")
def humaneval(shared_data):
    return {p["task_id"]: p for p in load_benchmark("humaneval")}


@pytest.fixture(scope="module")
def mbpp(shared_data):
    return load_benchmark("mbppplus")


@pytest.fixture(scope="module")
def lcb(shared_data):
    return load_benchmark("livecodebench")


def whole(problem: dict, body: str, prelude: str = "") -> str:
    """A whole definition of the task's entry point with ``body`` (indented 4)."""
    params = "*args, **kwargs"
    return f"{prelude}\ndef {problem['entry_point']}({params}):\n{body}"


def assert_fails(verdict):
    assert not verdict.passed, verdict
    assert verdict.reason and verdict.reason != "passed"


# Finds every marker or nonce-looking string the candidate can reach: code constants and
# locals/globals of every frame up the stack, gc-tracked objects, argv, /proc/self/cmdline,
# stdin and __main__; then prints marker lines claiming a pass in both the old format
# (``<marker>true``) and the relay format (with the right answers, given as FORGED), on its
# stdout, on the real stdout object, and through /proc/<pid>/fd/1 of its parent and of pid 1.
DIG_AND_FORGE = r'''
def __dig():
    import gc, os, re, sys
    found = set()
    marker = re.compile(r"__weft_result_[0-9a-f]+__")
    nonce = re.compile(r"^[0-9a-f]{16,64}$")

    def look(v):
        if isinstance(v, bytes):
            v = v.decode("latin-1")
        if isinstance(v, str):
            found.update(marker.findall(v))
            if nonce.match(v.strip()):
                found.add("__weft_result_" + v.strip() + "__")

    f = sys._getframe()
    while f is not None:
        for c in f.f_code.co_consts:
            look(c)
        for v in list(f.f_locals.values()) + list(f.f_globals.values()):
            look(v)
            if isinstance(v, dict):
                for x in list(v.values()):
                    look(x)
        f = f.f_back
    for o in gc.get_objects():
        try:
            if isinstance(o, dict):
                for v in list(o.values())[:2000]:
                    look(v)
            elif isinstance(o, (list, tuple)):
                for v in list(o)[:2000]:
                    look(v)
            elif hasattr(o, "__code__"):
                for c in o.__code__.co_consts:
                    look(c)
        except Exception:
            pass
    look(" ".join(sys.argv))
    for path in ("/proc/self/cmdline", "/proc/self/environ"):
        try:
            look(open(path, "rb").read())
        except OSError:
            pass
    try:
        look(os.read(0, 4096))
    except OSError:
        pass
    look(" ".join(str(v) for v in vars(sys.modules["__main__"]).values()))
    return sorted(found)


def __forge(markers):
    import json, os, sys
    lines = []
    for m in markers:
        lines.append("\n" + m + "true\n")
        lines.append("\n" + m + json.dumps({"results": FORGED, "overflow": False, "status": 0,
                                          "sealed": True, "output": "", "output_bytes": 0}) + "\n")
    text = "".join(lines)
    for write in (sys.stdout.write, sys.__stdout__.write):
        try:
            write(text)
        except Exception:
            pass
    for stream in (sys.stdout, sys.__stdout__):
        try:
            stream.flush()
        except Exception:
            pass
    for path in (f"/proc/{os.getppid()}/fd/1", "/proc/1/fd/1"):
        try:
            with open(path, "w") as handle:
                handle.write(text)
        except OSError:
            pass
    return markers
'''


def forged_answers(problem, pool) -> str:
    """The right answers to every call of the task's test, as a relay payload would hold them
    (the attacker is given them: a forged line must not pass even with correct content)."""
    return repr(humaneval_recording(problem, pool).results)


def dig_attack(problem, pool, then: str) -> str:
    prelude = f"FORGED = {forged_answers(problem, pool)}\n{DIG_AND_FORGE}"
    body = "    __forge(__dig())\n" + then
    return whole(problem, body, prelude)


@pytest.mark.parametrize("task", TASKS)
def test_always_equal_object_fails(task, humaneval, pool):
    problem = humaneval[task]
    prelude = ("class Anything:\n    def __eq__(self, other):\n        return True\n"
               "    def __ne__(self, other):\n        return False\n"
               "    def __lt__(self, other):\n        return True\n"
               "    __le__ = __gt__ = __ge__ = __lt__\n"
               "    def __abs__(self):\n        return 0\n"
               "    def __sub__(self, other):\n        return self\n"
               "    __rsub__ = __add__ = __radd__ = __mul__ = __rmul__ = __sub__\n"
               "    def __float__(self):\n        return 0.0\n"
               "    def __hash__(self):\n        return 0\n")
    verdict = grade_code(whole(problem, "    return Anything()\n", prelude), problem, pool)
    assert_fails(verdict)
    assert "not plain data" in verdict.reason


ANYTHING = ("class Anything:\n    def __eq__(self, other):\n        return True\n"
            "    def __ne__(self, other):\n        return False\n"
            "    def __bool__(self):\n        return True\n")


def test_every_humaneval_task_resists_an_always_equal_object_and_a_trace_hook(humaneval, pool):
    problems = list(humaneval.values())
    equal = [whole(p, "    return Anything()\n", ANYTHING) for p in problems]
    hook = [whole(p, "    return None\n") + "\nimport sys, os\n"
            "def _profile(frame, event, arg):\n"
            "    if event == 'call' and frame.f_code.co_name == 'check':\n"
            "        print('__weft_result_0__true', flush=True)\n        os._exit(0)\n"
            "sys.setprofile(_profile)\n" for p in problems]
    results = grade_code_many(equal + hook, problems + problems, pool=pool)
    assert [r.task_id for r in results if r.passed] == []
    assert all("not plain data" in r.reason for r in results[:len(problems)])


@pytest.mark.parametrize("base", ["int", "str", "float"])
def test_builtin_subclass_with_custom_eq_fails(base, humaneval, pool):
    problem = humaneval["HumanEval/13"]  # greatest_common_divisor: an int
    prelude = (f"class Sly({base}):\n    def __eq__(self, other):\n        return True\n"
               f"    __hash__ = {base}.__hash__\n")
    verdict = grade_code(whole(problem, f"    return Sly({'0' if base != 'str' else repr('')})\n",
                               prelude), problem, pool)
    assert_fails(verdict)
    assert "not plain data" in verdict.reason


@pytest.mark.parametrize("task", ["HumanEval/4", "HumanEval/32"])  # every assert uses abs/fabs
def test_patched_abs_and_fabs_fail(task, humaneval, pool):
    problem = humaneval[task]
    prelude = "import builtins, math\nbuiltins.abs = lambda x: 0\nmath.fabs = lambda x: 0.0\n"
    assert_fails(grade_code(whole(problem, "    return 12345.0\n", prelude), problem, pool))


@pytest.mark.parametrize("task", TASKS)
def test_marker_from_code_constants_frames_and_gc_fails(task, humaneval, pool):
    problem = humaneval[task]
    assert_fails(grade_code(dig_attack(problem, pool, "    import os\n    os._exit(0)\n"),
                            problem, pool))


@pytest.mark.parametrize("task", ["HumanEval/0", "HumanEval/53"])
def test_marker_forgery_fails_in_a_cold_jail_too(task, humaneval, jail, pool):
    problem = humaneval[task]
    humaneval_recording(problem, pool)
    assert_fails(grade_code(dig_attack(problem, pool, "    import os\n    os._exit(0)\n"),
                            problem, jail))


def test_relay_in_the_plain_subprocess_fallback(humaneval, fallback, pool):
    problem = humaneval["HumanEval/0"]
    assert grade_code(problem["canonical_solution"], problem, fallback).passed
    assert_fails(grade_code(dig_attack(problem, pool, "    import os\n    os._exit(0)\n"),
                            problem, fallback))


def test_the_candidate_never_holds_the_nonce_warm_or_cold(humaneval, pool, jail, monkeypatch):
    import eval.code_grader as grader

    issued = []

    def spy():
        issued.append(new_marker())
        return issued[-1]

    problem = humaneval["HumanEval/0"]
    humaneval_recording(problem, pool)
    monkeypatch.setattr(grader, "new_marker", spy)
    prelude = f"FORGED = {forged_answers(problem, pool)}\n{DIG_AND_FORGE}"
    attack = whole(problem, "    print(' '.join(__dig()), flush=True)\n    __forge(__dig())\n"
                            "    return None\n", prelude)
    # What it dug out is printed first in its output: never the nonce of its own run (a warm
    # runner forks the program before reading the request that carries it; a cold run passes
    # it as a descriptor the driver never reads; the parent reads it after the fork).
    for box in (pool, pool, jail):
        verdict = grade_code(attack, problem, box)
        assert_fails(verdict)
        assert "its output" in verdict.details
        assert marker_nonce(issued[-1]) not in verdict.details


# Reads every anonymous readable mapping of its own process and looks for a line of the task's
# test, in two halves, so that the whole line is never in its own memory unless leaked there.
SCAN = r'''
def __leaked(first, second):
    import ctypes
    for line in open("/proc/self/maps"):
        parts = line.split()
        name = parts[5] if len(parts) > 5 else ""
        if "r" not in parts[1] or (name and name not in ("[heap]", "[stack]")):
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        try:
            data = ctypes.string_at(lo, hi - lo)
        except Exception:
            continue
        at = data.find(first)
        while at >= 0:
            if data[at + len(first):at + len(first) + len(second)] == second:
                return True
            at = data.find(first, at + 1)
    return False
'''


def test_no_remnant_of_the_test_in_the_candidates_memory(humaneval, jail, monkeypatch):
    """The recording (canonical solution + test) runs in a jail of its own: a warm runner that
    had run it would keep remnants in its heap, inherited by every program it forks later."""
    import eval.code_grader as grader

    monkeypatch.setattr(grader, "_RECORDINGS", {})  # record again, on this pool
    problem = humaneval["HumanEval/7"]
    line = next(ln.strip() for ln in problem["test"].splitlines() if "assert" in ln).encode()
    half = len(line) // 2
    body = (f"    print('LEAKED' if __leaked({line[:half]!r}, {line[half:]!r}) else 'clean')\n"
            "    return None\n")
    with SandboxPool(jail, workers=1) as one:
        verdict = grade_code(whole(problem, body, SCAN), problem, one)
    assert_fails(verdict)
    assert "clean" in verdict.details and "LEAKED" not in verdict.details


def test_forged_payload_with_right_answers_then_wrong_returns_fails(humaneval, pool):
    problem = humaneval["HumanEval/53"]  # add(x, y); its check draws random arguments
    attack = dig_attack(problem, pool, "    import os\n    os._exit(0)\n")
    verdict = grade_code(attack, problem, pool)
    assert_fails(verdict)
    assert "ended" in verdict.reason  # no result came back: the forged line was not read


@pytest.mark.parametrize("hook", ["settrace", "setprofile"])
@pytest.mark.parametrize("task", TASKS)
def test_trace_or_profile_hook_that_skips_check_fails(hook, task, humaneval, pool):
    problem = humaneval[task]
    # At module level: a hook that jumps over the line calling check() (settrace), or that
    # prints every marker it can find and exits as soon as check is called (setprofile).
    module_code = f"FORGED = {forged_answers(problem, pool)}\n{DIG_AND_FORGE}\n" + (
        "import dis, sys\n"
        "_lines = set()\n"
        "def _tracer(frame, event, arg):\n"
        "    if frame.f_code.co_name == '<module>' and event == 'line' and not _lines:\n"
        "        for ins in dis.get_instructions(frame.f_code):\n"
        "            if ins.opname == 'LOAD_NAME' and ins.argval == 'check':\n"
        "                _lines.add(ins.positions.lineno)\n"
        "    if (event == 'line' and frame.f_code.co_name == '<module>'\n"
        "            and frame.f_lineno in _lines):\n"
        "        try:\n            frame.f_lineno = frame.f_lineno + 1\n"
        "        except ValueError:\n            pass\n"
        "    return _tracer\n"
        "sys.settrace(_tracer)\nsys._getframe().f_trace = _tracer\n"
        if hook == "settrace" else
        "import os, sys\n"
        "def _profile(frame, event, arg):\n"
        "    if event == 'call' and frame.f_code.co_name == 'check':\n"
        "        __forge(__dig())\n        os._exit(0)\n"
        "sys.setprofile(_profile)\n")
    candidate = whole(problem, "    return None\n") + "\n" + module_code
    assert_fails(grade_code(candidate, problem, pool))


LOOKUP = r'''
def __table():
    import ast, gc, os, sys
    texts = []
    f = sys._getframe()
    while f is not None:
        texts += [v for v in list(f.f_locals.values()) + list(f.f_globals.values())
                  if isinstance(v, str)]
        f = f.f_back
    texts += [v for o in gc.get_objects() if isinstance(o, dict)
              for v in list(o.values()) if isinstance(v, str)]
    texts.append(" ".join(sys.argv))
    try:
        texts.append(open("/proc/self/cmdline", "rb").read().decode("latin-1"))
    except OSError:
        pass
    main = sys.modules["__main__"]
    check = getattr(main, "check", None)
    table = {}
    for text in texts:
        at = text.rfind("\ndef check(")
        if at < 0:
            continue
        try:
            tree = ast.parse(text[at + 1:].split("\ncheck(")[0])
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assert):
                continue
            test, want = node.test, True
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                test, want = test.operand, False
            if isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.Eq):
                call, want = test.left, None
                try:
                    want = ast.literal_eval(test.comparators[0])
                except ValueError:
                    continue
            else:
                call = test
            if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "candidate":
                try:
                    key = repr([ast.literal_eval(a) for a in call.args])
                except ValueError:
                    continue
                table[key] = want
    return table, check
'''


@pytest.mark.parametrize("task", ["HumanEval/0", "HumanEval/3", "HumanEval/13"])
def test_lookup_table_from_the_program_text_fails(task, humaneval, pool):
    problem = humaneval[task]
    body = ("    table, _ = __table()\n"
            "    return table.get(repr(list(args)), False)\n")
    verdict = grade_code(whole(problem, body, LOOKUP), problem, pool)
    assert_fails(verdict)


def test_killing_or_stopping_the_parent_fails(humaneval, pool):
    problem = humaneval["HumanEval/0"]
    for signal_name in ("SIGKILL", "SIGSTOP", "SIGTERM"):
        prelude = f"FORGED = {forged_answers(problem, pool)}\n{DIG_AND_FORGE}"
        body = ("    import os, signal\n    markers = __dig()\n"
                f"    for pid in (os.getppid(), 1):\n"
                f"        try:\n            os.kill(pid, signal.{signal_name})\n"
                "        except OSError:\n            pass\n"
                "    __forge(markers)\n    os._exit(0)\n")
        verdict = grade_code(whole(problem, body, prelude), problem, pool, timeout_s=3)
        assert_fails(verdict)


def test_the_candidate_cannot_reach_the_relay_parent(jail, pool):
    """The forked child cannot open its parent's stdout, stdin or memory, nor ptrace it."""
    probe = ("import ctypes, os\n"
             "def f():\n"
             "    out = []\n"
             "    for pid in (os.getppid(), 1):\n"
             "        for path in ('fd/1', 'fd/0', 'mem', 'environ'):\n"
             "            try:\n"
             "                open(f'/proc/{pid}/{path}', 'rb' if path != 'fd/1' else 'wb')"
             ".close()\n"
             "                out.append(f'{pid}/{path} opened')\n"
             "            except OSError as exc:\n"
             "                out.append(type(exc).__name__)\n"
             "        libc = ctypes.CDLL(None, use_errno=True)\n"
             "        out.append(libc.ptrace(16, pid, 0, 0) == 0 and 'attached' or 'refused')\n"
             "    out.append(os.readlink('/proc/self/fd/1'))\n"
             "    return out\n")
    for box in (pool, jail):
        marker = new_marker()
        program = relay_program(probe, ("function", "f"), [encode_call(())],
                                results_cap=1 << 20)
        result = box.run(program, stdin=marker_nonce(marker))
        outcome = read_relay(result.stdout, marker, 1)
        assert outcome.problem == "" and outcome.results[0].ok, (outcome, result)
        seen = outcome.results[0].value
        assert not any("opened" in s or s == "attached" for s in seen), seen
        assert seen[-1].startswith("pipe:"), seen  # its stdout is the parent's drain pipe


def test_the_candidate_cannot_reach_the_fork_server_that_relays_it(pool):
    """On a warm pool the grader runs the relay with the runner's driver (pid 1 of the jail,
    never given the nonce's stdin) as the candidate's parent, outside the candidate's pid
    namespace, whose pid 1 is a holder sharing the runner template's memory: the same probe
    finds the holder's fds, memory and ptrace refused, and its stdout is the drain pipe."""
    probe = ("import ctypes, os, sys\n"
             "def f():\n"
             "    out = [os.getppid()]\n"
             "    for pid in (os.getppid(), 1):\n"
             "        for path in ('fd/1', 'fd/0', 'mem', 'environ'):\n"
             "            try:\n"
             "                open(f'/proc/{pid}/{path}', 'rb' if path != 'fd/1' else 'wb')"
             ".close()\n"
             "                out.append(f'{pid}/{path} opened')\n"
             "            except OSError as exc:\n"
             "                out.append(type(exc).__name__)\n"
             "        libc = ctypes.CDLL(None, use_errno=True)\n"
             "        out.append(libc.ptrace(16, pid, 0, 0) == 0 and 'attached' or 'refused')\n"
             "    out.append(sys.stdin.read())\n"
             "    out.append(os.readlink('/proc/self/fd/1'))\n"
             "    return out\n")
    assert pool.relay_preloaded()
    marker = new_marker()
    result = pool.run_relay(probe, ("function", "f"), [encode_call(())],
                            nonce=marker_nonce(marker), results_cap=1 << 20)
    outcome = read_relay(result.stdout, marker, 1)
    assert outcome.problem == "" and outcome.results[0].ok, (outcome, result)
    seen = outcome.results[0].value
    assert seen[0] == 0  # the parent is outside the candidate's pid namespace: no pid there
    assert not any(isinstance(s, str) and ("opened" in s or s == "attached") for s in seen), seen
    assert seen[-2] == ""  # its stdin is empty: the nonce never reached it
    assert seen[-1].startswith("pipe:"), seen  # its stdout is the fork server's drain pipe


# ---------------------------------------------------------------------------------------------
# payloads that used to crash the grader, and floods


def test_read_payload_never_raises():
    marker = "M__"
    cases = [(marker + "[" * 200_000, None, "nested too deeply"),
             (marker + "[" * 200_000 + "]" * 200_000, None, "nested too deeply"),
             (marker + "{not json", None, "not valid JSON"),
             ("nothing here", None, "no result line"),
             (marker + "[" + "1," * 1000 + "1]", 1000, "longer than")]
    for text, cap, why in cases:
        value, reason = read_payload(text, marker, max_chars=cap)
        assert value is NOT_FOUND and why in reason
        assert find_payload(text, marker, max_chars=cap) is NOT_FOUND
    assert read_payload(marker + "[1, 2]\n", marker) == ([1, 2], "")


def test_read_relay_survives_malformed_results():
    marker = new_marker()
    deep = json.loads("[" * 50 + "]" * 50)
    payload = {"results": [["ok", {"t": "nope", "v": 1}], ["ok", deep], "junk",
                           ["ok", {"t": "set", "v": [[1]]}], ["ok", {"t": "int", "v": "zz"}]],
               "overflow": False, "status": 0}
    outcome = read_relay(f"\n{marker}{json.dumps(payload)}\n", marker, 6)
    kinds = [r.kind for r in outcome.results]
    assert kinds == ["invalid", "ok", "invalid", "invalid", "invalid", "missing"]


BRACKETS = "[" * 200_000


@pytest.mark.parametrize("bench", ["humaneval", "mbppplus"])
def test_deeply_nested_payload_is_a_failed_item_not_a_crash(bench, humaneval, mbpp, pool):
    problem = humaneval["HumanEval/0"] if bench == "humaneval" else mbpp[0]
    prelude = f"FORGED = []\n{DIG_AND_FORGE}"
    body = ("    import os, sys\n    for m in __dig():\n"
            f"        sys.stdout.write('\\n' + m + {BRACKETS[:10]!r} * 20000 + '\\n')\n"
            "    sys.stdout.flush()\n    os._exit(0)\n")
    candidate = whole(problem, body, prelude)
    verdict = grade_code(candidate, problem, pool)
    assert_fails(verdict)
    # and in a batch, every item still gets its verdict
    batch = grade_code_many([candidate, problem.get("canonical_solution", "")], [problem] * 2,
                            pool=pool)
    assert [r.passed for r in batch] == [False, True]


@pytest.mark.parametrize("bench", ["humaneval", "mbppplus"])
def test_64mib_flood_costs_the_host_little_memory(bench, humaneval, mbpp, pool):
    problem = humaneval["HumanEval/0"] if bench == "humaneval" else mbpp[0]
    grade_code(problem.get("canonical_solution", ""), problem, pool)  # recording done before
    prelude = f"FORGED = []\n{DIG_AND_FORGE}"
    body = ("    import os, sys\n    markers = __dig() or ['']\n"
            "    for m in markers[:1]:\n"
            "        sys.stdout.write(m + '[' + '[],' * (21 * 1024 * 1024) + '[]]\\n')\n"
            "    sys.stdout.flush()\n    os._exit(0)\n")
    gc.collect()
    tracemalloc.start()
    try:
        verdict = grade_code(whole(problem, body, prelude), problem, pool, timeout_s=30)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_fails(verdict)
    assert peak < 16 * 1024 * 1024, f"peak host allocation {peak / 2**20:.0f} MiB"


def test_host_replay_is_bounded_and_turns_every_failure_into_a_reason(monkeypatch):
    from eval import code_replay
    from pipelines.sandbox.harness import CallResult

    monkeypatch.setattr(code_replay, "REPLAY_TIMEOUT_S", 0.2)
    call, one = encode_call((1,)), CallResult("ok", 1)
    spin = "    t = time.thread_time()\n    while time.thread_time() - t < 0.01:\n        pass\n"
    endless = "import time\nwhile True:\n" + spin + "    assert f(1) == 1\n"
    start = time.monotonic()
    assert "more than 0.2 s of CPU time" in code_replay.replay(
        "", endless, "f", [call] * 1000, [one] * 1000)
    assert time.monotonic() - start < 3
    # Waiting is not work: a host too busy to schedule the replay (here: a test that sleeps
    # 0.4 s of wall time between its calls) never turns a correct answer into a failure.
    waits = "import time\nfor _ in range(4):\n    time.sleep(0.1)\n    assert f(1) == 1\n"
    assert code_replay.replay("", waits, "f", [call] * 4, [one] * 4) is None
    assert "ZeroDivisionError" in code_replay.replay("", "1 / 0\n", "f", [], [])
    assert "RecursionError" in code_replay.replay("", "def g():\n    g()\ng()\n", "f", [], [])
    assert "more often" in code_replay.replay("", "f(1)\n", "f", [], [])
    assert "other arguments" in code_replay.replay("", "f(2)\n", "f", [call], [one])
    assert "raised ValueError: x" in code_replay.replay(
        "", "f(1)\n", "f", [call], [CallResult("error", "ValueError: x")])
    assert "AssertionError" in code_replay.replay("", "assert f(1) == 2\n", "f", [call], [one])
    assert code_replay.replay("", "assert f(1) == 1\n", "f", [call], [one]) is None


def test_livecodebench_stdout_is_capped_near_the_expected_output(lcb, pool):
    problem = lcb[0]  # prints one number per test
    answer = ("n = int(input())\na = list(map(int, input().split()))\n"
              "print(a.index(sorted(a)[-2]) + 1)\n")
    assert grade_code(answer, problem, pool).passed
    noisy = "import sys\nsys.stderr.write('debug ' * 100000)\n" + answer
    assert grade_code(noisy, problem, pool).passed  # stderr is not the answer
    padded = answer + "print(' ' * 100000 + 'extra')\n"  # the kept part alone would match
    verdict = grade_code(padded, problem, pool)
    assert_fails(verdict)
    assert "more output than the grader keeps" in verdict.reason
    tracemalloc.start()
    try:
        flood = grade_code(answer + "print('9' * (64 * 1024 * 1024))\n", problem, pool)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_fails(flood)
    assert peak < 16 * 1024 * 1024, f"peak host allocation {peak / 2**20:.0f} MiB"


def test_one_broken_item_does_not_end_the_batch(humaneval, pool):
    good = humaneval["HumanEval/0"]
    broken = {"task_id": "X/1", "prompt": "def f(:\n", "test": "def check(c):\n    pass\n",
              "entry_point": "f", "canonical_solution": "    return 1\n"}
    results = grade_code_many([good["canonical_solution"], "    return 1\n", "x"],
                              [good, broken, {"question": "?"}], pool=pool)
    assert [r.passed for r in results] == [True, False, False]
    assert "grading failed" in results[1].reason and "grading failed" in results[2].reason
    assert [r.ungradable for r in results] == [False, True, True]


def test_a_problem_with_no_test_passes_nothing(pool):
    # a test that never calls the function, or an MBPP+ task with neither inputs nor an
    # assertion block, would accept any program: the item is ungradable instead
    never_called = {"task_id": "X/2", "prompt": "def f(x):\n    \"\"\"x\"\"\"\n",
                    "entry_point": "f",
                    "test": "def check(candidate):\n    assert True\n",
                    "canonical_solution": "    return x\n"}
    no_inputs = {"task_id": "Mbpp/x", "benchmark": "mbppplus", "entry_point": "f",
                 "canonical_solution": "def f(x):\n    return x\n", "base_input": [],
                 "plus_input": [], "assertion": ""}
    results = grade_code_many(["    return 'anything'\n", "def f(x):\n    return None\n"],
                              [never_called, no_inputs], pool=pool)
    assert [(r.passed, r.ungradable) for r in results] == [(False, True), (False, True)]
    assert all("nothing to grade" in r.reason for r in results)


# ---------------------------------------------------------------------------------------------
# what must still pass


def test_humaneval_canonical_subset_passes_and_wrong_answers_fail(humaneval, pool):
    tasks = [humaneval[t] for t in (*TASKS, "HumanEval/38", "HumanEval/50", "HumanEval/95")]
    good = grade_code_many([p["canonical_solution"] for p in tasks], tasks, pool=pool)
    assert [(r.task_id, r.reason) for r in good if not r.passed] == []
    # find_zero accepts any root: a different correct root passes too
    bisect = ("    lo, hi = -1.0, 1.0\n    while poly(xs, lo) * poly(xs, hi) > 0:\n"
              "        lo, hi = lo * 2, hi * 2\n    for _ in range(200):\n"
              "        mid = (lo + hi) / 2\n"
              "        if poly(xs, lo) * poly(xs, mid) <= 0:\n            hi = mid\n"
              "        else:\n            lo = mid\n    return (lo + hi) / 2\n")
    assert grade_code(bisect, humaneval["HumanEval/32"], pool).passed


def test_mbpp_assertion_block_is_replayed_on_the_host(mbpp, pool):
    problem = next(p for p in mbpp if p["entry_point"] == "similar_elements")
    recording = mbpp_recording(problem, pool)
    assert recording.replayable and recording.calls
    good = grade_code(problem["canonical_solution"], problem, pool)
    assert good.passed and good.tests_total == len(problem["base_input"]) + len(
        problem["plus_input"]) + 1


@pytest.mark.slow
def test_all_humaneval_canonical_solutions_pass_in_a_cold_jail(humaneval, jail):
    problems = list(humaneval.values())
    results = [grade_code(p["canonical_solution"], p, jail) for p in problems]
    assert [(r.task_id, r.reason) for r in results if not r.passed] == []
