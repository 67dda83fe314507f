"""How queries use the catalog file: read-only (other processes' read-only DuckDB clients open it
at the same time), rebuilt only when the warehouse folder changed, written as a new file moved
into place, never needed for a read when the disk is full, and rebuilt from the Parquet files
when it is damaged. Real DuckDB, real files and processes; a real full disk on a small tmpfs
(skipped where it cannot be mounted)."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from warehouse import Lineage, Warehouse
from warehouse.__main__ import main as warehouse_main
from warehouse.files import DATA_FILE


def _problems(n: int, tag: str) -> list[dict]:
    return [{"problem_id": f"{tag}-{i}", "source": tag, "split": "test", "problem": f"p{i}",
             "answer": str(i)} for i in range(n)]


def _count(wh: Warehouse, table: str = "problems") -> int:
    return wh.sql(f"SELECT count(*) AS n FROM {table}").to_pylist()[0]["n"]


# ---- read-only access ---------------------------------------------------------------------

_CLIENT = textwrap.dedent("""
    import sys, time, duckdb
    catalog, seconds = sys.argv[1], float(sys.argv[2])
    ok = failed = 0
    errors = set()
    end = time.monotonic() + seconds
    print("ready", flush=True)
    while time.monotonic() < end:
        try:
            con = duckdb.connect(catalog, read_only=True)
            con.execute("SELECT count(*) FROM duckdb_views()").fetchall()
            con.close()
            ok += 1
        except duckdb.Error as err:
            failed += 1
            errors.add(str(err)[:120])
        time.sleep(0.005)
    print(ok, failed, sorted(errors), flush=True)
