"""User SQL runs under memory, thread, spill and wall-clock limits, each configurable, each with
an error that names the limit and how to raise it.

The stopping tests run real DuckDB work that needs more than the limit allows (a cross join of
10^12 rows, a 3-million-key aggregation of strings under a 32 MiB memory cap); the same query
under roomy limits succeeds, so the error comes from the limit and not from the query.
"""

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from warehouse import Lineage, Warehouse
from warehouse.__main__ import main as warehouse_main
from warehouse.limits import (
    DEFAULT_SPILL,
    DEFAULT_TIMEOUT_S,
    GIB,
    MIB,
    QueryLimitError,
    QueryLimits,
    format_size,
    parse_size,
)

REPO = Path(__file__).resolve().parents[2]
CROSS_JOIN = "SELECT count(*) AS n FROM range(1000000) a CROSS JOIN range(1000000) b"
# about 3M distinct 32-character keys: far more than 32 MiB of hash table
BIG_AGGREGATION = ("SELECT max(c) AS c, count(*) AS n FROM (SELECT md5(range::varchar) AS k, "
                   "count(*) AS c FROM range(3000000) GROUP BY k)")
SETTINGS = ("SELECT current_setting('memory_limit') AS memory, current_setting('threads') AS "
            "threads, current_setting('max_temp_directory_size') AS spill, "
            "current_setting('temp_directory') AS spill_dir")


@pytest.fixture
def wh(tmp_path, weft_home):
    wh = Warehouse(tmp_path / "wh")
    wh.write("problems", [{"problem_id": "a", "source": "s", "split": "test", "problem": "p",
                           "answer": "1"}], lineage=Lineage(partition="p"))
    return wh


def _in_thread(fn, limit_s=120.0):
    """Run ``fn`` in a daemon thread; fail (instead of hanging) if it is not done in time."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed to the caller
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"still running after {limit_s} s: the limit did not stop it"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_wall_clock_limit_interrupts_a_cross_join_and_the_next_query_runs(wh):
    with pytest.raises(QueryLimitError) as info:
        _in_thread(lambda: wh.sql(CROSS_JOIN, limits=QueryLimits(timeout_s=1)))
    err = info.value
    assert err.limit == "time"
    text = str(err)
    assert "wall-clock limit of 1 s" in text
    assert "--timeout" in text and "WEFT_SQL_TIMEOUT_S" in text and "timeout_s" in text
    # the process and the catalog stay usable
    assert wh.sql("SELECT count(*) AS n FROM problems").to_pylist() == [{"n": 1}]


def test_sql_command_stops_a_cross_join_at_its_timeout(wh):
    # liveness is judged by a hard kill of the whole command, far above its own limit
    proc = subprocess.run(
        [sys.executable, "-m", "warehouse", "--root", str(wh.root), "sql", "--timeout", "1.5",
         CROSS_JOIN], check=False, cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 3, proc.stderr
    assert "wall-clock limit of 1.5 s" in proc.stderr and "--timeout" in proc.stderr
    assert proc.stdout == ""


class _CountingConnection:
    """Stands in for a DuckDB connection in the watchdog's unit tests: counts interrupts."""

    def __init__(self):
        self.interrupts = 0

    def interrupt(self):
        self.interrupts += 1


def test_the_watchdog_interrupts_past_the_deadline_until_removed_and_never_after():
    import time

    from warehouse.limits import INTERRUPT_REPEAT_S, _Watchdog

    late, early = _CountingConnection(), _CountingConnection()
    with _Watchdog(early, time.monotonic() + 60) as spared:
        with _Watchdog(late, time.monotonic() + 0.05) as dog:
            deadline = time.monotonic() + 30
            while late.interrupts < 3 and time.monotonic() < deadline:
                time.sleep(INTERRUPT_REPEAT_S)
            assert dog.fired and late.interrupts >= 3  # repeated while the query runs
        seen = late.interrupts
        time.sleep(10 * INTERRUPT_REPEAT_S)
        assert late.interrupts == seen  # none once the block has ended
    assert not spared.fired and early.interrupts == 0
    # a registration removed before its deadline is never interrupted
    quick = _CountingConnection()
    with _Watchdog(quick, time.monotonic() + 0.1):
        pass
    time.sleep(0.5)
    assert quick.interrupts == 0


