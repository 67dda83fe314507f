"""The E2B backend: the same ``run`` / ``session`` interface over E2B's cloud code interpreter
(``e2b-code-interpreter``, the optional extra ``weft[e2b]``), mapped to :class:`ExecResult`.

- :meth:`E2BSandbox.session` creates one cloud sandbox and a code context in it; each
  :meth:`E2BSession.execute` is one ``run_code`` call (a Jupyter cell: state persists, the value
  of a trailing expression comes back as the main result). A cell that times out has its context
  restarted (``restarted=True``).
- :meth:`E2BSandbox.run` creates a short-lived cloud sandbox, writes the program (and stdin) to
  files and runs ``python3 main.py < stdin`` as a command, then kills the sandbox.

The SDK is imported only when a sandbox is created, and ``E2B_API_KEY`` (or ``api_key=``) is
checked before any network call, so a missing package or key fails at once with what to do.
:func:`result_from_execution` and :func:`result_from_command` are pure functions over objects
shaped like the SDK's ``Execution`` / ``CommandResult``, testable without the service.

Not guaranteed: the local jail's limits (memory, processes, file size are the E2B template's;
only the wall-clock timeout and the output cap are applied); network isolation (E2B sandboxes
reach the internet unless the template forbids it); byte-exact stdout (the SDK delivers text).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from typing import Any, Self

from pipelines.sandbox.result import (
    ISOLATION_E2B,
    LIMIT_MEMORY,
    LIMIT_OUTPUT,
    LIMIT_WALL,
    ExecError,
    ExecResult,
    Limits,
    parse_traceback_tail,
    strip_ansi,
)

API_KEY_ENV = "E2B_API_KEY"
DEFAULT_SANDBOX_TIMEOUT_S = 600
WORKDIR = "/home/user"
INSTALL_HINT = "pip install 'weft[e2b]'  (or: pip install e2b-code-interpreter)"


class E2BUnavailable(RuntimeError):
    """The E2B backend cannot be used (SDK not installed, no API key, service unreachable)."""


def _clip(text: str, cap: int) -> tuple[str, bool]:
    data = text.encode("utf-8", "replace")
    if len(data) <= cap:
        return text, False
    return data[:cap].decode("utf-8", "ignore"), True


def _limit_for(error: ExecError | None) -> tuple[str | None, bool]:
    if error is not None and error.name == "MemoryError":
        return LIMIT_MEMORY, True
    return None, False


def result_from_execution(execution: Any, *, duration_s: float, limits: Limits,
                          restarted: bool = False) -> ExecResult:
    """Map an ``e2b_code_interpreter.Execution`` (``logs.stdout``/``logs.stderr`` lists of
    text, ``results`` with ``text`` and ``is_main_result``, ``error`` with ``name``, ``value``,
    ``traceback``) to an :class:`ExecResult`."""
    logs = getattr(execution, "logs", None)
    stdout, out_cut = _clip("".join(getattr(logs, "stdout", None) or []), limits.max_output_bytes)
    stderr, err_cut = _clip("".join(getattr(logs, "stderr", None) or []), limits.max_output_bytes)
    value = None
    for item in getattr(execution, "results", None) or []:
        if getattr(item, "is_main_result", False) and getattr(item, "text", None) is not None:
            value = item.text
    raw = getattr(execution, "error", None)
    error = None
    if raw is not None:
        error = ExecError(name=str(getattr(raw, "name", "Error")),
                          value=strip_ansi(str(getattr(raw, "value", ""))),
                          traceback=strip_ansi(str(getattr(raw, "traceback", "") or "")))
    limit, memory = _limit_for(error)
    truncated = out_cut or err_cut
    return ExecResult(stdout=stdout, stderr=stderr, error=error, value=value, exit_code=None,
                      timed_out=False, memory_exceeded=memory, output_truncated=truncated,
                      limit_exceeded=limit or (LIMIT_OUTPUT if truncated else None),
                      duration_s=duration_s, isolation=ISOLATION_E2B, restarted=restarted)


def result_from_command(command: Any, *, duration_s: float, limits: Limits) -> ExecResult:
    """Map an ``e2b.CommandResult`` (or a ``CommandExitException``, which carries the same
    ``stdout``, ``stderr``, ``exit_code``) of ``python3 main.py`` to an :class:`ExecResult`;
    the error is recovered from the traceback Python printed on stderr."""
    stdout, out_cut = _clip(str(getattr(command, "stdout", "") or ""), limits.max_output_bytes)
    raw_err = str(getattr(command, "stderr", "") or "")
    error = parse_traceback_tail(raw_err) if getattr(command, "exit_code", 0) else None
    if error is not None and error.traceback:
        # the traceback is reported in `error`; keep only what precedes it in stderr
        cut = strip_ansi(raw_err).rfind(error.traceback.splitlines()[0])
        raw_err = strip_ansi(raw_err)[:cut] if cut >= 0 else raw_err
    stderr, err_cut = _clip(raw_err, limits.max_output_bytes)
    limit, memory = _limit_for(error)
    truncated = out_cut or err_cut
    return ExecResult(stdout=stdout, stderr=stderr, error=error, value=None,
                      exit_code=int(getattr(command, "exit_code", 0) or 0), timed_out=False,
                      memory_exceeded=memory, output_truncated=truncated,
                      limit_exceeded=limit or (LIMIT_OUTPUT if truncated else None),
                      duration_s=duration_s, isolation=ISOLATION_E2B)


def timeout_result(*, duration_s: float, limits: Limits, restarted: bool) -> ExecResult:
    return ExecResult(error=ExecError("TimeoutError", "execution exceeded the wall-clock limit "
                                      f"of {limits.timeout_s:g} s"),
                      exit_code=None, timed_out=True, limit_exceeded=LIMIT_WALL,
                      duration_s=duration_s, isolation=ISOLATION_E2B, restarted=restarted)


def _sdk():
    try:
        import e2b_code_interpreter
    except ImportError as exc:
        raise E2BUnavailable(f"the E2B backend needs the e2b-code-interpreter package: "
                             f"{INSTALL_HINT}") from exc
    return e2b_code_interpreter


def _is_timeout(exc: BaseException) -> bool:
    return "timeout" in type(exc).__name__.lower() or "timed out" in str(exc).lower()


class E2BSandbox:
    """Runs code in E2B cloud sandboxes. ``api_key`` defaults to ``$E2B_API_KEY``;
    ``template`` to the SDK's code-interpreter template; ``sandbox_timeout_s`` is how long an
    idle cloud sandbox lives before E2B kills it."""

    isolation = ISOLATION_E2B

    def __init__(self, limits: Limits | None = None, *, api_key: str | None = None,
                 template: str | None = None,
                 sandbox_timeout_s: int = DEFAULT_SANDBOX_TIMEOUT_S) -> None:
        self.limits = limits or Limits()
        self._api_key = api_key
        self.template = template
        self.sandbox_timeout_s = sandbox_timeout_s

    @property
    def api_key(self) -> str:
        key = self._api_key or os.environ.get(API_KEY_ENV, "")
        if not key:
            raise E2BUnavailable(f"no E2B API key: set {API_KEY_ENV} (https://e2b.dev/dashboard)"
                                 " or pass api_key=..., or use the local backend")
        return key

    def _create(self):
        key = self.api_key  # checked before importing or calling anything
        sdk = _sdk()
        kwargs: dict[str, Any] = {"api_key": key, "timeout": self.sandbox_timeout_s}
        if self.template:
            kwargs["template"] = self.template
        try:
            return sdk.Sandbox.create(**kwargs)
        except Exception as exc:
            raise E2BUnavailable(f"could not create an E2B sandbox ({type(exc).__name__}: "
                                 f"{exc}); check the key, the network and "
                                 "https://status.e2b.dev") from exc

    def run(self, code: str, stdin: str | bytes | None = None,
            limits: Limits | None = None) -> ExecResult:
        """Run a program in a fresh cloud sandbox (killed afterwards)."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        limits = limits or self.limits
        box = self._create()
        start = time.monotonic()
        try:
            box.files.write(f"{WORKDIR}/main.py", code)
            command = f"cd {WORKDIR} && python3 main.py"
            if stdin is not None:
                data = stdin.decode("utf-8", "replace") if isinstance(stdin, bytes) else stdin
                box.files.write(f"{WORKDIR}/stdin.txt", data)
                command += " < stdin.txt"
            else:
                command += " < /dev/null"
            try:
                done = box.commands.run(f"bash -c {shlex.quote(command)}",
                                        timeout=limits.timeout_s)
            except Exception as exc:  # CommandExitException carries the same fields
                if hasattr(exc, "exit_code") and hasattr(exc, "stdout"):
                    done = exc
                elif _is_timeout(exc):
                    return timeout_result(duration_s=time.monotonic() - start, limits=limits,
                                          restarted=False)
                else:
                    raise
            return result_from_command(done, duration_s=time.monotonic() - start, limits=limits)
        finally:
            with contextlib.suppress(Exception):  # it expires on its own anyway
                box.kill()

    def session(self, limits: Limits | None = None) -> E2BSession:
        return E2BSession(self, limits or self.limits)


class E2BSession:
    """A stateful E2B code interpreter (one cloud sandbox, one code context)."""

    isolation = ISOLATION_E2B

    def __init__(self, backend: E2BSandbox, limits: Limits) -> None:
        self.limits = limits
        self._box = backend._create()
        self._context = self._box.create_code_context()
        self._closed = False

    def execute(self, cell: str, limits: Limits | None = None) -> ExecResult:
        if self._closed:
            raise RuntimeError("this E2B session is closed")
        limits = limits or self.limits
        start = time.monotonic()
        try:
            execution = self._box.run_code(cell, context=self._context,
                                           timeout=limits.timeout_s)
        except Exception as exc:
            if not _is_timeout(exc):
                raise
            self.restart()
            return timeout_result(duration_s=time.monotonic() - start, limits=limits,
                                  restarted=True)
        return result_from_execution(execution, duration_s=time.monotonic() - start,
                                     limits=limits)

    def restart(self) -> None:
        self._box.restart_code_context(self._context)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(Exception):  # it expires on its own anyway
                self._box.kill()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
