"""The catalog: derived views from warehouse/views re-created on every refresh, data migrations
applied once, and catalogs built by the view migrations (old_migrations/, copied from the
warehouse before views had their own files) upgraded in place."""

import datetime as dt
import json
import shutil
from pathlib import Path

import duckdb
import pytest

from warehouse import Lineage, Warehouse
from warehouse.catalog import BASE_VIEW_NAMES, VIEWS_DIR, CatalogDefinitionError, load_views
from warehouse.schema import TABLES

OLD_MIGRATIONS = Path(__file__).with_name("old_migrations")
# every view the view migrations 001-008 defined (budget_curve of 002 had already been dropped)
OLD_VIEWS = {"latest_scores", "sample_stats", "leaderboard", "latency", "pairwise",
             "budget_curve", "eff_curve", "duet_steps", "tandem_summary_latest",
             "tandem_pairwise_latest", "models", "ep_leaderboard", "ep_budget_table"}
# views added as files after the migrations era
NEW_VIEWS = {"model_lineage", "run_status"}
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def _views(con) -> set[str]:
    return {r[0] for r in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}


def _catalog_views(wh: Warehouse) -> set[str]:
    with wh.connect() as con:
        return _views(con)


def test_the_view_files_define_exactly_the_views_of_the_old_migrations():
    assert {v.name for v in load_views()} == OLD_VIEWS | NEW_VIEWS


def test_every_view_is_queryable_on_an_empty_warehouse(tmp_path):
    wh = Warehouse(tmp_path)
    with wh.connect() as con:
        names = _views(con)
        counts = {n: con.execute(f"SELECT count(*) FROM {n}").fetchone()[0] for n in names}
    assert OLD_VIEWS <= names and "registered_models" in names
    # every declared table has its view too
    assert {BASE_VIEW_NAMES.get(t, t) for t in TABLES} <= names
    # the models view (and model_lineage over it) lists the embedded model before any
    # registration; the rest are empty
    assert counts == {n: int(n in ("models", "model_lineage")) for n in names}
    typed = {r["column_name"]: r["column_type"] for r in wh.sql(
        "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM leaderboard)").to_pylist()}
    assert typed["accuracy"] == "DOUBLE" and typed["samples_per_problem"] == "BIGINT"


def _sample_stats_rows():
    return [{"model": "m", "benchmark": "b", "problem_id": p, "sample_index": 0, "correct": c,
             "completion_tokens": t} for p, c, t in [("a", True, 10), ("b", False, 30)]]


def test_editing_a_view_file_changes_the_view_at_the_next_refresh(tmp_path):
    views = tmp_path / "views"
    shutil.copytree(VIEWS_DIR, views)
    wh = Warehouse(tmp_path / "wh", views_dir=views)
    wh.write("eval_samples", _sample_stats_rows(), partition="p")
    assert wh.sql("SELECT samples, accuracy FROM sample_stats").to_pylist() == [
        {"samples": 2, "accuracy": 0.5}]
    (views / "sample_stats.sql").write_text(
        "-- edited\nCREATE OR REPLACE VIEW sample_stats AS\n"
        "SELECT model, max(completion_tokens) AS longest FROM eval_samples GROUP BY model;\n")
    assert wh.refresh_catalog()
    assert wh.sql("SELECT * FROM sample_stats").to_pylist() == [{"model": "m", "longest": 30}]
    (views / "latency.sql").unlink()  # a deleted file's view is gone at the next refresh
    assert wh.refresh_catalog()
    assert "latency" not in _catalog_views(wh) and "sample_stats" in _catalog_views(wh)


def test_a_view_is_created_after_the_views_it_reads(tmp_path):
    views = tmp_path / "views"
    views.mkdir()
    # alphabetical order would create a_top before z_base, which it reads
    (views / "a_top.sql").write_text("CREATE OR REPLACE VIEW a_top AS SELECT n + 1 AS n FROM z_base;")
    (views / "z_base.sql").write_text(
        "CREATE OR REPLACE VIEW z_base AS SELECT count(*) AS n FROM eval_samples;")
    wh = Warehouse(tmp_path / "wh", views_dir=views)
    wh.write("eval_samples", _sample_stats_rows(), partition="p")
    assert wh.sql("SELECT n FROM a_top").to_pylist() == [{"n": 3}]


