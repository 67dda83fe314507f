"""Run records: one run's `llm_calls`, its data rows and its `runs` row, in that order.

Write order and the commit marker: a run that writes several tables writes its `llm_calls`
first, then its data tables, and its `runs` row last. The `runs` row with status ``success`` is
the commit marker: a partition whose rows come from a run without one was written by a run
that crashed before it finished (``assets.common.runs_disagreements`` finds such partitions).
`llm_calls` and `runs` rows hold the run's partition key in ``partition`` (for an evaluation,
Dagster's ``gsm8k|smollm2-135m-instruct``, ``warehouse.partitions``), so they join the data
tables and the run's ``dagster/partition`` tag on it. They are stored in one folder per run
(folder key ``<asset>/<partition>/<run_id>``, :func:`run_partition`), so a re-run adds its
records next to the earlier runs' instead of replacing them: every real endpoint call stays
counted for cost accounting.

:class:`RunRecord` holds that order for every stage that calls an LLM: it drains the call
records of the clients it tracks, writes them before the first data table, and writes the
`runs` row last. A run that raises still writes the calls completed so far and a `runs` row
with status ``failed`` and the reason; a run stopped by a ``BaseException`` that is not an
``Exception`` (``KeyboardInterrupt``, an orchestrator's interrupt) is recorded as
``canceled``. Dagster-free, so evaluation code (``eval.recorded``) records runs the same way
the assets do.

A started record (:meth:`RunRecord.start`, which entering it as a context manager does) writes
a heartbeat row to `run_heartbeats` (in the run's own folder) at once and then, every
``flush_every_s`` seconds (:data:`FLUSH_EVERY_S`, 30 s) from a background thread, writes the
calls completed so far to `llm_calls` and rewrites its heartbeat: ``heartbeat_at`` now,
``alive_until`` :data:`ALIVE_FLUSHES` intervals later (5 minutes by default). Its `runs` row
ends it and its heartbeat is removed (the table keeps an empty partition, ``idle``, so that its
catalog view stays the same between runs). A run killed outright (SIGKILL, out of memory, the
machine stopped) therefore leaves its calls up to the last flush and a heartbeat whose
``alive_until`` passes without a `runs` row: the view ``run_status``
(``warehouse/views/run_status.sql``) shows such a run as ``crashed`` (``running`` until then),
and so a run that wrote `llm_calls` but neither a `runs` row nor a heartbeat. `runs` itself
only ever holds finished runs. A record that is not started (``eval.recorded`` runs several in
turn over shared clients) writes no heartbeat and flushes only at its data writes and its end:
a flusher drains every client it tracks, so only the record of the run in progress may be
started.

Not guaranteed: atomicity across tables (each partition file is replaced on its own); a crash
between the data write and the `runs` row leaves the new data in place, flagged, not rolled
back. A record that cannot be written while a run is failing is skipped, so the run's own
error is the one that propagates. A process paused for longer than ``alive_until`` allows (a
suspended laptop) shows as ``crashed`` until its next heartbeat.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import signal
import subprocess
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

from pipelines.settings import PROJECT_ROOT
from warehouse.files import DATA_FILE
from warehouse.store import Lineage, Warehouse, WriteResult

log = logging.getLogger(__name__)

RUN_STATUSES = ("success", "failed", "canceled")
HEARTBEATS = "run_heartbeats"
# The empty partition `run_heartbeats` keeps once no run has a heartbeat (see _end_heartbeats).
IDLE_HEARTBEATS = "idle"
ERROR_CHARS = 2000
# How often a started run writes its calls and heartbeat, and for how many intervals without
# one it still counts as alive.
FLUSH_EVERY_S = 30.0
ALIVE_FLUSHES = 10


def git_sha() -> str:
    """The short commit of the project's checkout, "" when git cannot tell."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, timeout=5, check=False)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def run_partition(lin: Lineage, name: str | None = None) -> str:
    """The key of a run's own `runs` / `llm_calls` folder, ``<name or asset>/<partition>/
    <run_id>`` (``Warehouse.read("runs", partition=...)`` takes it); the rows in it hold
    ``lin.partition`` in their ``partition`` column."""
    return f"{name or lin.asset}/{lin.partition}/{lin.run_id}"


