import json
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from warehouse import Lineage, Warehouse
from warehouse.__main__ import main as warehouse_main
from warehouse.output import format_result


def _rows(n, tag="a"):
    return [{"problem_id": f"{tag}{i}", "source": "s", "split": "test", "problem": f"p{i}",
             "answer": str(i), "solution": "", "answer_type": "math", "meta": "{}"} for i in range(n)]


def test_rematerializing_a_partition_leaves_row_counts_unchanged(tmp_path):
    wh = Warehouse(tmp_path)
    lin = Lineage(run_id="r1", asset="problems", partition="gsm8k")
    wh.write("problems", _rows(5), lineage=lin)
    wh.write("problems", _rows(3, "b"), lineage=Lineage(run_id="r1", asset="problems", partition="math"))
    assert wh.sql("SELECT count(*) AS n FROM problems").to_pylist() == [{"n": 8}]
    wh.write("problems", _rows(5), lineage=Lineage(run_id="r2", asset="problems", partition="gsm8k"))
    wh.write("problems", _rows(5), lineage=Lineage(run_id="r3", asset="problems", partition="gsm8k"))
    counts = wh.sql("SELECT partition, count(*) AS n, min(run_id) AS run FROM problems "
                    "GROUP BY partition ORDER BY partition").to_pylist()
    assert counts == [{"partition": "gsm8k", "n": 5, "run": "r3"}, {"partition": "math", "n": 3, "run": "r1"}]


def test_every_row_carries_lineage(tmp_path):
    wh = Warehouse(tmp_path)
    wh.write("problems", _rows(2), lineage=Lineage(run_id="run-9", asset="gsm8k_problems",
                                                   partition="gsm8k", config_hash="abc"))
    row = wh.read("problems").to_pylist()[0]
    assert (row["run_id"], row["asset"], row["partition"], row["config_hash"]) == (
        "run-9", "gsm8k_problems", "gsm8k", "abc")
    assert row["created_at"] is not None


def test_reader_sees_old_or_new_file_never_partial(tmp_path):
    wh = Warehouse(tmp_path)
    sizes = [1000, 3000]
    wh.write("problems", _rows(sizes[0]), lineage=Lineage(partition="p"))
    path = wh.files("problems")[0]
    stop = threading.Event()
    seen, errors = set(), []

    def writer():
        i = 0
        while not stop.is_set():
            i += 1
            wh.write("problems", _rows(sizes[i % 2]), lineage=Lineage(partition="p"))
            stop.wait(0.005)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for i in range(150):
            try:
                if i % 2:
                    with open(path, "rb") as fh:  # one open: one file version
                        seen.add(pq.read_table(fh).num_rows)
                else:
                    seen.add(wh.read("problems").num_rows)  # DuckDB over the glob
            except Exception as err:  # noqa: BLE001 — a partial file would fail to parse
                errors.append(repr(err))
    finally:
        stop.set()
        t.join()
    assert not errors
    assert seen <= set(sizes) and seen
    assert not list(path.parent.glob("*.tmp"))  # no temp files left behind


def test_empty_warehouse_has_typed_views(tmp_path):
    wh = Warehouse(tmp_path)
    for table in ("problems", "rejects", "llm_calls", "eval_samples", "eval_scores", "runs",
                  "train_metrics", "checkpoints", "latest_scores", "sample_stats"):
        assert wh.sql(f"SELECT count(*) AS n FROM {table}").to_pylist() == [{"n": 0}]
    # training tables are typed before any run, so dashboards over them can be written first
    typed = {r["column_name"]: r["column_type"] for r in wh.sql(
        "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM train_metrics)").to_pylist()}
    assert typed["loss"] == "DOUBLE" and typed["step"] == "BIGINT" and typed["checkpoint_id"] == "VARCHAR"
    # nested declared types too: TRL messages are a list of (role, content) structs
    typed = {r["column_name"]: r["column_type"] for r in wh.sql(
        "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM step_instances)").to_pylist()}
    assert typed["prompt"] == 'STRUCT("role" VARCHAR, "content" VARCHAR)[]'
    assert typed["is_last_step"] == "BOOLEAN"
    # the data migrations are recorded once, on an empty warehouse too, and stay so
    assert wh.sql("SELECT version FROM weft_migrations").to_pylist() == [{"version": 9}]
    wh.refresh_catalog()
    assert wh.sql("SELECT version FROM weft_migrations").to_pylist() == [{"version": 9}]


