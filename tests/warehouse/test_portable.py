"""The catalog file opens in older DuckDB clients (its storage format is v1.1.0's, checked in the
file header and, in the slow test, with a real DuckDB 1.1 client installed from the package
index), a catalog in DuckDB 2.0's format is rebuilt keeping its migration record, and a copied
warehouse reads its own Parquet files, through weft and through a plain DuckDB connection
opened from another working directory."""

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from warehouse import Lineage, Warehouse
from warehouse.confine import UnsafeQueryError

# DuckDB's main file header: 8 checksum bytes, the magic "DUCK", then the storage version number
# as a little-endian uint64. 64 is the number DuckDB 0.10 to 1.1 write and every later release
# reads; DuckDB 2.0's own format carries 999 there (its real version is stored elsewhere).
OLD_READABLE_STORAGE_NUMBER = 64
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def _header(path: Path) -> tuple[bytes, int]:
    head = path.read_bytes()[:20]
    return head[8:12], int.from_bytes(head[12:20], "little")


def _problems(ids: list[str]) -> list[dict]:
    return [{"problem_id": i, "source": "s", "split": "test", "problem": f"text {i}",
             "answer": i.upper()} for i in ids]


def _samples(model: str, correct: list[bool]) -> list[dict]:
    return [{"model": model, "benchmark": "b", "problem_id": f"p{n}", "sample_index": 0,
             "correct": c, "completion_tokens": 10 * (n + 1)} for n, c in enumerate(correct)]


def _filled(root: Path) -> Warehouse:
    wh = Warehouse(root)
    wh.write("problems", _problems(["a1", "a2"]), lineage=Lineage(partition="first"))
    wh.write("problems", _problems(["b1"]), lineage=Lineage(partition="second"))
    wh.write("eval_samples", _samples("m", [True, False, True, True]), partition="b|m")
    assert wh.refresh_catalog()
    return wh


def _plain(catalog: Path, search: Path | None = None) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(str(catalog), read_only=True)
    if search is not None:
        con.execute(f"SET file_search_path = '{search}'")
    return con


# ---- storage format ---------------------------------------------------------------------------

def test_the_catalog_file_has_the_storage_format_older_duckdb_clients_read(tmp_path):
    wh = _filled(tmp_path / "wh")
    assert _header(wh.catalog_path) == (b"DUCK", OLD_READABLE_STORAGE_NUMBER)
    # the DuckDB weft runs writes its own, newer format by default: the setting matters
    duckdb.connect(str(tmp_path / "default.duckdb")).close()
    assert _header(tmp_path / "default.duckdb")[1] != OLD_READABLE_STORAGE_NUMBER


def _catalog_in_duckdb2_format(wh: Warehouse, record: list[tuple]) -> None:
    """A catalog as weft wrote it before the storage format was set: DuckDB's default format, a
    view over an absolute glob, and a migration record."""
    con = duckdb.connect(str(wh.catalog_path))
    try:
        con.execute("CREATE TABLE weft_migrations (version INTEGER PRIMARY KEY, name VARCHAR, "
                    "applied_at TIMESTAMPTZ DEFAULT now())")
        if record:
            con.executemany("INSERT INTO weft_migrations VALUES (?, ?, ?)", record)
        con.execute(f"CREATE VIEW problems AS SELECT * FROM read_parquet("
                    f"'{wh.root}/problems/*/data.parquet', union_by_name=true)")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    assert _header(wh.catalog_path)[1] != OLD_READABLE_STORAGE_NUMBER


def test_a_catalog_in_duckdb2_format_with_no_migrations_applied_is_rebuilt(tmp_path):
    # what weft wrote before: an empty migration record (no migration 009+ existed yet)
    wh = Warehouse(tmp_path / "wh")
    wh.write("problems", _problems(["a1"]), partition="all")
    _catalog_in_duckdb2_format(wh, [])
    assert wh.refresh_catalog()
    assert _header(wh.catalog_path) == (b"DUCK", OLD_READABLE_STORAGE_NUMBER)
    # the rebuilt catalog applied (and recorded) the data migrations that exist now
    assert wh.sql("SELECT version FROM weft_migrations").to_pylist() == [{"version": 9}]
    assert wh.sql("SELECT problem_id FROM problems").to_pylist() == [{"problem_id": "a1"}]


