"""The warehouse modules use DuckDB's engine module and import the package's Python layer only
where relations are built or a connection is handed to a caller.

Each check runs in a fresh interpreter (this test process has imported the ``duckdb`` package
already), on a real warehouse with a real catalog, and reads ``sys.modules`` there: what the
command line loads, and that every path that builds relations still works when nothing had
imported the package before it.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from warehouse import Lineage, Warehouse
from warehouse.engine import duckdb as engine
from warehouse.engine import with_relations

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def wh(tmp_path, weft_home):
    wh = Warehouse(tmp_path / "wh")
    wh.write("problems", [{"problem_id": f"p{i}", "source": "s", "split": "test",
                           "problem": "what?", "answer": str(i)} for i in range(3)],
             lineage=Lineage(partition="p"))
    assert wh.refresh_catalog()
    return wh


def _fresh(code: str, *args: str) -> dict:
    """Run ``code`` in a new interpreter; it prints one JSON line last."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], check=False,
                          cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_engine_names_are_the_packages_own_objects():
    assert with_relations() is duckdb
    for name in ("Error", "PermissionException", "OutOfMemoryException", "InterruptException",
                 "CatalogException", "BinderException", "ParserException",
                 "SerializationException", "DuckDBPyConnection", "StatementType", "connect"):
        assert getattr(engine, name) is getattr(duckdb, name), name


def test_the_sql_command_runs_without_the_package_layer(wh):
    out = _fresh("""
        import contextlib, io, json, sys
        from warehouse.__main__ import main
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = main(["--root", sys.argv[1], "sql", "--format", "csv",
                       "SELECT problem_id, answer FROM problems ORDER BY problem_id"])
        print(json.dumps({"rc": rc, "out": buf.getvalue(),
                          "package": "duckdb" in sys.modules,
                          "engine": "_duckdb" in sys.modules}))
        """, str(wh.root))
    assert out["rc"] == 0
    assert out["out"].split() == ["problem_id,answer", "p0,0", "p1,1", "p2,2"]
    assert out["engine"] and not out["package"]


_CALLS = """
    def via_sql(wh):
        return wh.sql("SELECT count(*) AS n FROM problems").column("n").to_pylist()[0]

    def via_read(wh):
        return wh.read("problems").num_rows

    def via_stream(wh):
        with wh.stream("SELECT * FROM problems") as batches:
            return sum(batch.num_rows for batch in batches)

    def via_connect(wh):
        with wh.connect() as con:
            return con.sql("SELECT count(*) FROM problems").fetchall()[0][0]
    """


@pytest.mark.parametrize("call", ["via_sql", "via_read", "via_stream", "via_connect"])
def test_relations_work_when_nothing_imported_the_package_first(wh, call):
    out = _fresh(_CALLS + f"""
    import json, sys
    from warehouse import Warehouse
    before = "duckdb" in sys.modules
    print(json.dumps({{"before": before, "value": {call}(Warehouse(sys.argv[1]))}}))
    """, str(wh.root))
    assert out == {"before": False, "value": 3}
