"""User SQL is read-only and confined to the warehouse folder.

Each attack from the issue is reproduced against ``Warehouse.sql`` on both query paths (the
catalog opened read-only, and the in-memory views built when another connection holds the
catalog), and its effect is checked on disk, independently of what the query returned.
"""

import contextlib
import json
import os
import threading
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from warehouse import Lineage, Warehouse
from warehouse.__main__ import main as warehouse_main
from warehouse.confine import UnsafeQueryError


def _rows(n, tag="a"):
    return [{"problem_id": f"{tag}{i}", "source": "s", "split": "test", "problem": f"p{i}",
             "answer": str(i)} for i in range(n)]


@pytest.fixture
def wh(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    wh.write("problems", _rows(3), lineage=Lineage(partition="p"))
    return wh


@contextlib.contextmanager
def _query_path(wh, mode):
    """'catalog': the normal read-only catalog; 'memory': a writer in this process holds the
    catalog, so queries run on views built in memory."""
    if mode == "catalog":
        yield
        return
    wh.refresh_catalog()
    holder = duckdb.connect(str(wh.catalog_path))
    try:
        yield
    finally:
        holder.close()


def _attacks(tmp_path: Path, wh: Warehouse):
    part = wh.root / "problems" / "p" / "data.parquet"
    return {
        "copy_outside": (f"COPY (SELECT 42 AS x) TO '{tmp_path}/out.csv'", "COPY"),
        "copy_over_partition": (
            f"COPY (SELECT 'forged' AS problem_id) TO '{part}' (FORMAT parquet)", "COPY"),
        "attach_outside": (f"ATTACH '{tmp_path}/new.duckdb' AS n (READ_WRITE)", "ATTACH"),
        "attach_inside": (f"ATTACH '{wh.root}/new.duckdb' AS n (READ_WRITE)", "ATTACH"),
        "read_text_etc": ("SELECT * FROM read_text('/etc/hostname')", "warehouse folder"),
        "read_text_dotdot": (f"SELECT * FROM read_text('{wh.root}/../../../../etc/hostname')",
                             "warehouse folder"),
        "read_remote": ("SELECT * FROM read_parquet('https://example.com/x.parquet')",
                        "warehouse folder"),
        "install_httpfs": ("INSTALL httpfs", "not allowed"),
        "load_httpfs": ("LOAD httpfs", "not allowed"),
        "write_after_select": (f"SELECT 1; COPY (SELECT 1 AS x) TO '{tmp_path}/multi.csv'",
                               "2 statements"),
        "two_selects": ("SELECT 1; SELECT 2", "2 statements"),
        "explain_analyze_copy": (f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{tmp_path}/e.csv'",
                                 "EXPLAIN"),
        "unlock_config": ("SET enable_external_access = true", "not allowed"),
        "create_table": ("CREATE TABLE t AS SELECT 1 AS x", "not allowed"),
        "export": (f"EXPORT DATABASE '{tmp_path}/export'", "not allowed"),
        "empty": ("", "empty query"),
        "whitespace": ("  \n\t ", "empty query"),
        "comment_only": ("-- just a comment\n/* and another */ ;", "empty query"),
    }


ATTACK_NAMES = list(_attacks(Path("/x"), Warehouse("/x/wh")))  # names only; paths unused


@pytest.mark.parametrize("mode", ["catalog", "memory"])
@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_attack_is_refused_and_changes_nothing(tmp_path, wh, mode, name):
    query, reason = _attacks(tmp_path, wh)[name]
    before_outside = sorted(p.name for p in tmp_path.iterdir())
    partition = wh.root / "problems" / "p" / "data.parquet"
    before_rows = pq.read_table(partition).column("problem_id").to_pylist()
    with _query_path(wh, mode), pytest.raises(UnsafeQueryError, match=reason):
        wh.sql(query)
    assert sorted(p.name for p in tmp_path.iterdir()) == before_outside  # no host file written
    assert not (wh.root / "new.duckdb").exists()
    assert pq.read_table(partition).column("problem_id").to_pylist() == before_rows == [
        "a0", "a1", "a2"]


def test_files_next_to_the_warehouse_are_unreadable(tmp_path, wh):
    # a sibling folder whose name starts with the warehouse folder's name
    sibling = tmp_path / "wh_secrets"
    sibling.mkdir()
    (sibling / "key.txt").write_text("secret")
    # a symlink inside the warehouse pointing out of it
    os.symlink(sibling, wh.root / "escape")
    for path in (sibling / "key.txt", wh.root / "escape" / "key.txt"):
        with pytest.raises(UnsafeQueryError, match="warehouse folder"):
            wh.sql(f"SELECT content FROM read_text('{path}')")


def test_files_inside_the_warehouse_stay_readable(wh):
    glob = f"{wh.root}/problems/*/data.parquet"
    got = wh.sql(f"SELECT count(*) AS n FROM read_parquet('{glob}')").to_pylist()
    assert got == [{"n": 3}]


@pytest.mark.parametrize("query, expected", [
    ("SELECT count(*) AS n FROM problems", [{"n": 3}]),
    ("  -- leading comment\nSELECT count(*) AS n FROM problems ;  ", [{"n": 3}]),
    ("WITH x AS (SELECT problem_id FROM problems) SELECT count(*) AS n FROM x", [{"n": 3}]),
    ("FROM problems SELECT count(*) AS n", [{"n": 3}]),
    ("VALUES (1), (2)", [{"col0": 1}, {"col0": 2}]),
    ("SELECT * FROM query('SELECT 7 AS n')", [{"n": 7}]),
])
def test_select_family_queries_run(wh, query, expected):
    assert wh.sql(query).to_pylist() == expected


def test_describe_show_summarize_and_explain_run(wh):
    names = wh.sql("DESCRIBE problems").column("column_name").to_pylist()
    assert "problem_id" in names and "run_id" in names
    assert "problems" in wh.sql("SHOW TABLES").column("name").to_pylist()
    assert wh.sql("SUMMARIZE SELECT problem_id FROM problems").num_rows == 1
    assert wh.sql("EXPLAIN SELECT * FROM problems").num_rows >= 1
    assert wh.sql("EXPLAIN ANALYZE SELECT count(*) FROM problems").num_rows >= 1
    assert wh.sql("SELECT answer FROM problems WHERE problem_id = $p", {"p": "a2"}).to_pylist() \
        == [{"answer": "2"}]


def test_connection_itself_is_confined_and_locked(tmp_path, wh):
    # Below the statement check: the connection cannot reach host files or unlock itself.
    with wh.connect() as con:
        with pytest.raises(duckdb.PermissionException):
            con.execute("SELECT * FROM read_text('/etc/hostname')")
        with pytest.raises(duckdb.PermissionException):
            con.execute(f"COPY (SELECT 1 AS x) TO '{tmp_path}/direct.csv'")
        for setting in ("enable_external_access = true", "lock_configuration = false",
                        "allowed_directories = ['/']", "autoinstall_known_extensions = true"):
            with pytest.raises(duckdb.InvalidInputException, match="locked"):
                con.execute(f"SET {setting}")
        with pytest.raises(duckdb.Error):  # the catalog is opened read-only
            con.execute("CREATE VIEW x AS SELECT 1")
    assert not (tmp_path / "direct.csv").exists()


def test_relative_root_resolves_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    wh = Warehouse("rel")
    wh.write("problems", _rows(2), lineage=Lineage(partition="p"))
    assert wh.root == tmp_path / "rel"
    assert wh.sql("SELECT count(*) AS n FROM problems").to_pylist() == [{"n": 2}]


def test_sql_command_refuses_writes_and_empty_queries(tmp_path, wh, capsys):
    root = str(wh.root)
    target = tmp_path / "cli.csv"
    assert warehouse_main(["--root", root, "sql", f"COPY (SELECT 1) TO '{target}'"]) == 2
    out, err = capsys.readouterr()
    assert "query refused" in err and "COPY" in err and not out
    assert not target.exists()
    for empty in ("", "   ", "-- nothing"):
        assert warehouse_main(["--root", root, "sql", empty]) == 2
        out, err = capsys.readouterr()
        assert out == "" and "empty query" in err
    assert warehouse_main(["--root", root, "sql", "SELECT * FROM read_text('/etc/hostname')"]) == 2
    assert "warehouse folder" in capsys.readouterr().err
    assert warehouse_main(["--root", root, "sql", "--format", "json",
                           "SELECT count(*) AS n FROM problems"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"n": 3}]
    assert warehouse_main(["--root", root, "tables"]) == 0
    assert "problems" in capsys.readouterr().out


def test_concurrent_queries_in_one_process_share_the_confined_catalog(wh):
    # DuckDB gives every connection to one path the same (globally configured) instance: threads
    # querying at once must neither trip over each other's lock-down nor over the refresh.
    results, errors = [], []

    def query():
        for _ in range(8):
            try:
                results.append(wh.sql("SELECT count(*) AS n FROM problems").to_pylist())
            except Exception as err:  # noqa: BLE001 - collected and asserted below
                errors.append(repr(err))

    threads = [threading.Thread(target=query) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert results == [[{"n": 3}]] * 32
    with pytest.raises(UnsafeQueryError):  # and the shared instance is still confined
        wh.sql("SELECT * FROM read_text('/etc/hostname')")