@pytest.mark.parametrize("files, message", [
    ({"a.sql": "CREATE OR REPLACE VIEW a AS SELECT * FROM b;",
      "b.sql": "CREATE OR REPLACE VIEW b AS SELECT * FROM a;"}, "cycle: a -> b -> a"),
    ({"a.sql": "CREATE OR REPLACE VIEW other AS SELECT 1 AS x;"}, "exactly one statement"),
    ({"a.sql": "CREATE OR REPLACE VIEW a AS SELECT 1 AS x; SELECT 2;"}, "found 2 statement"),
    ({"a.sql": "DROP VIEW latency;"}, "exactly one statement"),
    ({"Bad-Name.sql": "CREATE OR REPLACE VIEW x AS SELECT 1;"}, "lower-case letters"),
    ({"a.sql": "CREATE OR REPLACE VIEW a AS SELECT * FROM nowhere_declared;"},
     "must be declared in warehouse/schema.py"),
])
def test_unusable_view_files_are_refused_naming_the_file(tmp_path, files, message):
    views = tmp_path / "views"
    views.mkdir()
    for name, sql in files.items():
        (views / name).write_text(sql)
    wh = Warehouse(tmp_path / "wh", views_dir=views)
    with pytest.raises(CatalogDefinitionError, match=message):
        wh.sql("SELECT 1")


def test_a_failed_refresh_leaves_the_catalog_as_it_was(tmp_path):
    views = tmp_path / "views"
    shutil.copytree(VIEWS_DIR, views)
    wh = Warehouse(tmp_path / "wh", views_dir=views)
    before = _catalog_views(wh)
    (views / "zz_broken.sql").write_text("CREATE OR REPLACE VIEW zz_broken AS SELECT * FROM nope;")
    with pytest.raises(CatalogDefinitionError, match="zz_broken"):
        wh.refresh_catalog()
    con = duckdb.connect(str(wh.catalog_path), read_only=True)
    try:
        assert _views(con) == before
    finally:
        con.close()


def test_a_data_migration_runs_once_and_is_recorded(tmp_path):
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    # a change to stored data: a copy of problems with an upper-cased answer, as a new table
    (migrations / "009_upper_answers.sql").write_text(
        "COPY (SELECT problem_id, upper(answer) AS answer FROM problems) TO "
        "'{warehouse}/problems_upper/all/data.parquet' (FORMAT parquet);\n")
    root = tmp_path / "wh"
    (root / "problems_upper" / "all").mkdir(parents=True)
    wh = Warehouse(root, migrations_dir=migrations)
    wh.write("problems", [{"problem_id": "p1", "answer": "x"}], partition="s")
    assert wh.sql("SELECT * FROM problems_upper").to_pylist() == [
        {"problem_id": "p1", "answer": "X"}]
    assert wh.sql("SELECT version, name FROM weft_migrations").to_pylist() == [
        {"version": 9, "name": "009_upper_answers"}]
    (root / "problems_upper" / "all" / "data.parquet").unlink()
    assert wh.refresh_catalog()  # recorded: not run again
    assert "problems_upper" not in wh.tables()


@pytest.mark.parametrize("name, message", [
    ("003_again.sql", "version 3 is retired"),
    ("12_short.sql", "NNN_<name>.sql"),
])
def test_badly_numbered_migrations_are_refused(tmp_path, name, message):
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    (migrations / name).write_text("SELECT 1;")
    with pytest.raises(CatalogDefinitionError, match=message):
        Warehouse(tmp_path / "wh", migrations_dir=migrations).refresh_catalog()


# ---- a catalog built by the view migrations ---------------------------------------------------