def test_queries_share_one_watchdog_thread(wh, monkeypatch):
    """A query registers with the process's watchdog instead of starting a thread of its own
    (starting one cost a query 17 ms of waiting on a loaded machine)."""
    wh.sql("SELECT 1")
    started = []
    real_start = threading.Thread.start

    def counting_start(self):
        started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    for _ in range(20):
        assert wh.sql("SELECT count(*) AS n FROM problems").to_pylist() == [{"n": 1}]
    with pytest.raises(QueryLimitError):
        wh.sql(CROSS_JOIN, limits=QueryLimits(timeout_s=0.5))
    assert started == []
    assert [t.name for t in threading.enumerate()].count("weft-sql-watchdog") == 1


def test_a_forked_child_gets_its_own_watchdog(wh):
    """The watchdog thread does not survive a fork: the child starts its own, and its time
    limit still stops a query."""
    wh.sql("SELECT 1")  # the parent's watchdog is running
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            try:
                wh.sql(CROSS_JOIN, limits=QueryLimits(timeout_s=0.5))
            except QueryLimitError as err:
                code = 0 if err.limit == "time" else 2
        finally:
            os.write(write, b"%d" % code)
            os._exit(0)
    os.close(write)
    try:
        answer = _in_thread(lambda: os.read(read, 8), limit_s=120)
    finally:
        os.close(read)
        if os.waitpid(pid, os.WNOHANG) == (0, 0):  # a child that hangs is killed, not waited
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    assert answer == b"0"


def test_memory_limit_stops_an_aggregation_that_needs_more(wh):
    assert wh.sql(BIG_AGGREGATION, limits=QueryLimits(memory=1 * GIB)).to_pylist() == [
        {"c": 1, "n": 3000000}]
    with pytest.raises(QueryLimitError) as info:
        _in_thread(lambda: wh.sql(BIG_AGGREGATION, limits=QueryLimits(memory=32 * MIB, spill=0)))
    assert info.value.limit == "memory"
    text = str(info.value)
    assert "memory limit of 32.0 MiB" in text and "spilling to disk is off" in text
    assert "--memory-limit" in text and "WEFT_SQL_MEMORY_LIMIT" in text


def test_spill_limit_stops_a_query_that_spills_more(wh, weft_home):
    limits = QueryLimits(memory=32 * MIB, spill=16 * MIB, threads=1)
    with pytest.raises(QueryLimitError) as info:
        _in_thread(lambda: wh.sql(BIG_AGGREGATION, limits=limits))
    assert info.value.limit == "spill"
    text = str(info.value)
    assert "spill limit of 16.0 MiB" in text and "memory limit 32.0 MiB" in text
    assert "--spill-limit" in text and "WEFT_SQL_SPILL_LIMIT" in text
    assert str(weft_home / "tmp" / "sql-spill") in text
    # with room to spill, the same query under the same memory cap completes
    roomy = QueryLimits(memory=32 * MIB, spill=2 * GIB, threads=1)
    assert wh.sql(BIG_AGGREGATION, limits=roomy).to_pylist() == [{"c": 1, "n": 3000000}]


def test_limits_are_set_on_the_query_connection(wh, weft_home):
    got = wh.sql(SETTINGS, limits=QueryLimits(memory=64 * MIB, threads=1, spill=100 * MIB))
    assert got.to_pylist() == [{"memory": "64.0 MiB", "threads": 1, "spill": "100.0 MiB",
                                "spill_dir": str(weft_home / "tmp" / "sql-spill")}]
    # spilling off: no temp directory at all
    off = wh.sql(SETTINGS, limits=QueryLimits(spill=0)).to_pylist()[0]
    assert (off["spill"], off["spill_dir"]) == ("0 bytes", "")


