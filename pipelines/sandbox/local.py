"""The local sandbox backend: stateless runs, stateful sessions and warm runners, all executed
by the in-jail driver (``_driver.py``) inside a bubblewrap jail, or in the plain-subprocess
fallback (see :mod:`pipelines.sandbox.jail`).

- :meth:`LocalSandbox.run` starts a fresh jail per program (cold start, tens of ms).
- :meth:`LocalSandbox.session` starts one jail holding a kernel; :meth:`LocalSession.execute`
  runs cells in its persistent namespace. A cell over its wall-clock or CPU limit is interrupted
  inside the kernel (state kept, ``timed_out=True``); a kernel that does not answer within the
  limit plus a grace period, or that dies, is killed and replaced (``restarted=True``); so is
  a kernel whose timed-out cell left threads running (they would keep burning CPU between
  cells). :meth:`LocalSession.execute` never raises for what a cell does.
- :meth:`LocalSandbox.runner` starts one jail holding a fork server: each :meth:`Runner.run`
  forks a fresh process from a template interpreter that has never read a request (a few ms),
  in mount, IPC and pid namespaces of its own with a fresh ``/tmp`` and ``/dev/shm``; when it
  ends, the kernel ends everything it left and discards its mounts and IPC objects.
  :class:`~pipelines.sandbox.pool.SandboxPool` keeps several runners warm.

Every request to a kernel carries a fresh random nonce; a reply must be exactly one well-formed
frame of the expected shape echoing it. Garbage, a reply to another request, or bytes nobody
asked for (code that wrote into the reply channel) mean the kernel is treated as dead: it is
replaced and that call reports ``KernelDied`` / ``SandboxDied``, so one cell's forgery can
never shift the results of the cells after it.

Output is read while the code runs; each of stdout and stderr keeps at most
``limits.max_output_bytes`` (the rest is read and dropped, ``output_truncated=True``).

Not guaranteed: that output written by background processes of a session between two cells is
attributed to the right cell; that a cell can signal its own kernel (the kernel is the jail's
pid 1, which ignores signals it has no handler for when they come from inside the jail);
per-cell changes of the limits fixed when a jail starts (memory, disk size and file count,
processes, open files: a session or runner keeps the ones it was started with).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import selectors
import subprocess
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import replace
from typing import Self

from pipelines.sandbox.jail import (
    DEFAULT_PYTHON,
    JailSpec,
    Launch,
    candidate_mounts,
    cleanup,
    kill_jail,
    launch,
    resolve_spec,
    rlimit_spec,
)
from pipelines.sandbox.result import (
    ERROR_KERNEL_DIED,
    ERROR_SANDBOX_DIED,
    ISOLATION_BWRAP,
    LIMIT_CPU,
    LIMIT_WALL,
    ExecError,
    ExecResult,
    Limits,
)
from pipelines.sandbox.streams import (
    SIGNAL_NAMES,
    Capture,
    Pump,
    as_bytes,
    build_result,
    check_code,
    close_all,
    drain_fd,
    error_from_fields,
    memfd,
    parse_report,
    read_available,
    read_to_eof_or_empty,
)

GRACE_S = 1.0  # host-side slack on top of a limit the kernel enforces itself
START_TIMEOUT_S = 20.0
_HEADER = 10
# Largest reply a kernel may send (its values and tracebacks are capped far below this); a
# bigger length header is garbage written into the reply channel.
MAX_REPLY_BYTES = 64 * 1024 * 1024


class SandboxError(RuntimeError):
    """The sandbox machinery itself failed (a jail did not start, a session is closed)."""


class LocalSandbox:
    """Runs untrusted Python locally in a bubblewrap jail (default) or the fallback.

    ``isolation``: ``auto`` | ``bwrap`` | ``subprocess``. ``python``: a world-readable
    interpreter (the system ``/usr/bin/python3``; a venv under /root is unreadable inside).
    ``uid``: the unprivileged user to run as when root (-1: 65534 in the jail and 65533 in
    the fallback when root, else yourself).
    ``allow_unjailed``: with ``isolation="auto"``, accept the plain-subprocess fallback where
    bubblewrap cannot run (default: refuse with :class:`SandboxUnavailable`, which says how to
    install it). ``candidate_namespaces=False``: warm runners run every candidate in the
    namespaces of their jail (leftovers killed by pid, the work dir wiped) instead of giving
    each its own; weaker (a candidate can outlast the wipe; SysV IPC persists), for comparison. The choice is made on first use (a probe of ~20 ms, cached per process) and
    recorded in every result's ``isolation``.
    """

    def __init__(self, limits: Limits | None = None, *, isolation: str = "auto",
                 python: str = DEFAULT_PYTHON, uid: int | None = -1,
                 extra_ro_binds: tuple[str, ...] = (), allow_unjailed: bool = False,
                 candidate_namespaces: bool = True) -> None:
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits must be a Limits, got {type(limits).__name__}")
        self.limits = limits or Limits()
        self._options = (isolation, python, uid, tuple(extra_ro_binds), bool(allow_unjailed))
        self._namespaces = bool(candidate_namespaces)
        self._spec: JailSpec | None = None

    @property
    def spec(self) -> JailSpec:
        if self._spec is None:
            spec = resolve_spec(*self._options)
            if not self._namespaces:
                spec = replace(spec, candidate_namespaces=False)
            self._spec = spec
        return self._spec

    @property
    def isolation(self) -> str:
        return self.spec.isolation

    def run(self, code: str, stdin: str | bytes | None = None,
            limits: Limits | None = None) -> ExecResult:
        """Run ``code`` as a program in a fresh jail; ``stdin`` is its standard input."""
        limits = limits or self.limits
        source = check_code(code).encode("utf-8", "surrogateescape")
        data = as_bytes(stdin)
        spec = self.spec
        start = time.monotonic()
        code_fd = memfd("program", source)
        in_fd = memfd("stdin", data) if data is not None else os.open(os.devnull, os.O_RDONLY)
        rep_r, rep_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            child = launch(spec, limits, ["once", str(code_fd), str(rep_w), rlimit_spec(limits)],
                           pass_fds=(code_fd, rep_w), stdin=in_fd, stdout=out_w, stderr=err_w)
        except BaseException:
            close_all(code_fd, in_fd, rep_w, out_w, err_w, rep_r, out_r, err_r)
            raise
        close_all(code_fd, in_fd, rep_w, out_w, err_w)
        out, err = Capture(limits.max_output_bytes), Capture(limits.max_output_bytes)
        pump = Pump({out_r: out, err_r: err})
        report = bytearray()
        wall, exit_code, cpu_used = False, None, 0.0
        pidfd = os.pidfd_open(child.proc.pid)
        try:
            pump.add(rep_r)
            pump.add(pidfd)
            deadline = start + limits.timeout_s
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    wall = True
                    kill_jail(child)
                    break
                ready = pump.poll(remaining)
                if rep_r in ready:
                    data = read_to_eof_or_empty(rep_r)
                    if data is None:
                        pump.remove(rep_r)
                    else:
                        report += data
                if pidfd in ready:
                    _, status, usage = os.wait4(child.proc.pid, 0)
                    exit_code = os.waitstatus_to_exitcode(status)
                    child.proc.returncode = exit_code
                    cpu_used = usage.ru_utime + usage.ru_stime
                    break
            pump.remove(pidfd)
            pump.remove(rep_r)
            cleanup(child)
            pump.drain_to_eof(0.5)
            report += drain_fd(rep_r)
        finally:
            pump.close()
            close_all(pidfd, out_r, err_r, rep_r)
            if child.proc.returncode is None:
                kill_jail(child)
            cleanup(child)
        error, own_status = parse_report(bytes(report))
        if exit_code is not None and own_status is None and 128 < exit_code < 160:
            exit_code = 128 - exit_code  # the driver reports death by signal N as 128 + N
        # SIGXCPU means the soft CPU limit; a SIGKILL counts only with the CPU time to show for
        # it (the hard limit; rusage is exact in the fallback, not through bubblewrap).
        cpu = not wall and (exit_code == -24 or (
            exit_code == -9 and cpu_used >= limits.cpu_seconds - 0.05))
        return build_result(out=out.take(), err=err.take(), error=error, exit_code=exit_code,
                            wall=wall, cpu=cpu, start=start, isolation=spec.isolation,
                            limits=limits)

    def session(self, limits: Limits | None = None) -> LocalSession:
        """A started stateful session (close it, or use it as a context manager)."""
        return LocalSession(self, limits or self.limits)

    def runner(self, limits: Limits | None = None,
               preload: Mapping[str, str] | None = None) -> Runner:
        """A started fork-server worker for many fast stateless runs (see :class:`Runner`);
        ``preload`` maps module names to trusted source it loads before any program."""
        return Runner(self, limits or self.limits, preload)


# ---------------------------------------------------------------------------------------------
# a long-lived jailed kernel (session or runner)


class _Kernel:
    """One jail running the driver in serve mode, and the host end of its protocol."""

    def __init__(self, spec: JailSpec, limits: Limits, role: str) -> None:
        self.spec = spec
        self.role = role
        self.limits = limits
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        kernel_limits = rlimit_spec(limits, cpu=False)
        jailed = "1" if spec.isolation == ISOLATION_BWRAP else "0"
        # a runner in a jail that allows it gives each candidate its own namespaces and mounts
        isolate = role == "runner" and spec.isolation == ISOLATION_BWRAP \
            and spec.candidate_namespaces
        mounts = candidate_mounts(limits) if isolate else ""
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            self.child: Launch = launch(
                spec, limits,
                ["serve", str(req_r), str(resp_w), kernel_limits, jailed, role, mounts],
                pass_fds=(req_r, resp_w), stdin=devnull, stdout=out_w, stderr=err_w,
                long_lived=True, keep_admin=isolate)
        except BaseException:
            close_all(req_r, resp_w, out_w, err_w, devnull, self.req_w, self.resp_r,
                       self.out_r, self.err_r)
            raise
        close_all(req_r, resp_w, out_w, err_w, devnull)
        self.out = Capture(limits.max_output_bytes)
        self.err = Capture(limits.max_output_bytes)
        self.pump = Pump({self.out_r: self.out, self.err_r: self.err})
        self.pump.add(self.resp_r)
        os.set_blocking(self.req_w, False)
        self._finalizer = weakref.finalize(self, _kill_quietly, self.child)
        self._buf = bytearray()
        reply, state = self.call(None, START_TIMEOUT_S)
        if reply is None or reply.get("ready") is not True:
            text = self.err.take()[0].strip()
            self.kill()
            raise SandboxError(f"sandbox kernel did not start ({state}): {text[:2000]}")
        self.isolated = bool(reply.get("isolated"))
        self.out.take()
        self.err.take()

    @property
    def alive(self) -> bool:
        return self.child.proc.poll() is None

    def stray_reply(self) -> bool:
        """Whether the reply channel holds bytes nobody asked for (a reply written by code
        after the real one was taken, or garbage): the kernel can no longer be trusted."""
        if self._buf:
            return True
        data = read_available(self.resp_r)
        if data:
            self._buf += data
        return data is None or bool(data)

    def call(self, request: dict | None, wait_s: float) -> tuple[dict | None, str]:
        """Send ``request`` (None: only wait for a message) tagged with a fresh random nonce and
        wait for the reply, which must be one well-formed frame carrying the same nonce.

        Returns (reply, state) with state ``ok``, ``timeout``, ``died`` or ``garbled`` (an
        unreadable frame, or a reply to another request: code wrote into the channel)."""
        pending = b""
        nonce = None
        if request is not None:
            nonce = secrets.token_hex(16)
            body = json.dumps(dict(request, nonce=nonce)).encode("utf-8", "surrogatepass")
            pending = b"%010d" % len(body) + body
            self.pump.add(self.req_w, selectors.EVENT_WRITE)
        buf = self._buf
        deadline = time.monotonic() + wait_s
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None, "timeout"
                ready = self.pump.poll(min(remaining, 1.0))
                if self.req_w in ready and pending:
                    try:
                        pending = pending[os.write(self.req_w, pending[:1 << 20]):]
                    except BlockingIOError:
                        pass
                    except OSError:
                        return None, "died"
                    if not pending:
                        self.pump.remove(self.req_w)
                eof = False
                if self.resp_r in ready or buf:
                    while True:
                        data = read_available(self.resp_r)
                        if data is None:
                            eof = True
                            break
                        if not data:
                            break
                        buf += data
                    framed = _take_frame(buf, nonce)
                    if framed is not None:
                        self.pump.drain_now()
                        return framed
                    if eof:
                        return None, "died"
                if not ready and not self.alive:
                    return None, "died"
        finally:
            self.pump.remove(self.req_w)

    def take_output(self, cap: int) -> tuple[tuple[str, bool], tuple[str, bool]]:
        return self.out.take(cap), self.err.take(cap)

    def exit_code(self, wait_s: float = 0.0) -> int | None:
        """The kernel's exit status (negative: killed by that signal), None while running."""
        try:
            code = self.child.proc.wait(timeout=wait_s) if wait_s else self.child.proc.poll()
        except subprocess.TimeoutExpired:
            return None
        if code is not None and self.spec.isolation == ISOLATION_BWRAP and 128 < code < 160:
            code = 128 - code  # bubblewrap reports death by signal N as 128 + N
        return code

    def kill(self) -> None:
        try:
            kill_jail(self.child)
            self.pump.drain_to_eof(0.1)
        finally:
            cleanup(self.child)
            self.pump.close()
            close_all(self.req_w, self.resp_r, self.out_r, self.err_r)
            self._finalizer.detach()


