"""A partition symlinked out of the warehouse folder is quarantined: left out of its table's
view (and of reads), reported with the reason, while the table's other partitions and the views
built on it stay queryable."""

import fcntl
import logging
import os

import pytest

from warehouse import Lineage, Warehouse
from warehouse.__main__ import main as warehouse_main
from warehouse.confine import UnsafeQueryError
from warehouse.quarantine import UnreadablePartitionError


def _rows(n, tag):
    return [{"problem_id": f"{tag}{i}", "source": "s", "split": "test", "problem": f"p{i}",
             "answer": str(i)} for i in range(n)]


@pytest.fixture
def wh(tmp_path, weft_home):
    wh = Warehouse(tmp_path / "wh")
    wh.write("problems", _rows(3, "a"), lineage=Lineage(partition="good"))
    wh.write("problems", _rows(2, "b"), lineage=Lineage(partition="also good"))
    # a partition written by another warehouse, outside this one
    elsewhere = Warehouse(tmp_path / "elsewhere")
    elsewhere.write("problems", _rows(4, "x"), lineage=Lineage(partition="foreign"))
    wh.outside = elsewhere.root / "problems" / "foreign"
    return wh


def _count(wh):
    return wh.sql("SELECT count(*) AS n FROM problems").to_pylist()[0]["n"]


def test_symlinked_out_partition_is_left_out_and_reported(wh, caplog):
    assert _count(wh) == 5
    os.symlink(wh.outside, wh.root / "problems" / "linked")
    with caplog.at_level(logging.WARNING, logger="warehouse.store"):
        assert _count(wh) == 5
    assert "linked" in caplog.text and "outside the warehouse folder" in caplog.text
    assert wh.sql("SELECT list_sort(list(DISTINCT partition)) AS p FROM problems").to_pylist() == [
        {"p": ["also good", "good"]}]
    [bad] = wh.quarantined()
    assert (bad.table, bad.partition) == ("problems", "linked")
    assert str(wh.outside.resolve()) in bad.reason
    assert wh.files("problems") == [wh.root / "problems" / d / "data.parquet"
                                    for d in ("also%20good", "good")]
    assert wh.read("problems", strict=False).num_rows == 5
    with pytest.raises(UnreadablePartitionError, match="problems/linked"):
        wh.read("problems")  # strict, as pipeline code reads
    # the confinement itself is unchanged: the file cannot be read by path
    with pytest.raises(UnsafeQueryError, match="warehouse folder"):
        wh.sql(f"SELECT count(*) FROM read_parquet('{wh.root}/problems/linked/data.parquet')")


def test_a_data_file_symlinked_out_is_quarantined_too(wh):
    folder = wh.root / "problems" / "file-link"
    folder.mkdir()
    os.symlink(wh.outside / "data.parquet", folder / "data.parquet")
    assert _count(wh) == 5
    assert [q.partition for q in wh.quarantined("problems")] == ["file-link"]


def test_symlinks_inside_the_warehouse_and_dangling_or_looping_ones_do_not_break_it(wh, tmp_path):
    os.symlink(wh.root / "problems" / "good", wh.root / "problems" / "alias")
    os.symlink(tmp_path / "nowhere", wh.root / "problems" / "dangling")
    os.symlink(wh.root / "problems" / "loop", wh.root / "problems" / "loop")
    assert _count(wh) == 8  # the alias is read like any partition inside the folder
    assert wh.quarantined() == []


def test_tables_command_lists_the_quarantined_partition(wh, capsys):
    os.symlink(wh.outside, wh.root / "problems" / "linked")
    assert warehouse_main(["--root", str(wh.root), "tables"]) == 0
    out = capsys.readouterr().out
    assert "quarantined partition" in out and "problems/linked" in out
    assert warehouse_main(["--root", str(wh.root), "sql", "--format", "json",
                           "SELECT count(*) AS n FROM problems"]) == 0
    assert '"n": 5' in capsys.readouterr().out


def test_symlink_added_while_the_catalog_cannot_be_refreshed(wh):
    assert _count(wh) == 5  # the catalog now has the problems view over a glob
    os.symlink(wh.outside, wh.root / "problems" / "linked")
    # another process refreshing the catalog holds its lock
    with open(wh.root / "catalog.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            assert not wh.refresh_catalog()
            assert _count(wh) == 5
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
