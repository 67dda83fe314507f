"""Resource limits for user SQL: memory, threads, disk spill and wall-clock time.

Every query through ``Warehouse.sql`` or ``Warehouse.stream`` (hence ``python -m warehouse``)
runs under a ``QueryLimits``. The defaults suit a laptop; each limit is configurable in Python
(``QueryLimits(...)``, ``Warehouse(limits=...)``, ``Warehouse.sql(..., limits=...)``), by
environment variable, and by a ``python -m warehouse`` flag:

=============  ==========================  ===========================  ==================
limit          default                     environment variable         flag
=============  ==========================  ===========================  ==================
memory         a quarter of RAM, at most   ``WEFT_SQL_MEMORY_LIMIT``    ``--memory-limit``
               4 GiB, at least 256 MiB
threads        the usable cores, at most 4 ``WEFT_SQL_THREADS``         ``--threads``
spill          4 GiB (0 turns spilling     ``WEFT_SQL_SPILL_LIMIT``     ``--spill-limit``
               off)
time           300 s                       ``WEFT_SQL_TIMEOUT_S``       ``--timeout``
spill folder   ``WEFT_HOME/tmp/sql-spill`` ``WEFT_SQL_SPILL_DIR``       ``--spill-dir``
=============  ==========================  ===========================  ==================

The rows and bytes ``python -m warehouse sql`` prints are capped too (``WEFT_SQL_MAX_ROWS``,
``WEFT_SQL_MAX_BYTES``, ``--max-rows``, ``--max-bytes``: ``warehouse.output``).

Sizes are written like DuckDB's (``512MB``, ``4GB``, ``4GiB``, or a number of bytes). Memory,
threads and spill are DuckDB's ``memory_limit``, ``threads`` and ``max_temp_directory_size``,
set before the connection's configuration is locked; spill files go to the spill folder (under
``WEFT_HOME`` with the other artifacts, never into the warehouse folder), which DuckDB creates
when a query first spills and removes when the connection closes. The wall-clock limit is a
watchdog that calls ``interrupt()`` on the query's connection once the deadline has passed, and
again every ``INTERRUPT_REPEAT_S`` until the query returns (an interrupt that lands between two
statements is lost, so it is repeated). One watchdog thread per process serves every query: a
query registers its deadline and removes it when it ends (after that no interrupt reaches its
connection), so a query starts and joins no thread of its own. Starting one cost a query 17 ms
of waiting on a loaded 2-core machine, as much as an aggregation over a million rows. Work
outside DuckDB that counts towards the
limit (``Warehouse.stream``'s consumer, the command's formatting and writing) checks a
``Deadline`` between steps. A query stopped by a limit raises ``QueryLimitError`` naming the
limit, its value and how to raise it.

Not guaranteed: the limits bound one connection, not the whole process (concurrent queries each
get their own); DuckDB's memory limit covers its buffer manager, not every allocation (Python
conversion of a large result is outside it: ``Warehouse.sql`` holds the whole result,
``Warehouse.stream`` one batch at a time); the wall-clock limit stops the query within about
``INTERRUPT_REPEAT_S`` of the deadline, not to the millisecond, work outside DuckDB at its
next check, and the time to open the catalog counts towards it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipelines.settings import weft_home
from warehouse.engine import duckdb

ENV_MEMORY = "WEFT_SQL_MEMORY_LIMIT"
ENV_THREADS = "WEFT_SQL_THREADS"
ENV_SPILL = "WEFT_SQL_SPILL_LIMIT"
ENV_TIMEOUT = "WEFT_SQL_TIMEOUT_S"
ENV_SPILL_DIR = "WEFT_SQL_SPILL_DIR"

KIB, MIB, GIB = 1024, 1024**2, 1024**3
MAX_DEFAULT_MEMORY = 4 * GIB
MIN_DEFAULT_MEMORY = 256 * MIB
MAX_DEFAULT_THREADS = 4
DEFAULT_SPILL = 4 * GIB
DEFAULT_TIMEOUT_S = 300.0
INTERRUPT_REPEAT_S = 0.05

_UNITS = {
    "": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "kib": KIB, "mib": MIB, "gib": GIB, "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([a-z]*)\s*$", re.IGNORECASE)


class QueryLimitError(RuntimeError):
    """A query stopped by one of its limits. ``limit`` is ``"memory"``, ``"spill"`` or
    ``"time"``; the message names the limit's value and the flag and variable that raise it."""

    def __init__(self, limit: str, message: str):
        super().__init__(message)
        self.limit = limit