def test_a_catalog_in_duckdb2_format_is_rebuilt_keeping_its_migration_record(tmp_path):
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    # recorded as applied in the old file: it must not run again in the rebuilt one
    (migrations / "009_once.sql").write_text("SELECT error('009_once ran a second time');\n")
    root = tmp_path / "wh"
    wh = Warehouse(root, migrations_dir=migrations)
    wh.write("problems", _problems(["a1", "a2", "a3"]), partition="all")
    record = [(9, "009_once", T0)]
    _catalog_in_duckdb2_format(wh, record)

    assert wh.refresh_catalog()
    assert _header(wh.catalog_path) == (b"DUCK", OLD_READABLE_STORAGE_NUMBER)
    con = _plain(wh.catalog_path, root)
    try:
        assert con.execute("SELECT version, name, applied_at FROM weft_migrations").fetchall() \
            == record
        assert sorted(r[0] for r in con.execute("SELECT problem_id FROM problems").fetchall()) \
            == ["a1", "a2", "a3"]
        views = {r[0] for r in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    finally:
        con.close()
    assert {"leaderboard", "sample_stats", "models"} <= views  # every view, not just the old one
    assert sorted(os.listdir(root)) == ["catalog.duckdb", "catalog.lock", "problems"]
    # later refreshes keep the file as it is and still do not re-run the migration
    assert wh.refresh_catalog()
    assert wh.sql("SELECT count(*) AS n FROM weft_migrations").to_pylist() == [{"n": 1}]


# ---- a copied warehouse ------------------------------------------------------------------------

def test_a_copied_warehouse_reads_its_own_data_never_the_originals(tmp_path, monkeypatch):
    original = _filled(tmp_path / "wh")
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(original.root), str(copy)], check=True)
    # change the copy behind weft's back: one partition gone, one replaced
    (copy / "problems" / "second" / "data.parquet").unlink()
    replaced = pa.table({"problem_id": ["c1", "c2", "c3"], "answer": ["x", "y", "z"]})
    pq.write_table(replaced, copy / "problems" / "first" / "data.parquet")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    # a plain client, before weft has touched the copy, from another working directory
    monkeypatch.chdir(elsewhere)
    con = _plain(copy / "catalog.duckdb", copy)
    try:
        assert sorted(r[0] for r in con.execute("SELECT problem_id FROM problems").fetchall()) \
            == ["c1", "c2", "c3"]
        # a derived view over the copy's (unchanged) samples
        assert con.execute("SELECT samples, accuracy FROM sample_stats").fetchall() == [(4, 0.75)]
    finally:
        con.close()
    # without the search path, from elsewhere: an error, not the original's rows
    con = _plain(copy / "catalog.duckdb")
    try:
        with pytest.raises(duckdb.IOException, match="No files found"):
            con.execute("SELECT * FROM problems").fetchall()
    finally:
        con.close()
    # started in the original's folder, with the search path on the copy: still the copy's
    monkeypatch.chdir(original.root)
    con = _plain(copy / "catalog.duckdb", copy)
    try:
        assert con.execute("SELECT count(*) FROM problems").fetchone() == (3,)
    finally:
        con.close()
    # started in the copy's folder, no setting needed
    monkeypatch.chdir(copy)
    con = _plain(copy / "catalog.duckdb")
    try:
        assert con.execute("SELECT count(*) FROM problems").fetchone() == (3,)
    finally:
        con.close()

    # through weft, from the original's folder: each warehouse its own rows
    monkeypatch.chdir(original.root)
    assert sorted(Warehouse(copy).sql("SELECT problem_id FROM problems").column(
        "problem_id").to_pylist()) == ["c1", "c2", "c3"]
    assert sorted(original.sql("SELECT problem_id FROM problems").column(
        "problem_id").to_pylist()) == ["a1", "a2", "b1"]


def test_a_view_listing_files_reads_them_in_its_own_warehouse(tmp_path, monkeypatch):
    # with a partition quarantined the view lists the readable files; each must still be
    # looked up in the warehouse, not in a working directory holding the same relative path
    original = _filled(tmp_path / "wh")
    copy = tmp_path / "copy"
    shutil.copytree(original.root, copy, symlinks=True)
    outside = Warehouse(tmp_path / "outside")
    outside.write("problems", _problems(["x1"]), partition="foreign")
    os.symlink(outside.root / "problems" / "foreign", copy / "problems" / "linked")
    pq.write_table(pa.table({"problem_id": ["c1"]}), copy / "problems" / "first" / "data.parquet")
    wh = Warehouse(copy)
    assert [q.partition for q in wh.quarantined()] == ["linked"]
    monkeypatch.chdir(original.root)  # holds problems/first/data.parquet with a1, a2
    assert sorted(wh.sql("SELECT problem_id FROM problems").column("problem_id").to_pylist()) \
        == ["b1", "c1"]
    monkeypatch.chdir(tmp_path)
    con = _plain(copy / "catalog.duckdb", copy)
    try:
        assert sorted(r[0] for r in con.execute("SELECT problem_id FROM problems").fetchall()) \
            == ["b1", "c1"]
    finally:
        con.close()