def _take_frame(buf: bytearray, nonce: str | None) -> tuple[dict | None, str] | None:
    """The reply in ``buf`` if a whole frame has arrived (removed from ``buf``), as (reply,
    ``ok``) or (None, ``garbled``); None while a frame is still incomplete."""
    if len(buf) < _HEADER:
        return None
    head = bytes(buf[:_HEADER])
    if not head.isdigit() or int(head) > MAX_REPLY_BYTES:
        return None, "garbled"
    size = int(head)
    if len(buf) < _HEADER + size:
        return None
    body = bytes(buf[_HEADER:_HEADER + size])
    del buf[:_HEADER + size]
    try:
        reply = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, "garbled"
    if not isinstance(reply, dict) or buf or reply.get("nonce") != nonce:
        return None, "garbled"  # not one frame, or a reply to another request
    return reply, "ok"


def _error_fields_ok(fields) -> bool:
    return fields is None or (isinstance(fields, list) and len(fields) == 3
                              and all(isinstance(f, str) for f in fields))


def _session_reply_ok(reply: dict) -> bool:
    """A cell reply has exactly the shape the driver writes."""
    return (_error_fields_ok(reply.get("error"))
            and (reply.get("value") is None or isinstance(reply.get("value"), str))
            and reply.get("flag") in (None, LIMIT_WALL, LIMIT_CPU)
            and isinstance(reply.get("threads_left", 0), int))