def write_llm_calls(wh: Warehouse, calls: list[Mapping[str, Any]], lin: Lineage,
                    name: str | None = None) -> int:
    """Write one run's `llm_calls` records into its own folder (``run_partition``), so
    re-runs never replace the records of earlier runs; their ``partition`` is
    ``lin.partition``. Nothing is written for no calls. Writing again replaces this run's
    folder: pass every call of the run each time."""
    if calls:
        wh.write("llm_calls", list(calls), lineage=lin, folder=run_partition(lin, name))
    return len(calls)


def record_run(wh: Warehouse, lin: Lineage, *, started_at: dt.datetime, rows_written: int,
               config: Mapping[str, Any] | None = None, status: str = "success",
               error: str | None = None, sha: str | None = None) -> None:
    """One row in `runs` per run (``partition`` = ``lin.partition``, in the run's own folder
    ``run_partition(lin)``). Write it last: a
    ``success`` row marks the run's other writes as complete. A failed run records
    ``status='failed'`` and the reason in ``error``; a cancelled one ``'canceled'``. ``sha``:
    the checkout's commit when already known (default: ``git_sha()``)."""
    if status not in RUN_STATUSES:
        raise ValueError(f"run status must be one of {RUN_STATUSES}, got {status!r}")
    row = {
        "status": status,
        "error": None if error is None else str(error)[:ERROR_CHARS],
        "started_at": started_at,
        "finished_at": dt.datetime.now(dt.UTC),
        "rows_written": int(rows_written),
        "config_json": json.dumps(dict(config or {}), sort_keys=True, default=str),
        "git_sha": git_sha() if sha is None else sha,
    }
    wh.write("runs", [row], lineage=lin, folder=run_partition(lin))


def write_heartbeat(wh: Warehouse, lin: Lineage, *, started_at: dt.datetime, rows_written: int,
                    alive_s: float, config: Mapping[str, Any] | None = None,
                    sha: str = "") -> None:
    """Say that the run of ``lin`` is alive now and counts as crashed ``alive_s`` seconds from
    now unless it writes another heartbeat or its `runs` row first (table `run_heartbeats`, in
    the run's own folder, replaced at each heartbeat)."""
    now = dt.datetime.now(dt.UTC)
    row = {
        "started_at": started_at,
        "heartbeat_at": now,
        "alive_until": now + dt.timedelta(seconds=alive_s),
        "rows_written": int(rows_written),
        "config_json": json.dumps(dict(config or {}), sort_keys=True, default=str),
        "git_sha": sha,
    }
    wh.write(HEARTBEATS, [row], lineage=lin, folder=run_partition(lin))