def test_tandem_and_engagement_tables_are_declared_and_typed_before_rows(tmp_path):
    wh = Warehouse(tmp_path)
    typed = {r["column_name"]: r["column_type"] for r in wh.sql(
        "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM tandem_summary)").to_pylist()}
    assert typed["survival"] == "DOUBLE[]" and typed["kl"] == "DOUBLE"
    assert typed["created_at"] == "TIMESTAMP WITH TIME ZONE"
    for view in ("tandem_summary_latest", "tandem_pairwise_latest", "ep_leaderboard",
                 "ep_budget_table"):
        assert wh.sql(f"SELECT count(*) AS n FROM {view}").to_pylist() == [{"n": 0}]
    # rows written with the declared types read back through the same view
    wh.write("tandem_summary", [{"model": "m", "junior": "j", "benchmark": "b", "kl": 0.5,
                                 "survival_thresholds": [0.1, 1.0], "survival": [0.9, 0.2]}],
             partition="p")
    assert wh.sql("SELECT survival FROM tandem_summary").to_pylist() == [{"survival": [0.9, 0.2]}]


def _written_tables() -> dict[str, list[str]]:
    """Table name -> where the code writes it: every ``<x>.write(<table>, <rows>, ...)`` call in
    the source folders whose table is a string literal, a module constant (also imported from
    another module) or a local variable assigned such names (``a if c else b`` gives both)."""
    import ast
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    modules = {}
    for folder in ("assets", "eval", "training", "pipelines", "warehouse"):
        for path in (root / folder).rglob("*.py"):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = (path, ast.parse(path.read_text()))

    def constants(module: str) -> dict[str, ast.expr]:
        out = {}
        for node in modules[module][1].body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        out[target.id] = (module, node.value)
            elif isinstance(node, ast.ImportFrom) and node.module in modules:
                for alias in node.names:
                    out[alias.asname or alias.name] = (node.module, ast.Name(alias.name))
        return out

    def strings(expr, module, scope, seen=()) -> set[str]:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return {expr.value}
        if isinstance(expr, ast.IfExp):
            return strings(expr.body, module, scope, seen) | strings(expr.orelse, module, scope, seen)
        if isinstance(expr, ast.Name) and (module, expr.id) not in seen:
            seen = (*seen, (module, expr.id))
            local = [n.value for n in ast.walk(scope) if isinstance(n, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == expr.id for t in n.targets)]
            if local:
                return set().union(*(strings(v, module, scope, seen) for v in local))
            found = constants(module).get(expr.id)
            if found is not None:
                other, value = found
                return strings(value, other, modules[other][1], seen)
        return set()

    written: dict[str, list[str]] = {}
    for module, (path, tree) in modules.items():
        for scope in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            for call in ast.walk(scope):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "write" and len(call.args) >= 2):
                    for table in strings(call.args[0], module, scope):
                        if re.fullmatch(r"[a-z][a-z0-9_]*", table):
                            written.setdefault(table, []).append(f"{path.name}:{call.lineno}")
    return written


def test_every_table_the_code_writes_is_declared():
    """A table's schema lives in warehouse/schema.py: every table weft writes is declared, so it
    is typed before its first rows and a writer cannot change a column's type by accident."""
    from warehouse.schema import TABLES

    written = _written_tables()
    # the scan sees tables named by literals, by constants (train_metrics, eval_samples via
    # eval.recorded) and by local variables (the two MOSAIC trajectory tables)
    assert {"problems", "train_metrics", "eval_samples", "mosaic_trajectories",
            "mosaic_baseline_trajectories", "runs", "llm_calls"} <= set(written)
    undeclared = {t: where for t, where in written.items() if t not in TABLES}
    assert not undeclared, f"declare these tables in warehouse/schema.py: {undeclared}"


def test_a_row_that_does_not_fit_a_declared_type_is_refused_naming_the_column(tmp_path):
    wh = Warehouse(tmp_path)
    with pytest.raises(ValueError, match=r"row 2 has step_index='two'.*declares step_index as int64"):
        wh.write("step_instances", [{"instance_id": "a", "step_index": 1},
                                    {"instance_id": "b", "step_index": "two"}], partition="p")
    assert wh.partitions("step_instances") == []


