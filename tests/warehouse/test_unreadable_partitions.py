"""A partition file that cannot be read (truncated, not Parquet, empty, unreadable, a stray file
at the warehouse root) is quarantined: left out of its table's view with a warning naming the
file and the fix, while every other table and partition stays readable. Strict reads (the
default of ``Warehouse.read``, for pipeline code) raise instead of returning less; ``python -m
warehouse doctor`` lists what is quarantined and exits 1. Real DuckDB, real files."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from warehouse import Lineage, Warehouse
from warehouse import files as files_module
from warehouse import quarantine as quarantine_module
from warehouse.__main__ import main as warehouse_main
from warehouse.files import check_data_file
from warehouse.quarantine import UnreadablePartitionError


def _problems(n: int, tag: str) -> list[dict]:
    return [{"problem_id": f"{tag}-{i}", "source": tag, "split": "test", "problem": f"p{i}",
             "answer": str(i)} for i in range(n)]


@pytest.fixture
def wh(tmp_path, weft_home) -> Warehouse:
    wh = Warehouse(tmp_path / "wh")
    wh.write("source_problems", _problems(30, "aime24"), lineage=Lineage(partition="aime24"))
    wh.write("source_problems", _problems(30, "aime25"), lineage=Lineage(partition="aime25"))
    wh.write("problems", _problems(30, "aime25"), lineage=Lineage(partition="aime25"))
    wh.write("eval_samples", [{"model": "m", "benchmark": "b", "problem_id": "p", "sample_index": 0,
                               "correct": True}] * 4, partition="b|m")
    assert wh.sql("SELECT count(*) AS n FROM source_problems").to_pylist() == [{"n": 60}]
    return wh


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _text(path):
    path.write_text("this is not a parquet file\n")


def _empty(path):
    path.write_bytes(b"")


def _count(wh: Warehouse, table: str) -> int:
    return wh.sql(f"SELECT count(*) AS n FROM {table}").to_pylist()[0]["n"]


@pytest.mark.parametrize("damage", [_truncate, _text, _empty], ids=["truncated", "text", "empty"])
def test_a_bad_partition_file_is_left_out_and_everything_else_stays_readable(wh, damage, caplog,
                                                                             capsys):
    bad = wh.root / "source_problems" / "aime24" / "data.parquet"
    damage(bad)
    with caplog.at_level(logging.WARNING, logger="warehouse.store"):
        assert _count(wh, "eval_samples") == 4  # another table: no warning about it
        assert "aime24" not in caplog.text
        assert _count(wh, "source_problems") == 30  # the readable rest, with a warning
    assert str(bad) in caplog.text and "re-materialize the partition" in caplog.text
    assert wh.read("problems").num_rows == 30
    assert [q.partition for q in wh.quarantined()] == ["aime24"]
    assert warehouse_main(["--root", str(wh.root), "tables"]) == 0
    assert "source_problems/aime24" in capsys.readouterr().out


def test_a_stray_file_at_the_warehouse_root_breaks_nothing(wh):
    stray = wh.root / "scratch" / "x" / "data.parquet"
    stray.parent.mkdir(parents=True)
    stray.write_text("notes\n")
    assert _count(wh, "source_problems") == 60
    assert wh.read("problems").num_rows == 30
    [bad] = wh.quarantined()
    assert (bad.table, bad.partition, bad.path) == ("scratch", "x", stray)


def test_strict_reads_raise_naming_the_file_and_non_strict_ones_read_the_rest(wh, caplog):
    bad = wh.root / "source_problems" / "aime24" / "data.parquet"
    _truncate(bad)
    with pytest.raises(UnreadablePartitionError) as err:
        wh.read("source_problems")
    message = str(err.value)
    assert str(bad) in message and "no magic bytes at its end" in message
    assert "re-materialize the partition" in message and "strict=False" in message
    with pytest.raises(UnreadablePartitionError):
        wh.read("source_problems", partition="aime24")
    assert wh.read("source_problems", partition="aime25").num_rows == 30  # a good one: fine
    with caplog.at_level(logging.WARNING, logger="warehouse.store"):
        assert wh.read("source_problems", strict=False).num_rows == 30
    assert str(bad) in caplog.text
    # SQL: interactive queries get the rest; pipeline SQL asks for strict
    assert _count(wh, "source_problems") == 30
    with pytest.raises(UnreadablePartitionError, match="aime24"):
        wh.sql("SELECT count(*) FROM source_problems", strict=True)
    assert wh.sql("SELECT count(*) AS n FROM eval_samples", strict=True).to_pylist() == [{"n": 4}]
    # a warehouse for pipeline code: strict by default, through the view files too
    pipeline = Warehouse(wh.root, strict_sql=True)
    with pytest.raises(UnreadablePartitionError, match="aime24"):
        pipeline.sql("WITH s AS (SELECT * FROM source_problems) SELECT count(*) FROM s")
    assert pipeline.sql("SELECT count(*) AS n FROM leaderboard").num_rows == 1


def test_an_unreadable_file_and_an_unlistable_folder_are_quarantined(wh, monkeypatch):
    # root reads every file whatever its mode, so the denial the kernel gives other users is
    # simulated where weft meets it: opening the file, and looking inside the folder
    denied_file = wh.root / "source_problems" / "aime24" / "data.parquet"
    denied_folder = wh.root / "problems" / "aime25"
    real_open, real_lstat = open, os.lstat

    def fake_open(path, *args, **kwargs):
        if os.fspath(path) == str(denied_file):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    def fake_lstat(path, *args, **kwargs):
        if os.path.dirname(os.fspath(path)) == str(denied_folder):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_lstat(path, *args, **kwargs)

    os.utime(denied_file)  # a new file version: checked again
    monkeypatch.setattr(files_module, "open", fake_open, raising=False)
    monkeypatch.setattr(quarantine_module.os, "lstat", fake_lstat)
    reasons = {(q.table, q.partition): q.reason for q in wh.quarantined()}
    assert reasons.keys() == {("source_problems", "aime24"), ("problems", "aime25")}
    assert "Permission denied" in reasons[("source_problems", "aime24")]
    assert "cannot be read" in reasons[("problems", "aime25")]
    with pytest.raises(UnreadablePartitionError, match="Permission denied"):
        wh.read("problems")
    assert _count(wh, "source_problems") == 30
    assert _count(wh, "eval_samples") == 4


def test_doctor_lists_quarantined_partitions_and_exits_1(wh, capsys):
    assert warehouse_main(["--root", str(wh.root), "doctor"]) == 0
    assert "quarantined partitions" in capsys.readouterr().out
    bad = wh.root / "source_problems" / "aime24" / "data.parquet"
    _text(bad)
    assert warehouse_main(["--root", str(wh.root), "doctor"]) == 1
    out = capsys.readouterr().out
    assert str(bad) in out and "does not start with the Parquet magic bytes" in out
    assert "re-materialize the partition" in out


def test_a_file_is_checked_once_per_version_and_only_its_ends_are_read(wh, monkeypatch):
    # a partition of a few MB (random text does not compress)
    big = [{"problem_id": f"b{i}", "problem": os.urandom(2000).hex()} for i in range(1000)]
    path = wh.write("problems", big, partition="big").path
    assert path.stat().st_size > 2_000_000
    reads: list[int] = []
    real_open = open

    class Counting:
        def __init__(self, fh):
            self.fh = fh

        def read(self, n=-1):
            data = self.fh.read(n)
            reads.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    def counting_open(p, *args, **kwargs):
        return Counting(real_open(p, *args, **kwargs))

    monkeypatch.setattr(files_module, "open", counting_open, raising=False)
    os.utime(path)  # a new version
    assert check_data_file(path) is None
    first = len(reads)
    assert first >= 1 and sum(reads) < 200_000  # the ends and the footer, not the data
    for _ in range(3):
        assert check_data_file(path) is None
        _count(wh, "source_problems")
    assert len(reads) == first  # remembered: not opened again


def test_reads_of_other_tables_work_when_the_catalog_cannot_describe_a_file(wh):
    # a read refreshes the catalog first: it must not fail because a file of another table
    # cannot be read
    _truncate(wh.root / "source_problems" / "aime24" / "data.parquet")
    fresh = Warehouse(wh.root)
    assert fresh.read("problems").num_rows == 30
    assert fresh.refresh_catalog()
    assert _count(fresh, "problems") == 30
