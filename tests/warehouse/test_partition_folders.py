"""Partition folders never stay empty: a write stopped by a full disk removes the folder it
created, a writer killed before its first file (or whose temp file was removed as stale) leaves
a folder the next write to the table removes, and deleting a partition removes its folder.
Writers here are real processes killed with SIGKILL; the full disk is simulated where the
writer meets it (the Parquet write)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from warehouse import Lineage, Warehouse
from warehouse.files import EMPTY_FOLDER_AGE_S, host_tag

REPO = Path(__file__).resolve().parents[2]

# A writer killed after creating its partition folder, before its temp file exists.
_KILLED_AFTER_MKDIR = """
import os, signal, sys
import pyarrow.parquet as pq
from warehouse import Lineage, Warehouse
def killed(table, where, **kw):
    os.kill(os.getpid(), signal.SIGKILL)
pq.write_table = killed
Warehouse(sys.argv[1]).write("problems", [{"problem_id": "x"}], lineage=Lineage(partition="k"))
"""


def _rows(n, tag):
    return [{"problem_id": f"{tag}{i}", "answer": str(i)} for i in range(n)]


def test_a_write_stopped_by_a_full_disk_leaves_no_empty_folder(tmp_path, monkeypatch):
    wh = Warehouse(tmp_path)
    wh.write("problems", _rows(2, "a"), lineage=Lineage(partition="a"))

    def full(table, where, **kwargs):
        with open(where, "wb") as fh:
            fh.write(b"PAR1")
        raise OSError(errno.ENOSPC, "No space left on device", str(where))

    monkeypatch.setattr(pq, "write_table", full)
    with pytest.raises(OSError, match="No space left"):
        wh.write("problems", _rows(2, "b"), lineage=Lineage(partition="new"))
    assert sorted(p.name for p in (tmp_path / "problems").iterdir()) == ["a"]
    # an existing partition keeps its folder and its file
    with pytest.raises(OSError, match="No space left"):
        wh.write("problems", _rows(2, "c"), lineage=Lineage(partition="a"))
    assert sorted(p.name for p in (tmp_path / "problems" / "a").iterdir()) == ["data.parquet"]


def test_folders_of_killed_writers_are_removed_by_the_next_write(tmp_path):
    wh = Warehouse(tmp_path)
    proc = subprocess.run([sys.executable, "-c", _KILLED_AFTER_MKDIR, str(tmp_path)],
                          check=False, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == -9
    left = tmp_path / "problems" / "k"
    assert left.is_dir() and not any(left.iterdir())
    # a writer may be about to write into a folder this young: it stays for now
    wh.write("problems", _rows(1, "a"), lineage=Lineage(partition="a"))
    assert left.is_dir()
    old = time.time() - EMPTY_FOLDER_AGE_S - 1
    os.utime(left, (old, old))
    wh.write("problems", _rows(1, "a"), lineage=Lineage(partition="a"))
    assert not left.exists()
    assert wh.partitions("problems") == ["a"]


def test_a_folder_emptied_of_a_stale_temp_file_goes_at_once(tmp_path):
    wh = Warehouse(tmp_path)
    folder = tmp_path / "problems" / "k"
    folder.mkdir(parents=True)
    # a temp file named after a writer PID that does not run here
    (folder / f".data.parquet.999999999.{host_tag()}.0a.tmp").write_bytes(b"x")
    wh.write("problems", _rows(1, "a"), lineage=Lineage(partition="a"))
    assert not folder.exists()


def test_deleting_a_partition_removes_its_folder(tmp_path):
    wh = Warehouse(tmp_path)
    wh.write("problems", _rows(1, "a"), lineage=Lineage(partition="a"))
    assert wh.delete_partition("problems", "a")
    assert not (tmp_path / "problems" / "a").exists()


def test_a_writer_whose_new_folder_was_just_removed_creates_it_again(tmp_path, monkeypatch):
    wh = Warehouse(tmp_path)
    real = pq.write_table
    calls = []

    def folder_gone_once(table, where, **kwargs):
        if not calls:
            calls.append(where)
            Path(where).parent.rmdir()  # a cleanup removed it between mkdir and this write
        return real(table, where, **kwargs)

    monkeypatch.setattr(pq, "write_table", folder_gone_once)
    wh.write("problems", _rows(2, "a"), lineage=Lineage(partition="a"))
    assert wh.read("problems").num_rows == 2