def test_new_columns_are_unioned_by_name(tmp_path):
    wh = Warehouse(tmp_path)
    wh.write("problems", _rows(1), lineage=Lineage(partition="a"))
    extra = _rows(1, "z")
    extra[0]["difficulty"] = 3
    wh.write("problems", extra, lineage=Lineage(partition="b"))
    rows = wh.sql("SELECT problem_id, difficulty FROM problems ORDER BY problem_id").to_pylist()
    assert rows == [{"problem_id": "a0", "difficulty": None}, {"problem_id": "z0", "difficulty": 3}]


def _view_sql(wh, view):
    import duckdb

    con = duckdb.connect(str(wh.catalog_path), read_only=True)
    try:
        return con.execute("SELECT sql FROM duckdb_views() WHERE view_name = ?",
                           [view]).fetchall()[0][0]
    finally:
        con.close()


def test_views_read_plainly_while_every_file_has_the_same_columns_and_union_otherwise(tmp_path):
    """Files that agree are read without union_by_name (a scan's 3-11%); the first file that
    differs, by a column or only by the order of its columns, gets a unioned view at the next
    query, and every row comes back under its own column names."""
    wh = Warehouse(tmp_path)
    wh.write("problems", _rows(2), lineage=Lineage(partition="a"))
    wh.write("problems", _rows(2, "b"), lineage=Lineage(partition="b"))
    assert wh.sql("SELECT count(*) AS n FROM problems").to_pylist() == [{"n": 4}]
    assert "union_by_name" not in _view_sql(wh, "problems").lower()

    reordered = pa.Table.from_pylist(_rows(1, "r")).select(
        ["answer", "problem_id", "source", "split", "problem", "solution", "answer_type", "meta"])
    wh.write("problems", reordered, lineage=Lineage(partition="r"))
    got = wh.sql("SELECT problem_id, answer FROM problems WHERE partition = 'r'").to_pylist()
    assert got == [{"problem_id": "r0", "answer": "0"}]
    assert "union_by_name=true" in _view_sql(wh, "problems").lower().replace(" ", "")

    wh.delete_partition("problems", "r")
    assert wh.sql("SELECT count(*) AS n FROM problems").to_pylist() == [{"n": 4}]
    assert "union_by_name" not in _view_sql(wh, "problems").lower()
    extra = _rows(1, "z")
    extra[0]["difficulty"] = 3
    wh.write("problems", extra, lineage=Lineage(partition="z"))
    rows = wh.sql("SELECT problem_id, difficulty FROM problems WHERE problem_id IN ('a0', 'z0') "
                  "ORDER BY problem_id").to_pylist()
    assert rows == [{"problem_id": "a0", "difficulty": None}, {"problem_id": "z0", "difficulty": 3}]
    assert "union_by_name=true" in _view_sql(wh, "problems").lower().replace(" ", "")


def test_undeclared_table_becomes_a_view_when_written(tmp_path):
    wh = Warehouse(tmp_path)
    wh.write("custom_metrics", [{"x": 1.5}, {"x": 2.5}], lineage=Lineage(partition="one"))
    assert wh.sql("SELECT sum(x) AS s FROM custom_metrics").to_pylist() == [{"s": 4.0}]


def test_invalid_names_are_rejected_with_a_message(tmp_path):
    wh = Warehouse(tmp_path)
    with pytest.raises(ValueError, match="invalid table name"):
        wh.write("drop table; --", [{"a": 1}])
    with pytest.raises(ValueError, match="partition"):
        wh.write("problems", _rows(1), partition="")


def test_partition_keys_with_slashes_round_trip(tmp_path):
    wh = Warehouse(tmp_path)
    wh.write("eval_samples", [{"model": "org/m", "benchmark": "gsm8k", "problem_id": "x",
                               "sample_index": 0, "correct": True}], partition="gsm8k|org/m")
    assert wh.partitions("eval_samples") == ["gsm8k|org/m"]
    assert wh.read("eval_samples", partition="gsm8k|org/m").num_rows == 1
    assert wh.delete_partition("eval_samples", "gsm8k|org/m")
    assert wh.read("eval_samples").num_rows == 0


def test_query_while_another_process_holds_the_catalog(tmp_path):
    import duckdb

    wh = Warehouse(tmp_path)
    wh.write("problems", _rows(4), lineage=Lineage(partition="p"))
    wh.refresh_catalog()
    holder = duckdb.connect(str(wh.catalog_path))  # a writer holding the file
    try:
        # refresh fails to lock, read-only open fails, so the views are built in memory
        assert wh.sql("SELECT count(*) AS n FROM problems").to_pylist() == [{"n": 4}]
    finally:
        holder.close()


