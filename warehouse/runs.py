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

Not guaranteed: atomicity across tables (each partition file is replaced on its own); a crash
between the data write and the `runs` row leaves the new data in place, flagged, not rolled
back. A record that cannot be written while a run is failing is skipped, so the run's own
error is the one that propagates.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import signal
import subprocess
import threading
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

from pipelines.settings import PROJECT_ROOT
from warehouse.store import Lineage, Warehouse, WriteResult

log = logging.getLogger(__name__)

RUN_STATUSES = ("success", "failed", "canceled")
ERROR_CHARS = 2000


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
               error: str | None = None) -> None:
    """One row in `runs` per run (``partition`` = ``lin.partition``, in the run's own folder
    ``run_partition(lin)``). Write it last: a
    ``success`` row marks the run's other writes as complete. A failed run records
    ``status='failed'`` and the reason in ``error``; a cancelled one ``'canceled'``."""
    if status not in RUN_STATUSES:
        raise ValueError(f"run status must be one of {RUN_STATUSES}, got {status!r}")
    row = {
        "status": status,
        "error": None if error is None else str(error)[:ERROR_CHARS],
        "started_at": started_at,
        "finished_at": dt.datetime.now(dt.UTC),
        "rows_written": int(rows_written),
        "config_json": json.dumps(dict(config or {}), sort_keys=True, default=str),
        "git_sha": git_sha(),
    }
    wh.write("runs", [row], lineage=lin, folder=run_partition(lin))


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

    Use it as a context manager (or call :meth:`commit` / :meth:`abort` yourself)::

        with RunRecord(wh, lin, config=cfg) as rec:
            client = rec.track(make_client())
            ...
            rec.write("my_table", rows)          # the calls are written first
        # leaving the block writes the `runs` row: success, failed or canceled

    ``track`` registers clients (anything with ``drain_records()``) whose call records belong
    to this run; ``add_calls`` adds records drained elsewhere. Calls go to the `llm_calls`
    folder ``run_partition(lin, calls_name)``; every later flush rewrites that folder
    with all of the run's calls, so calls made after a data write are kept too.
    ``rows_written`` in the `runs` row is the number of rows written with ``counted=True``
    unless set explicitly (attribute ``rows_written`` or :meth:`commit`'s argument).
    """

    def __init__(self, wh: Warehouse, lin: Lineage, *, config: Mapping[str, Any] | None = None,
                 started_at: dt.datetime | None = None, calls_name: str | None = None,
                 clients: Iterable[Any] = ()) -> None:
        self.wh = wh
        self.lineage = lin
        self.config = dict(config or {})
        self.started_at = started_at or dt.datetime.now(dt.UTC)
        self.calls_name = calls_name
        self.calls: list[dict[str, Any]] = []
        self.rows_written: int | None = None
        self.status: str | None = None  # set once the `runs` row is written (or attempted)
        self._clients: list[Any] = list(clients)
        self._counted = 0
        self._calls_written = 0

    # ---- what belongs to the run --------------------------------------------------------
    def track(self, client: Any) -> Any:
        """Register ``client``: its call records are drained into this run. Returns it."""
        if not any(client is c for c in self._clients):
            self._clients.append(client)
        return client

    def add_calls(self, calls: Iterable[Mapping[str, Any]]) -> None:
        self.calls.extend(dict(c) for c in calls)

    def drain(self) -> list[dict[str, Any]]:
        """Move the tracked clients' pending call records into ``calls``; returns ``calls``."""
        for client in self._clients:
            self.calls.extend(client.drain_records())
        return self.calls

    # ---- writing ------------------------------------------------------------------------
    def write_calls(self) -> int:
        """Write the run's calls (all of them, into the run's partition) if any are new."""
        self.drain()
        if len(self.calls) != self._calls_written:
            write_llm_calls(self.wh, self.calls, self.lineage, self.calls_name)
            self._calls_written = len(self.calls)
        return len(self.calls)

    def write(self, table: str, rows: Any, *, lineage: Lineage | None = None,
              partition: str | None = None, counted: bool = True) -> WriteResult:
        """Write a data table (after the calls so far); ``lineage`` defaults to the run's."""
        self.write_calls()
        result = self.wh.write(table, rows, lineage=lineage or self.lineage, partition=partition)
        if counted:
            self._counted += result.rows
        return result

    def commit(self, rows_written: int | None = None) -> None:
        """The calls not yet written, then the ``success`` `runs` row."""
        if rows_written is not None:
            self.rows_written = rows_written
        self.write_calls()
        record_run(self.wh, self.lineage, started_at=self.started_at,
                   rows_written=self._rows(), config=self.config)
        self.status = "success"

    def abort(self, exc: BaseException) -> None:
        """Record a run that stopped with ``exc``: its calls, then a `runs` row with status
        ``failed`` (an ``Exception``) or ``canceled`` (any other ``BaseException``) and the
        reason. Never raises: a record that cannot be written is skipped, so the caller
        re-raises the run's own error. Nothing is done when the run already has its row."""
        if self.status is not None:
            return
        self.status = "failed" if isinstance(exc, Exception) else "canceled"
        with _interrupts_held():  # a second Ctrl-C (or the orchestrator's) must not cut it
            try:
                self.write_calls()
            except Exception as err:  # noqa: BLE001 - the run's own error is the one to raise
                log.warning("could not write the llm_calls of %s: %s",
                            run_partition(self.lineage), error_text(err))
            try:
                record_run(self.wh, self.lineage, started_at=self.started_at,
                           rows_written=self._counted, config=self.config, status=self.status,
                           error=error_text(exc))
            except Exception as err:  # noqa: BLE001
                log.warning("could not write the %s runs row of %s: %s", self.status,
                            run_partition(self.lineage), error_text(err))

    def _rows(self) -> int:
        return self._counted if self.rows_written is None else int(self.rows_written)

    def __enter__(self) -> RunRecord:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            if self.status is None:
                self.commit()
        else:
            self.abort(exc)