def _fill(wh: Warehouse) -> None:
    """A few rows in every table the old views read, two writes where a view keeps the latest."""
    old, new = T0, T0 + dt.timedelta(days=1)
    score = {"model": "m", "benchmark": "b", "k": 1, "ci_low": 0.1, "ci_high": 0.9,
             "n_problems": 4, "n_samples": 4, "checkpoint_id": "ck"}
    wh.write("eval_scores", [dict(score, metric="avg@k", value=0.25, created_at=old),
                             dict(score, metric="avg@k", value=0.5, created_at=new),
                             dict(score, metric="pass@k", value=0.75, created_at=new)],
             partition="b@m")
    wh.write("eval_samples", [
        {"model": "m", "benchmark": "b", "problem_id": "p1", "sample_index": 0, "correct": True,
         "completion_tokens": 12, "latency_s": 0.5, "ari": 3.0, "abo": 1.0, "airw": 2.0,
         "airw_between": 1.5, "reasoning_tokens": 8, "response_tokens": 4},
        {"model": "m", "benchmark": "b", "problem_id": "p2", "sample_index": 0, "correct": False,
         "completion_tokens": 20, "latency_s": 1.5, "gen_error": "timeout"},
    ], partition="b@m")
    pair = {"benchmark": "b", "metric": "accuracy", "model_a": "m", "model_b": "n", "n": 4,
            "mean_a": 0.5, "mean_b": 0.25, "ci_low": 0.0, "ci_high": 0.5, "p_bootstrap": 0.1,
            "p_ttest": 0.2, "alternative": "two-sided"}
    wh.write("eval_pairwise", [dict(pair, diff=0.1, created_at=old),
                               dict(pair, diff=0.25, created_at=new)], partition="b")
    wh.write("budget_scores", [
        {"model": "m", "benchmark": "b", "budget": 100, "n_problems": 2, "n_samples": 2,
         "budgeted_success": s, "accuracy": 0.5, "mean_tokens": 60.0, "generation_limit": 800,
         "created_at": t} for s, t in [(0.9, old), (0.25, new)]], partition="all")
    wh.write("eff_scores", [
        {"model": "m", "benchmark": "b", "baseline": "m@thinking_cap=0", "thinking_cap": 32,
         "n_problems": 2, "accuracy": 1.0, "baseline_accuracy": 0.5, "mean_tokens": 200.0,
         "eff": 2.5, "created_at": new}], partition="all")
    wh.write("train_metrics", [
        {"checkpoint_id": "ck", "kind": "grpo", "step": s, "seconds_per_step": 2.0,
         "logs_json": json.dumps({"duet/lambda": 0.5 * s, "duet/k1": 10, "duet/abort_rate": 0.25})
         if s < 3 else json.dumps({"loss": 1.0})} for s in (1, 2, 3)], partition="ck")
    wh.write("tandem_summary", [
        {"model": "m", "junior": "j", "benchmark": "b", "kl": kl, "survival": [1.0, 0.5],
         "survival_thresholds": [0.1, 1.0], "created_at": t} for kl, t in [(0.9, old), (0.3, new)]],
        partition="m")
    wh.write("tandem_pairwise", [
        {"benchmark": "b", "model_a": "m", "model_b": "n", "junior": "j", "statistic": "ce",
         "starts": "senior", "k": 1, "n": 4, "diff": d, "created_at": t}
        for d, t in [(0.5, old), (0.125, new)]], partition="b")
    wh.write("models", [{"model_id": "tuned", "kind": "local", "path": "/x", "baseline": False,
                         "added_at": new}], partition="tuned")
    wh.write("ep_scores", [
        {"environment": "assistant", "setting": "milestones", "policy": "scripted",
         "method": method, "metric": metric, "value": value, "low": value - 0.1,
         "high": value + 0.1, "episodes": 10}
        for method, metric, value in [("ep", "utility", 0.8), ("ep", "timeout", 0.1),
                                      ("poll", "utility", 0.6), ("poll", "latency", 2.0)]],
        partition="all")
    wh.write("ep_budget_scores", [
        {"arm": arm, "arm_order": order, "model": arm, "train_cap": 256, "steps": 4,
         "budget": budget, "n_problems": 8, "budgeted_success": bs, "accuracy": bs + 0.1,
         "mean_tokens": 100.0 * order + budget}
        for arm, order in [("base", 0), ("ep_aware", 1)]
        for budget, bs in [(64, 0.25 * order), (256, 0.5)]], partition="t1")


def _old_catalog(wh: Warehouse) -> None:
    """The catalog the view migrations built: a view per table over its Parquet glob, then
    migrations 001-008 in order, recorded in weft_migrations."""
    con = duckdb.connect(str(wh.catalog_path))
    try:
        for table in wh.tables():
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM read_parquet("
                        f"'{wh.root}/{table}/*/data.parquet', union_by_name=true, "
                        "hive_partitioning=false)")
        con.execute("CREATE TABLE weft_migrations (version INTEGER PRIMARY KEY, name VARCHAR, "
                    "applied_at TIMESTAMPTZ DEFAULT now())")
        for path in sorted(OLD_MIGRATIONS.glob("*.sql")):
            con.execute(path.read_text().replace("{warehouse}", str(wh.root)))
            con.execute("INSERT INTO weft_migrations (version, name) VALUES (?, ?)",
                        [int(path.name[:3]), path.stem])
        con.execute("CHECKPOINT")
    finally:
        con.close()


def _snapshot(con, view: str, names: list[str] | None = None
              ) -> tuple[list[tuple[str, str]], list[tuple]]:
    """(column, type) pairs and sorted rows of ``view`` (only the columns ``names``, in that
    order, when given: a view may gain columns, never lose or change the old ones)."""
    select = ", ".join(f'"{n}"' for n in names) if names else "*"
    columns = [(r[0], r[1]) for r in con.execute(f"DESCRIBE SELECT {select} FROM {view}").fetchall()]
    rows = sorted(con.execute(f"SELECT {select} FROM {view}").fetchall(), key=repr)
    return columns, rows