def error_text(exc: BaseException) -> str:
    """``<type>: <message>`` of an exception, as the `runs` row's ``error`` holds it."""
    return f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """SIGINT and SIGTERM are held off while the block runs (main thread only; elsewhere a
    no-op): a stopped run's record is a few small writes, and an interrupt arriving in the
    middle of them (a second Ctrl-C, or an orchestrator forwarding its own) would leave the run
    with no record. The run is already stopping, so the held signals are dropped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in held}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class RunRecord:
    """The records of one run under lineage ``lin``: `llm_calls`, then data, then `runs`.

    Use it as a context manager (or call :meth:`start`, then :meth:`commit` / :meth:`abort`
    yourself)::

        with RunRecord(wh, lin, config=cfg) as rec:
            client = rec.track(make_client())
            ...
            rec.write("my_table", rows)          # the calls are written first
        # leaving the block writes the `runs` row: success, failed or canceled

    ``track`` registers clients (anything with ``drain_records()``) whose call records belong
    to this run; ``add_calls`` adds records drained elsewhere. Calls go to the `llm_calls`
    folder ``run_partition(lin, calls_name)``; every later flush rewrites that folder
    with all of the run's calls, so calls made after a data write are kept too. Once started,
    the run writes a heartbeat and flushes its calls and heartbeat every ``flush_every_s``
    seconds (module docstring).
    ``rows_written`` in the `runs` row is the number of rows written with ``counted=True``
    unless set explicitly (attribute ``rows_written`` or :meth:`commit`'s argument).
    """

    def __init__(self, wh: Warehouse, lin: Lineage, *, config: Mapping[str, Any] | None = None,
                 started_at: dt.datetime | None = None, calls_name: str | None = None,
                 clients: Iterable[Any] = (), flush_every_s: float = FLUSH_EVERY_S) -> None:
        if not flush_every_s > 0:
            raise ValueError(f"flush_every_s must be > 0, got {flush_every_s!r}")
        self.wh = wh
        self.lineage = lin
        self.config = dict(config or {})
        self.started_at = started_at or dt.datetime.now(dt.UTC)
        self.calls_name = calls_name
        self.flush_every_s = float(flush_every_s)
        self.calls: list[dict[str, Any]] = []
        self.rows_written: int | None = None
        self.status: str | None = None  # set once the `runs` row is written (or attempted)
        self._clients: list[Any] = list(clients)
        self._counted = 0
        self._calls_written = 0
        self._lock = threading.RLock()  # the flusher thread and the run's own writes
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._sha: str | None = None

    # ---- what belongs to the run --------------------------------------------------------
    def track(self, client: Any) -> Any:
        """Register ``client``: its call records are drained into this run. Returns it."""
        with self._lock:
            if not any(client is c for c in self._clients):
                self._clients.append(client)
        return client

    def add_calls(self, calls: Iterable[Mapping[str, Any]]) -> None:
        with self._lock:
            self.calls.extend(dict(c) for c in calls)

    def drain(self) -> list[dict[str, Any]]:
        """Move the tracked clients' pending call records into ``calls``; returns ``calls``."""
        with self._lock:
            for client in self._clients:
                self.calls.extend(client.drain_records())
            return self.calls

    # ---- writing ------------------------------------------------------------------------
    def start(self) -> None:
        """Write the run's first heartbeat and start flushing calls and heartbeats every
        ``flush_every_s`` seconds (once; entering the record as a context manager calls it)."""
        with self._lock:
            if self._flusher is not None or self.status is not None:
                return
            self._heartbeat()
            self._flusher = threading.Thread(
                target=_flush_loop, args=(weakref.ref(self), self._stop, self.flush_every_s),
                name=f"run-record-{run_partition(self.lineage)}", daemon=True)
            self._flusher.start()

    def flush(self) -> None:
        """Write the calls not yet written and, for a started run, its heartbeat."""
        with self._lock:
            if self.status is not None:
                return
            self.write_calls()
            if self._flusher is not None:
                self._heartbeat()

    def _heartbeat(self) -> None:
        if self._sha is None:
            self._sha = git_sha()
        write_heartbeat(self.wh, self.lineage, started_at=self.started_at,
                        rows_written=self._counted, config=self.config, sha=self._sha,
                        alive_s=ALIVE_FLUSHES * self.flush_every_s)

    def _end_heartbeats(self) -> None:
        """Remove the run's heartbeat once its `runs` row is written (best effort: a heartbeat
        left behind is overruled by the `runs` row). The table keeps an empty partition,
        ``IDLE_HEARTBEATS``, written before the heartbeat goes the first time: with it, the
        table's files have the same columns whether or not a run is going on, so its catalog
        view does not change and the catalog is not rebuilt at every run's start and end."""
        if self._flusher is None:
            return
        try:
            if not (self.wh.root / HEARTBEATS / IDLE_HEARTBEATS / DATA_FILE).is_file():
                self.wh.write(HEARTBEATS, [], lineage=Lineage(run_id="", asset="", partition=""),
                              folder=IDLE_HEARTBEATS)
            self.wh.delete_partition(HEARTBEATS, run_partition(self.lineage))
        except Exception as err:  # noqa: BLE001 - the run's outcome is recorded already
            log.warning("could not remove the heartbeat of %s: %s", run_partition(self.lineage),
                        error_text(err))

    def _stop_flushing(self) -> None:
        self._stop.set()
        flusher = self._flusher
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join(timeout=60)

    def write_calls(self) -> int:
        """Write the run's calls (all of them, into the run's partition) if any are new."""
        with self._lock:
            self.drain()
            if len(self.calls) != self._calls_written:
                write_llm_calls(self.wh, self.calls, self.lineage, self.calls_name)
                self._calls_written = len(self.calls)
            return len(self.calls)

    def write(self, table: str, rows: Any, *, lineage: Lineage | None = None,
              partition: str | None = None, counted: bool = True) -> WriteResult:
        """Write a data table (after the calls so far); ``lineage`` defaults to the run's."""
        with self._lock:
            self.write_calls()
            result = self.wh.write(table, rows, lineage=lineage or self.lineage,
                                   partition=partition)
            if counted:
                self._counted += result.rows
            return result

    def commit(self, rows_written: int | None = None) -> None:
        """The calls not yet written, then the ``success`` `runs` row."""
        self._stop_flushing()
        with self._lock:
            if rows_written is not None:
                self.rows_written = rows_written
            self.write_calls()
            record_run(self.wh, self.lineage, started_at=self.started_at,
                       rows_written=self._rows(), config=self.config, sha=self._sha)
            self.status = "success"
            self._end_heartbeats()

    def abort(self, exc: BaseException) -> None:
        """Record a run that stopped with ``exc``: its calls, then a `runs` row with status
        ``failed`` (an ``Exception``) or ``canceled`` (any other ``BaseException``) and the
        reason. Never raises: a record that cannot be written is skipped, so the caller
        re-raises the run's own error. Nothing is done when the run already has its row."""
        if self.status is not None:
            return
        with _interrupts_held():  # a second Ctrl-C (or the orchestrator's) must not cut it
            self._stop_flushing()
            with self._lock:
                if self.status is not None:
                    return
                self.status = "failed" if isinstance(exc, Exception) else "canceled"
                try:
                    self.write_calls()
                except Exception as err:  # noqa: BLE001 - the run's own error is the one to raise
                    log.warning("could not write the llm_calls of %s: %s",
                                run_partition(self.lineage), error_text(err))
                try:
                    record_run(self.wh, self.lineage, started_at=self.started_at,
                               rows_written=self._counted, config=self.config,
                               status=self.status, error=error_text(exc), sha=self._sha)
                except Exception as err:  # noqa: BLE001
                    log.warning("could not write the %s runs row of %s: %s", self.status,
                                run_partition(self.lineage), error_text(err))
                else:
                    self._end_heartbeats()

    def _rows(self) -> int:
        return self._counted if self.rows_written is None else int(self.rows_written)

    def __enter__(self) -> RunRecord:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            if self.status is None:
                self.commit()
        else:
            self.abort(exc)


def _flush_loop(ref: weakref.ReferenceType[RunRecord], stop: threading.Event,
                every_s: float) -> None:
    """The flusher thread of a started record: ``flush`` every ``every_s`` seconds until the
    record stops it or is gone. A flush that fails is logged and tried again at the next."""
    warned = False
    while not stop.wait(every_s):
        record = ref()
        if record is None:
            return
        try:
            record.flush()
        except Exception as err:  # noqa: BLE001 - the run goes on; its end writes again
            if not warned:
                log.warning("could not flush the calls and heartbeat of %s: %s (tried again "
                            "every %g s)", run_partition(record.lineage), error_text(err),
                            every_s)
                warned = True
        del record