def test_defaults_bound_every_query(wh, monkeypatch):
    for name in ("WEFT_SQL_MEMORY_LIMIT", "WEFT_SQL_THREADS", "WEFT_SQL_SPILL_LIMIT",
                 "WEFT_SQL_TIMEOUT_S", "WEFT_SQL_SPILL_DIR"):
        monkeypatch.delenv(name, raising=False)
    limits = QueryLimits()
    assert 256 * MIB <= limits.memory <= 4 * GIB
    assert 1 <= limits.threads <= min(4, len(os.sched_getaffinity(0)))
    assert (limits.spill, limits.timeout_s) == (DEFAULT_SPILL, DEFAULT_TIMEOUT_S) == (4 * GIB, 300)
    got = wh.sql(SETTINGS).to_pylist()[0]
    assert got["threads"] == limits.threads
    assert got["spill"] == "4.0 GiB"
    assert got["memory"] == format_size(limits.memory)


def test_environment_variables_and_flags_set_the_limits(wh, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("WEFT_SQL_THREADS", "1")
    monkeypatch.setenv("WEFT_SQL_MEMORY_LIMIT", "96MiB")
    monkeypatch.setenv("WEFT_SQL_SPILL_LIMIT", "0")
    assert wh.sql(SETTINGS).to_pylist()[0] == {"memory": "96.0 MiB", "threads": 1,
                                              "spill": "0 bytes", "spill_dir": ""}
    spill_dir = tmp_path / "spill-here"
    assert warehouse_main(["--root", str(wh.root), "sql", "--format", "json", "--threads", "2",
                           "--memory-limit", "128MB", "--spill-limit", "1GiB",
                           "--spill-dir", str(spill_dir), SETTINGS]) == 0
    out = capsys.readouterr().out
    assert '"threads": 2' in out and '"memory": "122.0 MiB"' in out
    assert '"spill": "1.0 GiB"' in out and str(spill_dir) in out
    monkeypatch.setenv("WEFT_SQL_TIMEOUT_S", "soon")
    with pytest.raises(SystemExit):
        warehouse_main(["--root", str(wh.root), "sql", "SELECT 1"])
    assert "WEFT_SQL_TIMEOUT_S must be a number of seconds" in capsys.readouterr().err


def test_a_query_with_other_limits_while_the_catalog_is_open_gets_its_own(wh):
    # connections to one catalog share a DuckDB instance whose (locked) settings are global
    with wh.connect(QueryLimits(threads=2, memory=256 * MIB)) as held:
        assert held.execute("SELECT current_setting('threads')").fetchall() == [(2,)]
        got = wh.sql(SETTINGS, limits=QueryLimits(threads=1, memory=64 * MIB)).to_pylist()[0]
        assert (got["threads"], got["memory"]) == (1, "64.0 MiB")
        assert held.execute("SELECT current_setting('threads')").fetchall() == [(2,)]


@pytest.mark.parametrize("text, expected", [
    ("0", 0), ("1024", 1024), ("512MB", 512 * 10**6), ("4GB", 4 * 10**9), ("4GiB", 4 * GIB),
    ("1.5 GiB", int(1.5 * GIB)), ("32mib", 32 * MIB), (2048, 2048),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


def test_limits_take_sizes_as_text():
    assert (QueryLimits(memory="64MiB", spill="1GB").memory, QueryLimits(spill="1GB").spill) == (
        64 * MIB, 10**9)


@pytest.mark.parametrize("bad", ["", "lots", "4 parsecs", "-1GB", "GB"])
def test_parse_size_rejects_what_is_not_a_size(bad):
    with pytest.raises(ValueError, match="size|negative"):
        parse_size(bad)


@pytest.mark.parametrize("kwargs, message", [
    ({"memory": 10}, "memory limit must be at least 1MiB"),
    ({"threads": 0}, "threads must be"),
    ({"spill": -1}, "spill limit must be 0"),
    ({"timeout_s": 0}, "timeout must be more than 0"),
])
def test_bad_limits_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        QueryLimits(**kwargs)