def test_a_catalog_built_by_the_view_migrations_opens_with_the_same_views(tmp_path):
    wh = Warehouse(tmp_path)
    _fill(wh)
    _old_catalog(wh)
    con = duckdb.connect(str(wh.catalog_path), read_only=True)
    try:
        assert OLD_VIEWS | {"registered_models"} <= _views(con)
        before = {v: _snapshot(con, v) for v in OLD_VIEWS}
    finally:
        con.close()
    # the old catalog answers with rows: the comparison below is not between empty views
    assert all(rows for _, rows in before.values())
    assert ("tuned",) in {r[:1] for r in before["models"][1]}
    assert wh.refresh_catalog()
    with wh.connect() as con:
        after = {v: _snapshot(con, v, [c for c, _ in before[v][0]]) for v in OLD_VIEWS}
        recorded = con.execute("SELECT version, name FROM weft_migrations ORDER BY 1").fetchall()
        assert "registered_models" in _views(con)
    for view in sorted(OLD_VIEWS):
        # the same rows, but for the evaluation partition "b@m", respelled by migration 009
        assert after[view] == (before[view][0], sorted(
            (tuple("b|m" if v == "b@m" else v for v in row) for row in before[view][1]),
            key=repr)), view
    assert recorded == [(int(p.name[:3]), p.stem) for p in sorted(OLD_MIGRATIONS.glob("*.sql"))
                        ] + [(9, "009_partition_spelling")]
    # hand-checked values through the upgraded catalog
    assert wh.sql("SELECT accuracy, pass_at_1 FROM leaderboard").to_pylist() == [
        {"accuracy": 0.5, "pass_at_1": 0.75}]
    assert wh.sql("SELECT step, lam FROM duet_steps ORDER BY step").to_pylist() == [
        {"step": 1, "lam": 0.5}, {"step": 2, "lam": 1.0}]
    assert wh.sql("SELECT method, rank FROM ep_leaderboard ORDER BY rank").to_pylist() == [
        {"method": "ep", "rank": 1}, {"method": "poll", "rank": 2}]
    assert wh.sql("SELECT arm, bs_small, bs_large, tok_large FROM ep_budget_table").to_pylist() == [
        {"arm": "base", "bs_small": 0.0, "bs_large": 0.5, "tok_large": 256.0},
        {"arm": "ep_aware", "bs_small": 0.25, "bs_large": 0.5, "tok_large": 356.0}]
    assert sorted(wh.sql("SELECT model_id FROM models").column("model_id").to_pylist()) == [
        "smollm2-135m-instruct", "tuned"]



def test_an_edit_of_the_declared_schemas_makes_the_catalog_stale(tmp_path, monkeypatch):
    """The fingerprint covers the declarations through their module's source (a query does
    not import pyarrow to build them): an edit there rebuilds the catalog."""
    import importlib.util
    import types

    import warehouse.schema
    from warehouse import store

    wh = Warehouse(tmp_path / "wh")
    wh.write("problems", [{"problem_id": "a"}], lineage=Lineage(partition="p"))
    assert wh.refresh_catalog()
    assert wh.catalog_status()[0] == "current"
    copy = tmp_path / "schema.py"
    copy.write_text(Path(warehouse.schema.__file__).read_text()
                    + "\n# a declaration changed\n")
    real = importlib.util.find_spec
    monkeypatch.setattr(store.importlib.util, "find_spec", lambda name, *a: (
        types.SimpleNamespace(origin=str(copy)) if name == "warehouse.schema"
        else real(name, *a)))
    monkeypatch.setattr(store, "_SCHEMA_SIGNATURE", [])
    assert wh.catalog_status()[0] == "stale"
    assert wh.refresh_catalog() and wh.catalog_status()[0] == "current"


def test_a_catalog_written_before_views_keys_reads_as_having_none(tmp_path):
    """A catalog file of the format before views keys (its state table has no such column)
    reads with no key, so it is never taken for current by key; its other format makes its
    fingerprint differ, and the next query rebuilds it."""
    from warehouse.catalog import QUARANTINE_TABLE, STATE_TABLE, stored_state

    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    try:
        con.execute(f"CREATE TABLE {STATE_TABLE} (fingerprint VARCHAR NOT NULL, "
                    "built_at TIMESTAMPTZ DEFAULT now())")
        con.execute(f"INSERT INTO {STATE_TABLE} (fingerprint) VALUES ('abc')")
        con.execute(f'CREATE TABLE {QUARANTINE_TABLE} ("table" VARCHAR, partition VARCHAR, '
                    "path VARCHAR, reason VARCHAR, fix VARCHAR)")
        con.execute(f"INSERT INTO {QUARANTINE_TABLE} VALUES ('t', 'p', 't/p/data.parquet', "
                    "'bad', 'fix it')")
        assert stored_state(con) == ("abc", [("t", "p", "t/p/data.parquet", "bad", "fix it")],
                                     None)
    finally:
        con.close()