def test_user_sql_reads_relative_paths_only_as_the_views_globs(tmp_path, monkeypatch):
    wh = _filled(tmp_path / "wh")
    cwd = tmp_path / "cwd"
    (cwd / "problems" / "first").mkdir(parents=True)
    pq.write_table(pa.table({"problem_id": ["secret"]}), cwd / "problems" / "first" / "data.parquet")
    monkeypatch.chdir(cwd)
    # a plain relative path would be found in the working directory: refused
    with pytest.raises(UnsafeQueryError, match="warehouse folder"):
        wh.sql("SELECT * FROM read_parquet('problems/first/data.parquet')")
    with pytest.raises(UnsafeQueryError, match="warehouse folder"):
        wh.sql("SELECT * FROM read_parquet('problems/*/../../../cwd/problems/*/data.parquet')")
    # the views' own glob reads the warehouse's files
    rows = wh.sql("SELECT problem_id FROM read_parquet('problems/*/data.parquet')")
    assert sorted(rows.column("problem_id").to_pylist()) == ["a1", "a2", "b1"]


def test_a_warehouse_folder_with_a_comma_is_refused_with_the_fix(tmp_path):
    wh = Warehouse(tmp_path / "a,b")
    wh.write("problems", _problems(["a1"]), partition="all")
    with pytest.raises(ValueError, match="comma.*move the warehouse"):
        wh.sql("SELECT count(*) FROM problems")


# ---- a real older DuckDB client ----------------------------------------------------------------

_UNREACHABLE = ("Could not fetch URL", "NewConnectionError", "Max retries exceeded",
                "Temporary failure in name resolution", "Network is unreachable",
                "Connection refused", "ConnectTimeout", "ReadTimeout")


@pytest.fixture(scope="module")
def duckdb_1_1(tmp_path_factory) -> Path:
    """A folder holding DuckDB 1.1 from the package index (for PYTHONPATH)."""
    target = tmp_path_factory.mktemp("duckdb-1.1")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
         "duckdb==1.1.*"], check=False, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if any(marker in output for marker in _UNREACHABLE):
            pytest.skip(f"the package index is unreachable, so DuckDB 1.1 cannot be installed: "
                        f"{output.strip()[-300:]}")
        raise AssertionError(f"pip could not install duckdb==1.1.*:\n{output}")
    return target


_OLD_CLIENT = textwrap.dedent("""
    import json, sys
    import duckdb
    catalog, folder = sys.argv[1], sys.argv[2]
    con = duckdb.connect(catalog, read_only=True)
    con.execute("SET file_search_path = '" + folder + "'")
    views = [r[0] for r in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1").fetchall()]
    failing = {}
    for view in views:
        try:
            con.execute(f"SELECT count(*) FROM {view}").fetchall()
        except duckdb.Error as err:
            failing[view] = str(err)
    print(json.dumps({
        "version": duckdb.__version__,
        "problems": sorted(r[0] for r in con.execute("SELECT problem_id FROM problems").fetchall()),
        "sample_stats": con.execute("SELECT samples, accuracy FROM sample_stats").fetchall(),
        "views": len(views), "failing": failing}))
""")


def _old_client(duckdb_dir: Path, catalog: Path, folder: Path, cwd: Path
                ) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(duckdb_dir))
    return subprocess.run([sys.executable, "-c", _OLD_CLIENT, str(catalog), str(folder)],
                          check=False, capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)


@pytest.mark.slow
@pytest.mark.network
def test_a_duckdb_1_1_client_reads_the_catalog_new_and_upgraded(tmp_path, duckdb_1_1):
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    # a catalog weft writes now
    wh = _filled(tmp_path / "wh")
    done = _old_client(duckdb_1_1, wh.catalog_path, wh.root, cwd)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["version"].startswith("1.1.")
    assert seen["problems"] == ["a1", "a2", "b1"]
    assert seen["sample_stats"] == [[4, 0.75]]
    assert seen["failing"] == {} and seen["views"] >= 40

    # a catalog in DuckDB 2.0's format: refused by the old client until weft rebuilds it
    old = Warehouse(tmp_path / "old")
    old.write("problems", _problems(["o1", "o2"]), partition="all")
    old.write("eval_samples", _samples("m", [False, True]), partition="b|m")
    _catalog_in_duckdb2_format(old, [(9, "009_data_fix", T0)])
    refused = _old_client(duckdb_1_1, old.catalog_path, old.root, cwd)
    assert refused.returncode != 0 and "version" in refused.stderr
    assert old.refresh_catalog()
    done = _old_client(duckdb_1_1, old.catalog_path, old.root, cwd)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["problems"] == ["o1", "o2"] and seen["sample_stats"] == [[2, 0.5]]
    assert seen["failing"] == {}
