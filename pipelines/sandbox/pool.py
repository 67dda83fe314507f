"""A pool of warm sandbox workers, so concurrent trajectories and graders do not pay a jail's
start-up for every program or session.

- :meth:`SandboxPool.run` hands a program to an idle warm runner (a fork server in its own
  jail, see :class:`~pipelines.sandbox.local.Runner`); at most ``workers`` programs run at
  once and callers beyond that wait for a free runner. :meth:`SandboxPool.run_many` runs a
  batch on all runners in parallel and returns results in input order.
- Every local runner preloads the grader's relay module
  (:func:`~pipelines.sandbox.harness.relay_module_source`) before it forks any program, so a
  relay program sent to it can be the short form; :meth:`SandboxPool.relay_preloaded` says
  whether a run with given limits lands on such a runner. It also imports ``warm_imports``
  (standard modules that are slow to import and that programs commonly use: ``typing``
  takes 4-6 ms in the jail, longer than the rest of a small program's run) once, so the
  programs it forks find them loaded.
- :meth:`SandboxPool.session` hands out a session that was started in the background
  (``warm_sessions`` are kept ready); a session is never reused after it is closed, so no state
  leaks from one trajectory to the next.

Any backend works: with a :class:`~pipelines.sandbox.local.LocalSandbox` runs go to warm
runners; with another backend (E2B) runs go to ``backend.run`` with the same concurrency
bound, and sessions are pre-started the same way.

Not guaranteed: fairness between waiting callers; that a run whose limits exceed the pool's
(memory, disk size or file count, processes, open files, file size) is fast (it gets a cold
jail of its own).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Self

from pipelines.sandbox.harness import RELAY_MODULE, relay_module_source, relay_request
from pipelines.sandbox.local import LocalSandbox, Runner, limits_fit
from pipelines.sandbox.result import ExecResult, Limits

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunJob:
    """One program for :meth:`SandboxPool.run_many`."""

    code: str
    stdin: str | bytes | None = None
    limits: Limits | None = None


WARM_IMPORTS = ("typing",)
_WARM_MODULE = "__weft_warm_imports__"


class SandboxPool:
    """Warm runners and pre-started sessions over one backend. Thread-safe; close it (or use it
    as a context manager) to kill every jail it started. ``warm_imports``: standard-library
    modules each local runner imports before it forks programs (ValueError for a name that is
    not a dotted module name)."""

    def __init__(self, backend: Any | None = None, *, workers: int = 2,
                 warm_sessions: int = 0, limits: Limits | None = None,
                 warm_imports: Sequence[str] = WARM_IMPORTS) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if warm_sessions < 0:
            raise ValueError(f"warm_sessions must be >= 0, got {warm_sessions}")
        if isinstance(warm_imports, str) or not all(
                isinstance(m, str) and m and all(part.isidentifier() for part in m.split("."))
                for m in warm_imports):
            raise ValueError(f"warm_imports must be a list of module names such as "
                             f"['typing'], got {warm_imports!r}")
        self._preload = {RELAY_MODULE: relay_module_source()}
        if warm_imports:
            self._preload[_WARM_MODULE] = "".join(f"import {m}\n" for m in warm_imports)
        self.backend = backend if backend is not None else LocalSandbox(limits)
        self.limits = limits or getattr(self.backend, "limits", None) or Limits()
        self.workers = workers
        self.warm_sessions = warm_sessions
        self._local = isinstance(self.backend, LocalSandbox)
        self._idle: queue.LifoQueue = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(workers)
        self._runners: list[Runner] = []
        self._sessions: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self._refills = 0
        if warm_sessions:
            self._refill_sessions()

    @property
    def isolation(self) -> str:
        return self.backend.isolation

    # -- stateless runs -------------------------------------------------------------------

    def run(self, code: str, stdin: str | bytes | None = None,
            limits: Limits | None = None) -> ExecResult:
        """Run a program on a warm worker (same contract as ``LocalSandbox.run``)."""
        self._check_open()
        limits = limits or self.limits
        with self._slots:
            if not self._local:
                return self.backend.run(code, stdin=stdin, limits=limits)
            runner = self._take_runner()
            try:
                if not runner.fits(limits):
                    return self.backend.run(code, stdin=stdin, limits=limits)
                return runner.run(code, stdin=stdin, limits=limits)
            finally:
                self._idle.put(runner)

    def run_many(self, jobs: Iterable[RunJob | str | tuple]) -> list[ExecResult]:
        """Run many programs, ``workers`` at a time; results in the order of ``jobs``.
        A job is a :class:`RunJob`, a code string, or a ``(code, stdin)`` tuple."""
        items = [_as_job(job) for job in jobs]
        if not items:
            return []
        with ThreadPoolExecutor(max_workers=min(self.workers, len(items)),
                                thread_name_prefix="weft-sandbox") as ex:
            return list(ex.map(lambda j: self.run(j.code, stdin=j.stdin, limits=j.limits),
                               items))

    def relay_preloaded(self, limits: Limits | None = None) -> bool:
        """Whether a run with ``limits`` lands on a warm runner that has the relay module
        loaded (a local backend and limits within the runners' own), so that
        :meth:`run_relay` may be used for it."""
        return self._local and limits_fit(self.limits, limits or self.limits)

    def run_relay(self, source: str, target: tuple, calls: list, *, nonce: str,
                  results_cap: int, digest_above: int = 0, digest_count: int | None = None,
                  limits: Limits | None = None) -> ExecResult:
        """The relay of :func:`~pipelines.sandbox.harness.relay_program` (same arguments, same
        payload line in the result's stdout, ``nonce`` in place of its stdin) run by a warm
        runner's fork server as the candidate's trusted parent. Only where
        :meth:`relay_preloaded` is true (else ValueError)."""
        self._check_open()
        limits = limits or self.limits
        if not self.relay_preloaded(limits):
            raise ValueError("run_relay needs a local backend and limits within the pool's "
                             "runners (see relay_preloaded); use relay_program with run")
        relay = relay_request(source, target, calls, results_cap=results_cap,
                              digest_above=digest_above, digest_count=digest_count)
        with self._slots:
            runner = self._take_runner()
            try:
                return runner.run("", stdin=nonce, limits=limits, relay=relay)
            finally:
                self._idle.put(runner)

    def _take_runner(self) -> Runner:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            self._check_open()
            runner = self.backend.runner(self.limits, preload=self._preload)
            self._runners.append(runner)
            return runner

    def warm_up(self) -> None:
        """Start every runner now instead of on first use."""
        if not self._local:
            return
        taken = [self._take_runner() for _ in range(self.workers - self._idle.qsize())]
        for runner in taken:
            self._idle.put(runner)

    # -- sessions -------------------------------------------------------------------------

    def session(self, limits: Limits | None = None):
        """A started session: a pre-started one when available (then the pool starts a
        replacement in the background), else a new one. Close it when done."""
        self._check_open()
        if limits is None or limits == self.limits:
            try:
                sess = self._sessions.get_nowait()
            except queue.Empty:
                sess = None
            if sess is not None:
                self._refill_sessions()
                return sess
        return self.backend.session(limits or self.limits)

    def _refill_sessions(self) -> None:
        def fill() -> None:
            try:
                while not self._closed and self._sessions.qsize() < self.warm_sessions:
                    sess = self.backend.session(self.limits)
                    if self._closed:
                        sess.close()
                        return
                    self._sessions.put(sess)
            except Exception:  # a failed warm start is retried by the next session() call
                log.exception("could not pre-start a sandbox session")

        self._refills += 1
        threading.Thread(target=fill, name="weft-sandbox-warm", daemon=True).start()

    # -- lifecycle ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this SandboxPool is closed; create a new one")

    def close(self) -> None:
        """Kill every runner and every pre-started session. Idempotent."""
        with self._lock:
            self._closed = True
            runners, self._runners = self._runners, []
        for runner in runners:
            runner.close()
        while True:
            try:
                self._sessions.get_nowait().close()
            except queue.Empty:
                break

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _as_job(job: RunJob | str | Sequence) -> RunJob:
    if isinstance(job, RunJob):
        return job
    if isinstance(job, str):
        return RunJob(job)
    if isinstance(job, (tuple, list)) and 1 <= len(job) <= 3:
        return RunJob(*job)
    raise TypeError(f"a job is a RunJob, a code string or a (code, stdin[, limits]) tuple, "
                    f"got {type(job).__name__}")
