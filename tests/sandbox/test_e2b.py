"""The E2B backend offline: result mapping from stand-ins shaped like the SDK's objects
(``Execution``, ``Logs``, ``Result``, ``ExecutionError``, ``CommandResult``), the error paths
(no key, no SDK, service unreachable, execution timeout), and a live test marked ``network``."""

import sys
import types
from dataclasses import dataclass, field

import pytest

from pipelines.sandbox import E2BSandbox, E2BUnavailable, Limits, make_sandbox
from pipelines.sandbox.e2b_backend import result_from_command, result_from_execution


@dataclass
class Logs:  # same fields as e2b_code_interpreter.models.Logs
    stdout: list = field(default_factory=list)
    stderr: list = field(default_factory=list)


@dataclass
class Result:  # the fields of e2b_code_interpreter.models.Result that we read
    text: str | None = None
    is_main_result: bool = False


@dataclass
class ExecutionError:
    name: str
    value: str
    traceback: str


@dataclass
class Execution:
    results: list = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: ExecutionError | None = None
    execution_count: int | None = None


@dataclass
class CommandResult:
    stdout: str
    stderr: str
    exit_code: int
    error: str | None = None


class TimeoutException(Exception):  # name-alike of e2b.exceptions.TimeoutException
    pass


def test_execution_maps_logs_value_and_error():
    execution = Execution(
        results=[Result(text="<figure>"), Result(text="42", is_main_result=True)],
        logs=Logs(stdout=["a\n", "b\n"], stderr=["warn\n"]),
        error=ExecutionError("ValueError", "bad",
                             "\x1b[0;31m---------\x1b[0m\nValueError: bad"))
    result = result_from_execution(execution, duration_s=0.5, limits=Limits())
    assert (result.stdout, result.stderr, result.value) == ("a\nb\n", "warn\n", "42")
    assert result.error.name == "ValueError" and "\x1b" not in result.error.traceback
    assert result.isolation == "e2b" and result.exit_code is None and not result.ok
    assert result.observation().index("a\nb") < result.observation().index("ValueError")


def test_execution_without_error_is_ok_and_memory_error_is_flagged():
    ok = result_from_execution(Execution(logs=Logs(stdout=["1\n"])), duration_s=0.1,
                               limits=Limits())
    assert ok.ok and ok.stdout == "1\n" and ok.value is None
    mem = result_from_execution(Execution(error=ExecutionError("MemoryError", "", "")),
                                duration_s=0.1, limits=Limits())
    assert mem.memory_exceeded and mem.limit_exceeded == "memory"


def test_execution_output_is_capped():
    big = Execution(logs=Logs(stdout=["x" * 5000]))
    result = result_from_execution(big, duration_s=0.1, limits=Limits(max_output_bytes=100))
    assert len(result.stdout) == 100 and result.output_truncated


def test_command_result_maps_exit_status_and_traceback():
    stderr = ("careful\nTraceback (most recent call last):\n  File \"/home/user/main.py\", "
              "line 1, in <module>\nZeroDivisionError: division by zero\n")
    result = result_from_command(CommandResult("partial\n", stderr, 1), duration_s=0.2,
                                 limits=Limits())
    assert result.exit_code == 1 and result.stdout == "partial\n"
    assert result.error.name == "ZeroDivisionError" and result.stderr == "careful\n"
    clean = result_from_command(CommandResult("ok\n", "", 0), duration_s=0.2, limits=Limits())
    assert clean.ok and clean.error is None


def test_missing_key_fails_before_any_import_or_call(monkeypatch):
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    monkeypatch.setitem(sys.modules, "e2b_code_interpreter", None)  # would fail to import
    with pytest.raises(E2BUnavailable, match="E2B_API_KEY"):
        E2BSandbox().run("print(1)")
    with pytest.raises(E2BUnavailable, match="E2B_API_KEY"):
        E2BSandbox().session()


def test_missing_sdk_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "e2b_code_interpreter", None)
    with pytest.raises(E2BUnavailable, match=r"weft\[e2b\]"):
        E2BSandbox(api_key="k").run("print(1)")


class FakeBox:
    """A stand-in for e2b_code_interpreter.Sandbox with the calls the backend makes."""

    def __init__(self, executions=None, command=None):
        self.files_written = {}
        self.executions = list(executions or [])
        self.command = command
        self.restarts = 0
        self.killed = False
        box = self

        class Files:
            def write(self, path, data):
                box.files_written[path] = data

        class Commands:
            def run(self, cmd, timeout=None):
                box.last_command = (cmd, timeout)
                if isinstance(box.command, BaseException):
                    raise box.command
                return box.command

        self.files, self.commands = Files(), Commands()

    def create_code_context(self):
        return "ctx"

    def run_code(self, code, context=None, timeout=None):
        self.last_code = (code, context, timeout)
        item = self.executions.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    def restart_code_context(self, context):
        self.restarts += 1

    def kill(self):
        self.killed = True