def parse_size(text: str | int, what: str = "size") -> int:
    """Bytes in ``text``: a number of bytes or a number with a unit (KB/MB/GB/TB are powers of
    1000, KiB/MiB/GiB/TiB powers of 1024, as in DuckDB)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE_RE.match(str(text))
        unit = match[2].lower() if match else None
        if match is None or unit not in _UNITS:
            raise ValueError(f"{what} {text!r} is not a size: write e.g. 512MB, 4GB or 4GiB")
        value = int(float(match[1]) * _UNITS[unit])
    if value < 0:
        raise ValueError(f"{what} must not be negative, got {text!r}")
    return value


def format_size(n: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _total_ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 4 * MAX_DEFAULT_MEMORY


def default_memory() -> int:
    return max(MIN_DEFAULT_MEMORY, min(MAX_DEFAULT_MEMORY, _total_ram() // 4))


def default_threads() -> int:
    return max(1, min(MAX_DEFAULT_THREADS, _usable_cores()))


@dataclass(frozen=True)
class QueryLimits:
    """Limits of one query connection. ``memory`` and ``spill`` are bytes or sizes as text
    (``"4GB"``); ``spill`` 0 turns spilling to disk off; ``spill_dir`` None means
    ``WEFT_HOME/tmp/sql-spill`` at the time of the query."""

    memory: int = field(default_factory=default_memory)
    threads: int = field(default_factory=default_threads)
    spill: int = DEFAULT_SPILL
    timeout_s: float = DEFAULT_TIMEOUT_S
    spill_dir: Path | None = None

    def __post_init__(self) -> None:
        for name in ("memory", "spill"):  # sizes may be given as text: "4GB", "512MiB"
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, parse_size(getattr(self, name), name))
        if not isinstance(self.memory, int) or self.memory < MIB:
            raise ValueError(f"memory limit must be at least 1MiB, got {self.memory!r}")
        if not isinstance(self.threads, int) or self.threads < 1:
            raise ValueError(f"threads must be a whole number of at least 1, got {self.threads!r}")
        if not isinstance(self.spill, int) or self.spill < 0:
            raise ValueError(f"spill limit must be 0 (no spilling) or more bytes, got {self.spill!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout must be more than 0 seconds, got {self.timeout_s!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides) -> QueryLimits:
        """Defaults, replaced by the ``WEFT_SQL_*`` variables set in ``env`` (default
        ``os.environ``), replaced by the ``overrides`` that are not None."""
        env = os.environ if env is None else env
        values: dict = {}
        if env.get(ENV_MEMORY):
            values["memory"] = parse_size(env[ENV_MEMORY], ENV_MEMORY)
        if env.get(ENV_THREADS):
            values["threads"] = _parse_int(env[ENV_THREADS], ENV_THREADS)
        if env.get(ENV_SPILL):
            values["spill"] = parse_size(env[ENV_SPILL], ENV_SPILL)
        if env.get(ENV_TIMEOUT):
            values["timeout_s"] = _parse_float(env[ENV_TIMEOUT], ENV_TIMEOUT)
        if env.get(ENV_SPILL_DIR):
            values["spill_dir"] = Path(env[ENV_SPILL_DIR])
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def instance_settings(self) -> tuple:
        """What is set on the DuckDB instance (everything but the wall-clock limit)."""
        return (self.memory, self.threads, self.spill, self.spill_dir)

    def resolved(self) -> QueryLimits:
        """The same limits with an absolute spill folder."""
        folder = self.spill_dir if self.spill_dir is not None else default_spill_dir()
        return replace(self, spill_dir=Path(os.path.abspath(folder)))


def default_spill_dir() -> Path:
    return weft_home() / "tmp" / "sql-spill"


def _parse_int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{what} must be a whole number, got {text!r}") from None


def _parse_float(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{what} must be a number of seconds, got {text!r}") from None


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def limit_settings(limits: QueryLimits) -> list[str]:
    """The SET statements that put ``limits`` (resolved) on a DuckDB connection. With spilling
    off the temp directory is empty, so DuckDB cannot offload at all."""
    folder = limits.spill_dir
    if folder is None:
        raise ValueError("resolve the limits (QueryLimits.resolved()) before applying them")
    statements = [f"SET memory_limit = '{limits.memory}B'", f"SET threads = {limits.threads}"]
    spill = limits.spill
    if spill:
        try:
            # DuckDB creates the last level of the folder itself, not its parents
            folder.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # a full disk or read-only home: the query runs without spilling
            logging.getLogger(__name__).warning(
                "spill folder %s cannot be created (%s): this query runs without spilling to "
                "disk", folder, err)
            spill = 0
    if spill == 0:
        statements += ["SET max_temp_directory_size = '0B'", "SET temp_directory = ''"]
    else:
        statements += [f"SET temp_directory = {_sql_string(str(folder))}",
                       f"SET max_temp_directory_size = '{spill}B'"]
    return statements


def _how_to_raise(flag: str, env: str, example: str, field_name: str) -> str:
    return (f"raise it with `python -m warehouse sql {flag} {example} ...`, the environment "
            f"variable {env}={example}, or QueryLimits({field_name}=...) in Python")


def memory_error(limits: QueryLimits) -> QueryLimitError:
    spill = ("spilling to disk is off" if limits.spill == 0
             else f"spilling up to {format_size(limits.spill)} to disk was not enough")
    return QueryLimitError("memory", (
        f"query stopped: it needs more memory than the memory limit of "
        f"{format_size(limits.memory)} ({spill}); "
        + _how_to_raise("--memory-limit", ENV_MEMORY, "8GB", "memory")
        + ", or narrow the query (WHERE, LIMIT, fewer columns)"))


def spill_error(limits: QueryLimits) -> QueryLimitError:
    where = f" in {limits.spill_dir}" if limits.spill else ""
    return QueryLimitError("spill", (
        f"query stopped: it needs more disk for spilling than the spill limit of "
        f"{format_size(limits.spill)}{where} (memory limit {format_size(limits.memory)}); "
        + _how_to_raise("--spill-limit", ENV_SPILL, "16GB", "spill")
        + f" (or the memory limit with --memory-limit / {ENV_MEMORY}), "
        "or narrow the query (WHERE, LIMIT, fewer columns)"))


def timeout_error(limits: QueryLimits, elapsed_s: float) -> QueryLimitError:
    return QueryLimitError("time", (
        f"query stopped after {elapsed_s:.1f} s: it reached the wall-clock limit of "
        f"{limits.timeout_s:g} s; "
        + _how_to_raise("--timeout", ENV_TIMEOUT, "900", "timeout_s")
        + ", or narrow the query (WHERE, LIMIT, no cross joins)"))


def out_of_memory_error(err: duckdb.OutOfMemoryException, limits: QueryLimits) -> QueryLimitError:
    """Which limit an OutOfMemory error hit: DuckDB names ``max_temp_directory_size`` when the
    spill folder was full, otherwise memory could not be allocated."""
    return spill_error(limits) if "max_temp_directory_size" in str(err) else memory_error(limits)


@dataclass(frozen=True)
class Deadline:
    """The wall-clock limit of one query as a point in time (``time.monotonic()``), for work
    outside DuckDB that counts towards it (reading a result in batches, formatting, writing):
    ``check()`` between steps raises the limit's ``QueryLimitError`` once it has passed."""

    limits: QueryLimits
    started: float

    def remaining_s(self) -> float:
        return self.started + self.limits.timeout_s - time.monotonic()

    def error(self) -> QueryLimitError:
        return timeout_error(self.limits, time.monotonic() - self.started)

    def check(self) -> None:
        if self.remaining_s() <= 0:
            raise self.error()


