"""The warm pool: runners are reused and bounded, sessions are pre-started and never reused."""

import threading
import time

import pytest

from pipelines.sandbox import ExecResult, Limits, SandboxPool


def test_run_many_keeps_order_and_reuses_warm_runners(jail):
    with SandboxPool(jail, workers=2) as pool:
        jobs = [f"print({i} * {i})" for i in range(12)] + [("print(input())", "fed\n")]
        results = pool.run_many(jobs)
        assert [r.stdout for r in results[:12]] == [f"{i * i}\n" for i in range(12)]
        assert results[12].stdout == "fed\n"
        assert len(pool._runners) <= 2  # at most `workers` jails were started
        assert sum(r.runs for r in pool._runners) == 13


def test_pool_bounds_concurrency_to_workers(jail, monkeypatch):
    from pipelines.sandbox.local import Runner

    active, peak, lock = [0], [0], threading.Lock()
    real_run = Runner.run

    def counting_run(self, *args, **kwargs):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            return real_run(self, *args, **kwargs)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(Runner, "run", counting_run)
    with SandboxPool(jail, workers=2) as pool:
        threads = [threading.Thread(target=pool.run, args=("import time; time.sleep(0.3)",))
                   for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert peak[0] == 2 and len(pool._runners) == 2


def test_pool_runs_limits_above_its_own_in_a_cold_jail(jail):
    with SandboxPool(jail, workers=1, limits=Limits(memory_mb=256)) as pool:
        big = pool.run("x = bytearray(400 * 1024 * 1024); print(len(x))",
                       limits=Limits(memory_mb=1024))
        assert big.stdout == f"{400 * 1024 * 1024}\n"
        small = pool.run("x = bytearray(400 * 1024 * 1024)")
        assert small.memory_exceeded


def test_pool_recovers_a_runner_whose_jail_died(jail):
    with SandboxPool(jail, workers=1) as pool:
        assert pool.run("print(1)").ok
        runner = pool._runners[0]
        runner._kernel.kill()  # the jail disappears under the pool
        result = pool.run("print(2)")
        assert result.stdout == "2\n" and result.restarted


def test_warm_sessions_are_prestarted_and_not_reused(jail):
    with SandboxPool(jail, workers=1, warm_sessions=2) as pool:
        deadline = time.monotonic() + 30
        while pool._sessions.qsize() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool._sessions.qsize() == 2
        first = pool.session()
        first.execute("mine = 1")
        first.close()
        second = pool.session()
        assert second is not first
        fresh = second.execute("mine")
        assert fresh.error.name == "NameError"
        assert not fresh.restarted  # the pre-started jail survived its starter thread
        second.close()


def test_pool_close_kills_everything_and_refuses_more_work(jail):
    pool = SandboxPool(jail, workers=2, warm_sessions=1)
    pool.run_many(["pass", "pass"])
    procs = [r._kernel.child.proc for r in pool._runners]
    pool.close()
    assert all(p.poll() is not None for p in procs)
    with pytest.raises(RuntimeError, match="closed"):
        pool.run("pass")


def test_pool_over_a_backend_without_runners_uses_its_run():
    calls = []

    class Backend:
        isolation = "fake"
        limits = Limits()

        def run(self, code, stdin=None, limits=None):
            calls.append((code, threading.current_thread().name))
            return ExecResult(stdout=code)

        def session(self, limits=None):
            raise AssertionError("not used here")

    with SandboxPool(Backend(), workers=3) as pool:
        results = pool.run_many(["a", "b", "c"])
    assert [r.stdout for r in results] == ["a", "b", "c"] and len(calls) == 3


def test_pool_rejects_bad_arguments(jail):
    with pytest.raises(ValueError, match="workers"):
        SandboxPool(jail, workers=0)
    with SandboxPool(jail, workers=1) as pool, pytest.raises(TypeError, match="a job is"):
        pool.run_many([42])


def test_runners_preload_the_relay_module_and_warm_imports_even_after_a_restart(jail):
    probe = "import sys; print('__weft_relay__' in sys.modules, 'typing' in sys.modules)"
    with SandboxPool(jail, workers=1) as pool:
        assert pool.run(probe).stdout == "True True\n"
        pool._runners[0]._kernel.kill()  # the jail dies: its replacement preloads again
        again = pool.run(probe)
        assert again.restarted and again.stdout == "True True\n"
        # a program changes its own copy of a preloaded module, never the fork server's
        assert pool.run("import typing; typing.List = None").ok
        assert pool.run("import typing; print(typing.List is None)").stdout == "False\n"
    with SandboxPool(jail, workers=1, warm_imports=()) as bare:
        assert bare.run(probe).stdout == "True False\n"
    with pytest.raises(ValueError, match="warm_imports"):
        SandboxPool(jail, warm_imports="typing")
    with pytest.raises(ValueError, match="warm_imports"):
        SandboxPool(jail, warm_imports=["os; import shutil"])


def test_a_runner_whose_preload_fails_says_so(jail):
    from pipelines.sandbox.local import SandboxError

    with pytest.raises(SandboxError, match="could not preload 'broken'.*ZeroDivisionError"):
        jail.runner(preload={"broken": "x = 1 / 0\n"})


CANDIDATE = ("class P:\n"
             "    def __repr__(self):\n"
             "        return 'P()'\n"
             "def f(x):\n"
             "    print('called', x)\n"
             "    if x == 0:\n"
             "        raise ZeroDivisionError('no zero')\n"
             "    if x == 1:\n"
             "        return P()\n"
             "    return (x, [x * 2], {'k': x})\n")


def test_run_relay_returns_the_payload_the_relay_program_returns(jail):
    from pipelines.sandbox.harness import (
        encode_call,
        marker_nonce,
        new_marker,
        read_relay,
        relay_program,
    )

    calls = [encode_call((x,)) for x in (2, 0, 1, 5)]
    with SandboxPool(jail, workers=1) as pool:
        assert pool.relay_preloaded()
        outcomes = []
        for run in ("fork server", "program"):
            marker = new_marker()
            if run == "fork server":
                result = pool.run_relay(CANDIDATE, ("function", "f"), calls,
                                        nonce=marker_nonce(marker), results_cap=1 << 20)
            else:
                result = jail.run(relay_program(CANDIDATE, ("function", "f"), calls,
                                                results_cap=1 << 20),
                                  stdin=marker_nonce(marker))
            assert result.ok, result
            outcomes.append(read_relay(result.stdout, marker, len(calls)))
        fast, program = outcomes
        assert fast == program
        assert fast.problem == ""
        assert [r.kind for r in fast.results] == ["ok", "error", "bad", "ok"]
        assert fast.results[0].value == (2, [4], {"k": 2})
        assert fast.results[3].value == (5, [10], {"k": 5})
        assert fast.results[1].value == "ZeroDivisionError: no zero"
        assert fast.results[2].value == "returned a __main__.P object, which is not plain data (P())"
        assert fast.output == "called 2\ncalled 0\ncalled 1\ncalled 5\n"


def test_run_relay_caps_results_and_time_and_refuses_other_limits(jail):
    from pipelines.sandbox.harness import encode_call, marker_nonce, new_marker, read_relay

    with SandboxPool(jail, workers=1, limits=Limits(memory_mb=256)) as pool:
        marker = new_marker()
        big = pool.run_relay("def f():\n    return 'x' * 100_000\n", ("function", "f"),
                             [encode_call(())], nonce=marker_nonce(marker), results_cap=1000)
        assert read_relay(big.stdout, marker, 1).problem == \
            "its results were larger than the grader accepts"
        marker = new_marker()
        slow = pool.run_relay("import time\ndef f():\n    time.sleep(30)\n", ("function", "f"),
                              [encode_call(())], nonce=marker_nonce(marker), results_cap=1000,
                              limits=Limits(memory_mb=256, timeout_s=1))
        assert slow.timed_out
        assert read_relay(slow.stdout, marker, 1).problem == "no result line was printed"
        # the runner is still usable after the kill
        marker = new_marker()
        after = pool.run_relay("def f():\n    return 7\n", ("function", "f"), [encode_call(())],
                               nonce=marker_nonce(marker), results_cap=1000)
        assert read_relay(after.stdout, marker, 1).results[0].value == 7
        assert not pool.relay_preloaded(Limits(memory_mb=1024))
        with pytest.raises(ValueError, match="relay_preloaded"):
            pool.run_relay("def f():\n    return 1\n", ("function", "f"), [encode_call(())],
                           nonce="ab", results_cap=1000, limits=Limits(memory_mb=1024))


def test_a_relay_whose_calls_are_not_a_json_list_fails_that_candidate_only(jail):
    """The driver decodes a relay's calls for its child; calls it cannot decode are passed on
    as they came, the child fails on them, and the runner goes on."""
    from pipelines.sandbox.harness import (
        encode_call,
        marker_nonce,
        new_marker,
        read_relay,
        relay_request,
    )

    source = "def f(x):\n    return x + 1\n"
    with SandboxPool(jail, workers=1) as pool:
        pool.warm_up()
        runner = pool._take_runner()
        try:
            for calls in ("[not json", '{"a": 1}'):
                marker = new_marker()
                relay = dict(relay_request(source, ("function", "f"), [encode_call((1,))],
                                           results_cap=1000), calls=calls)
                result = runner.run("", stdin=marker_nonce(marker), limits=pool.limits,
                                    relay=relay)
                assert not result.restarted, result  # the driver itself went on
                outcome = read_relay(result.stdout, marker, 1)
                # no payload at all, or calls that each failed: never an answer
                assert outcome.problem or not any(r.ok for r in outcome.results), (calls, result)
            marker = new_marker()
            relay = relay_request(source, ("function", "f"), [encode_call((1,))],
                                  results_cap=1000)
            result = runner.run("", stdin=marker_nonce(marker), limits=pool.limits, relay=relay)
            assert not result.restarted, result
            assert read_relay(result.stdout, marker, 1).results[0].value == 2
        finally:
            pool._idle.put(runner)