def _fake_sdk(monkeypatch, box=None, create_error=None):
    module = types.ModuleType("e2b_code_interpreter")

    class Sandbox:
        @classmethod
        def create(cls, **kwargs):
            module.created_with = kwargs
            if create_error:
                raise create_error
            return box

    module.Sandbox = Sandbox
    monkeypatch.setitem(sys.modules, "e2b_code_interpreter", module)
    return module


def test_unreachable_service_is_a_clear_error(monkeypatch):
    _fake_sdk(monkeypatch, create_error=ConnectionError("no route to api.e2b.dev"))
    with pytest.raises(E2BUnavailable, match="could not create an E2B sandbox.*no route"):
        E2BSandbox(api_key="k").run("print(1)")


def test_run_writes_program_and_stdin_and_kills_the_box(monkeypatch):
    box = FakeBox(command=CommandResult("HELLO\n", "", 0))
    sdk = _fake_sdk(monkeypatch, box)
    result = E2BSandbox(api_key="key-1").run("print(input().upper())", stdin="hello\n",
                                             limits=Limits(timeout_s=3))
    assert result.ok and result.stdout == "HELLO\n" and result.isolation == "e2b"
    assert box.files_written["/home/user/main.py"] == "print(input().upper())"
    assert box.files_written["/home/user/stdin.txt"] == "hello\n"
    assert "< stdin.txt" in box.last_command[0] and box.last_command[1] == 3
    assert box.killed and sdk.created_with["api_key"] == "key-1"


class CommandExitException(Exception):  # shape of e2b's: an exception carrying the result
    def __init__(self, stdout, stderr, exit_code):
        super().__init__(f"Command exited with code {exit_code}")
        self.stdout, self.stderr, self.exit_code, self.error = stdout, stderr, exit_code, None


def test_run_nonzero_exit_raised_by_the_sdk_is_a_result(monkeypatch):
    stderr = "Traceback (most recent call last):\n  File \"main.py\", line 1\nKeyError: 'k'\n"
    box = FakeBox(command=CommandExitException("", stderr, 1))
    _fake_sdk(monkeypatch, box)
    result = E2BSandbox(api_key="k").run("{}['k']")
    assert result.exit_code == 1 and result.error.name == "KeyError" and box.killed


def test_run_timeout_maps_to_timed_out(monkeypatch):
    box = FakeBox(command=TimeoutException("Execution timed out"))
    _fake_sdk(monkeypatch, box)
    result = E2BSandbox(api_key="k").run("while True: pass", limits=Limits(timeout_s=1))
    assert result.timed_out and result.limit_exceeded == "wall_time" and box.killed


def test_session_executes_cells_and_restarts_on_timeout(monkeypatch):
    box = FakeBox(executions=[Execution(results=[Result("2", True)]),
                              TimeoutException("Execution timed out"),
                              Execution(logs=Logs(stdout=["after\n"]))])
    _fake_sdk(monkeypatch, box)
    with E2BSandbox(api_key="k").session(Limits(timeout_s=2)) as session:
        assert session.execute("1 + 1").value == "2"
        assert box.last_code == ("1 + 1", "ctx", 2)
        slow = session.execute("while True: pass")
        assert slow.timed_out and slow.restarted and box.restarts == 1
        assert session.execute("print('after')").stdout == "after\n"
    assert box.killed


def test_make_sandbox_auto_prefers_e2b_when_a_key_is_set(monkeypatch):
    monkeypatch.setenv("E2B_API_KEY", "set")
    assert isinstance(make_sandbox("auto"), E2BSandbox)


@pytest.mark.network
def test_live_e2b_session_and_run():  # pragma: no cover - needs E2B_API_KEY and internet
    import os

    if not os.environ.get("E2B_API_KEY"):
        pytest.skip("E2B_API_KEY not set")
    sandbox = E2BSandbox(Limits(timeout_s=30))
    with sandbox.session() as session:
        session.execute("x = 20")
        assert session.execute("x + 22").value == "42"
        assert session.execute("1/0").error.name == "ZeroDivisionError"
    result = sandbox.run("print(input()[::-1])", stdin="abc\n")
    assert result.stdout == "cba\n"