class _Watchdogs:
    """The process's one watchdog thread: it interrupts each registered connection once its
    deadline has passed and then every ``INTERRUPT_REPEAT_S`` until the registration is
    removed. It interrupts while holding the lock that ``remove`` takes, so once ``remove``
    has returned no interrupt reaches that connection (a connection kept for the next query
    is never hit by the last one's watchdog). Started at the first registration, and anew in
    a forked child (whose state is reset at the fork)."""

    # drop removed registrations from the heap once this many have piled up
    COMPACT_AT = 256

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, _Watchdog]] = []
        self._removed = 0
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, dog: _Watchdog) -> None:
        with self._cond:
            heapq.heappush(self._heap, (dog.deadline, next(self._order), dog))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="weft-sql-watchdog",
                                                daemon=True)
                self._thread.start()
            elif self._heap[0][2] is dog:  # the earliest deadline now: wake the thread
                self._cond.notify()

    def remove(self, dog: _Watchdog) -> None:
        with self._cond:
            dog.active = False
            dog.con = None  # the heap keeps no connection alive
            self._removed += 1
            if self._removed >= self.COMPACT_AT and self._removed * 2 >= len(self._heap):
                self._heap = [item for item in self._heap if item[2].active]
                heapq.heapify(self._heap)
                self._removed = 0

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and not self._heap[0][2].active:
                    heapq.heappop(self._heap)
                    self._removed = max(0, self._removed - 1)
                if not self._heap:
                    self._cond.wait()
                    continue
                when, _, dog = self._heap[0]
                now = time.monotonic()
                if when > now:
                    self._cond.wait(when - now)
                    continue
                heapq.heapreplace(self._heap, (now + INTERRUPT_REPEAT_S, next(self._order), dog))
                dog.fired = True
                try:
                    dog.con.interrupt()
                except Exception:  # a connection closed meanwhile: nothing left to stop
                    logging.getLogger(__name__).debug("watchdog: interrupt failed",
                                                      exc_info=True)