def _runner_reply_ok(reply: dict) -> bool:
    """A spawn reply has exactly the shape the driver writes."""
    return (isinstance(reply.get("exit_code"), int) and not isinstance(reply["exit_code"], bool)
            and _error_fields_ok(reply.get("error"))
            and isinstance(reply.get("timed_out"), bool)
            and isinstance(reply.get("cpu_exceeded"), bool))


def _kill_quietly(child: Launch) -> None:
    with contextlib.suppress(OSError):  # best effort at garbage collection
        kill_jail(child)
        cleanup(child)


class LocalSession:
    """A stateful interpreter in its own jail: cells share one namespace, like a notebook.

    A trailing expression's ``repr`` is returned as ``value``. Per-cell ``limits`` apply
    ``timeout_s``, ``cpu_s`` and ``max_output_bytes``; the other limits are the session's.
    Thread-safe (one cell at a time).
    """

    def __init__(self, sandbox: LocalSandbox, limits: Limits) -> None:
        self.sandbox = sandbox
        self.limits = limits
        self.isolation = sandbox.spec.isolation
        self._lock = threading.Lock()
        self._closed = False
        self.restarts = 0
        self._kernel: _Kernel | None = _Kernel(sandbox.spec, limits, "session")

    def execute(self, cell: str, limits: Limits | None = None) -> ExecResult:
        """Run one cell; never hangs longer than its limit plus a grace period, and never
        raises for anything the cell does (a closed session is the caller's error)."""
        check_code(cell)
        limits = limits or self.limits
        with self._lock:
            if self._closed:
                raise SandboxError("this session is closed; start a new one with "
                                   "sandbox.session()")
            start = time.monotonic()
            try:
                return self._execute(cell, limits, start)
            except (SandboxError, OSError) as exc:  # a replacement kernel failed to start
                self._discard_kernel()
                return build_result(out=("", False), err=("", False),
                                    error=ExecError(ERROR_KERNEL_DIED, f"the interpreter could "
                                                    f"not be restarted: {exc}"),
                                    exit_code=None, wall=False, cpu=False, start=start,
                                    isolation=self.isolation, limits=limits, restarted=True)

    def _execute(self, cell: str, limits: Limits, start: float) -> ExecResult:
        restarted = False
        if self._kernel is None or not self._kernel.alive or self._kernel.stray_reply():
            self._replace_kernel()
            restarted = True
        kernel = self._kernel
        assert kernel is not None
        kernel.out.take(limits.max_output_bytes)
        kernel.err.take(limits.max_output_bytes)
        request = {"op": "exec", "code": cell, "timeout_s": limits.timeout_s,
                   "cpu_s": limits.cpu_seconds}
        reply, state = kernel.call(request, limits.timeout_s + GRACE_S)
        if reply is not None and not _session_reply_ok(reply):
            reply, state = None, "garbled"
        if reply is not None:
            out, err = kernel.take_output(limits.max_output_bytes)
            flag = reply.get("flag")
            if flag and reply.get("threads_left"):
                # Threads of a timed-out cell still run: they would keep using the CPU (and
                # the session's CPU budget) between cells. Only a new kernel stops them.
                self._replace_kernel()
                restarted = True
            return build_result(out=out, err=err, error=error_from_fields(reply.get("error")),
                                exit_code=None, wall=flag == LIMIT_WALL,
                                cpu=flag == LIMIT_CPU, start=start, isolation=self.isolation,
                                limits=limits, value=reply.get("value"), restarted=restarted)
        # No usable answer: the kernel died, ignored the interrupt, or its reply channel was
        # written to by the cell. Replace it; the cell failed.
        exit_code = kernel.exit_code(wait_s=1.0 if state == "died" else 0.0)
        kernel.kill()
        out, err = kernel.take_output(limits.max_output_bytes)
        self._kernel = None
        self._replace_kernel()
        wall = state == "timeout"
        error = None
        if state == "garbled":
            exit_code = None
            error = ExecError(ERROR_KERNEL_DIED, "the interpreter's reply was unreadable or "
                              "not for this cell (the code wrote into the sandbox's reply "
                              "channel); it was restarted")
        elif not wall:
            code = exit_code if exit_code is not None else -9
            error = ExecError(ERROR_KERNEL_DIED, f"the interpreter exited with status {code}"
                              if code >= 0 else
                              f"the interpreter was killed by "
                              f"{SIGNAL_NAMES.get(-code, f'signal {-code}')}")
        return build_result(out=out, err=err, error=error, exit_code=exit_code, wall=wall,
                            cpu=False, start=start, isolation=self.isolation,
                            limits=limits, restarted=True)

    def _discard_kernel(self) -> None:
        if self._kernel is not None:
            with contextlib.suppress(OSError):
                self._kernel.kill()
        self._kernel = None

    def _replace_kernel(self) -> None:
        if self._kernel is not None:
            self._kernel.kill()
        self._kernel = None
        self._kernel = _Kernel(self.sandbox.spec, self.limits, "session")
        self.restarts += 1

    def restart(self) -> None:
        """Discard all state: a fresh interpreter in a fresh jail."""
        with self._lock:
            if self._closed:
                raise SandboxError("this session is closed")
            self._replace_kernel()

    def close(self) -> None:
        """Kill the jail and everything in it. Idempotent."""
        with self._lock:
            self._closed = True
            if self._kernel is not None:
                self._kernel.kill()
                self._kernel = None

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def limits_fit(own: Limits, limits: Limits) -> bool:
    """Whether a run with ``limits`` can go to a runner started with ``own`` (the limits a
    jail fixes when it starts: memory, disk size and file count, processes, open files, file
    size; time and output are per run)."""
    return (limits.memory_mb <= own.memory_mb and limits.disk_mb == own.disk_mb
            and limits.disk_files == own.disk_files
            and limits.processes <= own.processes and limits.open_files <= own.open_files
            and limits.file_size_mb <= own.file_size_mb)


