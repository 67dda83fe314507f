"""Temp files of killed writers are removed by the next write; live writers' are kept
Writers here are real processes, stopped in the middle of a write."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from warehouse import Lineage, Warehouse
from warehouse.files import STALE_TEMP_AGE_S, host_tag

REPO = Path(__file__).resolve().parents[2]

# A writer that stops after its temp file is complete and before it is moved into place,
# prints the temp path, and finishes when told to on stdin.
_PAUSED_WRITER = """
import sys
import pyarrow.parquet as pq
from warehouse import Lineage, Warehouse
real_write = pq.write_table
def paused(table, where, **kw):
    real_write(table, where, **kw)
    print(where, flush=True)
    sys.stdin.readline()
pq.write_table = paused
rows = [{"problem_id": f"child{i}", "answer": str(i)} for i in range(int(sys.argv[2]))]
Warehouse(sys.argv[1]).write("problems", rows, lineage=Lineage(partition="p"))
print("done", flush=True)
"""


def _rows(n, tag):
    return [{"problem_id": f"{tag}{i}", "answer": str(i)} for i in range(n)]


def _start_paused_writer(root: Path, n: int) -> tuple[subprocess.Popen, Path]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", _PAUSED_WRITER, str(root), str(n)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        raise AssertionError(f"writer did not start: {proc.stderr.read()}")
    return proc, Path(line)


def _ids(path: Path) -> list[str]:
    return sorted(pq.read_table(path).column("problem_id").to_pylist())


def test_killed_writers_temp_file_is_removed_by_the_next_write(tmp_path):
    wh = Warehouse(tmp_path)
    wh.write("problems", _rows(2, "old"), lineage=Lineage(partition="p"))
    proc, tmp = _start_paused_writer(tmp_path, 5)
    proc.kill()
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    assert tmp.exists() and tmp.parent == tmp_path / "problems" / "p"
    # the killed write never replaced the partition
    assert _ids(tmp_path / "problems" / "p" / "data.parquet") == ["old0", "old1"]
    # the next write, to another partition of the table, removes the orphan at once
    wh.write("problems", _rows(1, "new"), lineage=Lineage(partition="q"))
    assert not tmp.exists()
    assert sorted(p.name for p in (tmp_path / "problems" / "p").iterdir()) == ["data.parquet"]


def test_a_concurrent_writers_live_temp_file_is_kept(tmp_path):
    wh = Warehouse(tmp_path)
    proc, tmp = _start_paused_writer(tmp_path, 5)
    try:
        # other writes to the same table, the same partition included, run meanwhile
        wh.write("problems", _rows(1, "other"), lineage=Lineage(partition="q"))
        wh.write("problems", _rows(2, "same"), lineage=Lineage(partition="p"))
        assert tmp.exists()
        out, err = proc.communicate("go\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out.strip() == "done"
    # the paused writer finished last, so its rows are the partition's
    assert _ids(tmp_path / "problems" / "p" / "data.parquet") == [f"child{i}" for i in range(5)]
    assert not list((tmp_path / "problems").glob("*/.data.parquet.*.tmp"))


def _touch(path: Path, age_s: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"partial")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("name, age_s, removed", [
    # no PID in the name (written by an older version): judged by age only
    (".data.parquet.0123456789abcdef.tmp", 60.0, False),
    (".data.parquet.0123456789abcdef.tmp", STALE_TEMP_AGE_S + 60, True),
    # this (live) process: kept while young, removed once older than the safe age
    (".data.parquet.{me}.{host}.abc.tmp", 60.0, False),
    (".data.parquet.{me}.{host}.abc.tmp", STALE_TEMP_AGE_S + 60, True),
    # a PID that has exited: removed however young
    (".data.parquet.{dead}.{host}.abc.tmp", 0.0, True),
    # the same PID from another host or PID namespace means nothing here: age only
    (".data.parquet.{dead}.ffffffff.abc.tmp", 60.0, False),
    (".data.parquet.{dead}.ffffffff.abc.tmp", STALE_TEMP_AGE_S + 60, True),
    # not a temp file of ours
    ("notes.tmp", STALE_TEMP_AGE_S + 60, False),
    ("data.parquet", STALE_TEMP_AGE_S + 60, False),
])
def test_staleness_rules(tmp_path, name, age_s, removed):
    assert host_tag() != "ffffffff"
    name = name.format(me=os.getpid(), dead=_dead_pid(), host=host_tag())
    path = _touch(tmp_path / "problems" / "old" / name, age_s)
    wh = Warehouse(tmp_path)
    wh.write("problems", _rows(1, "x"), lineage=Lineage(partition="new"))
    assert path.exists() is not removed


def test_only_the_written_table_is_cleaned(tmp_path):
    other = _touch(tmp_path / "traces" / "p" / ".data.parquet.1.x.y.tmp", STALE_TEMP_AGE_S + 60)
    Warehouse(tmp_path).write("problems", _rows(1, "x"), lineage=Lineage(partition="p"))
    assert other.exists()
    Warehouse(tmp_path).write("traces", [{"trace_id": "t"}], lineage=Lineage(partition="q"))
    assert not other.exists()


def test_host_tag_names_the_host_and_pid_namespace():
    """The tag is the one earlier writers put in their temp names (host name as
    ``socket.gethostname`` gives it, and this PID namespace), so their files stay judged by
    PID on this host."""
    import hashlib
    import socket

    namespace = os.readlink("/proc/self/ns/pid")
    want = hashlib.sha256(f"{socket.gethostname()}|{namespace}".encode()).hexdigest()[:8]
    assert host_tag() == want