_WATCHDOGS = _Watchdogs()


class _Watchdog:
    """One query's registration with the process's watchdog (``_Watchdogs``) for the block;
    ``fired`` once it interrupted the connection."""

    def __init__(self, con: duckdb.DuckDBPyConnection, deadline: float):
        self.con = con
        self.deadline = deadline
        self.fired = False
        self.active = True

    def __enter__(self) -> _Watchdog:
        _WATCHDOGS.add(self)
        return self

    def __exit__(self, *exc) -> None:
        _WATCHDOGS.remove(self)


@contextmanager
def enforce(con: duckdb.DuckDBPyConnection, limits: QueryLimits, started: float | None = None
               ) -> Iterator[Deadline]:
    """Run the block under ``limits``: interrupt ``con`` once ``limits.timeout_s`` have passed
    since ``started`` (``time.monotonic()``, default now) and raise ``QueryLimitError``; map
    DuckDB's out-of-memory errors to the memory or spill limit. The block gets the
    ``Deadline``, to check between steps of its own work outside DuckDB."""
    started = time.monotonic() if started is None else started
    with _Watchdog(con, started + limits.timeout_s) as dog:
        try:
            yield Deadline(limits, started)
        except duckdb.OutOfMemoryException as err:
            if dog.fired:
                raise timeout_error(limits, time.monotonic() - started) from err
            raise out_of_memory_error(err, limits) from err
        except duckdb.Error as err:
            if dog.fired:  # interrupted (InterruptException, or an error raised on the way out)
                raise timeout_error(limits, time.monotonic() - started) from err
            raise