""")


def test_a_read_only_client_opens_the_catalog_while_weft_queries_and_writes(tmp_path, weft_home):
    wh = Warehouse(tmp_path / "wh")
    wh.write("problems", _problems(5, "a"), partition="a")
    assert _count(wh) == 5  # the catalog exists
    client = subprocess.Popen([sys.executable, "-c", _CLIENT, str(wh.catalog_path), "6"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "ready"
        queries = 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if queries % 10 == 9:  # a write: the next query rebuilds the catalog
                wh.write("problems", _problems(5, f"w{queries}"), partition=f"w{queries}")
            assert _count(wh) >= 5
            queries += 1
        out, _ = client.communicate(timeout=30)
    finally:
        client.kill()
    ok, failed, errors = out.split(" ", 2)
    print(f"read-only client: {ok} opens succeeded, {failed} failed while weft ran {queries} "
          f"queries ({queries // 10} writes)")
    # weft never opens the catalog file for writing (it writes a new file and moves it into
    # place), so no open of a read-only client can meet a lock
    assert int(ok) >= 10 and int(failed) == 0, errors  # (a loaded machine opens slowly)
    assert queries >= 10


def _no_views_key(*_args):
    raise AssertionError("the views key was computed again")


def test_the_catalog_is_rebuilt_only_when_its_views_would_change(tmp_path, weft_home):
    wh = Warehouse(tmp_path / "wh")
    wh.write("problems", _problems(3, "a"), partition="a")
    _count(wh)
    first = wh.catalog_path.stat()
    for _ in range(3):
        assert _count(wh) == 3
    again = wh.catalog_path.stat()
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    assert wh.catalog_status()[0] == "current"
    # a partition with the columns the table's files already have: the view reads the
    # table's files by glob and would come out the same, so the file is kept, in this
    # process and in a fresh one
    wh.write("problems", _problems(2, "b"), partition="b")
    assert wh.catalog_status()[0] == "current"
    assert _count(wh) == 5
    kept = wh.catalog_path.stat()
    assert (kept.st_ino, kept.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    # the first query that found so recorded it: another process reads no footer for it
    other = Warehouse(wh.root)
    other._views_key = _no_views_key  # it must not be needed
    assert other.catalog_status()[0] == "current"
    assert _count(other) == 5
    # a new table changes the views: rebuilt
    wh.write("eval_samples", [{"model": "m", "benchmark": "b", "problem_id": "p",
                               "sample_index": 0, "correct": True}], partition="b|m")
    assert wh.catalog_status()[0] == "stale"
    assert _count(wh, "eval_samples") == 1
    assert wh.catalog_path.stat().st_ino != first.st_ino
    # the last partition of a table removed: its view changes too
    rebuilt = wh.catalog_path.stat().st_ino
    wh.delete_partition("eval_samples", "b|m")
    assert wh.catalog_status()[0] == "stale"
    assert _count(wh, "eval_samples") == 0
    assert wh.catalog_path.stat().st_ino != rebuilt
    assert sorted(os.listdir(wh.root)) == ["catalog.duckdb", "catalog.equivalent",
                                           "catalog.lock", "eval_samples", "problems"]


# ---- a damaged catalog ------------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_damaged_catalog_is_rebuilt_from_the_parquet_files(tmp_path, weft_home, caplog, damage):
    wh = Warehouse(tmp_path / "wh")
    wh.write("problems", _problems(3, "a"), partition="a")
    assert _count(wh) == 3
    data = wh.catalog_path.read_bytes()
    wh.catalog_path.write_bytes({"garbage": os.urandom(len(data)), "truncated": data[:4096],
                                 "empty": b""}[damage])
    with caplog.at_level(logging.INFO, logger="warehouse.store"):
        assert _count(wh) == 3
    assert "is damaged" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="warehouse.store"):
        assert _count(wh) == 3
    assert "in memory" not in caplog.text  # the rebuilt file serves the queries again
    assert wh.catalog_status()[0] == "current"
    con = duckdb.connect(str(wh.catalog_path), read_only=True)  # a plain client opens it
    try:
        con.execute(f"SET file_search_path = '{wh.root}'")
        assert con.execute("SELECT count(*) FROM problems").fetchone()[0] == 3
    finally:
        con.close()
    assert [p.name for p in wh.root.glob("catalog.duckdb.corrupt-*")]  # kept for inspection


def test_a_catalog_locked_by_another_process_is_not_taken_for_damaged(tmp_path, weft_home):
    wh = Warehouse(tmp_path / "wh")
    wh.write("problems", _problems(3, "a"), partition="a")
    _count(wh)
    wh.close()  # the connection sql keeps holds the file read-only; a writer needs it alone
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                                "print('held', flush=True); time.sleep(30)"), str(wh.catalog_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        wh.write("problems", _problems(2, "b"), partition="b")  # read by the views as they are
        wh.write("eval_samples", [{"model": "m", "benchmark": "b", "problem_id": "p",
                                   "sample_index": 0, "correct": True}],
                 partition="b|m")  # a new table: stale, weft wants to rebuild
        assert _count(wh) == 5 and _count(wh, "eval_samples") == 1  # in memory meanwhile
        assert wh.catalog_status()[0] == "busy"
        assert not list(wh.root.glob("catalog.duckdb.corrupt-*"))
    finally:
        holder.kill()
        holder.wait()


# ---- a full disk ------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 16 MB tmpfs (root only; skipped where it cannot be mounted)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                          check=False, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)


def _fill(disk: Path) -> None:
    """Fill ``disk`` to the last byte (unbuffered writes, 1 MiB then 4 KiB at a time)."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as err:
                assert err.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_reads_need_no_write_on_a_full_disk(small_disk, monkeypatch, caplog, capsys):
    home = small_disk / "home"
    monkeypatch.setenv("WEFT_HOME", str(home))
    wh = Warehouse(home / "warehouse")
    wh.write("problems", _problems(20, "a"), partition="a")
    wh.write("eval_samples", [{"model": "m", "benchmark": "b", "problem_id": "p",
                               "sample_index": 0, "correct": True}], partition="b|m")
    assert _count(wh) == 20
    _fill(small_disk)
    # nothing changed: the catalog is current and read as it is
    assert _count(wh) == 20
    assert wh.read("problems").num_rows == 20
    # a file touched: the views would come out the same, nothing needs writing
    os.utime(wh.root / "problems" / "a" / "data.parquet")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert _count(wh) == 20
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    # a change of the views (the eval_samples partition moved away): the catalog cannot be
    # rewritten, the views are built in memory for the query
    (sample,) = (wh.root / "eval_samples").glob(f"*/{DATA_FILE}")
    os.rename(sample, small_disk / "moved.parquet")
    with caplog.at_level(logging.WARNING):
        assert _count(wh) == 20
        assert _count(wh, "eval_samples") == 0
    assert "No space left on device" in caplog.text
    os.rename(small_disk / "moved.parquet", sample)  # back: the stored views fit again
    assert _count(wh, "eval_samples") == 1
    assert warehouse_main(["--root", str(wh.root), "sql", "--format", "csv",
                           "SELECT count(*) AS n FROM problems"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "20"
    assert Warehouse(wh.root).read("eval_samples").num_rows == 1
    # a write fails and leaves no empty partition folder behind
    with pytest.raises(OSError) as err:
        wh.write("problems", _problems(2000, "x" * 200), partition="new")
    assert err.value.errno == errno.ENOSPC
    assert not (wh.root / "problems" / "new").exists()
    assert not [p for p in wh.root.glob(".catalog.duckdb.*")]
    # space again: the next query rebuilds the catalog file
    (small_disk / "filler").unlink()
    assert _count(wh) == 20 and wh.catalog_status()[0] == "current"


def test_a_catalog_that_cannot_be_written_leaves_queries_working(tmp_path, weft_home,
                                                                 monkeypatch, caplog):
    wh = Warehouse(tmp_path / "wh")
    wh.write("problems", _problems(3, "a"), lineage=Lineage(partition="a"))
    real_replace = os.replace

    def full(src, dst, *args, **kwargs):
        if os.fspath(dst) == str(wh.catalog_path):
            raise OSError(errno.ENOSPC, "No space left on device", os.fspath(dst))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full)
    with caplog.at_level(logging.WARNING, logger="warehouse.store"):
        assert _count(wh) == 3
    assert "No space left on device" in caplog.text and "in memory" in caplog.text
    assert not wh.catalog_path.exists()
    assert not [p for p in wh.root.glob(".catalog.duckdb.*")]
