"""The local backend against the real jail: stateless runs, sessions, runners, the fallback."""

import warnings

import pytest

from pipelines.sandbox import ExecResult, Limits, LocalSandbox, SandboxError, make_sandbox
from pipelines.sandbox.jail import SandboxUnavailable, resolve_spec


def test_run_captures_stdout_stderr_and_records_isolation(jail):
    result = jail.run("import sys\nprint('hello')\nprint('warn', file=sys.stderr)")
    assert result.ok
    assert (result.stdout, result.stderr, result.exit_code) == ("hello\n", "warn\n", 0)
    assert result.isolation == "bwrap"


def test_run_feeds_stdin(jail):
    result = jail.run("import sys\ndata = sys.stdin.read()\nprint(data.upper(), end='')",
                      stdin="abc\ndef\n")
    assert result.stdout == "ABC\nDEF\n"
    assert jail.run("print(input())", stdin=b"bytes-in\n").stdout == "bytes-in\n"
    assert jail.run("import sys; print(repr(sys.stdin.read()))").stdout == "''\n"


def test_run_reports_an_uncaught_exception_as_error_not_stderr(jail):
    result = jail.run("def f():\n    return 1 / 0\nprint('before')\nf()")
    assert result.stdout == "before\n"
    assert result.stderr == ""
    assert result.exit_code == 1
    assert (result.error.name, result.error.value) == ("ZeroDivisionError", "division by zero")
    assert 'File "main.py", line 2, in f' in result.error.traceback
    assert "<string>" not in result.error.traceback  # the driver's own frames are hidden
    assert result.observation().endswith("ZeroDivisionError: division by zero")


def test_run_syntax_error_and_exit_status(jail):
    bad = jail.run("x = (")
    assert bad.error.name == "SyntaxError" and bad.exit_code == 1
    assert "Traceback" not in bad.error.traceback
    assert jail.run("import sys; sys.exit(3)").exit_code == 3
    assert jail.run("raise SystemExit('bye')").exit_code == 1
    ok = jail.run("import sys; sys.exit(0)")
    assert ok.ok and ok.error is None


def test_run_rejects_non_string_code(jail):
    with pytest.raises(TypeError, match="code must be a str"):
        jail.run(b"print(1)")
    with pytest.raises(TypeError, match="stdin must be"):
        jail.run("pass", stdin=123)


def test_run_has_numpy_and_sympy_inside_the_jail(jail):
    result = jail.run("import numpy, sympy\nprint(numpy.arange(3).sum(), sympy.sqrt(8))")
    assert result.stdout == "3 2*sqrt(2)\n", result.observation()


def test_run_sees_a_fixed_hash_seed(jail):
    code = "print(hash('weft'))"
    assert jail.run(code).stdout == jail.run(code).stdout


def test_session_keeps_state_and_shows_the_last_expression(jail):
    with jail.session() as session:
        assert session.execute("x = 41\ndef inc(v):\n    return v + 1").ok
        result = session.execute("inc(x)")
        assert result.value == "42" and result.stdout == ""
        assert session.execute("print(x)\nNone").value is None


def test_session_syntax_error_in_cell_two_keeps_cell_one(jail):
    with jail.session() as session:
        session.execute("a = [1, 2, 3]")
        bad = session.execute("b = (")
        assert bad.error.name == "SyntaxError" and not bad.restarted
        assert "<cell-2>" in bad.error.traceback
        assert session.execute("sum(a)").value == "6"


def test_session_runtime_error_keeps_earlier_state(jail):
    with jail.session() as session:
        session.execute("total = 10")
        err = session.execute("total += 1\nraise KeyError('k')")
        assert err.error.name == "KeyError" and "<cell-2>" in err.error.traceback
        assert session.execute("total").value == "11"


def test_sessions_are_isolated_from_each_other(jail):
    with jail.session() as one, jail.session() as two:
        one.execute("secret = 'one'\nopen('/tmp/mine.txt', 'w').write('one')")
        missing = two.execute("secret")
        assert missing.error.name == "NameError"
        assert two.execute("import os; os.path.exists('/tmp/mine.txt')").value == "False"
        # each jail has its own pid namespace: only its kernel (the jail's pid 1) is visible
        pids = two.execute("import os; sorted(int(p) for p in os.listdir('/proc') if p.isdigit())")
        assert pids.value == "[1]"


def test_session_timeout_interrupts_the_cell_and_keeps_state(jail):
    with jail.session(Limits(timeout_s=1)) as session:
        session.execute("kept = 'yes'")
        result = session.execute("import time\nwhile True:\n    time.sleep(0.05)")
        assert result.timed_out and result.limit_exceeded == "wall_time"
        assert result.error.name == "TimeoutError" and not result.restarted
        assert session.execute("kept").value == "'yes'"