class Runner:
    """A warm fork server in its own jail: fast stateless runs, one at a time.

    Each program runs in a freshly forked process with its own rlimits and ``__main__``,
    forked from a template that never saw another program, in namespaces of its own (mount,
    IPC, pid) with a fresh ``/tmp`` and ``/dev/shm``, all discarded when it ends, so programs
    do not see each other (where the jail cannot give a candidate namespaces, leftovers are
    killed by pid and the work dir is wiped instead). ``fits(limits)`` says whether a run's limits are within the jail's own.

    ``preload`` maps module names to source the fork server executes once, before it forks
    any program (and again after each restart): trusted code only (it runs in the pristine
    process every program is forked from), such as the grader's relay module
    (``pipelines.sandbox.harness.relay_module_source``). Every program then finds those
    modules in ``sys.modules``; a program can change its own copy, never the fork server's.
    Raises :class:`SandboxError` when a module fails to load.
    """

    def __init__(self, sandbox: LocalSandbox, limits: Limits,
                 preload: Mapping[str, str] | None = None) -> None:
        self.sandbox = sandbox
        self.limits = limits
        self.isolation = sandbox.spec.isolation
        self.preload = dict(preload or {})
        self._lock = threading.Lock()
        self._kernel: _Kernel | None = self._start_kernel()
        self.restarts = 0
        self.runs = 0

    def _start_kernel(self) -> _Kernel:
        kernel = _Kernel(self.sandbox.spec, self.limits, "runner")
        for name, source in self.preload.items():
            reply, state = kernel.call({"op": "preload", "name": name, "code": source},
                                       START_TIMEOUT_S)
            if reply is None or reply.get("preloaded") != name:
                why = (reply or {}).get("error") or state
                kernel.kill()
                raise SandboxError(f"the sandbox runner could not preload {name!r}: {why}")
        kernel.take_output(self.limits.max_output_bytes)
        return kernel

    def fits(self, limits: Limits) -> bool:
        return limits_fit(self.limits, limits)

    def run(self, code: str, stdin: str | bytes | None = None,
            limits: Limits | None = None, relay: dict | None = None) -> ExecResult:
        """Run ``code`` in a freshly forked process. With ``relay``
        (``pipelines.sandbox.harness.relay_request``; the runner must have preloaded the
        relay module) ``code`` is ignored: the fork server runs the relay as the candidate's
        trusted parent, ``stdin`` is the nonce, and the payload line is the result's stdout."""
        limits = limits or self.limits
        check_code(code)
        data = as_bytes(stdin)
        if not self.fits(limits):
            raise ValueError("these limits exceed the runner's own (memory, disk size or file "
                             "count, processes, open files, file size); use LocalSandbox.run "
                             "for them")
        with self._lock:
            start = time.monotonic()
            restarted = False
            if self._kernel is None or not self._kernel.alive or self._kernel.stray_reply():
                self._restart()
                restarted = True
            kernel = self._kernel
            assert kernel is not None
            kernel.out.take(limits.max_output_bytes)
            kernel.err.take(limits.max_output_bytes)
            request = {"op": "spawn", "code": code,
                       "stdin": None if data is None else data.decode("latin-1"),
                       "timeout_s": limits.timeout_s, "cpu_s": limits.cpu_seconds,
                       "limits": rlimit_spec(limits)}
            if relay is not None:
                request["relay"] = relay
            reply, state = kernel.call(request, limits.timeout_s + GRACE_S + 1.0)
            self.runs += 1
            if reply is not None and not _runner_reply_ok(reply):
                reply, state = None, "garbled"
            if reply is not None:
                out, err = kernel.take_output(limits.max_output_bytes)
                wall = bool(reply.get("timed_out"))
                return build_result(out=out, err=err,
                                    error=error_from_fields(reply.get("error")),
                                    exit_code=None if wall else reply.get("exit_code"),
                                    wall=wall, cpu=bool(reply.get("cpu_exceeded")), start=start,
                                    isolation=self.isolation, limits=limits,
                                    restarted=restarted)
            status = kernel.exit_code(wait_s=0.0 if state == "timeout" else 1.0)
            kernel.kill()
            out, err = kernel.take_output(limits.max_output_bytes)
            self._kernel = None
            self._restart()
            wall = state == "timeout"
            error = None if wall else ExecError(
                ERROR_SANDBOX_DIED,
                "the sandbox's fork server sent an unreadable reply" if state == "garbled" else
                f"the sandbox's fork server died while running the program (exit status "
                f"{status})")
            return build_result(out=out, err=err, error=error, exit_code=None, wall=wall,
                                cpu=False, start=start, isolation=self.isolation,
                                limits=limits, restarted=True)

    def _restart(self) -> None:
        if self._kernel is not None:
            self._kernel.kill()
        self._kernel = None
        self._kernel = self._start_kernel()
        self.restarts += 1

    def close(self) -> None:
        with self._lock:
            if self._kernel is not None:
                self._kernel.kill()
                self._kernel = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
