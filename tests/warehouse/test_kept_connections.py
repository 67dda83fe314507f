"""``Warehouse.sql`` keeps its confined connection for the next query of the same thread: every
query still sees the folder as it is, under the limits it asks for, refused or quarantined as a
fresh connection would have it. Real DuckDB, real files."""

from __future__ import annotations

import os
import pickle
import shutil
import threading

import duckdb
import pytest

from warehouse import Lineage, Warehouse
from warehouse.confine import UnsafeQueryError
from warehouse.limits import QueryLimits
from warehouse.quarantine import UnreadablePartitionError


def _rows(n, tag="a"):
    return [{"problem_id": f"{tag}{i}", "source": "s", "split": "test", "problem": f"p{i}",
             "answer": str(i), "solution": "", "answer_type": "math", "meta": "{}"}
            for i in range(n)]


def _count(wh: Warehouse) -> int:
    return wh.sql("SELECT count(*) AS n FROM problems").to_pylist()[0]["n"]


@pytest.fixture
def wh(tmp_path):
    w = Warehouse(tmp_path / "wh")
    w.write("problems", _rows(3), lineage=Lineage(partition="gsm8k"))
    yield w
    w.close()


def _kept(wh: Warehouse) -> list:
    return [entry.con for entry in wh._idle.values()]


def test_a_second_query_reuses_the_connection_and_sees_a_partition_written_between(wh):
    assert _count(wh) == 3
    [first] = _kept(wh)
    assert _count(wh) == 3
    assert _kept(wh) == [first]  # the same connection, not a new one
    wh.write("problems", _rows(2, "b"), lineage=Lineage(partition="math"))
    assert _count(wh) == 5  # the folder changed: a connection whose views see the new file
    assert _kept(wh) != [first]
    wh.delete_partition("problems", "gsm8k")
    assert _count(wh) == 2


def test_a_query_with_other_limits_gets_a_connection_with_those_settings(wh):
    two = QueryLimits(threads=2, memory="256MB")
    one = QueryLimits(threads=1, memory="128MB")
    ask = "SELECT current_setting('threads') AS t, current_setting('memory_limit') AS m"
    assert wh.sql(ask, limits=two).to_pylist()[0]["t"] == 2
    got = wh.sql(ask, limits=one).to_pylist()[0]
    assert got["t"] == 1 and got["m"].startswith("122")  # 128 MB in DuckDB's MiB units
    assert wh.sql(ask, limits=two).to_pylist()[0]["t"] == 2


def test_refusals_and_errors_on_a_kept_connection_are_as_on_a_fresh_one(wh, tmp_path):
    assert _count(wh) == 3
    with pytest.raises(UnsafeQueryError):
        wh.sql("CREATE TEMP TABLE t AS SELECT 1 AS x")
    with pytest.raises(UnsafeQueryError):
        wh.sql("SET threads = 64")
    outside = tmp_path / "outside.csv"
    outside.write_text("a\n1\n")
    with pytest.raises(UnsafeQueryError):
        wh.sql(f"SELECT * FROM read_csv('{outside}')")
    with pytest.raises(duckdb.Error):
        wh.sql("SELECT no_such_column FROM problems")
    assert _count(wh) == 3  # a failed query leaves no connection behind that breaks the next
    assert wh.sql("SELECT current_setting('lock_configuration') AS c").to_pylist()[0]["c"]


def test_the_wall_clock_limit_applies_to_every_query_on_a_kept_connection(wh):
    from warehouse.limits import QueryLimitError

    assert _count(wh) == 3
    slow = "SELECT count(*) FROM range(100000000) a, range(100000000) b"
    with pytest.raises(QueryLimitError):
        wh.sql(slow, limits=QueryLimits(timeout_s=0.5))
    assert _count(wh) == 3


def test_a_partition_quarantined_after_the_first_query_is_noticed_by_the_next(wh, caplog):
    wh.write("problems", _rows(2, "b"), lineage=Lineage(partition="math"))
    assert _count(wh) == 5
    [bad] = [p for p in wh.files("problems") if "math" in str(p)]
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(UnreadablePartitionError, match="math"):
        wh.sql("SELECT count(*) FROM problems", strict=True)
    with caplog.at_level("WARNING", logger="warehouse"):
        assert _count(wh) == 3
        assert _count(wh) == 3  # the kept connection still warns, query after query
    assert sum("left out of the problems view" in r.getMessage() for r in caplog.records) == 2


def test_threads_get_connections_of_their_own(wh):
    results, errors = [], []

    def work():
        try:
            for _ in range(5):
                results.append(_count(wh))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == [3] * 15
    assert 1 <= len(_kept(wh)) <= 3


def test_close_frees_the_kept_connections_and_the_warehouse_stays_usable(wh):
    assert _count(wh) == 3
    [con] = _kept(wh)
    wh.close()
    assert _kept(wh) == []
    with pytest.raises(duckdb.ConnectionException):
        con.execute("SELECT 1")
    assert _count(wh) == 3
    with Warehouse(wh.root) as other:
        assert _count(other) == 3
        [kept] = _kept(other)
    with pytest.raises(duckdb.ConnectionException):
        kept.execute("SELECT 1")


def test_a_pickled_warehouse_queries_without_its_kept_connections(wh):
    assert _count(wh) == 3
    copy = pickle.loads(pickle.dumps(wh))
    assert _kept(copy) == [] and copy.root == wh.root
    assert _count(copy) == 3


def test_a_kept_connection_caches_footers_yet_sees_a_file_replaced_under_its_old_mtime(wh, tmp_path):
    """Kept connections cache Parquet footers, which DuckDB reuses while a file looks
    unchanged to it. A writer that replaces a partition file and sets the old mtime back is
    still seen: the folder's file versions (inode, ctime) changed, so the next query gets a
    connection of its own, and DuckDB checks a cached footer against the file besides."""
    [path] = wh.files("problems")
    old = path.stat().st_mtime_ns - 3600 * 10**9  # an hour old: DuckDB trusts its footer cache
    os.utime(path, ns=(old, old))
    setting = "SELECT current_setting('parquet_metadata_cache') AS c"
    assert wh.sql(setting).to_pylist()[0]["c"] is True
    assert _count(wh) == 3
    assert _count(wh) == 3  # this one read the footer from the cache
    with Warehouse(tmp_path / "other") as other:
        other.write("problems", _rows(5, "b"), lineage=Lineage(partition="gsm8k"))
        [new] = other.files("problems")
        staged = path.with_name(".replacement.parquet")
        shutil.copyfile(new, staged)
    os.utime(staged, ns=(old, old))
    os.replace(staged, path)
    assert path.stat().st_mtime_ns == old
    assert _count(wh) == 5
    assert sorted(r["problem_id"] for r in wh.sql("SELECT problem_id FROM problems").to_pylist()) \
        == [f"b{i}" for i in range(5)]