def test_session_that_swallows_the_interrupt_is_restarted_not_hung(jail):
    code = ("while True:\n    try:\n        while True:\n            pass\n"
            "    except BaseException:\n        pass")
    with jail.session(Limits(timeout_s=1)) as session:
        session.execute("lost = 1")
        result = session.execute(code)
        assert result.timed_out and result.restarted
        assert result.duration_s < 1 + 1.0 + 5  # limit + grace + a loaded machine's slack
        assert session.execute("lost").error.name == "NameError"
        assert session.restarts == 1


def test_session_kernel_death_is_reported_and_recovered(jail):
    with jail.session() as session:
        session.execute("v = 1")
        died = session.execute("import os\nos._exit(7)")
        assert died.restarted and died.error.name == "KernelDied" and died.exit_code == 7
        assert session.execute("1 + 1").value == "2"


def test_session_restart_and_close(jail):
    session = jail.session()
    session.execute("v = 1")
    session.restart()
    assert session.execute("v").error.name == "NameError"
    session.close()
    session.close()  # idempotent
    assert session.closed
    with pytest.raises(SandboxError, match="closed"):
        session.execute("1")


def test_session_cell_processes_do_not_outlive_the_cell(jail):
    with jail.session() as session:
        session.execute("import subprocess\np = subprocess.Popen(['sleep', '30'])")
        pids = session.execute("import os; sorted(int(p) for p in os.listdir('/proc') "
                               "if p.isdigit())")
        assert pids.value == "[1]"  # the kernel is the jail's pid 1; the sleep is gone


def test_runner_gives_each_program_a_fresh_process_and_work_dir(jail):
    with jail.runner() as runner:
        first = runner.run("import os\nx = 1\nopen('left.txt', 'w').write('x')\n"
                           "print(os.listdir('.'))")
        assert first.stdout == "['left.txt']\n"
        second = runner.run("import os\nprint(os.listdir('.'), 'x' in globals())")
        assert second.stdout == "[] False\n"
        assert runner.run("print(input())", stdin="fed\n").stdout == "fed\n"
        err = runner.run("raise ValueError('v')")
        assert err.error.name == "ValueError" and err.exit_code == 1
        assert runner.runs == 4 and runner.restarts == 0


def test_runner_refuses_limits_above_its_own(jail):
    with jail.runner(Limits(memory_mb=512)) as runner:
        assert not runner.fits(Limits(memory_mb=1024))
        with pytest.raises(ValueError, match="exceed the runner"):
            runner.run("pass", limits=Limits(memory_mb=1024))


def test_fallback_runs_with_rlimits_and_says_so(fallback, monkeypatch):
    monkeypatch.setenv("WEFT_TEST_SECRET", "do-not-leak")
    result = fallback.run("print('hi')")
    assert result.ok and result.stdout == "hi\n" and result.isolation == "subprocess"
    mem = fallback.run("x = bytearray(4 * 1024**3)", limits=Limits(memory_mb=512))
    assert mem.memory_exceeded
    env = fallback.run("import os; print(sorted(os.environ))")
    assert "WEFT_TEST_SECRET" not in env.stdout and "HOME" in env.stdout
    assert "do-not-leak" not in env.stdout
    with fallback.session() as session:
        session.execute("z = 5")
        assert session.execute("z * 2").value == "10"
        assert session.isolation == "subprocess"
    with fallback.runner() as runner:
        assert runner.run("print(2)").stdout == "2\n"


def test_auto_refuses_the_fallback_without_bubblewrap_unless_opted_in(monkeypatch):
    import pipelines.sandbox.jail as jail_mod

    monkeypatch.setattr(jail_mod.shutil, "which", lambda name: None)
    resolve_spec.cache_clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # refusing must not merely warn
            with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
                resolve_spec("auto", "/usr/bin/python3", -1, ())
            with pytest.raises(SandboxUnavailable, match="allow_unjailed=True"):
                _ = LocalSandbox().isolation
        with pytest.warns(RuntimeWarning, match="FALLING BACK"):
            spec = resolve_spec("auto", "/usr/bin/python3", -1, (), True)
        assert spec.isolation == "subprocess"
        assert LocalSandbox(allow_unjailed=True).isolation == "subprocess"
        assert LocalSandbox(isolation="subprocess").isolation == "subprocess"  # explicit choice
        with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
            resolve_spec("bwrap", "/usr/bin/python3", -1, ())
    finally:
        resolve_spec.cache_clear()


def test_bad_interpreter_or_isolation_is_a_clear_error():
    with pytest.raises(SandboxUnavailable, match="apt-get install python3"):
        _ = LocalSandbox(python="/nonexistent/python3").isolation
    with pytest.raises(ValueError, match="isolation must be"):
        _ = LocalSandbox(isolation="docker").isolation
    with pytest.raises(ValueError, match="backend must be one of"):
        make_sandbox("docker")


def test_make_sandbox_picks_local_without_an_e2b_key(monkeypatch):
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    assert isinstance(make_sandbox("auto"), LocalSandbox)


def test_result_is_a_plain_dataclass(jail):
    result = jail.run("print(1)")
    assert isinstance(result, ExecResult) and result.duration_s > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert jail.run("pass").ok  # no fallback warning on a machine with bubblewrap