def test_sql_command_formats(tmp_path, capsys):
    wh = Warehouse(tmp_path)
    wh.write("problems", _rows(2), lineage=Lineage(partition="p"))
    assert warehouse_main(["--root", str(tmp_path), "sql", "SELECT problem_id, answer FROM problems ORDER BY 1"]) == 0
    out = capsys.readouterr().out
    assert "problem_id" in out and "a1" in out and "(2 rows)" in out
    assert warehouse_main(["--root", str(tmp_path), "sql", "--format", "csv", "SELECT problem_id FROM problems ORDER BY 1"]) == 0
    assert capsys.readouterr().out.strip().splitlines() == ["problem_id", "a0", "a1"]
    assert warehouse_main(["--root", str(tmp_path), "sql", "--format", "json", "SELECT answer FROM problems ORDER BY 1"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"answer": "0"}, {"answer": "1"}]
    assert warehouse_main(["--root", str(tmp_path), "sql", "SELECT * FROM nope"]) == 1
    assert "SQL error" in capsys.readouterr().err


def test_format_table_truncates_long_cells():
    table = pa.table({"text": ["x" * 100], "v": [0.123456]})
    out = format_result(table, "table")
    assert "…" in out and "0.1235" in out


def test_evaluation_views_on_hand_made_rows(tmp_path):
    wh = Warehouse(tmp_path)
    scores = [
        {"model": "m", "benchmark": "gsm8k", "metric": "avg@k", "k": 2, "value": 0.5, "ci_low": 0.25,
         "ci_high": 0.75, "n_problems": 4, "n_samples": 8},
        {"model": "m", "benchmark": "gsm8k", "metric": "pass@k", "k": 1, "value": 0.5, "ci_low": 0.25,
         "ci_high": 0.75, "n_problems": 4, "n_samples": 8},
    ]
    wh.write("eval_scores", scores, partition="gsm8k|m")
    board = wh.sql("SELECT model, accuracy, ci_low, pass_at_1 FROM leaderboard").to_pylist()
    assert board == [{"model": "m", "accuracy": 0.5, "ci_low": 0.25, "pass_at_1": 0.5}]
    samples = [
        # budget 100: correct+within, correct+over, wrong → success 1/3, accuracy 2/3
        {"model": "m", "benchmark": "gsm8k", "problem_id": "a", "sample_index": 0, "correct": True,
         "completion_tokens": 80, "budget": 100, "mode": "budgeted"},
        {"model": "m", "benchmark": "gsm8k", "problem_id": "b", "sample_index": 0, "correct": True,
         "completion_tokens": 150, "budget": 100, "mode": "budgeted"},
        {"model": "m", "benchmark": "gsm8k", "problem_id": "c", "sample_index": 0, "correct": False,
         "completion_tokens": 20, "budget": 100, "mode": "budgeted"},
        {"model": "m", "benchmark": "gsm8k", "problem_id": "a", "sample_index": 0, "correct": True,
         "completion_tokens": 10, "ari": 12.0, "abo": 8.0, "airw": 5.0, "airw_between": 3.0,
         "mode": "interleaved"},
    ]
    wh.write("eval_samples", samples, partition="gsm8k|m")
    # budget_curve is computed in Python (eval.budget) and stored by eval_reports; its SQL is
    # tested in tests/warehouse/test_budget_views.py
    lat = wh.sql("SELECT samples, ari, abo, airw, airw_between FROM latency").to_pylist()
    assert lat == [{"samples": 1, "ari": 12.0, "abo": 8.0, "airw": 5.0, "airw_between": 3.0}]
    # declared columns are written even when a row does not set them
    assert "ari" in pq.read_schema(wh.files("eval_samples")[0]).names


def test_files_written_before_a_column_was_declared_still_give_full_views(tmp_path):
    # an eval_scores file from an older version without checkpoint_id (and other columns)
    wh = Warehouse(tmp_path)
    folder = tmp_path / "eval_scores" / "old"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"model": ["m"], "benchmark": ["b"], "metric": ["avg@k"], "k": [1],
                             "value": [0.5], "ci_low": [0.4], "ci_high": [0.6],
                             "created_at": pa.array([None], pa.timestamp("us", tz="UTC"))}),
                   folder / "data.parquet")
    rows = wh.sql("SELECT model, accuracy, checkpoint_id FROM leaderboard").to_pylist()
    assert rows == [{"model": "m", "accuracy": 0.5, "checkpoint_id": None}]
